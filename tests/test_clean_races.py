"""Deep cleans next to everything else at once: workers that complete, release, delay and abandon
items, a light cleaner, two deep cleans (one on the asyncio API), a client of another
implementation that leases with RPOPLPUSH then SET and completes with LREM + DEL, and lost list
entries. Items are numbered; a monitor checks atomic snapshots of the queue all along.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from helpers import traces, wait_for
from plugins.backends import Backend
from redis_work_queue import AsyncWorkQueue, CleanReport, Item, KeyPrefix, WorkQueue

pytestmark = pytest.mark.slow

PREFIX = "race"
TOTAL = 1500
LEASE_SECS = 0.4

#: One atomic snapshot: the ids listed twice on the main queue, and the ids on the main queue
#: whose lease key is a lease of this library ('<token>@<ms>') or a delay. A lease of the
#: foreign client is left out: between its RPOPLPUSH and its SET, any cleaner of the reference
#: design takes the unleased id for an expired lease and may requeue it (the design's window).
MONITOR = """
local ids = redis.call('LRANGE', KEYS[1], 0, -1)
local seen, twice, leased = {}, {}, {}
for _, id in ipairs(ids) do
  if seen[id] then
    twice[#twice + 1] = id
  end
  seen[id] = true
  local lease = redis.call('GET', ARGV[1] .. id)
  if lease and (lease == 'delayed' or string.find(lease, '^%x+@%d+$')) then
    leased[#leased + 1] = id
  end
end
return {twice, leased}
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Race:
    """The shared state of one run."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.queue = WorkQueue(KeyPrefix(PREFIX))
        self.stop = threading.Event()
        self.chaos = threading.Event()  # set while items may be abandoned and lists lost
        self.chaos.set()
        self.lock = threading.Lock()
        self.completed: Counter[str] = Counter()
        self.twice: list[list[str]] = []
        self.leased_and_queued: list[list[str]] = []
        self.deep: list[CleanReport] = []
        self.errors: list[BaseException] = []

    def done(self, item_id: str) -> None:
        with self.lock:
            self.completed[item_id] += 1

    def guard(self, target: Any) -> Any:
        def run() -> None:
            try:
                target()
            except BaseException as err:  # reported by the test
                self.errors.append(err)
                self.stop.set()

        return run

    def worker(self, seed: int) -> None:
        db = self.backend.client()
        rng = random.Random(seed)
        while not self.stop.is_set():
            item = self.queue.lease(db, LEASE_SECS, block=True, timeout=0.05)
            if item is None:
                continue
            roll = rng.random()
            if self.chaos.is_set() and roll < 0.1:
                continue  # the worker "dies": its lease runs out
            if self.chaos.is_set() and roll < 0.2:
                self.queue.release(db, item, delay=rng.choice([0, 0.05]))
                continue
            if self.queue.complete(db, item):
                self.done(item.id())

    def foreign(self, seed: int) -> None:
        """A client of the reference design: RPOPLPUSH, GET, SETEX; complete with DEL + LREM."""
        db = self.backend.client()
        rng = random.Random(seed)
        queue, processing = f"{PREFIX}:queue", f"{PREFIX}:processing"
        while not self.stop.is_set():
            moved = db.rpoplpush(queue, processing)
            if moved is None:
                time.sleep(0.01)
                continue
            item_id = _text(moved)
            data = db.get(f"{PREFIX}:item:{item_id}")
            if data is None:
                continue
            db.set(f"{PREFIX}:lease:{item_id}", "foreign-session", ex=1)
            if self.chaos.is_set() and rng.random() < 0.1:
                continue  # dies holding it
            pipe = db.pipeline()
            pipe.delete(f"{PREFIX}:item:{item_id}")
            pipe.lrem(processing, 0, item_id)
            pipe.delete(f"{PREFIX}:lease:{item_id}")
            removed, _, _ = pipe.execute()
            if removed:
                self.done(item_id)

    def light_cleaner(self) -> None:
        db = self.backend.client()
        while not self.stop.is_set():
            self.queue.light_clean(db)
            time.sleep(0.05)

    def deep_cleaner(self) -> None:
        db = self.backend.client()
        while not self.stop.is_set():
            self.deep.append(self.queue.deep_clean(db))

    def async_deep_cleaner(self) -> None:
        async def loop() -> None:
            db: Any
            if self.backend.real:
                db = redis.asyncio.Redis.from_url(self.backend.url)
            else:
                db = fakeredis.FakeAsyncRedis(server=self.backend.fake_server)
            queue = AsyncWorkQueue(KeyPrefix(PREFIX))
            try:
                while not self.stop.is_set():
                    self.deep.append(await queue.deep_clean(db))
            finally:
                await db.aclose()

        asyncio.run(loop())

    def vandal(self) -> None:
        """Loses list entries now and then, as a crashed client of another implementation or a
        lost key would: the processing list, or the data-only half of an add."""
        db = self.backend.client()
        while self.chaos.is_set() and not self.stop.is_set():
            time.sleep(0.3)
            db.delete(f"{PREFIX}:processing")

    def monitor(self) -> None:
        db = self.backend.client()
        check = db.register_script(MONITOR)
        while not self.stop.is_set():
            twice, leased = check(keys=[f"{PREFIX}:queue"], args=[f"{PREFIX}:lease:"])
            if twice:
                self.twice.append([_text(i) for i in twice])
            if leased:
                self.leased_and_queued.append([_text(i) for i in leased])
            time.sleep(0.002)


def test_deep_cleans_next_to_workers_cleaners_and_a_foreign_client(
    bytes_backend: Backend,
) -> None:
    race = Race(bytes_backend)
    db = bytes_backend.client()
    # Items numbered 0..TOTAL-1: a third queued, a third lost from both lists (data key only),
    # a third leased by a worker that died and whose processing entry is lost too.
    queued = [Item(f"d{i}".encode(), id=str(i)) for i in range(0, TOTAL, 3)]
    race.queue.add_items(db, queued, unique=True)
    db.mset({f"{PREFIX}:item:{i}": f"d{i}" for i in range(1, TOTAL, 3)})
    dying = [Item(f"d{i}".encode(), id=str(i)) for i in range(2, TOTAL, 3)]
    db.mset({f"{PREFIX}:item:{it.id()}": it.data() for it in dying})
    db.lpush(f"{PREFIX}:processing", *[it.id() for it in dying])
    for it in dying:
        db.set(f"{PREFIX}:lease:{it.id()}", "dead-worker", px=random.randint(50, 1500))
    targets = [
        *[lambda s=s: race.worker(s) for s in range(3)],
        lambda: race.foreign(99),
        race.light_cleaner,
        race.deep_cleaner,
        race.async_deep_cleaner,
        race.vandal,
        race.monitor,
    ]
    threads = [threading.Thread(target=race.guard(t), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    try:
        time.sleep(4)  # chaos: abandoned leases, releases, delays, lost lists
        race.chaos.clear()
        wait_for(
            lambda: race.errors or sum(race.completed.values()) >= TOTAL,
            timeout=120,
            interval=0.05,
            what="every item completed",
        )
    finally:
        race.stop.set()
        for thread in threads:
            thread.join(timeout=30)
    assert not race.errors, race.errors
    assert not any(thread.is_alive() for thread in threads)
    assert race.twice == [], f"ids twice on the main queue: {race.twice[:5]}"
    queued_leases = race.leased_and_queued
    assert queued_leases == [], f"leased or delayed and queued: {queued_leases[:5]}"
    assert set(race.completed) == {str(i) for i in range(TOTAL)}
    assert max(race.completed.values()) == 1
    assert len(race.deep) >= 4
    assert sum(report.requeued for report in race.deep) >= TOTAL // 3  # at least the lost third
    assert db.llen(f"{PREFIX}:queue") == 0
    assert db.llen(f"{PREFIX}:processing") == 0
    assert db.keys(f"{PREFIX}:item:*") == []
    assert db.keys(f"{PREFIX}:lease:*") == []
    # Foreign completes left delivery counts behind; a light clean forgets them.
    race.queue.light_clean(db)
    assert traces(db, f"{PREFIX}:*") == []
