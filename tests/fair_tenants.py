"""The fairness scenario of fair groups, shared by its test and its bench.

Tenant A adds a backlog, then tenants B..K add a few items each; one ``Worker`` with
``concurrency`` threads runs a handler that sleeps a fixed job time. The handler notes the order
in which items finish and each item's wait: the moment its handler started (it was leased)
minus the moment its add returned, on one monotonic clock (everything runs in this process).
The run stops as soon as every item of B..K is done and then deletes the queue's keys, so a
queue without groups need not drain the whole of A's backlog.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import dataclass

import redis

from redis_work_queue import Item, KeyPrefix, Worker, WorkQueue

#: The other tenants, B..K.
OTHERS = [chr(ord("B") + k) for k in range(10)]
#: Items added to A's backlog per call.
CHUNK = 1_000


@dataclass
class Outcome:
    """What one run measured.

    Attributes:
        a_done: Items of A done when the last item of B..K was done (how far A's backlog had
            dropped).
        waits: The wait of every item of B..K, in seconds.
        seconds: From the first lease to the last item of B..K done.
    """

    a_done: int
    waits: list[float]
    seconds: float

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile (0..100) of the waits of B..K, in seconds."""
        ordered = sorted(self.waits)
        return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]

    @property
    def p50(self) -> float:
        """The median wait of B..K, in seconds."""
        return statistics.median(self.waits)

    @property
    def p99(self) -> float:
        """The 99th percentile of the waits of B..K, in seconds."""
        return self.percentile(99)


def run(
    db: redis.Redis,
    prefix: str,
    *,
    grouped: bool,
    backlog: int,
    per_other: int,
    concurrency: int,
    job_secs: float,
    timeout: float = 120.0,
) -> Outcome:
    """Run the scenario once on a fresh queue and delete its keys.

    Args:
        db: A client of the server (its pool must hold ``concurrency`` connections).
        prefix: The queue's key prefix (its keys are deleted at the end).
        grouped: Add each tenant's items to its own group; False: every item on the plain
            queue, in the same order.
        backlog: Items of A, added first.
        per_other: Items of each of B..K, added after A's.
        concurrency: The worker's threads.
        job_secs: The handler's fixed job time.
        timeout: Give up (``TimeoutError``) if B..K are not all done by then.

    Returns:
        What the run measured.
    """
    queue = WorkQueue(KeyPrefix(prefix))
    added: dict[str, float] = {}
    started: dict[str, float] = {}
    done: list[str] = []
    others_done = 0
    total_others = per_other * len(OTHERS)
    finished = threading.Event()
    lock = threading.Lock()
    a_done_at_end = -1

    def handler(item: Item) -> None:
        nonlocal others_done, a_done_at_end
        started[item.id()] = time.monotonic()
        time.sleep(job_secs)
        with lock:
            done.append(item.id())
            if item.id()[0] != "A":
                others_done += 1
                if others_done == total_others:
                    a_done_at_end = sum(1 for name in done if name[0] == "A")
                    finished.set()

    def add(tenant: str, start: int, n: int) -> None:
        items = [Item(b"", id=f"{tenant}{k}") for k in range(start, start + n)]
        queue.add_items(db, items, group=tenant if grouped else None)
        now = time.monotonic()
        for item in items:
            added[item.id()] = now

    try:
        for start in range(0, backlog, CHUNK):
            add("A", start, min(CHUNK, backlog - start))
        for tenant in OTHERS:
            add(tenant, 0, per_other)
        worker = Worker(
            db,
            [queue],
            handler,
            concurrency=concurrency,
            lease_secs=60,
            poll_secs=0.05,
            clean_secs=None,
            heartbeat_secs=None,
            schedule_secs=None,
        )
        thread = threading.Thread(target=worker.run, kwargs={"signals": ()}, daemon=True)
        begin = time.monotonic()
        thread.start()
        try:
            if not finished.wait(timeout):
                raise TimeoutError(f"{others_done} of {total_others} items of B..K done")
            seconds = time.monotonic() - begin
        finally:
            worker.stop()
            thread.join(timeout=30)
        waits = [started[f"{t}{k}"] - added[f"{t}{k}"] for t in OTHERS for k in range(per_other)]
        return Outcome(a_done=a_done_at_end, waits=waits, seconds=seconds)
    finally:
        queue.flush(db)
