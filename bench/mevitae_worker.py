"""Benchmark worker for the published baseline, ``redis-work-queue==0.1.5`` (MeVitae).

Its package is also called ``redis_work_queue``, so it runs in its own process with
``PYTHONPATH=bench/.baseline/mevitae`` (``run.py`` sets it) and with this repository's ``src/``
removed from ``sys.path``. Run by ``run.py`` as
``python bench/mevitae_worker.py --port P --workload W --out FILE``.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import sys
from pathlib import Path
from typing import Any

import redis

from workloads import DATA, FILL_BATCH, PREFIX, worker_main

BENCH = Path(__file__).resolve().parent
BASELINE_DIR = BENCH / ".baseline" / "mevitae"
OUR_SRC = BENCH.parent / "src"


def _import_baseline() -> Any:
    """Import the baseline's ``redis_work_queue`` and make sure it is the baseline."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != OUR_SRC]
    if str(BASELINE_DIR) not in sys.path:
        sys.path.insert(0, str(BASELINE_DIR))
    rwq = importlib.import_module("redis_work_queue")
    origin = Path(rwq.__file__).resolve()
    if not origin.is_relative_to(BASELINE_DIR):
        raise SystemExit(
            f"mevitae_worker imported redis_work_queue from {origin}, not the baseline"
        )
    probe = rwq.WorkQueue(rwq.KeyPrefix(PREFIX))
    if not hasattr(probe, "_session") or hasattr(probe, "deep_clean"):
        raise SystemExit(f"{origin} does not look like redis-work-queue 0.1.5 (MeVitae)")
    return rwq


class MevitaeQueue:
    """The baseline behind the workloads' adapter interface."""

    impl = "baseline"
    #: Its lease is a SETEX, which takes whole seconds.
    short_lease = 1.0

    def __init__(self, rwq: Any, db: redis.Redis) -> None:
        self._rwq = rwq
        self._db = db
        self._q = rwq.WorkQueue(rwq.KeyPrefix(PREFIX))

    def new_item(self) -> Any:
        return self._rwq.Item(DATA)

    def add(self, item: Any) -> None:
        self._q.add_item(self._db, item)

    def add_each(self, items: list[Any]) -> None:
        add, db = self._q.add_item, self._db
        for item in items:
            add(db, item)

    def add_many(self, items: list[Any]) -> None:
        """The baseline has no batch add: its pipeline helper, one round trip."""
        pipe = self._db.pipeline(transaction=False)
        add = self._q.add_item_to_pipeline
        for item in items:
            add(pipe, item)
        pipe.execute()

    def add_checked(self, item: Any) -> bool:
        raise NotImplementedError("the baseline has no add with a duplicate check")

    def fill(self, n: int, data: bytes = DATA) -> None:
        make, add = self._rwq.Item, self._q.add_item_to_pipeline
        for start in range(0, n, FILL_BATCH):
            pipe = self._db.pipeline(transaction=False)
            for _ in range(min(FILL_BATCH, n - start)):
                add(pipe, make(data))
            pipe.execute()

    def reset(self) -> None:
        pass  # nothing to set up

    def add_lost(self, n: int) -> None:
        raise NotImplementedError("the baseline has no deep clean")

    def lease(self, secs: float) -> Any | None:
        return self._q.lease(self._db, max(1, math.ceil(secs)), block=False)

    def complete(self, item: Any) -> bool:
        return bool(self._q.complete(self._db, item))

    def light_clean(self) -> None:
        # The baseline prints a few lines per item it looks at.
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            self._q.light_clean(self._db)

    def deep_clean(self) -> tuple[int, int]:
        raise NotImplementedError("the baseline has no deep clean")

    def queue_len(self) -> int:
        return int(self._q.queue_len(self._db))

    def processing(self) -> int:
        return int(self._q.processing(self._db))


def main() -> None:
    rwq = _import_baseline()
    worker_main(lambda db: MevitaeQueue(rwq, db))


if __name__ == "__main__":
    main()
