"""Workloads of this library's sharded queues, for ``shards_rows.py`` (run by ``ours_worker.py``).

``shards_compare`` runs one workload of ``workloads.py`` or ``ours_workloads.py`` (``add``,
``lease_complete`` or ``worker_runner``) in rounds alternating between the unsharded queue and
the same queue with ``shards`` shards, on one server in one process: the ratio of the two is
what sharding costs where it cannot help. Each pair of rounds (run back to back, each pair
starting with the other queue) gives one ratio; the figure is the median of the pairs' ratios,
which a moment of load on the machine moves less than a ratio of two best rounds.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import redis

from ours_workloads import worker_runner
from workloads import PREFIX, Result, add, lease_complete

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


SHARDED = {"shards_compare": shards_compare}
