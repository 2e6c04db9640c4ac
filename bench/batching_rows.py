"""Row module of the batching runner: slots that lease together and complete together.

Workload ``batching:runner`` (run by ``ours_worker.py``): in one process, rounds alternating,
each draining ``per`` pre-added items with a no-op handler: ``Worker`` with ``CONCURRENCY``
threads batching (the default) and not (``batch=False``); ``AsyncWorker`` with ``CONCURRENCY``
tasks, batching and not; and a Redis Streams consumer-group loop with the same batch bound
(``XREADGROUP COUNT CONCURRENCY``, then ``XACK`` and ``XDEL`` of what it read, one call each).
Items/s of each, best round; the rows are ratios.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ours_workloads import _address, _drained, _fill, _rate_result, _record
from rows import Job, Ratio, Result, Results, Row, rate
from workloads import DATA, WARMUP, BenchError

CONCURRENCY = 8
STREAM, GROUP = "bench:stream", "bench"
#: Called as a round's clock starts and as it stops (``worker_cpu.py`` samples the CPU).
Clock = Callable[[], None]
WAYS = ("threads_batch", "threads_plain", "asyncio_batch", "asyncio_plain", "streams")


def _tick(clock: Clock | None) -> None:
    if clock is not None:
        clock()


def threads_round(
    q: Any, db: redis.Redis, url: str, k: int, batch: bool, clock: Clock | None = None,
    concurrency: int = CONCURRENCY,
) -> float:  # fmt: skip
    """Items/s of ``Worker``; ``clock()`` is called as the clock starts and stops."""
    rwq = q.rwq
    _fill(q, db, k)
    handled = 0
    lock = threading.Lock()
    all_handled = threading.Event()

    def noop(item: Any) -> None:
        nonlocal handled
        with lock:
            handled += 1
            if handled == k:
                all_handled.set()

    worker = rwq.Worker(
        url, [q.queue], noop, concurrency=concurrency, poll_secs=0.1, batch=batch,
        clean_secs=None, heartbeat_secs=None,
    )  # fmt: skip
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    gc.collect()
    _tick(clock)
    start = time.perf_counter()
    thread.start()
    if not all_handled.wait(300):
        worker.stop()
        raise BenchError(f"the worker handled {handled} of {k} items in 300 s")
    while q.processing():
        time.sleep(0.0002)
    seconds = time.perf_counter() - start
    _tick(clock)
    worker.stop()
    thread.join(30)
    if not out or out[0].completed != k:
        raise BenchError(f"the worker completed {out and out[0].completed} of {k}")
    _drained(q)
    return k / seconds


def asyncio_round(
    q: Any, db: redis.Redis, url: str, k: int, batch: bool, clock: Clock | None = None,
    concurrency: int = CONCURRENCY,
) -> float:  # fmt: skip
    """Items/s of ``AsyncWorker``; ``clock()`` as in :func:`threads_round`."""
    rwq = q.rwq
    _fill(q, db, k)

    async def main() -> float:
        handled = 0
        done = asyncio.Event()

        async def noop(item: Any) -> None:
            nonlocal handled
            handled += 1
            if handled == k:
                done.set()

        aq = rwq.AsyncWorkQueue(q.queue.name)
        worker = rwq.AsyncWorker(
            url, [aq], noop, concurrency=concurrency, poll_secs=0.1, batch=batch,
            clean_secs=None, heartbeat_secs=None,
        )  # fmt: skip
        gc.collect()
        _tick(clock)
        start = time.perf_counter()
        task = asyncio.create_task(worker.run(signals=()))
        await asyncio.wait_for(done.wait(), 300)
        while q.processing():
            await asyncio.sleep(0.0002)
        seconds = time.perf_counter() - start
        _tick(clock)
        worker.stop()
        stats = await task
        if stats.completed != k:
            raise BenchError(f"the asyncio worker completed {stats.completed} of {k}")
        return k / seconds

    rate_ = asyncio.run(main())
    _drained(q)
    return rate_


def stream_fill(db: redis.Redis, k: int) -> None:
    """A new stream and consumer group holding ``k`` entries."""
    db.delete(STREAM)
    db.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    pipe = db.pipeline(transaction=False)
    for _ in range(k):
        pipe.xadd(STREAM, {"d": DATA})
    pipe.execute()


def stream_drain(db: redis.Redis, k: int, count: int = CONCURRENCY) -> None:
    """The Streams loop: read ``count`` entries, acknowledge and delete them, ``k`` in all."""
    read, ack, delete = db.xreadgroup, db.xack, db.xdel
    left = k
    while left:
        reply = read(GROUP, "c", {STREAM: ">"}, count=count)
        if not reply:
            raise BenchError("the stream ran dry")
        ids = [entry_id for entry_id, _ in reply[0][1]]
        ack(STREAM, GROUP, *ids)
        delete(STREAM, *ids)
        left -= len(ids)


def streams_round(
    db: redis.Redis, k: int, clock: Clock | None = None, count: int = CONCURRENCY
) -> float:
    """Items/s of the Streams loop; ``clock()`` as in :func:`threads_round`."""
    stream_fill(db, k)
    gc.collect()
    _tick(clock)
    start = time.perf_counter()
    stream_drain(db, k, count)
    seconds = time.perf_counter() - start
    _tick(clock)
    db.delete(STREAM)
    return k / seconds


def batch_runner(db: redis.Redis, q: Any, p: Result) -> Result:
    """See the module's description."""
    n, rounds = p["n"], p["rounds"]
    per = max(CONCURRENCY, n // rounds)
    host, port = _address(db)
    url = f"redis://{host}:{port}/0"
    runs = {
        "threads_batch": lambda k: threads_round(q, db, url, k, True),
        "threads_plain": lambda k: threads_round(q, db, url, k, False),
        "asyncio_batch": lambda k: asyncio_round(q, db, url, k, True),
        "asyncio_plain": lambda k: asyncio_round(q, db, url, k, False),
        "streams": lambda k: streams_round(db, k),
    }
    for run in runs.values():
        run(WARMUP)
    result: Result = {way: _rate_result(per) for way in runs}
    for _ in range(rounds):
        for way, run in runs.items():
            _record(result[way], run(per))
    return result


#: Registered with this library's worker (``ours_worker.py``).
WORKLOADS = {"batch_runner": batch_runner}


def jobs(quick: bool) -> list[Job]:
    """One job: every way, rounds alternating."""
    n, rounds = (1_500, 1) if quick else (9_000, 3)
    return [Job("batching", "ours", "batch_runner", {"n": n, "rounds": rounds})]


def _value(results: Results, way: str) -> float | None:
    r = results.get(("batching", "ours"), {})
    if "error" in r or "value" not in r.get(way, {}):
        return None
    return float(r[way]["value"])


def report(results: Results, quick: bool) -> list[str]:
    """Nothing beyond the rows."""
    del results, quick
    return []


def rows(results: Results, quick: bool) -> list[Row]:
    """Batching against not, and against the Streams loop of the same batch bound."""
    del quick
    v = {way: _value(results, way) for way in WAYS}

    def ratio(a: str, b: str) -> float | None:
        x, y = v[a], v[b]
        return None if x is None or y is None or y == 0 else x / y

    c = CONCURRENCY
    needs = ("batching",)
    return [
        Ratio(ratio("threads_batch", "threads_plain"), "batching/not, items/s").row(
            needs, f"Worker, {c} threads, no-op: batching", rate(v["threads_batch"]),
            f"(not {rate(v['threads_plain'])})",
        ),
        Ratio(ratio("asyncio_batch", "asyncio_plain"), "batching/not, items/s").row(
            needs, f"AsyncWorker, {c} tasks, no-op: batching", rate(v["asyncio_batch"]),
            f"(not {rate(v['asyncio_plain'])})",
        ),
        Ratio(ratio("threads_batch", "streams"), "ours/Streams loop", at_least=1.0).row(
            needs, f"Worker, {c} threads, vs Streams XREADGROUP COUNT {c} + XACK + XDEL",
            rate(v["threads_batch"]), f"(Streams {rate(v['streams'])})",
        ),
        Ratio(ratio("asyncio_batch", "streams"), "ours/Streams loop", at_least=1.0).row(
            needs, f"AsyncWorker, {c} tasks, vs Streams XREADGROUP COUNT {c} + XACK + XDEL",
            rate(v["asyncio_batch"]), f"(Streams {rate(v['streams'])})",
        ),
    ]  # fmt: skip
