"""Workloads shared by the two benchmark workers.

This module never imports a work-queue client: each worker process (``ours_worker.py``,
``mevitae_worker.py``) imports its own ``redis_work_queue`` and wraps it in an adapter with the
methods of :class:`QueueAdapter`; the workloads below only talk to that adapter. A worker runs
exactly one workload on a database that ``run.py`` has just flushed, and writes its result as
JSON to the file named by ``--out``.
"""

from __future__ import annotations

import argparse
import gc
import json
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

Result = dict[str, Any]


class QueueAdapter(Protocol):
    """The operations a worker exposes for its client; ``None``/-1 where a client has none."""

    impl: str
    #: The shortest lease this client can take, in seconds.
    short_lease: float

    def new_item(self) -> Any: ...

    def add(self, item: Any) -> None: ...

    def add_checked(self, item: Any) -> bool: ...

    def fill(self, n: int) -> None: ...

    def add_lost(self, n: int) -> None: ...

    def lease(self, secs: float) -> Any | None: ...

    def complete(self, item: Any) -> bool: ...

    def light_clean(self) -> None: ...

    def deep_clean(self) -> tuple[int, int]: ...

    def queue_len(self) -> int: ...

    def processing(self) -> int: ...


class BenchError(Exception):
    """A workload's set-up or its final checks went wrong."""


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


def _adding(q: QueueAdapter, p: Result, add: Callable[[Any], object]) -> Result:
    n, rounds = p["n"], p["rounds"]
    for _ in range(WARMUP):
        add(q.new_item())
    items = iter([q.new_item() for _ in range(n)])

    def body(k: int) -> None:
        for _ in range(k):
            add(next(items))

    result = _timed_rounds(body, n, rounds)
    _expect("queue length after adding", q.queue_len(), WARMUP + result["ops_per_round"] * rounds)
    return result


def add(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Add items one call each (ours: add_unique_item; baseline: add_item). Items pre-built."""
    del db
    return _adding(q, p, q.add)


def add_checked(db: redis.Redis, q: QueueAdapter, p: Result) -> Result:
    """Add items one call each with the duplicate check (ours: add_item)."""
    del db
    return _adding(q, p, q.add_checked)


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


WORKLOADS: dict[str, Callable[[redis.Redis, QueueAdapter, Result], Result]] = {
    "roundtrip": roundtrip,
    "add": add,
    "add_checked": add_checked,
    "lease_complete": lease_complete,
    "inflight_fifo": inflight_fifo,
    "inflight_stuck": inflight_stuck,
    "light_clean": light_clean,
    "deep_clean": deep_clean,
}


def worker_main(
    make_adapter: Callable[[redis.Redis], QueueAdapter],
    extra: dict[str, Callable[[redis.Redis, Any, Result], Result]] | None = None,
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
    args = parser.parse_args()
    db = redis.Redis(host="127.0.0.1", port=args.port)
    try:
        adapter = make_adapter(db)
        result = workloads[args.workload](db, adapter, json.loads(args.params))
        result["impl"] = adapter.impl
        args.out.write_text(json.dumps(result), encoding="utf-8")
    finally:
        db.close()
