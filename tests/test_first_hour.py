"""What a newcomer meets in the first hour: install hints that can be followed, a worker that
says when it starts and stops, the small things ``rwq`` says, and a demo that cleans up."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, Worker, WorkQueue
from redis_work_queue.errors import MissingExtraError
from redis_work_queue.extras import EXTRAS, PACKAGES
from redis_work_queue.runner.shell import where_of
from servers import poll

ROOT = Path(__file__).resolve().parents[1]
TIMESTAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"


def rwq(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, **(env or {})},
    )


# Install hints ----------------------------------------------------------------------------------


def test_the_hint_names_the_extra_in_every_form_and_its_packages() -> None:
    err = MissingExtraError("the dashboard", "dashboard", "starlette", PACKAGES["dashboard"])
    message = str(err)
    assert "needs the 'dashboard' extra (starlette is missing)" in message
    assert "pip install 'redis-work-queue-lua[dashboard]' from a package index" in message
    assert "pip install '.[dashboard]' in a checkout" in message
    assert "pip install 'dist/redis_work_queue_lua-<version>-py3-none-any.whl[dashboard]'" in (
        message
    )
    assert "pip install 'starlette>=0.37' 'uvicorn>=0.29' 'jinja2>=3.1'" in message
    assert "\n" not in message


def test_the_hints_packages_are_the_extras_of_pyproject() -> None:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"][
        "optional-dependencies"
    ]
    assert set(PACKAGES) == set(EXTRAS)
    for extra, packages in PACKAGES.items():
        assert [p.strip("'") for p in packages] == declared[extra], extra


@pytest.mark.slow
def test_the_wheel_hint_works_in_a_fresh_venv(tmp_path: Path) -> None:
    """A wheel installed without extras: the hint of a missing extra, followed, cures it."""
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(ROOT)],
        cwd=tmp_path,
        capture_output=True,
        timeout=300,
        check=True,
    )
    (wheel,) = dist.glob("redis_work_queue_lua-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, str(wheel)], check=True, timeout=300, env=env, capture_output=True)
    probe = (
        "from redis_work_queue.metrics import QueueCollector\n"
        "try:\n    QueueCollector('redis://localhost:1', [])\n"
        "except ImportError as err:\n    print(err)\nelse:\n    print('ok')\n"
    )
    before = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    hint = before.stdout.strip()
    assert "needs the 'prometheus' extra" in hint, before.stdout + before.stderr
    # The wheel form of the hint, with this wheel's path in place of the placeholder.
    found = re.search(r"pip install '(dist/redis_work_queue_lua-<version>-[^']+)'", hint)
    assert found is not None, hint
    target = found.group(1).replace(
        "dist/redis_work_queue_lua-<version>-py3-none-any.whl", str(wheel)
    )
    subprocess.run([*pip, target], check=True, timeout=300, env=env, capture_output=True)
    after = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    assert "needs the" not in after.stdout, after.stdout + after.stderr


# The worker's start and stop lines ----------------------------------------------------------------


def test_where_of_masks_a_url_and_names_a_clients_server() -> None:
    assert where_of("redis://user:s3cret@host:6380/2") == "redis://user:***@host:6380/2"
    client = redis.Redis(host="h", port=7000, db=3, password="s3cret")
    assert where_of(client) == "redis://h:7000/3"
    assert where_of(redis.Redis(unix_socket_path="/tmp/r.sock")) == "unix:///tmp/r.sock"


def test_rwq_worker_logs_a_start_and_a_stop_line_with_timestamps(
    redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    queue = WorkQueue(KeyPrefix("hello"))
    queue.add_items(real_db, [Item(b"x") for _ in range(3)])
    (tmp_path / "quiet.py").write_text("def handle(item):\n    pass\n")
    url = redis_url.replace("redis://", "redis://default:s3cret-word@")
    real_db.config_set("requirepass", "s3cret-word")
    try:
        authed = redis.Redis.from_url(url)
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "redis_work_queue.cli",
                "--url",
                url,
                "worker",
                "quiet:handle",
                "hello",
                "--concurrency",
                "2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        try:
            poll(lambda: authed.llen("hello:queue") == 0, 60, "the worker to drain the queue")
            poll(lambda: authed.llen("hello:processing") == 0, 60, "the last completion")
        finally:
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=60)
    finally:
        redis.Redis.from_url(url).config_set("requirepass", "")
    assert proc.returncode == 0, err
    lines = err.strip().splitlines()
    start = next(line for line in lines if " started: " in line)
    stop = next(line for line in lines if " stopped: " in line)
    assert re.match(
        rf"{TIMESTAMP} INFO redis_work_queue\.worker: worker \S+:{proc.pid}:[0-9a-f]{{8}} "
        r"started: queues hello, concurrency 2, threads, redis://default:\*\*\*@",
        start,
    ), start
    assert re.match(
        rf"{TIMESTAMP} INFO redis_work_queue\.worker: worker \S+ stopped: completed 3, failed 0,",
        stop,
    ), stop
    assert "s3cret-word" not in err + out
    assert "completed 3, failed 0" in out


def test_a_worker_in_user_code_logs_its_start_and_stop(
    real_db: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(real_db, [WorkQueue(KeyPrefix("mine"))], lambda item: None, concurrency=2)
    worker.stop()
    with caplog.at_level(logging.INFO, logger="redis_work_queue.worker"):
        worker.run(signals=())
    messages = [r.getMessage() for r in caplog.records if r.name == "redis_work_queue.worker"]
    assert any(
        re.fullmatch(r"worker \S+ started: queues mine, concurrency 2, threads, redis://\S+", m)
        for m in messages
    ), messages
    assert any(m.endswith("stopped: completed 0, failed 0, lost 0, timed out 0") for m in messages)


def test_an_async_worker_logs_its_start_and_stop(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio  # noqa: PLC0415

    from redis_work_queue import AsyncWorker, AsyncWorkQueue  # noqa: PLC0415

    async def handle(item: Item) -> None:
        return None

    async def go() -> None:
        worker = AsyncWorker(redis_url, [AsyncWorkQueue(KeyPrefix("am"))], handle, concurrency=3)
        worker.stop()
        await worker.run(signals=())
        await worker.db.aclose()

    with caplog.at_level(logging.INFO, logger="redis_work_queue.aioworker"):
        asyncio.run(go())
    messages = [r.getMessage() for r in caplog.records if r.name == "redis_work_queue.aioworker"]
    assert any(
        re.fullmatch(r"worker \S+ started: queues am, concurrency 3, asyncio, redis://\S+", m)
        for m in messages
    ), messages
    assert any(" stopped: completed 0, failed 0" in m for m in messages), messages


# Small things rwq says ----------------------------------------------------------------------------


def test_info_help_has_a_description() -> None:
    done = rwq("info", "--help")
    assert done.returncode == 0
    assert "Print each queue's counts" in done.stdout


def test_workers_of_a_queue_without_keys_warns_like_info(redis_url: str) -> None:
    done = rwq("--url", redis_url, "workers", "nosuchqueue")
    assert done.returncode == 0
    assert "no live workers" in done.stdout
    assert "queue 'nosuchqueue' has no keys" in done.stderr
    info = rwq("--url", redis_url, "info", "nosuchqueue")
    assert "queue 'nosuchqueue' has no keys" in info.stderr


def test_one_dead_letter_is_one(redis_url: str, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("once"), max_deliveries=1)
    queue.add_item(real_db, Item(b"x", id="a"))
    leased = queue.lease(real_db, 30, block=False)
    assert leased is not None
    queue.release(real_db, leased, reason="no")
    listing = rwq("--url", redis_url, "dead-letters", "once")
    assert "1 dead letter in once" in listing.stdout
    done = rwq("--url", redis_url, "dead-letters", "once", "--requeue", "--all")
    assert done.stdout.strip() == "requeued 1 dead letter of once", done.stderr


@pytest.mark.slow
def test_the_demo_on_a_real_redis_removes_its_keys(redis_url: str, real_db: redis.Redis) -> None:
    real_db.set("mine", "kept")
    done = rwq("--url", redis_url, "demo", "--items", "20", "--workers", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed the demo's" in done.stdout
    assert real_db.keys("rwq-demo*") == []
    assert real_db.get("mine") == b"kept"
