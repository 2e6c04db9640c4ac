"""Handlers that misbehave, and the leases of the jobs they run.

Whatever a handler raises (``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``, an asyncio
``CancelledError``, an exception whose text cannot be encoded or had at all) is a failure of its
item: released with its reason, buried on its last allowed delivery, and the runner goes on. A
worker process that dies fails its item the same way. A handler a runner cannot run is refused
before anything starts, and no item is completed whose handler did not run. A renewal that finds
the item completed is no lost lease, and a job longer than its lease keeps it on every runner.

Each test runs its workers on its own redis-server (``servers.start_server``); handlers are in
``misbehaving_handlers`` (importable by worker processes and ``rwq``).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

import misbehaving_handlers
from helpers import wait_for
from misbehaving_handlers import UNENCODABLE, StrAndReprBroken, StrBroken, job
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    Worker,
    WorkQueue,
)
from redis_work_queue.calls import Sleep
from redis_work_queue.runner import failure_reason
from servers import Proc
from test_runner import JOIN_SECS, Running, messages, rwq, rwq_worker

P = "hf"
TAG = "hf-test"
KINDS = ["threads", "processes", "asyncio"]
#: Options of every worker here unless a test says otherwise: quick polls and retries.
QUICK: dict[str, Any] = {
    "lease_secs": 5,
    "poll_secs": 0.2,
    "backoff": 0.05,
    "max_backoff": 0.2,
    "heartbeat_secs": None,
    "clean_secs": None,
}


def make_worker(kind: str, url: str, max_deliveries: int | None = 1, **options: Any) -> Any:
    merged = {**QUICK, **options}
    if kind == "asyncio":
        handler = merged.pop("handler", misbehaving_handlers.amisbehave)
        return AsyncWorker(url, [AsyncWorkQueue(KeyPrefix(P), max_deliveries)], handler, **merged)
    handler = merged.pop("handler", misbehaving_handlers.misbehave)
    queues = [WorkQueue(KeyPrefix(P), max_deliveries)]
    return Worker(url, queues, handler, processes=kind == "processes", **merged)


@contextmanager
def running(kind: str, worker: Any) -> Iterator[Running]:
    """Run ``worker`` in a thread; stop it (and kill any process it left) on the way out."""
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


def add(db: redis.Redis, url: str, item_id: str, how: str, **spec: Any) -> None:
    assert WorkQueue(KeyPrefix(P)).add_item(db, Item(job(url, TAG, how, **spec), id=item_id))


def ran(db: redis.Redis) -> list[str]:
    """The ids whose handler was called, in order, once per call."""
    return [v.decode() for v in db.lrange(f"{TAG}:ran", 0, -1)]


def done(db: redis.Redis) -> list[str]:
    """The ids whose handler returned."""
    return [v.decode() for v in db.lrange(f"{TAG}:done", 0, -1)]


def burial_then_next(run: Running, db: redis.Redis, url: str) -> Any:
    """Wait for the failed item's burial, then show the worker goes on: it runs the next item.

    Returns the dead letter.
    """
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    run.until(lambda: queue.dead_count(db) == 1, "the failed item's burial", timeout=20)
    add(db, url, "after", "ok")
    run.until(lambda: done(db) == ["after"], "the next item", timeout=20)
    [dead] = queue.dead_letters(db)
    return dead


# Failure records of any exception -----------------------------------------------------------------


def test_failure_reason_of_an_unencodable_message_is_utf8() -> None:
    try:
        raise ValueError(UNENCODABLE)
    except ValueError as err:
        reason = failure_reason(err)
    reason.encode("utf-8")  # no lone surrogate is left
    assert reason.startswith("ValueError: \\ud800 in the message\nTraceback")
    assert reason.endswith("ValueError: \\ud800 in the message")


def test_failure_reason_falls_back_to_the_repr_then_to_the_type_name() -> None:
    try:
        raise StrBroken("hidden")
    except StrBroken as err:
        reason = failure_reason(err)
    assert reason.startswith("StrBroken: StrBroken('hidden')\nTraceback")
    assert "raise StrBroken" in reason
    try:
        raise StrAndReprBroken("hidden")
    except StrAndReprBroken as err:
        reason = failure_reason(err)
    assert reason.startswith("StrAndReprBroken\nTraceback")
    assert "raise StrAndReprBroken" in reason


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
@pytest.mark.parametrize(
    ("how", "head"),
    [
        ("unencodable", "ValueError: \\ud800 in the message"),
        ("bad-str", "StrBroken: StrBroken('hidden')"),
    ],
)
def test_an_exception_without_usable_text_fails_its_item_and_the_worker_goes_on(
    server: Proc, kind: str, how: str, head: str
) -> None:
    db = server.client()
    add(db, server.url, "bad", how)
    with running(kind, make_worker(kind, server.url)) as run:
        dead = burial_then_next(run, db, server.url)
        stats = run.stop()
    assert dead.id == "bad" and dead.reason.startswith(head + "\n")
    assert (stats.completed, stats.failed, stats.lost) == (1, 1, 0)
    assert ran(db) == ["bad", "after"]


def test_rwq_worker_goes_on_after_an_unencodable_failure(server: Proc, tmp_path: Path) -> None:
    db = server.client()
    add(db, server.url, "bad", "unencodable")
    args = ["misbehaving_handlers:misbehave", P, "--max-deliveries=1", "--lease-secs=5"]
    with rwq_worker(server.url, tmp_path, *args) as proc:
        queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
        wait_for(
            lambda: queue.dead_count(db) == 1 or proc.poll() is not None,
            timeout=JOIN_SECS,
            what="the burial",
        )
        add(db, server.url, "after", "ok")
        wait_for(lambda: done(db) or proc.poll() is not None, timeout=JOIN_SECS, what="the next")
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()
        proc.terminate()
        assert proc.wait(timeout=JOIN_SECS) == 0
    assert "completed 1, failed 1, lost 0" in (tmp_path / "stdout.txt").read_text()
    [dead] = queue.dead_letters(db)
    assert dead.reason.startswith("ValueError: \\ud800 in the message")


# Base exceptions, dead processes, cancelled tasks -------------------------------------------------


@pytest.mark.parametrize("concurrency", [1, 2])
@pytest.mark.parametrize(
    ("how", "head"),
    [
        ("system-exit", "SystemExit: 3"),
        ("keyboard-interrupt", "KeyboardInterrupt"),
        ("generator-exit", "GeneratorExit"),
    ],
)
def test_a_base_exception_from_a_handler_fails_its_item_and_the_thread_goes_on(
    server: Proc, how: str, head: str, concurrency: int
) -> None:
    """Not a dead slot whose lease is renewed for ever (nor, with a timeout, a false
    'timeout' record): the item is buried with its own reason, and the slot works on."""
    db = server.client()
    add(db, server.url, "bad", how)
    worker = make_worker("threads", server.url, concurrency=concurrency, timeout=30)
    with running("threads", worker) as run:
        dead = burial_then_next(run, db, server.url)
        # The next item's completion may be written with others' a moment after it ran.
        wait_for(lambda: WorkQueue(KeyPrefix(P)).stats(db).leased == 0, what="no lease left")
        stats = run.stop()
    assert dead.reason.startswith(head) and "Traceback" in dead.reason
    assert (stats.completed, stats.failed, stats.timed_out) == (1, 1, 0)
    assert ran(db) == ["bad", "after"]


@pytest.mark.parametrize(
    ("how", "head"),
    [("exit", "crash: the worker process"), ("system-exit", "SystemExit: 3")],
)
def test_a_worker_process_that_dies_fails_its_item(server: Proc, how: str, head: str) -> None:
    db = server.client()
    add(db, server.url, "bad", how)
    with running("processes", make_worker("processes", server.url, concurrency=2)) as run:
        dead = burial_then_next(run, db, server.url)
        stats = run.stop()
    assert dead.reason.startswith(head), dead.reason
    assert (stats.completed, stats.failed, stats.lost) == (1, 1, 0)
    assert ran(db) == ["bad", "after"]


def test_a_cancelled_error_raised_by_an_async_handler_fails_its_item(server: Proc) -> None:
    db = server.client()
    add(db, server.url, "bad", "cancelled")
    with running("asyncio", make_worker("asyncio", server.url, concurrency=2)) as run:
        dead = burial_then_next(run, db, server.url)
        assert WorkQueue(KeyPrefix(P)).stats(db).leased == 0
        stats = run.stop()
    assert dead.reason.startswith("CancelledError")
    assert (stats.completed, stats.failed, stats.lost) == (1, 1, 0)


def test_aborting_an_async_worker_still_cancels_its_handlers(server: Proc) -> None:
    """A cancellation of the runner's own task is not the handler's failure: it ends the task."""
    db = server.client()
    add(db, server.url, "long", "sleep", sleep=30)
    with running("asyncio", make_worker("asyncio", server.url, max_deliveries=None)) as run:
        run.until(lambda: ran(db) == ["long"], "the handler to start")
        run.worker.abort()
        run.thread.join(timeout=10)
        assert not run.thread.is_alive(), "the worker did not stop"
    assert run.out["stats"].failed == 0
    queue = WorkQueue(KeyPrefix(P))
    assert queue.processing(db) == 0 and queue.queue_len(db) == 1
    assert done(db) == []


# Handlers a runner cannot run -------------------------------------------------------------------


class AsyncCallable:
    async def __call__(self, item: Item) -> None:
        await misbehaving_handlers.amisbehave(item)


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_worker_refuses_an_async_handler(processes: bool) -> None:
    queue = WorkQueue(KeyPrefix(P))
    for handler in (misbehaving_handlers.amisbehave, AsyncCallable()):
        with pytest.raises(InvalidArgumentError, match="AsyncWorker"):
            Worker("redis://127.0.0.1:1", [queue], handler, processes=processes)


def test_rwq_worker_refuses_an_async_handler(server: Proc) -> None:
    result = rwq(server.url, "worker", "misbehaving_handlers:amisbehave", P)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "AsyncWorker" in line


def test_a_handler_that_returns_a_coroutine_fails_its_item_unrun(server: Proc) -> None:
    """A plain function that only makes a coroutine did not run the job: not completed."""
    db = server.client()
    add(db, server.url, "bad", "ok")

    def sneaky(item: Item) -> Any:
        if item.id() == "after":
            return misbehaving_handlers.misbehave(item)
        return misbehaving_handlers.amisbehave(item)

    with running("threads", make_worker("threads", server.url, handler=sneaky)) as run:
        dead = burial_then_next(run, db, server.url)
        stats = run.stop()
    assert dead.reason.startswith("TypeError: the handler returned a coroutine")
    assert "AsyncWorker" in dead.reason
    assert ran(db) == ["after"] and done(db) == ["after"]
    assert (stats.completed, stats.failed) == (1, 1)
    assert WorkQueue(KeyPrefix(P)).counts(db).completed == 1


def test_async_worker_fails_an_item_whose_handler_returns_no_awaitable(server: Proc) -> None:
    db = server.client()
    add(db, server.url, "bad", "ok")

    def plain(item: Item) -> Any:
        if item.id() == "after":
            return misbehaving_handlers.amisbehave(item)
        return None  # a plain function: it ran, and returned no awaitable

    with running("asyncio", make_worker("asyncio", server.url, handler=plain)) as run:
        dead = burial_then_next(run, db, server.url)
        stats = run.stop()
    assert dead.reason.startswith("TypeError: the handler returned NoneType, not an awaitable")
    assert (stats.completed, stats.failed) == (1, 1)
    assert WorkQueue(KeyPrefix(P)).counts(db).completed == 1


# Leases of running jobs -------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_renewal_that_reaches_redis_after_the_completion_is_no_lost_lease(
    server: Proc, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """As when the server pauses (DEBUG SLEEP, CLIENT PAUSE): a renewal sent while the handler
    runs reaches Redis after the item's completion. The lease was not lost: no warning."""
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    db = server.client()
    checker = server.client()
    add(db, server.url, "short", "sleep", sleep=0.5)
    worker = make_worker(kind, server.url, lease_secs=0.6)
    [queue] = worker.queues
    real_renew = queue.ops.renew
    held_back: list[str] = []

    def late_renew(item: Item, lease_secs: float) -> Any:
        if not held_back:  # the first renewal waits for the completion, then goes
            held_back.append(item.id())
            deadline = time.monotonic() + 10
            while checker.exists(queue.keys.item(item.id())) and time.monotonic() < deadline:
                yield Sleep(0.01)
        return (yield from real_renew(item, lease_secs))

    queue.ops.renew = late_renew
    with running(kind, worker) as run:
        run.until(lambda: done(db) == ["short"], "the job")
        wait_for(lambda: held_back, timeout=10, what="a renewal")
        time.sleep(0.3)  # its reply
        stats = run.stop()
    assert (stats.completed, stats.lost) == (1, 0)
    assert messages(caplog, "lost the lease") == 0


@pytest.mark.parametrize("kind", KINDS)
def test_a_job_longer_than_its_lease_keeps_it_on_every_runner(server: Proc, kind: str) -> None:
    """Mid-handler, past its first lease time twice over, the lease key is there and the item
    counts as leased, with cleans running: the lease is renewed, not merely outlived."""
    db = server.client()
    queue = WorkQueue(KeyPrefix(P))
    add(db, server.url, "long", "sleep", sleep=3.0)
    worker = make_worker(kind, server.url, lease_secs=1.0, concurrency=2, clean_secs=0.2)
    with running(kind, worker) as run:
        run.until(lambda: ran(db) == ["long"], "the handler to start")
        started = time.monotonic()
        while time.monotonic() - started < 2.2:
            assert db.exists(queue.keys.lease("long")), "the lease ran out mid-handler"
            stats = queue.stats(db)
            assert (stats.leased, stats.expired) == (1, 0), stats
            time.sleep(0.1)
        run.until(lambda: done(db) == ["long"], "the job")
        totals = run.stop()
    assert queue.counts(db).expired == 0
    assert (totals.completed, totals.failed, totals.lost) == (1, 0, 0)
    assert ran(db) == ["long"]
