"""Workloads of this library's sharded queues, for ``shards_rows.py`` (run by ``ours_worker.py``).

``shards_compare`` runs one workload of ``workloads.py`` or ``ours_workloads.py`` (``add``,
``lease_complete`` or ``worker_runner``) in rounds alternating between the unsharded queue and
the same queue with ``shards`` shards, on one server in one process: the ratio of the two is
what sharding costs where it cannot help. Each pair of rounds (run back to back, each pair
starting with the other queue) gives one ratio; the figure is the median of the pairs' ratios,
which a moment of load on the machine moves less than a ratio of two best rounds.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from ours_workloads import worker_runner
from workloads import PREFIX, Result, add, latencies, lease_complete, wake_latency

#: The workloads compared, and the part of their result that is the figure.
COMPARED: dict[str, tuple[Callable[[redis.Redis, Any, Result], Result], str | None]] = {
    "add": (add, None),
    "lease_complete": (lease_complete, None),
    "worker": (worker_runner, "runner"),
}


def shards_compare(db: redis.Redis, q: Any, p: Result) -> Result:
    """Best rates of ``p["workload"]`` on ``p["shards"]`` shards and unsharded, alternating."""
    body, part = COMPARED[p["workload"]]
    rwq = q.rwq
    queues = {
        "plain": rwq.WorkQueue(rwq.KeyPrefix(PREFIX)),
        "sharded": rwq.WorkQueue(rwq.KeyPrefix(PREFIX), shards=p["shards"]),
    }
    out: Result = {name: {"value": 0.0, "unit": "ops/s", "rounds": []} for name in queues}
    ratios = []
    for round_ in range(p["rounds"]):
        # Each pair of rounds starts with the other queue: neither always runs first.
        order = list(queues.items())
        pair = {}
        for name, queue in order if round_ % 2 == 0 else order[::-1]:
            db.flushall()
            q._q = queue  # the adapter's queue: every call of the workload goes to it
            found = body(db, q, {**p, "rounds": 1})
            value = float((found[part] if part else found)["value"])
            pair[name] = value
            out[name]["rounds"].append(value)
            out[name]["value"] = max(out[name]["value"], value)
        ratios.append(pair["sharded"] / pair["plain"])
    out["ratio"] = {"value": statistics.median(ratios), "unit": "x", "rounds": ratios}
    out["value"] = out["sharded"]["value"]
    out["unit"] = "ops/s"
    return out


def block_idle(make_client: Callable[[], Any], queue: Any, workers: int, secs: float) -> None:
    """``workers`` threads, each on a client of its own, blocked in ``queue.lease`` on an empty
    queue for ``secs`` seconds."""
    stop = time.monotonic() + secs

    def idle(_: int) -> None:
        client = make_client()
        while time.monotonic() < stop:
            queue.lease(client, 30, timeout=max(stop - time.monotonic(), 0.01))

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(idle, range(workers)))


def shards_wake(db: redis.Redis, q: Any, p: Result) -> Result:
    """Wake-up latency of a blocked lease on ``p["shards"]`` shards, and the idle call rate.

    ``p["n"]`` times, a thread blocks in ``lease`` (its own client) and, once the server counts
    it blocked, an item with a random id (a random shard) is added; the latency runs from the
    add to the lease's return. Then ``p["idle"]`` threads block on the empty queue for
    ``p["idle_secs"]`` seconds: the calls the server got (``INFO commandstats``: scripts and
    blocking pops), a second, per worker.
    """
    rwq = q.rwq
    queue = rwq.WorkQueue(rwq.KeyPrefix(PREFIX), shards=p["shards"])
    port = int(db.connection_pool.connection_kwargs["port"])
    waiter = redis.Redis(host="127.0.0.1", port=port)
    samples = []
    for k in range(p["n"] + 5):
        took = wake_latency(
            db,
            lambda: queue.lease(waiter, 30, timeout=10),
            lambda k=k: queue.add_item(db, rwq.Item(b"w", id=f"w{k}-{random.getrandbits(64):x}")),
            "the lease",
        )
        if k >= 5:  # warm-up
            samples.append(took)
    waiter.close()
    db.flushall()
    db.config_resetstat()
    block_idle(lambda: redis.Redis(host="127.0.0.1", port=port), queue, p["idle"], p["idle_secs"])
    stats = db.info("commandstats")
    sent = sum(
        int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
        for c in ("evalsha", "eval", "fcall", "blpop", "brpoplpush", "blmove")
    )
    return {**latencies(samples), "idle_calls": sent / p["idle_secs"] / p["idle"]}


SHARDED = {"shards_compare": shards_compare, "shards_wake": shards_wake}
