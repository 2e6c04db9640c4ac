"""Row module of the event stream: a queue made with ``events=True`` against one without.

Workload ``events_cost`` (run by ``ours_worker.py``): in one process, on one server, a queue with
events on and the same queue with events off, for each of: ``add`` (``add_unique_item``, one
item per call), ``pair`` (``lease(block=False)`` then ``complete``, one item at a time), both
interleaved in chunks of 100 items (which side goes first swaps every chunk), and ``worker``
(``Worker``, one thread, a no-op handler, draining pre-added items, timed until the processing
list is empty) in rounds alternating the same way. Each side's rate is its items over its whole
time, so that both meet the same load of a busy machine; add and pair also read the server time
of the script calls (``INFO commandstats``). The rows are the time per item with events on over
off (target: at most 1.15x, 15% slower).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import redis

from jobs_workloads import _script_calls
from ours_workloads import _address, _rate_result, _record, drain_with_worker
from rows import Job, Ratio, Result, Results, Row, rate
from workloads import DATA, LONG_LEASE, PREFIX, WARMUP, BenchError

#: The slowdown allowed with events on (time per item, on over off).
TARGET = 1.15
KINDS = ("add", "pair", "worker")
#: Items of one side before the other side's turn (add and pair).
CHUNK = 100


class _Queue:
    """One queue of the comparison and what the runner's round needs of it."""

    def __init__(self, rwq: Any, db: redis.Redis, events: bool) -> None:
        self.rwq = rwq
        self.db = db
        self.queue = rwq.WorkQueue(
            rwq.KeyPrefix(f"{PREFIX}:{'on' if events else 'off'}"), events=events
        )

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


def _script_usec(db: redis.Redis) -> float:
    return _script_calls(db)[1]


def _interleaved(
    queues: dict[str, _Queue], body: Callable[[_Queue, int], None], n: int
) -> dict[str, Result]:
    """``body`` over ``n`` items per side, in chunks of ``CHUNK`` alternating between the sides
    (which goes first swaps every chunk), so that both meet the same load of the machine: per
    side, items/s over its whole time and server microseconds per item."""
    seconds = dict.fromkeys(queues, 0.0)
    usec = dict.fromkeys(queues, 0.0)
    done = dict.fromkeys(queues, 0)
    db = next(iter(queues.values())).db
    db.config_resetstat()
    gc.collect()
    for k in range(0, n, CHUNK):
        count = min(CHUNK, n - k)
        order = list(queues) if (k // CHUNK) % 2 == 0 else list(reversed(queues))
        for side in order:
            before = _script_usec(db)
            start = time.perf_counter()
            body(queues[side], count)
            seconds[side] += time.perf_counter() - start
            usec[side] += _script_usec(db) - before
            done[side] += count
    return {
        side: {"value": done[side] / seconds[side], "server_us": usec[side] / done[side]}
        for side in queues
    }


def events_cost(db: redis.Redis, q: Any, p: Result) -> Result:
    """Each kind with events on and off: add and pair interleaved chunk by chunk, the worker in
    rounds alternating (which goes first swaps every round), each side's rate over its whole
    time."""
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    host, port = _address(db)
    url = f"redis://{host}:{port}/0"
    queues = {"on": _Queue(rwq, db, True), "off": _Queue(rwq, db, False)}
    for queue in queues.values():  # warm-up: load the scripts, start the pools
        _adds(queue, WARMUP)
        _pairs(queue, WARMUP)
        drain_with_worker(queue, db, url, WARMUP)
    out: Result = {"add": _interleaved(queues, _adds, n), "pair": _interleaved(queues, _pairs, n)}
    worker: Result = {side: _rate_result(per) for side in queues}
    seconds = dict.fromkeys(queues, 0.0)
    for r in range(rounds):
        for side in list(queues) if r % 2 == 0 else list(reversed(queues)):
            items_per_s = drain_with_worker(queues[side], db, url, per)
            _record(worker[side], items_per_s)
            seconds[side] += per / items_per_s
    for side in queues:
        worker[side]["value"] = per * rounds / seconds[side]
    out["worker"] = worker
    out["server_us"] = {
        kind: {s: out[kind][s]["server_us"] for s in queues} for kind in ("add", "pair")
    }
    out["value"] = out["add"]["off"]["value"] / out["add"]["on"]["value"]
    out["unit"] = "ratio"
    return out


#: Registered with this library's worker (``ours_worker.py``).
WORKLOADS = {"events_cost": events_cost}


def jobs(quick: bool) -> list[Job]:
    """One job: every kind, events on and off, rounds alternating."""
    n, rounds = (1_500, 2) if quick else (8_000, 8)
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
