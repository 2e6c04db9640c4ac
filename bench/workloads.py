"""Workloads shared by every benchmark worker.

This module never imports a work-queue client: each worker process (``ours_worker.py``,
``mevitae_worker.py``, ``peer_worker.py`` for the peers of ``peers/``) imports its own client
and wraps it in an adapter with the methods of :class:`QueueAdapter` it can offer; the
workloads below only talk to that adapter. A worker runs exactly one workload on a database
that ``run.py`` has just flushed, and writes its result as JSON to the file named by ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import redis

#: The key prefix of the benchmark queue (both clients use the same key layout).
PREFIX = "bench"
#: The data of every benchmark item: a small JSON document, as a typical job description.
DATA = b'{"kind":"bench","payload":"' + b"x" * 64 + b'"}'
#: Commands per pipeline when a workload's set-up fills the queue.
FILL_BATCH = 1000
#: Untimed operations run before the timed rounds (script loading, connection set-up, caches).
#: Lost items (data key only) in every deep-clean workload.
LOST_ITEMS = 20
WARMUP = 200
#: A lease that outlives any workload.
LONG_LEASE = 3600
#: Items per call of the batch workloads.
BATCH = 100

Result = dict[str, Any]


class QueueAdapter(Protocol):
    """The operations a worker exposes for its client.

    A client offers what fits it: a workload that needs a method the adapter lacks fails with
    an error that names it, and ``run.py`` plans no such job. Every adapter has ``impl``,
    ``new_item``, ``add_each``, ``fill``, ``reset`` and ``queue_len``.
    """

    impl: str
    #: The shortest lease this client can take, in seconds.
    short_lease: float

    def new_item(self) -> Any: ...

    def add(self, item: Any) -> None: ...

    def add_each(self, items: list[Any]) -> None:
        """Add ``items``, one call each (a loop of the client's own)."""

    def add_many(self, items: list[Any]) -> None:
        """Add ``items`` in one call (or one round trip) of the client's."""

    def fill(self, n: int, data: bytes = DATA) -> None:
        """Queue ``n`` items with ``data``, as fast as the client can (set-up, untimed)."""

    def reset(self) -> None:
        """Set up again what the client needs after a FLUSHALL (a consumer group)."""

    def lease_many(self, n: int, secs: float) -> list[Any]: ...

    def complete_many(self, items: list[Any]) -> None: ...

    def run_worker(self, n: int) -> None:
        """Run the client's own worker (a no-op handler) until it has handled ``n`` items."""

    def add_checked(self, item: Any) -> bool: ...

    def add_lost(self, n: int) -> None: ...

    def lease(self, secs: float) -> Any | None: ...

    def complete(self, item: Any) -> bool: ...

    def light_clean(self) -> None: ...

    def deep_clean(self) -> tuple[int, int]: ...

    def queue_len(self) -> int: ...

    def processing(self) -> int: ...


class BenchError(Exception):
    """A workload's set-up or its final checks went wrong."""


def until_blocked(db: redis.Redis, what: str) -> None:
    """Wait (at most 10 s) until the server counts a blocked client: ``what`` blocked."""
    deadline = time.monotonic() + 10
    while int(db.info("clients")["blocked_clients"]) < 1:
        if time.monotonic() > deadline:
            raise BenchError(f"{what} never blocked")
        time.sleep(0.001)


def wake_latency(
    db: redis.Redis, block: Callable[[], object], act: Callable[[], object], what: str
) -> float:
    """Seconds from ``act()`` to the return of ``block()``, run in a thread and blocked first.

    Raises:
        BenchError: ``block()`` never blocked, did not return within 30 s or returned None.
    """
    woke: list[float] = []

    def wait() -> None:
        if block() is not None:
            woke.append(time.perf_counter())

    thread = threading.Thread(target=wait)
    thread.start()
    until_blocked(db, what)
    begun = time.perf_counter()
    act()
    thread.join(timeout=30)
    if not woke:
        raise BenchError(f"{what} did not return")
    return woke[0] - begun


def latencies(samples: list[float]) -> Result:
    """The median (the figure) and the 99th percentile of ``samples`` (seconds)."""
    ordered = sorted(samples)
    middle = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"value": middle, "unit": "s", "median": middle, "p99": p99, "samples": len(ordered)}


def _expect(what: str, got: object, want: object) -> None:
    if got != want:
        raise BenchError(f"{what}: got {got!r}, expected {want!r}")


def _timed_rounds(body: Callable[[int], None], n: int, rounds: int) -> Result:
    """Run ``body(k)`` (k operations) ``rounds`` times; report the best rate and every rate."""
    per = max(1, n // rounds)
    rates: list[float] = []
    for _ in range(rounds):
        gc.collect()
        start = time.perf_counter()
        body(per)
        rates.append(per / (time.perf_counter() - start))
    return {"value": max(rates), "unit": "ops/s", "rounds": rates, "ops_per_round": per}


def _lease_all(q: QueueAdapter, n: int, secs: float) -> list[Any]:
    leased = [q.lease(secs) for _ in range(n)]
    if any(item is None for item in leased):
        raise BenchError("the queue ran dry while leasing the set-up items")
    return leased


# Workloads --------------------------------------------------------------------------------------


def roundtrip(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """The round-trip limit of one client: PING rate and EVALSHA rate of ``return 1``."""
    del q
    n, rounds = p["n"], p["rounds"]
    for _ in range(WARMUP):
        db.ping()

    def pings(k: int) -> None:
        ping = db.ping
        for _ in range(k):
            ping()

    ping = _timed_rounds(pings, n, rounds)
    sha = db.script_load("return 1")
    key = PREFIX + ":rt"
    for _ in range(WARMUP):
        db.evalsha(sha, 1, key)

    def evals(k: int) -> None:
        evalsha = db.evalsha
        for _ in range(k):
            evalsha(sha, 1, key)

    evalsha = _timed_rounds(evals, n, rounds)
    return {"ping": ping, "evalsha": evalsha}


def _adding(q: QueueAdapter, p: Result, each: Callable[[list[Any]], object]) -> Result:
    """Time ``each`` on pre-built items (``each(items)`` adds them, one call each or in one)."""
    n, rounds = p["n"], p["rounds"]
    each([q.new_item() for _ in range(WARMUP)])
    items = [q.new_item() for _ in range(n)]
    done = 0

    def body(k: int) -> None:
        nonlocal done
        each(items[done : done + k])
        done += k

    result = _timed_rounds(body, n, rounds)
    _expect("queue length after adding", q.queue_len(), WARMUP + result["ops_per_round"] * rounds)
    return result


def add(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Add items one call each (ours: add_unique_item; baseline: add_item). Items pre-built."""
    del db
    return _adding(q, p, q.add_each)


def add_checked(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Add items one call each with the duplicate check (ours: add_item)."""
    del db
    add_checked = q.add_checked

    def each(items: list[Any]) -> None:
        for item in items:
            add_checked(item)

    return _adding(q, p, each)


def lease_complete(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Non-blocking lease then complete, one item at a time, on a pre-filled queue.

    Its timed rounds alternate with rounds of EVALSHA ``return 1`` (two calls per item) on the
    same connection, so the round-trip limit (``limit``) is measured at the same moments.
    """
    n, rounds = p["n"], p["rounds"]
    q.fill(n + WARMUP)
    lease, complete = q.lease, q.complete
    sha = db.script_load("return 1")
    key = PREFIX + ":rt"
    evalsha = db.evalsha

    def pairs(k: int) -> None:
        for _ in range(k):
            item = lease(30)
            if item is None:
                raise BenchError("the queue ran dry")
            complete(item)

    def limit(k: int) -> None:
        for _ in range(k):
            evalsha(sha, 1, key)
            evalsha(sha, 1, key)

    pairs(WARMUP)
    limit(WARMUP)
    per = max(1, n // rounds)
    result: Result = {"value": 0.0, "unit": "ops/s", "rounds": [], "ops_per_round": per}
    result["limit"] = {"value": 0.0, "unit": "ops/s", "rounds": [], "ops_per_round": per}
    for _ in range(rounds):
        for body, into in ((limit, result["limit"]), (pairs, result)):
            r = _timed_rounds(body, per, 1)
            into["rounds"].append(r["value"])
            into["value"] = max(into["value"], r["value"])
    _expect("processing list after lease+complete", q.processing(), 0)
    return result


def inflight_fifo(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Lease+complete with ``hold`` leases in flight, completed first-leased-first.

    ``hold`` items are leased (long leases) and kept; then each step leases one more item and
    completes the oldest lease in flight, so the processing list holds ``hold`` entries all along
    and every completed item is the oldest one: the steady state of workers that each take
    about the same time.
    """
    del db
    n, rounds, hold = p["n"], p["rounds"], p["hold"]
    q.fill(hold + n + WARMUP)
    flight = deque(_lease_all(q, hold, LONG_LEASE))
    lease, complete = q.lease, q.complete

    def body(k: int) -> None:
        for _ in range(k):
            item = lease(LONG_LEASE)
            if item is None:
                raise BenchError("the queue ran dry")
            flight.append(item)
            complete(flight.popleft())

    body(WARMUP)
    result = _timed_rounds(body, n, rounds)
    _expect("processing list after the in-flight run", q.processing(), hold)
    return result


def inflight_stuck(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Lease+complete of fresh items while ``hold`` older leases stay in flight untouched.

    The ``hold`` items are leased first (long leases) and never completed, as long-running jobs
    next to short ones; each step leases one item and completes it at once.
    """
    del db
    n, rounds, hold = p["n"], p["rounds"], p["hold"]
    q.fill(hold + n + WARMUP)
    _lease_all(q, hold, LONG_LEASE)
    lease, complete = q.lease, q.complete

    def body(k: int) -> None:
        for _ in range(k):
            item = lease(30)
            if item is None:
                raise BenchError("the queue ran dry")
            complete(item)

    body(WARMUP)
    result = _timed_rounds(body, n, rounds)
    _expect("processing list after the in-flight run", q.processing(), hold)
    return result


def light_clean(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """One light clean of ``n`` expired leases (the time of that one call)."""
    del db
    n = p["n"]
    q.fill(n)
    _lease_all(q, n, q.short_lease)
    # Every lease has expired once the last one has (plus a margin for the server's clock).
    time.sleep(q.short_lease + 0.25)
    _expect("processing list before the clean", q.processing(), n)
    gc.collect()
    start = time.perf_counter()
    q.light_clean()
    seconds = time.perf_counter() - start
    _expect("queue length after the clean", q.queue_len(), n)
    _expect("processing list after the clean", q.processing(), 0)
    return {"value": seconds, "unit": "s"}


def deep_clean(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """One deep clean of ``n`` queued items plus a few lost ones (data key only).

    The number of lost items is the same at every size (LOST_ITEMS): a deep clean repairs the
    rare half-added items of crashed clients. Each lost item costs one scan of the lists inside
    Redis, so with a number that grew with ``n`` the time would grow as lost x length.
    """
    del db
    n = p["n"]
    lost = LOST_ITEMS
    q.fill(n)
    q.add_lost(lost)
    gc.collect()
    start = time.perf_counter()
    examined, requeued = q.deep_clean()
    seconds = time.perf_counter() - start
    _expect("items requeued by the deep clean", requeued, lost)
    _expect("data keys examined by the deep clean", examined, n + lost)
    _expect("queue length after the deep clean", q.queue_len(), n + lost)
    return {"value": seconds, "unit": "s", "lost": lost}


def add_batch(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Items/s of adds ``BATCH`` per call (``add_many``). Items pre-built."""
    del db
    n, rounds = p["n"], p["rounds"]
    q.add_many([q.new_item() for _ in range(BATCH)])  # warm-up
    items = [q.new_item() for _ in range(n)]
    done = 0
    add_many = q.add_many

    def body(k: int) -> None:
        nonlocal done
        for start in range(done, done + k, BATCH):
            add_many(items[start : min(start + BATCH, done + k)])
        done += k

    result = _timed_rounds(body, n, rounds)
    _expect("queue length after adding", q.queue_len(), BATCH + result["ops_per_round"] * rounds)
    return result


def lease_complete_batch(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Items/s of ``lease_many(BATCH)`` then ``complete_many`` of those, on a pre-filled queue."""
    del db
    n, rounds = p["n"], p["rounds"]
    per = max(BATCH, n // rounds // BATCH * BATCH)
    q.fill(per * rounds + WARMUP)
    lease_many, complete_many = q.lease_many, q.complete_many

    def body(k: int) -> None:
        for _ in range(k // BATCH):
            items = lease_many(BATCH, 30)
            if len(items) != BATCH:
                raise BenchError(f"leased {len(items)} of {BATCH}: the queue ran dry")
            complete_many(items)

    complete_many(lease_many(WARMUP, 30))
    result = _timed_rounds(body, per * rounds, rounds)
    _expect("processing list after the batches", q.processing(), 0)
    _expect("queue length after the batches", q.queue_len(), 0)
    return result


def worker(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Items/s of the client's own worker with a no-op handler draining ``n`` pre-added items.

    Each round fills the queue (untimed), then times ``run_worker``, which starts the worker
    and returns once it has handled (and completed) every item; the worker's start is timed
    too, as in a real deployment's first batch.
    """
    del db
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    q.fill(min(WARMUP, per))
    q.run_worker(min(WARMUP, per))  # warm-up: imports, scripts, connections

    rates: list[float] = []
    for _ in range(rounds):
        q.fill(per)
        gc.collect()
        start = time.perf_counter()
        q.run_worker(per)
        rates.append(per / (time.perf_counter() - start))
        _expect("queue length after the worker ran", q.queue_len(), 0)
    return {"value": max(rates), "unit": "ops/s", "rounds": rates, "ops_per_round": per}


def used_memory(db: redis.Redis) -> int:
    """``used_memory`` of the server, after MEMORY PURGE (where the allocator has one)."""
    with contextlib.suppress(redis.ResponseError):  # not built with jemalloc
        db.execute_command("MEMORY", "PURGE")
    return int(db.info("memory")["used_memory"])


def memory_per_item(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Bytes of Redis ``used_memory`` per waiting item of ``size`` bytes: the delta over
    ``fill(n)``, divided by ``n``.

    A warm-up fill (then FLUSHALL and ``reset``) loads the client's scripts and sizes its
    connection buffers first, so that only the items are counted.
    """
    n, size = p["n"], p["size"]
    data = (DATA * (size // len(DATA) + 1))[:size]
    q.fill(BATCH, data)
    db.flushall()
    q.reset()
    before = used_memory(db)
    q.fill(n, data)
    after = used_memory(db)
    _expect("items waiting after the fill", q.queue_len(), n)
    return {"value": (after - before) / n, "unit": "B/item", "n": n, "size": size}


WORKLOADS: dict[str, Callable[[redis.Redis, QueueAdapter, Result], Result]] = {
    "roundtrip": roundtrip,
    "add": add,
    "add_checked": add_checked,
    "lease_complete": lease_complete,
    "inflight_fifo": inflight_fifo,
    "inflight_stuck": inflight_stuck,
    "light_clean": light_clean,
    "deep_clean": deep_clean,
    "add_batch": add_batch,
    "lease_complete_batch": lease_complete_batch,
    "worker": worker,
    "memory_per_item": memory_per_item,
}


def worker_main(
    make_adapter: Callable[[redis.Redis], QueueAdapter],
    extra: dict[str, Callable[[redis.Redis, Any, Result], Result]] | None = None,
    argv: list[str] | None = None,
) -> None:
    """Entry point of a worker process: run one workload, write its result to ``--out``.

    ``extra`` adds the workloads of one client alone (see ``ours_workloads.py``).
    """
    workloads = {**WORKLOADS, **(extra or {})}
    parser = argparse.ArgumentParser(description="run one benchmark workload")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--workload", choices=sorted(workloads), required=True)
    parser.add_argument("--params", default="{}", help="workload parameters as JSON")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    db = redis.Redis(host="127.0.0.1", port=args.port)
    try:
        adapter = make_adapter(db)
        result = workloads[args.workload](db, adapter, json.loads(args.params))
        result["impl"] = adapter.impl
        args.out.write_text(json.dumps(result), encoding="utf-8")
    finally:
        db.close()
