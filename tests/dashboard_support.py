"""Running ``rwq dashboard`` as a process, and a headless Chromium to look at it."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from servers import free_port, poll

REPO_ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = REPO_ROOT / "test-output" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
START_SECS = 30.0
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``predicate`` until it returns something truthy (any error counts as "not yet");
    fail after ``timeout`` seconds."""
    return poll(predicate, timeout, what, 0.05, not_yet=(Exception,))


@dataclass
class Dashboard:
    """One ``rwq dashboard`` process owned by a test."""

    process: subprocess.Popen[str]
    port: int
    log: Path
    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_dashboard(
    redis_url: str,
    *args: str,
    workdir: Path,
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> Dashboard:
    """Start ``rwq dashboard`` on a free port of ``host`` and wait until it answers there."""
    port = free_port()
    log = workdir / f"dashboard-{port}.log"
    command = [sys.executable, "-m", "redis_work_queue.cli", "--url", redis_url, "dashboard"]
    command += ["--host", host, "--port", str(port), "--refresh-secs", "0.5", *args]
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env={**os.environ, **(env or {})},
        )
    dashboard = Dashboard(process, port, log, host)

    def answers() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"rwq dashboard exited: {dashboard.output()}")
        return httpx.get(dashboard.url + "static/dashboard.css", timeout=2).status_code < 500

    try:
        wait_for(answers, START_SECS, "the dashboard to answer")
    except BaseException:
        dashboard.stop()
        raise
    return dashboard


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not (os.path.exists(path) and os.access(path, os.X_OK)) and not shutil.which(path):
            return f"{path} not found (apt-get install chromium chromium-driver)"
    return None


def new_driver() -> Any:
    """A headless Chromium driven by Debian's chromedriver (no driver download)."""
    why = chromium_missing()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI requires the browser tests to run", pytrace=False)
        pytest.skip(why)
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    profile = tempfile.mkdtemp(prefix="rwq-chromium-")
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument("--window-size=1280,1400")
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    driver.profile_dir = profile
    return driver


def quit_driver(driver: Any) -> None:
    with contextlib.suppress(Exception):
        driver.quit()
    shutil.rmtree(driver.profile_dir, ignore_errors=True)


def screenshot(driver: Any, name: str) -> Path:
    """Save a PNG of the page under ``test-output/screenshots/``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / (name.replace("/", "_").replace("[", "_").replace("]", "") + ".png")
    assert driver.save_screenshot(str(path)), f"no screenshot saved at {path}"
    return path
