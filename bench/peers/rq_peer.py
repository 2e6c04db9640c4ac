"""rq: jobs enqueued with ``Queue.enqueue`` (one at a time) and ``Queue.enqueue_many`` (a
batch, one pipeline), drained by ``SimpleWorker`` (no fork per job) in burst mode.

Every job calls :func:`noop` with the benchmark item's data as its argument. rq keeps its
defaults (pickle serializer, result TTL); the worker logs at WARNING, so that per-job INFO
lines written to the terminal are not what is measured. rq has no lease or complete of its
own: it offers the adds, the worker and the memory rows.
"""

from __future__ import annotations

from typing import Any

import redis
from rq import Queue, SimpleWorker

from workloads import DATA, FILL_BATCH, BenchError

QUEUE = "bench"


def noop(data: bytes) -> None:
    """The handler: does nothing."""
    del data


class RqQueue:
    """One rq queue."""

    impl = "rq"

    def __init__(self, db: redis.Redis) -> None:
        self._db = db
        self._q = Queue(QUEUE, connection=db)

    def reset(self) -> None:
        pass

    def new_item(self) -> bytes:
        return DATA

    def add(self, item: bytes) -> None:
        self._q.enqueue(noop, item)

    def add_each(self, items: list[Any]) -> None:
        enqueue = self._q.enqueue
        for item in items:
            enqueue(noop, item)

    def add_many(self, items: list[Any]) -> None:
        self._q.enqueue_many([Queue.prepare_data(noop, (item,)) for item in items])

    def fill(self, n: int, data: bytes = DATA) -> None:
        for start in range(0, n, FILL_BATCH):
            count = min(FILL_BATCH, n - start)
            self._q.enqueue_many([Queue.prepare_data(noop, (data,)) for _ in range(count)])

    def run_worker(self, n: int) -> None:
        """``SimpleWorker.work(burst=True)``: it returns when the queue is empty."""
        before = self._q.finished_job_registry.get_job_count()
        worker = SimpleWorker([self._q], connection=self._db)
        worker.work(burst=True, logging_level="WARNING")
        done = self._q.finished_job_registry.get_job_count() - before
        if done != n:
            raise BenchError(f"the rq worker finished {done} jobs, not {n}")

    def queue_len(self) -> int:
        return len(self._q)


def make(db: redis.Redis) -> RqQueue:
    return RqQueue(db)
