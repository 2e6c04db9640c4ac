"""Row module of the event stream: a queue made with ``events=True`` against one without.

Workload ``events_cost`` (run by ``ours_worker.py``): in one process, on one server, rounds
alternating between a queue with events on and the same queue with events off, for each of:
``add`` (``add_unique_item``, one item per call), ``pair`` (``lease(block=False)`` then
``complete``, one item at a time) and ``worker`` (``Worker``, one thread, a no-op handler,
draining ``per`` pre-added items, timed until the processing list is empty). For add and pair it
reads the server time of the script calls too (``INFO commandstats``). Items/s and server
microseconds per operation are each the best round; the rows are the time per item with events
on over off (target: at most 1.15x, 15% slower).
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from jobs_workloads import _script_calls
from ours_workloads import _address, _drained, _rate_result, _record
from rows import Job, Ratio, Result, Results, Row, rate
from workloads import DATA, LONG_LEASE, PREFIX, WARMUP, BenchError

#: The slowdown allowed with events on (time per item, on over off).
TARGET = 1.15
KINDS = ("add", "pair", "worker")
FILL_CHUNK = 1000


class _Queue:
    """One queue of the comparison and what the runner's round needs of it."""

    def __init__(self, rwq: Any, db: redis.Redis, events: bool) -> None:
        self.rwq = rwq
        self.db = db
        self.queue = rwq.WorkQueue(
            rwq.KeyPrefix(f"{PREFIX}:{'on' if events else 'off'}"), events=events
        )

    def fill(self, n: int) -> None:
        make, add = self.rwq.Item, self.queue.add_items
        for start in range(0, n, FILL_CHUNK):
            add(self.db, [make(DATA) for _ in range(min(FILL_CHUNK, n - start))], unique=True)

    def processing(self) -> int:
        return int(self.queue.processing(self.db))

    def queue_len(self) -> int:
        return int(self.queue.queue_len(self.db))


def _adds(q: _Queue, k: int) -> None:
    add, make, db = q.queue.add_unique_item, q.rwq.Item, q.db
    for _ in range(k):
        add(db, make(DATA))


def _pairs(q: _Queue, k: int) -> None:
    lease, complete, db = q.queue.lease, q.queue.complete, q.db
    for _ in range(k):
        item = lease(db, LONG_LEASE, block=False)
        if item is None or not complete(db, item):
            raise BenchError("lease+complete found nothing to do")


def _timed(q: _Queue, body: Callable[[_Queue, int], None], k: int) -> tuple[float, float]:
    """Items/s and server microseconds per item of ``body`` (k items)."""
    q.db.config_resetstat()
    gc.collect()
    start = time.perf_counter()
    body(q, k)
    seconds = time.perf_counter() - start
    return k / seconds, _script_calls(q.db)[1] / k


def _worker(q: _Queue, url: str, k: int) -> float:
    """Items/s of ``Worker`` (one thread, a no-op handler) draining ``k`` items."""
    q.fill(k)
    handled = 0
    all_handled = threading.Event()

    def noop(item: Any) -> None:
        nonlocal handled
        handled += 1
        if handled == k:
            all_handled.set()

    worker = q.rwq.Worker(url, [q.queue], noop, concurrency=1, lease_secs=30, poll_secs=0.1)
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    gc.collect()
    start = time.perf_counter()
    thread.start()
    if not all_handled.wait(300):
        worker.stop()
        raise BenchError(f"the worker handled {handled} of {k} items in 300 s")
    while q.processing():  # the last completion follows the last handler call
        time.sleep(0.0002)
    seconds = time.perf_counter() - start
    worker.stop()
    thread.join(30)
    if thread.is_alive() or not out:
        raise BenchError("the worker did not stop within 30 s of stop()")
    if (out[0].completed, out[0].failed, out[0].lost) != (k, 0, 0):
        raise BenchError(f"the worker's counts: {out[0]}")
    _drained(q)
    return k / seconds


def events_cost(db: redis.Redis, q: Any, p: Result) -> Result:
    """Each kind with events on and off, rounds alternating."""
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    host, port = _address(db)
    url = f"redis://{host}:{port}/0"
    queues = {"on": _Queue(rwq, db, True), "off": _Queue(rwq, db, False)}
    out: Result = {kind: {side: _rate_result(per) for side in queues} for kind in KINDS}
    server: dict[str, dict[str, float]] = {
        kind: {side: float("inf") for side in queues} for kind in ("add", "pair")
    }
    for queue in queues.values():  # warm-up: load the scripts, start the pools
        _adds(queue, WARMUP)
        _pairs(queue, WARMUP)
        _worker(queue, url, WARMUP)
    for _ in range(rounds):
        for side, queue in queues.items():
            items_per_s, usec = _timed(queue, _adds, per)
            _record(out["add"][side], items_per_s)
            server["add"][side] = min(server["add"][side], usec)
        for side, queue in queues.items():
            items_per_s, usec = _timed(queue, _pairs, per)
            _record(out["pair"][side], items_per_s)
            server["pair"][side] = min(server["pair"][side], usec)
        for side, queue in queues.items():
            _record(out["worker"][side], _worker(queue, url, per))
    out["server_us"] = server
    out["value"] = out["add"]["off"]["value"] / out["add"]["on"]["value"]
    out["unit"] = "ratio"
    return out


#: Registered with this library's worker (``ours_worker.py``).
WORKLOADS = {"events_cost": events_cost}


def jobs(quick: bool) -> list[Job]:
    """One job: every kind, events on and off, rounds alternating."""
    n, rounds = (1_500, 1) if quick else (6_000, 6)
    return [Job("events", "ours", "events_cost", {"n": n, "rounds": rounds})]


def report(results: Results, quick: bool) -> list[str]:
    """Nothing beyond the rows."""
    del results, quick
    return []


LABELS = {
    "add": "add one item per call",
    "pair": "lease + complete one item at a time",
    "worker": "Worker runner, one thread, no-op handler",
}


def rows(results: Results, quick: bool) -> list[Row]:
    """Per kind: time per item with events on over off (items/s off over on)."""
    del quick
    r = results.get(("events", "ours"), {})
    if "error" in r:
        r = {}
    server = r.get("server_us", {})
    out = []
    for kind in KINDS:
        on = r.get(kind, {}).get("on", {}).get("value")
        off = r.get(kind, {}).get("off", {}).get("value")
        slower = None if not on or not off else off / on
        extra = ""
        if kind in server:
            s = server[kind]
            extra = f"; server {s['on']:.1f} vs {s['off']:.1f} us ({s['on'] / s['off']:.2f}x)"
        out.append(
            Ratio(slower, "time per item, events on/off", at_most=TARGET).row(
                ("events",),
                f"{LABELS[kind]}, events on vs off",
                rate(on),
                f"(off {rate(off)}{extra})",
            )
        )
    return out
