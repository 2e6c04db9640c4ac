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
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from ours_workloads import worker_runner
from workloads import PREFIX, BenchError, Result, add, lease_complete

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
    waiter = redis.Redis(
        connection_pool=redis.ConnectionPool(**db.connection_pool.connection_kwargs)
    )
    samples = []
    for k in range(p["n"] + 5):
        woke: list[float] = []

        def wait(woke: list[float] = woke) -> None:
            if queue.lease(waiter, 30, timeout=10) is not None:
                woke.append(time.perf_counter())

        thread = threading.Thread(target=wait)
        thread.start()
        deadline = time.monotonic() + 10
        while int(db.info("clients")["blocked_clients"]) < 1:
            if time.monotonic() > deadline:
                raise BenchError("the lease never blocked")
            time.sleep(0.001)
        time.sleep(random.random() * 0.05)
        begun = time.perf_counter()
        queue.add_item(db, rwq.Item(b"w", id=f"w{k}-{random.getrandbits(64):x}"))
        thread.join(timeout=30)
        if not woke:
            raise BenchError("the blocked lease did not return")
        if k >= 5:  # warm-up
            samples.append(woke[0] - begun)
    waiter.close()
    samples.sort()
    p99 = samples[min(len(samples) - 1, round(0.99 * (len(samples) - 1)))]
    db.flushall()
    db.config_resetstat()
    stop = time.monotonic() + p["idle_secs"]

    def idle() -> None:
        client = redis.Redis(
            connection_pool=redis.ConnectionPool(**db.connection_pool.connection_kwargs)
        )
        while time.monotonic() < stop:
            queue.lease(client, 30, timeout=max(stop - time.monotonic(), 0.01))
        client.close()

    threads = [threading.Thread(target=idle) for _ in range(p["idle"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=p["idle_secs"] + 30)
    stats = db.info("commandstats")
    sent = sum(
        int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
        for c in ("evalsha", "eval", "fcall", "blpop", "brpoplpush", "blmove")
    )
    return {
        "value": statistics.median(samples),
        "unit": "s",
        "median": statistics.median(samples),
        "p99": p99,
        "samples": len(samples),
        "idle_calls": sent / p["idle_secs"] / p["idle"],
    }


SHARDED = {"shards_compare": shards_compare, "shards_wake": shards_wake}
