"""A deep clean's holds never strand items: they last seconds and the run renews them while it
runs, so a clean that is SIGKILLed or stalls leaves holds that lapse within seconds, and the
next clean recovers every item at once; a clean that meets a BUSY script or loses its
connection waits it out and finishes, as the runners do.

Each test loses ``N`` items from both lists (a data key and nothing else), the state a deep
clean is for. ``stalled_clean`` stops a deep clean once its holds are taken.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from redis_work_queue import AsyncWorkQueue, KeyPrefix, ScriptError, WorkQueue, transport
from redis_work_queue.calls import Sleep
from redis_work_queue.ops import cleaning
from redis_work_queue.results import CleanReport
from servers import Proc
from stalled_clean import held_count, paused_at_recheck

pytestmark = [pytest.mark.faults]

N = 5000
TESTS_DIR = Path(__file__).resolve().parent
#: "A few seconds": the longest a hold may outlive the clean that took it.
LAPSE_SECS = 6.0


def lose(db: redis.Redis, prefix: str, n: int = N) -> None:
    """``n`` items that exist and are in neither list."""
    pipe = db.pipeline(transaction=False)
    for i in range(n):
        pipe.set(f"{prefix}:item:{i}", b"x")
    pipe.execute()


def recovered(db: redis.Redis, prefix: str, report: CleanReport, n: int = N) -> None:
    """Every lost item was requeued once, and no hold is left."""
    assert report.requeued == n, report
    assert db.llen(f"{prefix}:queue") == n
    assert len(set(db.lrange(f"{prefix}:queue", 0, -1))) == n
    assert held_count(db, prefix) == 0


def test_the_holds_of_a_sigkilled_deep_clean_lapse_and_the_next_clean_recovers_all(
    server: Proc,
) -> None:
    db = server.client()
    prefix = "killed"
    lose(db, prefix)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS_DIR.parent / "src"), str(TESTS_DIR)])
    cleaner = subprocess.Popen(
        [sys.executable, str(TESTS_DIR / "stalled_clean.py"), server.url, prefix],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert cleaner.stdout is not None
        assert cleaner.stdout.readline().strip() == f"held {N}"
        ttls = [db.pttl(f"{prefix}:lease:{i}") for i in range(0, N, 97)]
        assert all(0 < ttl <= LAPSE_SECS * 1000 for ttl in ttls), max(ttls)
        queue = WorkQueue(KeyPrefix(prefix))
        # While the holds last, another clean leaves the items alone.
        assert queue.deep_clean(db).requeued == 0
        os.kill(cleaner.pid, signal.SIGKILL)
        killed = time.monotonic()
    finally:
        cleaner.kill()
        cleaner.wait(10)
    while held_count(db, prefix):
        assert time.monotonic() - killed < LAPSE_SECS + 1, "holds outlived their clean"
        time.sleep(0.1)
    recovered(db, prefix, queue.deep_clean(db))


def _run(api: str, url: str, steps: Generator[Any, Any, Any], **client: Any) -> Any:
    """Drive a deep clean's ``steps`` on a client of ``api``."""
    if api == "sync":
        return transport.run(redis.Redis.from_url(url, **client), steps)

    async def go() -> Any:
        db = aredis.Redis.from_url(url, **client)
        try:
            return await transport.arun(db, steps)
        finally:
            await db.aclose()

    return asyncio.run(go())


def _ops(api: str, prefix: str) -> Any:
    return (WorkQueue if api == "sync" else AsyncWorkQueue)(KeyPrefix(prefix)).ops


def _slowed(steps: Generator[Any, Any, Any], secs: float) -> Generator[Any, Any, Any]:
    """``steps`` with a pause of ``secs`` before every call once the holds are taken."""
    reply: Any = None
    holding = False
    while True:
        try:
            step = steps.send(reply)
        except StopIteration as done:
            return done.value
        name = getattr(getattr(step, "script", None), "name", "")
        holding = holding or name == "deep_clean_hold"
        if holding and name != "deep_clean_renew":
            yield Sleep(secs)
        reply = yield step


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_deep_clean_slower_than_a_hold_keeps_its_holds(
    redis_server: Proc, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its calls spread over several times a hold's length (holds made short here): it renews
    them, and requeues every lost item, once."""
    monkeypatch.setattr(cleaning, "HOLD_MS", 600)
    monkeypatch.setattr(cleaning, "HOLD_RENEW_SECS", 0.15)
    db = redis_server.client()
    prefix = f"slow-{api}"
    lose(db, prefix, 300)
    started = time.monotonic()
    report = _run(api, redis_server.url, _slowed(_ops(api, prefix).deep_clean(), 0.3))
    assert time.monotonic() - started > 3 * 0.6
    recovered(db, prefix, report, 300)


def _paused_clean(
    api: str, url: str, prefix: str, **client: Any
) -> tuple[threading.Event, threading.Event, dict[str, Any], threading.Thread]:
    reached, go = threading.Event(), threading.Event()
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            steps = paused_at_recheck(_ops(api, prefix).deep_clean(), reached, go)
            out["report"] = _run(api, url, steps, **client)
        except BaseException as err:  # reported by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    assert reached.wait(30), out
    return reached, go, out, thread


def _finish(go: threading.Event, out: dict[str, Any], thread: threading.Thread) -> CleanReport:
    go.set()
    thread.join(60)
    assert not thread.is_alive(), "the deep clean did not finish"
    if "error" in out:
        raise out["error"]
    report: CleanReport = out["report"]
    return report


BUSY_SCRIPT = """
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local start = now()
while now() - start < tonumber(ARGV[1]) do end
return 1
"""


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_deep_clean_waits_out_a_busy_script(
    server: Proc, api: str, caplog: pytest.LogCaptureFixture
) -> None:
    db = server.client()
    db.config_set("lua-time-limit", 100)  # BUSY replies after 0.1 s of a script
    prefix = "busy"
    lose(db, prefix)
    _, go, out, thread = _paused_clean(api, server.url, prefix)
    busy = threading.Thread(
        target=lambda: server.client(socket_timeout=30).eval(BUSY_SCRIPT, 0, 1_000_000),
        daemon=True,
    )
    busy.start()
    deadline = time.monotonic() + 5
    while True:  # until the server answers BUSY
        try:
            server.client(socket_timeout=5).ping()
        except redis.exceptions.ResponseError as err:
            assert "BUSY" in str(err)
            break
        assert time.monotonic() < deadline, "the script never made the server busy"
        time.sleep(0.02)
    report = _finish(go, out, thread)
    busy.join(10)
    recovered(db, prefix, report)
    assert any("BUSY" in r.getMessage() and "retrying" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_deep_clean_waits_out_a_lost_connection(server: Proc, api: str) -> None:
    db = server.client()
    prefix = "cut"
    lose(db, prefix)
    # A client that does not retry by itself: the clean sees the lost connection.
    _, go, out, thread = _paused_clean(
        api, server.url, prefix, retry=Retry(NoBackoff(), 0), retry_on_error=[]
    )
    admin = server.client()
    killed = admin.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    recovered(db, prefix, _finish(go, out, thread))


def test_a_clean_that_gives_up_leaves_holds_that_lapse(
    server: Proc, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A BUSY script longer than the clean waits: the clean raises, its holds lapse within
    seconds, and the next clean recovers every item at once."""
    monkeypatch.setattr(cleaning, "RETRY_SECS", 0.3)
    db = server.client()
    db.config_set("lua-time-limit", 100)
    prefix = "gaveup"
    lose(db, prefix)
    _, go, out, thread = _paused_clean("sync", server.url, prefix)
    busy = threading.Thread(
        target=lambda: server.client(socket_timeout=30).eval(BUSY_SCRIPT, 0, 1_500_000),
        daemon=True,
    )
    busy.start()
    time.sleep(0.3)
    with pytest.raises(ScriptError, match="BUSY"):
        _finish(go, out, thread)
    busy.join(10)
    gave_up = time.monotonic()
    assert held_count(db, prefix) == N
    while held_count(db, prefix):
        assert time.monotonic() - gave_up < LAPSE_SECS + 1, "holds outlived their clean"
        time.sleep(0.1)
    recovered(db, prefix, WorkQueue(KeyPrefix(prefix)).deep_clean(db))


def test_a_deep_clean_that_cannot_reach_redis_at_its_start_raises_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """As a runner that cannot reach Redis at its start stops (``rwq deep-clean`` exits 3)."""
    unreachable = redis.Redis(port=1, socket_connect_timeout=2, retry=Retry(NoBackoff(), 0))
    started = time.monotonic()
    with pytest.raises(redis.exceptions.ConnectionError):
        WorkQueue(KeyPrefix("nowhere")).deep_clean(unreachable)
    assert time.monotonic() - started < 5
    assert not any("retrying" in r.getMessage() for r in caplog.records)


def test_the_holds_are_renewed_in_calls_sized_by_their_server_time() -> None:
    """A run holding 20,000 ids renews them in calls of about CLEAN_TARGET_US of server time
    each, as its other steps (with 4 µs of server time per id: 250 ids a call after the first),
    every id once and in order, but for those queued already (released); a renewal of thousands
    of ids in one call held Redis for 15 to 25 ms."""
    run = cleaning._DeepRun(_ops("sync", "paced"), "t")
    run.held = [b"i%d" % k for k in range(25_000)]
    run.released = 5_000
    steps = run.renew()
    sizes: list[int] = []
    renewed: list[bytes] = []
    reply: Any = None
    with pytest.raises(StopIteration):
        while True:
            call = steps.send(reply)
            assert call.script.name == "deep_clean_renew"
            ids = list(call.args[3:])  # after the prefix, the token and hold_ms
            sizes.append(len(ids))
            renewed += ids
            reply = [4 * len(ids), len(ids)]
    assert renewed == run.held[5_000:]
    assert sizes[0] == cleaning.CLEAN_FIRST
    assert max(sizes[1:]) * 4 <= cleaning.CLEAN_TARGET_US
