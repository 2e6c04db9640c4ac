"""The worker runtime under real faults, on every runner alike (threads, processes, asyncio).

Each test runs a worker on its own redis-server (``servers.start_server``) and does to the
server what happens in production: SIGKILL and restart on the same port, SIGSTOP, out of memory
with noeviction, keys of the wrong type. Handlers (``runner_handlers``) record what they did in
Redis. Every wait polls with a deadline; every process started here is stopped in a ``finally``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import runner_handlers
from helpers import script_calls, wait_for
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    Worker,
    WorkQueue,
    scripts,
)
from redis_work_queue.errors import WorkerFailedError
from redis_work_queue.health import alive_workers, live_workers
from redis_work_queue.ops import QueueOps
from redis_work_queue.runner import REASON_MAX_BYTES, Outage, failure_reason
from redis_work_queue.validation import MAX_SECS
from runner_handlers import job
from servers import Proc

P = "rn"
TAG = "rn-test"
KINDS = ["threads", "processes", "asyncio"]
JOIN_SECS = 60.0
TESTS_DIR = Path(__file__).resolve().parent
#: Options every test's worker gets unless it says otherwise: quick polls, retries and beats.
QUICK: dict[str, Any] = {
    "lease_secs": 5,
    "poll_secs": 0.2,
    "backoff": 0.05,
    "max_backoff": 0.2,
    "heartbeat_secs": 0.3,
}


@dataclass
class Running:
    kind: str
    worker: Any
    thread: threading.Thread
    out: dict[str, Any] = field(default_factory=dict)

    def until(self, predicate: Any, what: str, timeout: float = JOIN_SECS) -> Any:
        """Wait for ``predicate``; fail at once if the worker ends meanwhile."""

        def check() -> Any:
            if not self.thread.is_alive():
                raise AssertionError(f"the worker ended while waiting for {what}: {self.out}")
            return predicate()

        return wait_for(check, timeout=timeout, what=what)

    def stop(self) -> Any:
        """Stop the worker and return its stats (or raise what run() raised)."""
        self.worker.stop()
        self.thread.join(timeout=JOIN_SECS)
        assert not self.thread.is_alive(), "the worker did not stop"
        if "error" in self.out:
            raise self.out["error"]
        return self.out["stats"]


def make_worker(
    kind: str, url: str, names: tuple[str, ...], max_deliveries: int | None, **options: Any
) -> Any:
    merged = {**QUICK, **options}
    if kind == "asyncio":
        aqueues = [AsyncWorkQueue(KeyPrefix(n), max_deliveries) for n in names]
        return AsyncWorker(url, aqueues, runner_handlers.arecord, **merged)
    queues = [WorkQueue(KeyPrefix(n), max_deliveries) for n in names]
    return Worker(url, queues, runner_handlers.record, processes=kind == "processes", **merged)


@contextmanager
def running(
    kind: str,
    url: str,
    names: tuple[str, ...] = (P,),
    max_deliveries: int | None = None,
    **options: Any,
) -> Iterator[Running]:
    """Run a worker of ``kind`` in a thread; stop it (and kill any process it left) after."""
    worker = make_worker(kind, url, names, max_deliveries, **options)
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            if kind == "asyncio":
                out["stats"] = asyncio.run(worker.run(signals=()))
            else:
                out["stats"] = worker.run(signals=())
        except BaseException as err:  # reported by the test
            out["error"] = err

    before = set(multiprocessing.active_children())
    thread = threading.Thread(target=target, name="test-worker", daemon=True)
    thread.start()
    try:
        yield Running(kind, worker, thread, out)
    finally:
        worker.stop()
        thread.join(timeout=JOIN_SECS)
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join(timeout=5)


def add(db: redis.Redis, url: str, ids: list[str], name: str = P, **spec: Any) -> None:
    queue = WorkQueue(KeyPrefix(name))
    for item_id in ids:
        assert queue.add_item(db, Item(job(url, TAG, **spec), id=item_id))


def done(db: redis.Redis) -> list[str]:
    """The ids whose handler succeeded, in order, each once (a handler's note may be retried)."""
    return list(dict.fromkeys(v.decode() for v in db.lrange(f"{TAG}:done", 0, -1)))


def messages(caplog: pytest.LogCaptureFixture, text: str, level: int | None = None) -> int:
    return sum(
        1
        for r in caplog.records
        if text in r.getMessage() and (level is None or r.levelno == level)
    )


@pytest.mark.parametrize("kind", KINDS)
def test_each_job_s_completion_leases_the_next_in_the_same_call(server: Proc, kind: str) -> None:
    """A busy worker makes one script call per job: the completion leases the next item.

    Batching off (the way a worker process and a slow handler run): with it, a fast handler's
    items are leased and completed several per call (``tests/test_batching.py``).
    """
    db = server.client()
    admin = server.client(decode_responses=True)
    ids = [f"j{i}" for i in range(20)]
    add(db, server.url, ids)
    scripts.preload(db)
    admin.config_resetstat()
    with running(
        kind, server.url, heartbeat_secs=None, clean_secs=None, poll_secs=5, batch=False
    ) as run:
        run.until(lambda: db.llen(f"{P}:processing") == 0 and len(done(db)) == 20, "the jobs")
        calls = script_calls(admin)
        stats = run.stop()
    assert stats.completed == 20
    assert done(db) == ids
    # The first lease, then one call per job (the last finds nothing), and perhaps the next
    # blocking look; two calls per job before.
    assert 21 <= calls <= 23, calls


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_an_item_leased_with_a_completion_as_the_stop_comes_is_given_back(
    server: Proc, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stop comes while a completion leases the next item: that item goes back uncounted.

    (Not on the process runner: its children import the runner afresh, out of the patch's
    reach; they run the thread runner's code.)"""
    from redis_work_queue.ops import lease as lease_ops  # noqa: PLC0415

    db = server.client()
    real = lease_ops.complete_and_lease_from
    runs: list[Running] = []

    def stopping(*args: Any) -> Any:
        result = yield from real(*args)
        runs[0].worker.stop()
        return result

    monkeypatch.setattr(lease_ops, "complete_and_lease_from", stopping)
    with running(kind, server.url) as run:
        runs.append(run)
        add(db, server.url, ["first", "second"])
        run.thread.join(timeout=JOIN_SECS)
        assert not run.thread.is_alive(), "the worker did not stop"
    assert run.out["stats"].completed == 1
    assert done(db) == ["first"]
    queue = WorkQueue(KeyPrefix(P))
    assert queue.processing(db) == 0
    again = queue.lease(db, 30, block=False)
    assert again is not None
    assert (again.id(), again.deliveries) == ("second", 1)


# Reconnecting -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_server_killed_and_restarted_under_a_running_worker(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGKILL the server, start it again on the same port (empty: no persistence): the worker
    waits it out, logs the outage once and its end once, and drains what is added after."""
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    with running(kind, server.url, concurrency=3) as run:
        add(db, server.url, ["a", "b", "c"])
        run.until(lambda: len(done(db)) == 3, "the first items")
        server.kill()
        time.sleep(1.5)  # every loop of the worker fails at least once
        server.launch()
        db = server.client()
        add(db, server.url, ["d", "e", "f", "g"])
        after = {"d", "e", "f", "g"}
        run.until(lambda: after <= set(done(db)), "items added after")
        # A handler whose note reached the killed server but whose reply did not notes it again
        # on the new one; its completion then finds the item gone (the restart lost it).
        assert set(done(db)) - after <= {"a", "b", "c"}
        wait_for(
            lambda: WorkQueue(KeyPrefix(P)).processing(db) == 0, timeout=10, what="completions"
        )
        stats = run.stop()
    assert stats.failed == 0
    assert stats.completed + stats.lost == 7 and stats.lost <= 3
    if kind != "processes":  # the children log in their own processes
        assert messages(caplog, "Redis is unavailable", logging.WARNING) == 1
        assert messages(caplog, "Redis is back", logging.INFO) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_sigstopped_server_is_waited_out(server: Proc, kind: str) -> None:
    """A hung server (SIGSTOP) makes calls time out; the worker carries on once it resumes."""
    db = server.client()
    with running(kind, server.url, concurrency=2) as run:
        add(db, server.url, ["a"])
        run.until(lambda: done(db) == ["a"], "the first item")
        server.pause()
        try:
            time.sleep(7)  # longer than the worker's socket timeout (5 s)
        finally:
            server.resume()
        add(db, server.url, ["b", "c"])
        run.until(lambda: len(done(db)) == 3, "items added after")
        stats = run.stop()
    assert stats.completed == 3


@pytest.mark.parametrize("kind", KINDS)
def test_idle_worker_waits_through_out_of_memory(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """With noeviction at maxmemory, an idle worker's blocking lease (a write) fails: the worker
    keeps waiting, and works once memory is freed."""
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    db.config_set("maxmemory-policy", "noeviction")
    with running(kind, server.url, concurrency=2) as run:
        run.until(lambda: live_workers(db, WorkQueue(KeyPrefix(P))), "a beat")
        db.config_set("maxmemory", 1)
        try:
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                db.set(f"{TAG}:probe", 1)
            if kind != "processes":
                wait_for(
                    lambda: messages(caplog, "OutOfMemoryError"), timeout=10, what="an OOM reply"
                )
            else:
                time.sleep(2)
            assert run.thread.is_alive() and "error" not in run.out
        finally:
            db.config_set("maxmemory", 0)
        add(db, server.url, ["a", "b"])
        run.until(lambda: len(done(db)) == 2, "the items")
        stats = run.stop()
    assert stats.completed == 2


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_key_type_is_fatal(server: Proc, kind: str) -> None:
    """An error that reconnecting cannot cure stops the worker: run() raises."""
    db = server.client()
    db.set(f"{P}:queue", "not a list")
    with running(kind, server.url) as run:
        run.thread.join(timeout=JOIN_SECS)
        assert not run.thread.is_alive()
    err = run.out.get("error")
    assert isinstance(err, WorkerFailedError), run.out
    assert "WrongKeyTypeError" in str(err) or "wrong" in str(err).lower()


def test_asyncio_worker_with_200_tasks(server: Proc) -> None:
    """The pool of a worker made from a URL is sized to its concurrency."""
    db = server.client()
    ids = [f"i{n:03d}" for n in range(300)]
    add(db, server.url, ids)
    with running("asyncio", server.url, concurrency=200) as run:
        run.until(lambda: len(done(db)) == 300, "the items")
        stats = run.stop()
    assert stats.completed == 300 and sorted(done(db)) == ids


# Timeouts -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_handler_past_its_timeout_is_released_as_a_failure(server: Proc, kind: str) -> None:
    """A hung handler stops being renewed; its item is released with reason 'timeout' and follows
    max_deliveries; the slot goes on working."""
    db = server.client()
    queue = WorkQueue(KeyPrefix(P), max_deliveries=2)
    add(db, server.url, ["stuck"], hang=True)
    try:
        with running(kind, server.url, max_deliveries=2, timeout=1.0) as run:
            run.until(lambda: queue.dead_count(db) == 1, "the burial")
            add(db, server.url, ["after"])
            run.until(lambda: done(db) == ["after"], "the next item")
            stats = run.stop()
    finally:
        db.set(f"{TAG}:release", 1)  # lets an abandoned thread end
    [dead] = queue.dead_letters(db)
    assert (dead.id, dead.deliveries) == ("stuck", 2)
    assert dead.reason is not None and dead.reason.startswith("timeout")
    assert stats.timed_out == 2 and stats.failed == 2 and stats.completed == 1


# Failure records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_dead_letter_keeps_a_bounded_traceback_and_the_log_says_so(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    queue = WorkQueue(KeyPrefix(P), max_deliveries=2)
    add(db, server.url, ["bad"], fail=True, deep=400)
    with running(kind, server.url, max_deliveries=2) as run:
        run.until(lambda: queue.dead_count(db) == 1, "the burial")
        stats = run.stop()
    assert stats.failed == 2
    [dead] = queue.dead_letters(db)
    reason = dead.reason
    assert reason is not None
    assert reason.startswith("HandlerBoom: boom on delivery 2 of bad\nTraceback")
    assert len(reason.encode()) <= REASON_MAX_BYTES
    assert "  ...\n" in reason  # 400 frames do not fit: the outermost were cut
    assert reason.endswith("runner_handlers.HandlerBoom: boom on delivery 2 of bad")
    assert "in _explode" in reason
    if kind != "processes":
        assert messages(caplog, "failed (delivery 1), retry in") == 1
        assert messages(caplog, "failed on its last allowed delivery (2): moved to the dead") == 1
        assert messages(caplog, "(delivery 2), retry in") == 0


def test_failure_reason_is_type_message_and_innermost_frames() -> None:
    def deep(n: int) -> None:
        if n:
            other(n - 1)
        raise KeyError("x" * 10_000)

    def other(n: int) -> None:
        deep(n)

    try:
        deep(300)
    except KeyError as err:
        reason = failure_reason(err)
    assert len(reason.encode()) <= REASON_MAX_BYTES
    head = reason.partition("\n")[0]
    assert head.startswith("KeyError: 'xxx") and head.endswith("...")
    assert reason.splitlines()[1] == "Traceback (most recent call last):"
    assert "  ...\n" in reason
    assert "raise KeyError" in reason
    try:
        raise ValueError("short")
    except ValueError as err:
        short = failure_reason(err)
    assert short.startswith("ValueError: short\nTraceback (most recent call last):\n")
    assert "  ...\n" not in short and short.endswith("ValueError: short")


# Self-cleaning ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_worker_recovers_an_abandoned_lease_without_a_cron_cleaner(server: Proc, kind: str) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(P))
    add(db, server.url, ["orphan"])
    assert queue.lease(db, 0.3, block=False) is not None  # its holder "dies" here
    with running(kind, server.url, clean_secs=0.5) as run:
        run.until(lambda: done(db) == ["orphan"], "the recovery")
        stats = run.stop()
    assert stats.completed == 1


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_fleet_cleans_at_most_once_per_interval(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="redis_work_queue")
    interval = 1.0
    with (
        running(kind, server.url, clean_secs=interval) as a,
        running(kind, server.url, clean_secs=interval) as b,
        running(kind, server.url, clean_secs=interval) as c,
    ):
        time.sleep(0.5)
        caplog.clear()
        window = 4.2
        time.sleep(window)
        cleans = messages(caplog, "light clean of rn:")
        for run in (a, b, c):
            run.stop()
    assert 2 <= cleans <= window / interval + 1, cleans


def test_clean_secs_none_leaves_the_clean_to_cron(server: Proc) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(P))
    add(db, server.url, ["orphan"])
    assert queue.lease(db, 0.2, block=False) is not None
    with running("threads", server.url, clean_secs=None) as run:
        time.sleep(1.5)
        assert done(db) == []
        assert not db.exists(f"{P}:cleaned")
        queue.light_clean(db)
        run.until(lambda: done(db) == ["orphan"], "the item")
        run.stop()


# Heartbeats and health ----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_heartbeat_registers_the_worker_and_a_clean_stop_removes_it(
    server: Proc, kind: str
) -> None:
    db = server.client()
    queues = (P, f"{P}-low")
    with running(kind, server.url, names=queues) as run:
        add(db, server.url, ["a"])
        run.until(lambda: done(db) == ["a"], "the item")

        def counted() -> Any:
            found = live_workers(db, WorkQueue(KeyPrefix(P)))
            return found if found and found[0].completed == 1 else None

        [info] = wait_for(counted, timeout=10, what="a beat with the count")
        assert info.id == run.worker.worker_id
        assert info.pid == os.getpid() and info.queues == queues
        assert info.lapses > info.beat >= info.started - 1
        [low] = live_workers(db, WorkQueue(KeyPrefix(f"{P}-low")))
        assert low.id == info.id

        async def listed() -> list[Any]:
            client = redis.asyncio.Redis.from_url(server.url)
            try:
                return await alive_workers(client, AsyncWorkQueue(KeyPrefix(P)))
            finally:
                await client.aclose()

        assert [w.id for w in asyncio.run(listed())] == [info.id]
        assert 0 < db.pttl(f"{P}:workers") <= 1000 and db.pttl(f"{P}:worker:{info.id}") > 0
        run.stop()
    assert live_workers(db, WorkQueue(KeyPrefix(P))) == []
    assert not db.exists(f"{P}:workers", f"{P}:worker:{info.id}")
    assert WorkQueue(KeyPrefix(P)).flush(db).keys >= 0


def rwq_command() -> list[str]:
    script = Path(sys.executable).with_name("rwq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "redis_work_queue.cli"]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    env.pop("REDIS_URL", None)
    return env


@contextmanager
def rwq_worker(url: str, tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """``rwq -v --url URL worker ARGS`` with its output in files; killed on the way out."""
    out = (tmp_path / "stdout.txt").open("w")
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [*rwq_command(), "-v", "--url", url, "worker", *args],
        cwd=TESTS_DIR,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        text=True,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        out.close()
        err.close()


def rwq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*rwq_command(), "--url", url, *args],
        cwd=TESTS_DIR,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_sigkilled_worker_registration_lapses_and_rwq_workers_lists_it(
    server: Proc, tmp_path: Path, mode: str
) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(P))
    extra = ["--processes"] if mode == "processes" else []
    args = ["runner_handlers:record", P, "--heartbeat-secs=0.3", "--concurrency=2", *extra]
    with rwq_worker(server.url, tmp_path, *args) as proc:
        [info] = wait_for(lambda: live_workers(db, queue), timeout=JOIN_SECS, what="a beat")
        assert info.pid == proc.pid
        listed = rwq(server.url, "workers", P, "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = json.loads(listed.stdout)[P]
        assert (row["id"], row["pid"], row["queues"]) == (info.id, proc.pid, [P])
        table = rwq(server.url, "workers", P)
        assert table.returncode == 0 and info.id in table.stdout
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    wait_for(lambda: not live_workers(db, queue), timeout=5, what="the registration to lapse")
    wait_for(
        lambda: not db.exists(f"{P}:workers", f"{P}:worker:{info.id}"),
        timeout=5,
        what="the keys to expire",
    )
    assert "no live workers" in rwq(server.url, "workers", P).stdout


def age(path: Path) -> float:
    return time.time() - path.stat().st_mtime


def fresh(path: Path, within: float = 1.0) -> bool:
    return path.exists() and age(path) < within


def test_health_file_is_not_touched_during_an_outage(server: Proc, tmp_path: Path) -> None:
    health = tmp_path / "healthy"
    args = ["runner_handlers:record", P, "--heartbeat-secs=0.2", f"--health-file={health}"]
    with rwq_worker(server.url, tmp_path, *args) as proc:
        wait_for(lambda: fresh(health), timeout=JOIN_SECS, what="the health file")
        server.pause()
        try:
            time.sleep(2.5)
            assert age(health) > 1.5, "touched while the server was stopped"
        finally:
            server.resume()
        wait_for(lambda: fresh(health, 1.0), timeout=JOIN_SECS, what="a touch after")
        assert proc.poll() is None


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_health_file_is_not_touched_while_every_slot_is_stuck(
    server: Proc, tmp_path: Path, kind: str
) -> None:
    """Threads: a handler past its timeout is abandoned, and while as many are stuck as the
    worker has slots, the worker is unhealthy. Asyncio: the task is cancelled, so it recovers."""
    db = server.client()
    health = tmp_path / "healthy"
    options = {"timeout": 0.5, "heartbeat_secs": 0.2, "health_file": str(health)}
    try:
        with running(kind, server.url, concurrency=1, **options) as run:
            run.until(lambda: fresh(health), "the health file")
            add(db, server.url, ["stuck"], hang=True)
            run.until(lambda: db.llen(f"{TAG}:started"), "the job")
            time.sleep(2.5)
            if kind == "threads":
                assert age(health) > 1.5, "touched while the only slot was stuck"
                db.set(f"{TAG}:release", 1)
            run.until(lambda: fresh(health, 1.0), "a touch after")
            run.stop()
    finally:
        db.set(f"{TAG}:release", 1)


# Options and the command line ---------------------------------------------------------------------


BAD_OPTIONS = [
    ("lease_secs", float("inf")),
    ("lease_secs", float("nan")),
    ("lease_secs", 1e12),
    ("lease_secs", MAX_SECS + 1),
    ("lease_secs", 0),
    ("lease_secs", True),
    ("timeout", float("inf")),
    ("timeout", 0),
    ("timeout", -1),
    ("clean_secs", float("nan")),
    ("clean_secs", 0),
    ("heartbeat_secs", 0),
    ("poll_secs", float("inf")),
    ("backoff", -1),
    ("max_backoff", float("inf")),
    ("concurrency", 0),
    ("concurrency", 1.5),
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("option", "value"), BAD_OPTIONS)
def test_options_are_checked_before_anything_starts(kind: str, option: str, value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match=option):
        make_worker(kind, "redis://127.0.0.1:1", (P,), None, **{option: value})


@pytest.mark.parametrize("kind", KINDS)
def test_health_file_options_are_checked(kind: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="health_file"):
        make_worker(kind, "redis://127.0.0.1:1", (P,), None, health_file=str(tmp_path / "no" / "f"))
    with pytest.raises(InvalidArgumentError, match="heartbeat_secs"):
        make_worker(kind, "redis://127.0.0.1:1", (P,), None, health_file="h", heartbeat_secs=None)


@pytest.mark.parametrize(
    ("args", "code", "text"),
    [
        (["runner_handlers:record", P, "--lease-secs=inf"], 2, "lease_secs"),
        (["runner_handlers:record", P, "--timeout=nan"], 2, "timeout"),
        (["runner_handlers:no_such_thing", P], 2, "no_such_thing"),
    ],
)
def test_rwq_worker_usage_errors(server: Proc, args: list[str], code: int, text: str) -> None:
    result = rwq(server.url, "worker", *args)
    assert result.returncode == code
    assert text in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_rwq_worker_fatal_error_exits_1_with_one_line(server: Proc) -> None:
    db = server.client()
    db.set(f"{P}:queue", "not a list")
    result = rwq(server.url, "worker", "runner_handlers:record", P)
    assert result.returncode == 1
    # One error line; the others are the worker's timestamped start and stop log lines.
    [line] = [x for x in result.stderr.strip().splitlines() if not x[:4].isdigit()]
    assert line.startswith("rwq: the worker stopped on WrongKeyTypeError")


def test_rwq_worker_unreachable_at_start_exits_3() -> None:
    result = rwq("redis://127.0.0.1:1/0", "worker", "runner_handlers:record", P)
    assert result.returncode == 3


# Outcomes whose reply is lost ---------------------------------------------------------------------


class LosingOps(QueueOps):
    """Operations whose first complete and first release run on the server, then lose the
    reply (the queue's ``lost`` says which have)."""

    def __init__(self, queue: Any) -> None:
        super().__init__(queue.keys)
        self.queue = queue

    def lose(self, what: str) -> None:
        if what not in self.queue.lost:
            self.queue.lost.add(what)
            raise redis.ConnectionError("reply lost after the script ran")

    def complete_one(self, item: Item, replicas: int | None = None) -> Any:
        result = yield from super().complete_one(item, replicas)
        self.lose("complete")
        return result

    def release_outcome(self, item: Item, *args: Any, **kwargs: Any) -> Any:
        result = yield from super().release_outcome(item, *args, **kwargs)
        self.lose("release")
        return result


class LosingReplies(WorkQueue):
    """A queue whose first complete and first release run on the server, then lose the reply."""

    lost: set[str]

    def __init__(self, name: KeyPrefix) -> None:
        super().__init__(name)
        self.ops = LosingOps(self)


class ALosingReplies(AsyncWorkQueue):
    """Asynchronous :class:`LosingReplies`."""

    lost: set[str]

    def __init__(self, name: KeyPrefix) -> None:
        super().__init__(name)
        self.ops = LosingOps(self)


def losing_complete_and_lease(real: Any, lost: set[str]) -> Any:
    """The operation ``complete_and_lease_from`` (``real``), whose first call runs on the
    server, then loses its reply (and the item it leased, until that lease runs out)."""

    def first_reply_lost(*args: Any) -> Any:
        result = yield from real(*args)
        if "complete" not in lost:
            lost.add("complete")
            raise redis.ConnectionError("reply lost after the script ran")
        return result

    return first_reply_lost


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_outcome_whose_reply_was_lost_is_retried_and_counted_right(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A complete that ran but lost its reply is retried; the retry returns False and the item
    counts as completed, not lost. A lost release reply is retried and said so. The runner
    completes with complete_and_lease_from: the item the lost call leased comes back when its
    lease runs out."""
    from redis_work_queue.ops import lease as lease_ops  # noqa: PLC0415

    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    queue: Any = ALosingReplies(KeyPrefix(P)) if kind == "asyncio" else LosingReplies(KeyPrefix(P))
    queue.lost = set()
    losing = losing_complete_and_lease(lease_ops.complete_and_lease_from, queue.lost)
    monkeypatch.setattr(lease_ops, "complete_and_lease_from", losing)
    add(db, server.url, ["ok"])
    add(db, server.url, ["bad"], fail=True)
    options = {**QUICK, "backoff": 30.0, "max_backoff": 30.0}
    if kind == "asyncio":
        worker: Any = AsyncWorker(server.url, [queue], runner_handlers.arecord, **options)
    else:
        worker = Worker(server.url, [queue], runner_handlers.record, **options)
    out: dict[str, Any] = {}

    def target() -> None:
        out["stats"] = asyncio.run(worker.run(signals=())) if kind == "asyncio" else worker.run(())

    run = Running(kind, worker, threading.Thread(target=target, daemon=True), out)
    run.thread.start()
    try:
        run.until(lambda: queue.lost == {"complete", "release"}, "both")
        wait_for(lambda: WorkQueue(KeyPrefix(P)).stats(db).delayed == 1, timeout=JOIN_SECS)
        wait_for(lambda: WorkQueue(KeyPrefix(P)).processing(db) == 0, timeout=JOIN_SECS)
        stats = run.stop()
    finally:
        worker.stop()
    assert (stats.completed, stats.failed, stats.lost) == (1, 1, 0)
    assert messages(caplog, "the retried completion found it done") == 1
    assert messages(caplog, "the retried release found the first try had run") == 1
    assert messages(caplog, "Redis is unavailable", logging.WARNING) == 2


# Heartbeat script and Redis Cluster ---------------------------------------------------------------


def test_heartbeat_checks_key_types_before_writing(server: Proc) -> None:
    from redis_work_queue.errors import WrongKeyTypeError  # noqa: PLC0415
    from redis_work_queue.ops.health import heartbeat_steps  # noqa: PLC0415
    from redis_work_queue.transport import run as run_steps  # noqa: PLC0415

    db = server.client()
    keys = WorkQueue(KeyPrefix(P)).keys
    db.set(keys.worker("w1"), "a string")
    with pytest.raises(WrongKeyTypeError):
        run_steps(db, heartbeat_steps(keys, "w1", 1000, {"host": "h"}))
    assert not db.exists(keys.workers) and db.get(keys.worker("w1")) == b"a string"
    db.delete(keys.worker("w1"))
    db.set(keys.workers, "a string")
    with pytest.raises(WrongKeyTypeError):
        run_steps(db, heartbeat_steps(keys, "w1", 1000, {"host": "h"}))
    assert not db.exists(keys.worker("w1"))
    db.delete(keys.workers)
    assert run_steps(db, heartbeat_steps(keys, "w1", 1000, {"host": "h"})) == 1
    assert run_steps(db, heartbeat_steps(keys, "w2", 1000, {"host": "h"})) == 2
    assert run_steps(db, heartbeat_steps(keys, "w1", 0, {})) == 1
    assert db.zrange(keys.workers, 0, -1) == [b"w2"]


def test_worker_on_redis_cluster_beats_and_cleans_in_its_queue_slot(cluster_db: Any) -> None:
    from redis.crc import key_slot  # noqa: PLC0415

    name = "{rn}:jobs"
    queue = WorkQueue(KeyPrefix(name))
    url = "redis://unused"  # the handler records on the cluster client below
    for item_id in ("a", "b"):
        queue.add_item(cluster_db, Item(job(url, TAG), id=item_id))
    seen: list[str] = []
    orphan = Item(b"{}", id="orphan")
    queue.add_item(cluster_db, orphan)
    assert queue.lease(cluster_db, 0.3, block=False) is not None  # its holder "dies"

    def handler(item: Item) -> None:
        seen.append(item.id())

    worker = Worker(cluster_db, [queue], handler, **{**QUICK, "clean_secs": 0.5})
    thread = threading.Thread(target=lambda: worker.run(()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: sorted(seen) == ["a", "b", "orphan"], timeout=JOIN_SECS, what="items")
        [info] = wait_for(lambda: live_workers(cluster_db, queue), timeout=10, what="a beat")
        assert info.id == worker.worker_id
        slots = {key_slot(k.encode()) for k in (queue.keys.queue, queue.keys.workers)}
        assert slots == {key_slot(queue.keys.worker(info.id).encode())}
        assert cluster_db.exists(queue.keys.cleaned)
    finally:
        worker.stop()
        thread.join(timeout=JOIN_SECS)
    assert not thread.is_alive()
    assert live_workers(cluster_db, queue) == []


def test_which_errors_are_waited_out() -> None:
    from redis import exceptions as rx  # noqa: PLC0415

    from redis_work_queue.errors import (  # noqa: PLC0415
        ReplicationError,
        ScriptError,
        WrongKeyTypeError,
    )
    from redis_work_queue.runner import transient  # noqa: PLC0415

    def from_script(reply: str) -> ScriptError:
        err = ScriptError(reply)
        err.__cause__ = rx.ResponseError(reply)
        return err

    waited = [
        rx.ConnectionError("Connection closed by server."),
        rx.TimeoutError("Timeout reading from socket"),
        rx.BusyLoadingError("Redis is loading the dataset in memory"),
        rx.ReadOnlyError("You can't write against a read only replica."),
        rx.TryAgainError("TRYAGAIN"),
        rx.ClusterDownError("CLUSTERDOWN The cluster is down"),
        rx.MasterDownError("MASTERDOWN Link with MASTER is down"),
        rx.MovedError("3999 127.0.0.1:6381"),
        rx.OutOfMemoryError("OOM command not allowed when used memory > 'maxmemory'."),
        rx.MaxConnectionsError("Too many connections"),
        ReplicationError(0, 1, 100, None),
        from_script("READONLY You can't write against a read only replica. script: x"),
        from_script("OOM command not allowed when used memory > 'maxmemory'. script: x"),
        from_script("LOADING Redis is loading the dataset in memory"),
    ]
    fatal = [
        rx.AuthenticationError("invalid username-password pair"),
        rx.AuthorizationError("NOAUTH"),
        rx.NoPermissionError("NOPERM this user has no permissions"),
        WrongKeyTypeError("wrong type"),
        InvalidArgumentError("bad"),
        from_script("ERR user_script:1: attempt to call a nil value"),
        rx.NoScriptError("NOSCRIPT No matching script."),
        RuntimeError("a bug"),
    ]
    assert [e for e in waited if not transient(e)] == []
    assert [e for e in fatal if transient(e)] == []


def test_a_client_with_too_small_a_pool_is_refused() -> None:
    small = redis.asyncio.Redis(port=1, max_connections=10)
    with pytest.raises(InvalidArgumentError, match="max_connections=24"):
        AsyncWorker(small, [AsyncWorkQueue(KeyPrefix(P))], runner_handlers.arecord, concurrency=20)
    sync_small = redis.Redis(port=1, max_connections=3)
    with pytest.raises(InvalidArgumentError, match="max_connections=5"):
        Worker(sync_small, [WorkQueue(KeyPrefix(P))], runner_handlers.record)


def test_reconnect_delays_double_from_a_tenth_of_a_second_up_to_ten() -> None:
    from redis_work_queue.runner import reconnect_delay  # noqa: PLC0415

    for attempt, full in [(0, 0.1), (1, 0.2), (3, 0.8), (6, 6.4), (7, 10.0), (1000, 10.0)]:
        delays = [reconnect_delay(attempt) for _ in range(200)]
        assert all(full / 2 <= d <= full for d in delays), (attempt, min(delays), max(delays))
        assert max(delays) - min(delays) > full / 10  # jitter


class NeverReleasingOps(QueueOps):
    """Operations whose release and renew always fail as if the server had gone."""

    def release_outcome(self, *args: Any, **kwargs: Any) -> Any:
        yield from ()
        raise redis.ConnectionError("Connection refused")

    def renew(self, *args: Any, **kwargs: Any) -> Any:
        yield from ()
        raise redis.ConnectionError("Connection refused")


class NeverReleasing(WorkQueue):
    """A queue whose release and renew always fail as if the server had gone."""

    def __init__(self, name: KeyPrefix) -> None:
        super().__init__(name)
        self.ops = NeverReleasingOps(self.keys)


class ANeverReleasing(AsyncWorkQueue):
    """Asynchronous :class:`NeverReleasing`."""

    def __init__(self, name: KeyPrefix) -> None:
        super().__init__(name)
        self.ops = NeverReleasingOps(self.keys)


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_release_that_cannot_be_written_in_time_is_left_to_the_lease(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    add(db, server.url, ["bad"], fail=True)
    options = {**QUICK, "lease_secs": 1.0, "clean_secs": None}
    if kind == "asyncio":
        worker: Any = AsyncWorker(
            server.url, [ANeverReleasing(KeyPrefix(P))], runner_handlers.arecord, **options
        )
    else:
        worker = Worker(
            server.url, [NeverReleasing(KeyPrefix(P))], runner_handlers.record, **options
        )
    out: dict[str, Any] = {}

    def target() -> None:
        out["stats"] = asyncio.run(worker.run(signals=())) if kind == "asyncio" else worker.run(())

    run = Running(kind, worker, threading.Thread(target=target, daemon=True), out)
    run.thread.start()
    try:
        run.until(
            lambda: messages(caplog, "left to its lease, which hands it out again"),
            "the release to be given up",
        )
        assert run.thread.is_alive()
        stats = run.stop()
    finally:
        worker.stop()
    assert stats.failed >= 1
    assert WorkQueue(KeyPrefix(P)).stats(db).expired + WorkQueue(KeyPrefix(P)).stats(db).leased


def test_a_reply_sent_before_an_outage_does_not_end_it(caplog: pytest.LogCaptureFixture) -> None:
    """One WARNING and one INFO per outage, even when a call sent just before the connection
    went gets its reply after another loop saw the failure."""
    caplog.set_level(logging.INFO, logger="redis_work_queue.worker")
    outage = Outage()
    sent_before = time.monotonic()
    outage.failed(ConnectionError("gone"))
    outage.recovered(sent_before)  # that reply says nothing about the outage's end
    assert outage.active
    outage.failed(ConnectionError("still gone"))
    outage.recovered(time.monotonic())
    assert not outage.active
    levels = [r.levelno for r in caplog.records if r.name == "redis_work_queue.worker"]
    assert levels == [logging.WARNING, logging.INFO]
