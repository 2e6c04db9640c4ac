"""Workloads of job control by id (this library alone), run by ``ours_worker.py``.

- ``jobs_state``: the server time of ``state()`` (``INFO commandstats``, microseconds per
  EVALSHA) on a queue of ``big`` items against one of ``small`` items, for an item in each state
  (queued and never delivered, queued after a failure, leased, delayed, dead, gone);
- ``jobs_keep_results``: lease+complete, one at a time, on a queue that keeps results
  (``keep_results``, each completion keeping a 64-byte result) against one that does not,
  rounds alternating, in the same process on the same server: the server time per pair
  (``INFO commandstats``, the best round; the figure a busy machine moves least) and the rates;
- ``jobs_result_latency``: the time from the start of ``complete(..., result=...)`` to the
  return of a ``result()`` blocked on the item in another thread (its own connection): the
  median and the 99th percentile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from ours_workloads import _rate_result, _record
from workloads import (
    DATA,
    LONG_LEASE,
    PREFIX,
    WARMUP,
    BenchError,
    Result,
    _timed_rounds,
    latencies,
    wake_latency,
)

#: ``state()`` calls per state and queue size.
STATE_CALLS = 1000
#: Runs of STATE_CALLS calls; the best counts.
STATE_REPEATS = 3
#: Items per ``add_items`` call when filling the big queue.
FILL_CHUNK = 5000


#: The commands that run the library's scripts: as scripts, or as functions of its library.
CALLS = ("evalsha", "eval", "fcall", "fcall_ro")


def _script_calls(db: redis.Redis) -> tuple[int, float]:
    """The calls and microseconds of the library's script or function calls since the reset."""
    stats = db.info("commandstats")
    found = [stats.get(f"cmdstat_{name}", {}) for name in CALLS]
    return sum(int(s.get("calls", 0)) for s in found), sum(float(s.get("usec", 0)) for s in found)


def _fill(rwq: Any, queue: Any, db: redis.Redis, n: int) -> None:
    for start in range(0, n, FILL_CHUNK):
        count = min(FILL_CHUNK, n - start)
        queue.add_items(db, [rwq.Item(DATA, id=f"f{start + k}") for k in range(count)], unique=True)


def _state_micros(db: redis.Redis, queue: Any, item_id: str, expect: str) -> float:
    """Server microseconds per state() call of ``item_id`` (whose state must be ``expect``)."""
    found = queue.state(db, item_id)  # loads the script
    if found.state != expect:
        raise BenchError(f"state of {item_id}: {found.state}, not {expect}")
    for _ in range(WARMUP):
        queue.state(db, item_id)
    best = float("inf")
    for _ in range(STATE_REPEATS):  # the best of a few runs: the machine may be busy
        db.config_resetstat()
        for _ in range(STATE_CALLS):
            queue.state(db, item_id)
        calls, usec = _script_calls(db)
        if calls != STATE_CALLS:
            raise BenchError(f"{calls} script or function calls, not {STATE_CALLS}")
        best = min(best, usec / STATE_CALLS)
    return best


def _states(rwq: Any, db: redis.Redis, name: str, n: int) -> dict[str, float]:
    """Per state, the server microseconds of one state() call on a queue of ``n`` items."""
    queue = rwq.WorkQueue(rwq.KeyPrefix(name), max_deliveries=1)
    _fill(rwq, queue, db, n)
    # f0 is next to be leased; f1 fails (and, with one delivery allowed, dies); then f2 is
    # leased and f3 released as a failure by a queue without the limit (queued again).
    dead = queue.lease(db, LONG_LEASE, block=False)
    queue.release(db, dead, reason="bench")
    leased = queue.lease(db, LONG_LEASE, block=False)
    retried = queue.lease(db, LONG_LEASE, block=False)
    rwq.WorkQueue(rwq.KeyPrefix(name)).release(db, retried, reason="bench")
    queue.add_item(db, rwq.Item(DATA, id="later"), delay=3600)
    newest = f"f{n - 1}"
    return {
        "queued": _state_micros(db, queue, newest, "queued"),
        "queued_again": _state_micros(db, queue, retried.id(), "queued"),
        "leased": _state_micros(db, queue, leased.id(), "leased"),
        "delayed": _state_micros(db, queue, "later", "delayed"),
        "dead": _state_micros(db, queue, dead.id(), "dead"),
        "gone": _state_micros(db, queue, "never", "gone"),
    }


def jobs_state(db: redis.Redis, q: Any, p: Result) -> Result:
    """state() server time on a queue of ``p["big"]`` items against ``p["small"]`` items."""
    rwq = q.rwq
    small = _states(rwq, db, f"{PREFIX}:small", p["small"])
    big = _states(rwq, db, f"{PREFIX}:big", p["big"])
    worst = max(big[k] / small[k] for k in big)
    return {
        "value": worst,
        "unit": "ratio",
        "small": small,
        "big": big,
        "sizes": [p["small"], p["big"]],
    }


def jobs_keep_results(db: redis.Redis, q: Any, p: Result) -> Result:
    """lease+complete with keep_results (a 64-byte result each) against without."""
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    plain = rwq.WorkQueue(rwq.KeyPrefix(f"{PREFIX}:plain"))
    kept = rwq.WorkQueue(rwq.KeyPrefix(f"{PREFIX}:kept"), keep_results=3600)
    total = per * rounds + WARMUP
    for queue in (plain, kept):
        _fill(rwq, queue, db, total)
    value = b"r" * 64

    def pairs(queue: Any, result: bytes | None) -> Callable[[int], None]:
        lease, complete = queue.lease, queue.complete

        def body(k: int) -> None:
            for _ in range(k):
                item = lease(db, LONG_LEASE, block=False)
                if item is None or not complete(db, item, result=result):
                    raise BenchError("lease+complete found nothing to do")

        return body

    pairs(plain, None)(WARMUP)
    pairs(kept, value)(WARMUP)
    out: Result = {key: _rate_result(per) for key in ("plain", "kept")}
    server = {"plain": float("inf"), "kept": float("inf")}  # best us of server time per pair

    def timed(name: str, body: Callable[[int], None]) -> None:
        db.config_resetstat()
        _record(out[name], _timed_rounds(body, per, 1)["value"])
        usec = _script_calls(db)[1]
        server[name] = min(server[name], usec / per)

    for _ in range(rounds):
        timed("plain", pairs(plain, None))
        timed("kept", pairs(kept, value))
    out["server_us"] = server
    out["rate_ratio"] = out["kept"]["value"] / out["plain"]["value"]
    out["value"] = server["kept"] / server["plain"]
    out["unit"] = "ratio"
    return out


def jobs_result_latency(db: redis.Redis, q: Any, p: Result) -> Result:
    """From the start of a completion to the return of a result() blocked on the item."""
    rwq = q.rwq
    n = p["n"]
    queue = rwq.WorkQueue(rwq.KeyPrefix(f"{PREFIX}:latency"), keep_results=3600)
    port = int(db.connection_pool.connection_kwargs["port"])
    waiter_db = redis.Redis(host="127.0.0.1", port=port)
    _fill(rwq, queue, db, n + 10)
    samples: list[float] = []
    for k in range(n + 10):
        item = queue.lease(db, LONG_LEASE, block=False)
        took = wake_latency(
            db,
            lambda item=item: queue.result(waiter_db, item.id(), timeout=30),
            lambda item=item: queue.complete(db, item, result=b"done"),
            "the result() waiter",  # blocked once its connection runs BRPOPLPUSH
        )
        if k >= 10:  # warm-up
            samples.append(took)
    waiter_db.close()
    return latencies(samples)


JOBS_WORKLOADS: dict[str, Callable[[redis.Redis, Any, Result], Result]] = {
    "jobs_state": jobs_state,
    "jobs_keep_results": jobs_keep_results,
    "jobs_result_latency": jobs_result_latency,
}
