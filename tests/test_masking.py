"""Passwords never shown: one masking function (``connect.mask``) over every shape of Redis URL,
and the places a URL reaches a person: ``rwq`` errors (plain, ``--json``, ``-v``), the worker's
start, the dashboard's log, the Spark data source's options."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pytest

from redis_work_queue.connect import mask
from redis_work_queue.spark.options import Options, QueueOptions

TESTS_DIR = Path(__file__).resolve().parent
SECRET = "S3CRET"

#: (text holding a URL, the secrets in it): every shape a password takes in a Redis URL.
SHAPES: list[tuple[str, tuple[str, ...]]] = [
    ("redis://u:S3CRET@127.0.0.1:1/0", ("S3CRET",)),
    ("rediss://:S3CRET@127.0.0.1:1/0", ("S3CRET",)),
    ("unix://:S3CRET@/tmp/redis.sock?db=0", ("S3CRET",)),
    ("unix://u:S3CRET@/tmp/redis.sock", ("S3CRET",)),
    ("REDIS://:S3CRET@127.0.0.1:1/0", ("S3CRET",)),
    ("Rediss://user:S3CRET@127.0.0.1:1/0", ("S3CRET",)),
    ("redis://S3CRET@127.0.0.1:1/0", ("S3CRET",)),  # a password given where the user goes
    ("redis://u:a/S3CRET@127.0.0.1:1/0", ("a/S3CRET",)),  # a raw '/'
    ("redis://u:S3@CRET@127.0.0.1:1/0", ("S3@CRET", "CRET@")),  # a raw '@'
    ("redis://u:S3:CR:ET@127.0.0.1:1/0", ("S3:CR:ET", "CR:ET")),  # raw ':'
    ("redis://u:S3%40CR%2FET%25%3A@127.0.0.1:1/0", ("S3%40CR%2FET%25%3A", "S3@CR/ET%:")),
    ("redis://127.0.0.1:1/0?password=S3CRET", ("S3CRET",)),
    ("redis://127.0.0.1:1/0?db=0&password=S3CRET", ("S3CRET",)),
    ("redis://127.0.0.1:1/0?PASSWORD=S3CRET&socket_timeout=1", ("S3CRET",)),
    ("redis://127.0.0.1:1/0?password=S3%40CR%26ET", ("S3%40CR", "S3@CR&ET")),
    ("unix:///tmp/redis.sock?password=S3CRET&db=2", ("S3CRET",)),
    ("redis+sentinel://:S3CRET@127.0.0.1:1,127.0.0.1:2/mymaster/0", ("S3CRET",)),
    ("rediss+sentinel://u:S3CRET@127.0.0.1:1/mymaster", ("S3CRET",)),
    ("redis+cluster://u:S3CRET@127.0.0.1:1", ("S3CRET",)),
    ("rediss+cluster://:S3CRET@127.0.0.1:1?password=S3CRET", ("S3CRET",)),
]

#: Texts that hold several URLs, or a URL inside quotes, JSON or a repr.
IN_TEXT: list[tuple[str, tuple[str, ...]]] = [
    (
        "from redis://u:S3CRET@a:1/0 to rediss://:S3CRET2@b:2/0?password=S3CRET3, "
        "then REDIS://x:S3CRET4@c",
        ("S3CRET", "S3CRET2", "S3CRET3", "S3CRET4"),
    ),
    ("bad Redis URL 'redis://u:S3CRET@h:x/0': Port could not be cast", ("S3CRET",)),
    (
        json.dumps({"url": "redis://u:S3@CRET@h:1/0", "x": "rediss://:S3CRET2@h"}),
        ("CRET", "S3CRET2"),
    ),
    ("QueueOptions(url='unix:///s.sock?password=S3CRET&db=1')", ("S3CRET",)),
    ("(redis://:S3CRET@h:1/0)", ("S3CRET",)),
]


@pytest.mark.parametrize(("text", "secrets"), [*SHAPES, *IN_TEXT])
def test_mask_hides_the_password_of_every_url_shape(text: str, secrets: tuple[str, ...]) -> None:
    shown = mask(text)
    for secret in secrets:
        assert secret not in shown, shown
        assert unquote(secret) not in shown, shown
    assert "***" in shown
    assert mask(shown) == shown  # masking twice changes nothing more


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("redis://u:secret@h:1/0 and rediss://:p@x", "redis://u:***@h:1/0 and rediss://:***@x"),
        ("REDIS://:S3CRET@h:1/0", "REDIS://:***@h:1/0"),
        ("redis://u:S3@CRET@h:1/0", "redis://u:***@h:1/0"),
        ("redis://h:1/0?db=1&password=S3CRET&ssl=1", "redis://h:1/0?db=1&password=***&ssl=1"),
        ("redis+sentinel://:pw@s1:1,s2:2/m", "redis+sentinel://:***@s1:1,s2:2/m"),
        ("redis://S3CRET@h:1/0", "redis://***@h:1/0"),
    ],
)
def test_mask_keeps_the_rest_of_the_url(text: str, shown: str) -> None:
    assert mask(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "redis://127.0.0.1:6379/0",
        "cannot reach Redis at redis://h:1/0: Error 111 connecting to h:1. Connection refused.",
        "unix:///tmp/redis.sock?db=2",
        "user@example.com wrote password= in a sentence",
        "",
    ],
)
def test_mask_leaves_text_without_a_password_alone(text: str) -> None:
    assert mask(text) == text


# The command line ------------------------------------------------------------------------------


def rwq(*args: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_PASSWORD")}
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=environ,
        cwd=TESTS_DIR,
        stdin=subprocess.DEVNULL,
        check=False,
    )


#: URL shapes a user may pass to ``rwq`` (port 1: nothing listens; a socket that does not exist).
CLI_URLS = [
    "redis://127.0.0.1:1/0?password=S3CRET",
    "REDIS://:S3CRET@127.0.0.1:1/0",
    "redis://u:a/S3CRET@127.0.0.1:1/0",
    "redis://u:S3@CRET@127.0.0.1:1/0",
    "redis://u:S3%40CRET@127.0.0.1:1/0",
    "unix://:S3CRET@/nonexistent/redis.sock",
    "redis+cluster://u:S3CRET@127.0.0.1:1",
    "redis+sentinel://:S3CRET@127.0.0.1:1/mymaster",
    "redis+sentinel://u:S3@CRET@127.0.0.1:1,127.0.0.1:2/mymaster/0",
    "redis+sentinel://:a/S3CRET@127.0.0.1:1,127.0.0.1:2/mymaster",
]


@pytest.mark.parametrize("url", CLI_URLS)
def test_rwq_errors_never_show_the_password(url: str) -> None:
    for args in (
        ("--url", url, "info", "q", "--timeout", "1"),
        ("--url", url, "info", "q", "--timeout", "1", "--json"),
        ("--url", url, "-v", "dead-letters", "q", "--timeout", "1"),
    ):
        result = rwq(*args)
        assert result.returncode in (2, 3), (args, result.stderr)
        out = result.stdout + result.stderr
        assert SECRET not in out and "CRET" not in out, out
        assert "rwq:" in result.stderr or '"error"' in result.stderr


def test_a_raw_slash_in_the_password_is_refused_with_the_fix() -> None:
    result = rwq("--url", "redis://u:a/S3CRET@127.0.0.1:6379/0", "info", "q")
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "percent-encode" in line and "%2F" in line
    assert SECRET not in line


def test_the_worker_never_shows_the_password_at_start() -> None:
    for url in ("redis://127.0.0.1:1/0?password=S3CRET", "redis://u:S3@CRET@127.0.0.1:1/0"):
        result = rwq("--url", url, "-v", "worker", "runner_handlers:record", "q", "--timeout", "1")
        assert result.returncode == 3, result.stderr
        assert "CRET" not in result.stdout + result.stderr
        assert "cannot reach Redis at" in result.stderr


# The dashboard -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0?password=S3CRET",
        "redis://u:S3@CRET@127.0.0.1:1/0",
        "redis://:S3%2FCRET@127.0.0.1:1/0",
    ],
)
def test_the_dashboard_log_never_shows_the_password(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    pytest.importorskip("starlette", reason="needs the dashboard extra")
    from starlette.testclient import TestClient  # noqa: PLC0415

    from redis_work_queue.dashboard import DashboardSettings, create_app  # noqa: PLC0415

    caplog.set_level(logging.WARNING)
    with TestClient(create_app(DashboardSettings(url=url, queues=("q",)))) as client:
        reply = client.get("/api/overview")
    assert reply.status_code == 503
    assert "CRET" not in reply.text and "S3%2F" not in reply.text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "Redis unreachable at" in logged
    assert "CRET" not in logged and "S3%2F" not in logged


def test_rwq_dashboard_never_prints_the_password(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn", reason="needs the dashboard extra")
    import httpx  # noqa: PLC0415

    from dashboard_support import start_dashboard  # noqa: PLC0415

    url = "redis://127.0.0.1:1/0?db=0&password=S3CRET"
    dashboard = start_dashboard(url, "q", workdir=tmp_path)
    try:
        reply = httpx.get(dashboard.url + "api/overview", timeout=10)
        assert reply.status_code == 503 and SECRET not in reply.text
    finally:
        dashboard.stop()
    assert "Redis unreachable at" in dashboard.output()
    assert SECRET not in dashboard.output()


# Spark -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "secrets"), SHAPES)
def test_spark_options_hide_the_url_password(url: str, secrets: tuple[str, ...]) -> None:
    where = QueueOptions.parse(Options({"url": url, "queue": "q", "password": "OPT-S3CRET"}))
    shown = repr(where)
    for secret in (*secrets, "OPT-S3CRET"):
        assert secret not in shown and unquote(secret) not in shown, shown
