"""Benchmark worker for this library, imported from the working tree (``src/``).

Run by ``run.py`` as ``python bench/ours_worker.py --port P --workload W --out FILE``. With
``RWQ_BENCH_SRC`` set (``run.py --before REV``) it imports the library from that tree instead
and reports itself as ``RWQ_BENCH_IMPL`` (``before``).
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from typing import Any

import redis

from batching_rows import WORKLOADS as BATCHING_WORKLOADS
from events_rows import WORKLOADS as EVENTS_WORKLOADS
from functions_rows import WORKLOADS as FUNCTIONS_WORKLOADS
from jobs_workloads import JOBS_WORKLOADS
from ours_workloads import OURS_ONLY
from sharded_workloads import SHARDED
from workloads import DATA, FILL_BATCH, PREFIX, worker_main

SRC = Path(os.environ.get("RWQ_BENCH_SRC") or Path(__file__).resolve().parents[1] / "src")
IMPL = os.environ.get("RWQ_BENCH_IMPL", "ours")


def _import_ours() -> Any:
    """Import ``redis_work_queue`` and make sure it is this repository's, not the baseline."""
    if str(SRC) not in sys.path:
        sys.path.insert(0, str(SRC))
    rwq = importlib.import_module("redis_work_queue")
    origin = Path(rwq.__file__).resolve()
    if not origin.is_relative_to(SRC):
        raise SystemExit(f"ours_worker imported redis_work_queue from {origin}, not from {SRC}")
    if not hasattr(rwq.WorkQueue, "deep_clean") or not hasattr(rwq, "CleanReport"):
        raise SystemExit(f"{origin} is not this library (no deep_clean / CleanReport)")
    return rwq


class OursQueue:
    """This library behind the workloads' adapter interface."""

    short_lease = 0.05

    def __init__(self, rwq: Any, db: redis.Redis) -> None:
        self.impl = IMPL
        self._rwq = rwq
        self._db = db
        self._q = rwq.WorkQueue(rwq.KeyPrefix(PREFIX))

    @property
    def rwq(self) -> Any:
        """The ``redis_work_queue`` module (for the workloads of this library alone)."""
        return self._rwq

    @property
    def queue(self) -> Any:
        """The benchmark's ``WorkQueue``."""
        return self._q

    def new_item(self) -> Any:
        return self._rwq.Item(DATA)

    def add(self, item: Any) -> None:
        self._q.add_unique_item(self._db, item)

    def add_each(self, items: list[Any]) -> None:
        add, db = self._q.add_unique_item, self._db
        for item in items:
            add(db, item)

    def add_many(self, items: list[Any]) -> None:
        self._q.add_items(self._db, items, unique=True)

    def add_checked(self, item: Any) -> bool:
        return bool(self._q.add_item(self._db, item))

    def fill(self, n: int, data: bytes = DATA) -> None:
        make, add_items = self._rwq.Item, self._q.add_items
        for start in range(0, n, FILL_BATCH):
            add_items(
                self._db, [make(data) for _ in range(min(FILL_BATCH, n - start))], unique=True
            )

    def reset(self) -> None:
        pass  # nothing to set up: the queue's keys appear with its first item

    def add_lost(self, n: int) -> None:
        """Write ``n`` data keys that are in neither list (as a crashed foreign client leaves)."""
        pipe = self._db.pipeline(transaction=False)
        for _ in range(n):
            pipe.set(self._q.keys.item(self._rwq.Item(DATA).id()), DATA)
        pipe.execute()

    def lease(self, secs: float) -> Any | None:
        return self._q.lease(self._db, secs, block=False)

    def complete(self, item: Any) -> bool:
        return bool(self._q.complete(self._db, item))

    def lease_many(self, n: int, secs: float) -> list[Any]:
        return list(self._q.lease_many(self._db, secs, n, block=False))

    def complete_many(self, items: list[Any]) -> None:
        self._q.complete_many(self._db, items)

    def light_clean(self) -> None:
        self._q.light_clean(self._db)

    def deep_clean(self) -> tuple[int, int]:
        report = self._q.deep_clean(self._db)
        return report.examined, report.requeued

    def queue_len(self) -> int:
        return int(self._q.queue_len(self._db))

    def processing(self) -> int:
        return int(self._q.processing(self._db))


def main() -> None:
    rwq = _import_ours()
    workloads = {
        **OURS_ONLY,
        **SHARDED,
        **FUNCTIONS_WORKLOADS,
        **JOBS_WORKLOADS,
        **BATCHING_WORKLOADS,
        **EVENTS_WORKLOADS,
    }
    worker_main(lambda db: OursQueue(rwq, db), workloads)


if __name__ == "__main__":
    main()
