"""Schedules under load and over time, on real Redis with its clock: schedulers racing while
they are SIGKILLed and restarted, catch-up after a downtime, and Redis Cluster with a hash tag
(synchronous and asyncio)."""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
import sys
import threading
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from helpers import wait_for
from redis_work_queue import AsyncWorkQueue, KeyPrefix, Worker, WorkQueue
from redis_work_queue.ops.schedules import occurrence_id, occurrence_time
from servers import Cluster
from test_cli_ops import TESTS_DIR, env

pytestmark = pytest.mark.real_redis

P = "proof"
#: Schedulers racing, and for how long (seconds); RWQ_SCHEDULE_RACE=20x20 runs the full size.
_RACE = os.environ.get("RWQ_SCHEDULE_RACE", "8x10").split("x")
SCHEDULERS, RACE_SECS = int(_RACE[0]), float(_RACE[1])


def due_times(ids: list[str], name: str) -> list[int]:
    out = []
    for item_id in ids:
        found = occurrence_time(item_id)
        assert found is not None, item_id
        if found[0] == name:
            out.append(round(found[1] * 1000))
    return out


def start_scheduler(url: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "redis_work_queue.cli",
            "--url",
            url,
            "scheduler",
            P,
            "--interval",
            "0.02",
        ],
        env=env(),
        cwd=TESTS_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_racing_schedulers_killed_and_restarted_add_each_occurrence_once(
    real_db: redis.Redis, redis_url: str
) -> None:
    """Eight ``rwq scheduler`` processes for ten seconds (twenty for twenty seconds with
    ``RWQ_SCHEDULE_RACE=20x20``), one SIGKILLed and started again every 0.3 to 1.2 s, on an
    interval schedule of 0.2 s and a cron schedule of one second: every occurrence from the
    first due time to the schedule's next is added, once."""
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(real_db, "fast", every=0.2, catch_up="all")
    queue.schedule(real_db, "second", cron="* * * * * *", catch_up="all")
    first = {s.name: round(s.next_due * 1000) for s in queue.schedules(real_db)}  # type: ignore[operator]
    rng = random.Random(28)
    procs = [start_scheduler(redis_url) for _ in range(SCHEDULERS)]
    kills = 0
    try:
        # (A scheduler takes a second or more to start on a loaded machine.)
        wait_for(lambda: queue.queue_len(real_db) > 0, timeout=60, what="a first occurrence")
        deadline = time.monotonic() + RACE_SECS
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 1.2))
            victim = rng.randrange(SCHEDULERS)
            procs[victim].kill()
            procs[victim].wait()
            kills += 1
            procs[victim] = start_scheduler(redis_url)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert kills >= RACE_SECS * 0.8
    ids = [i.decode() for i in reversed(real_db.lrange(queue.keys.queue, 0, -1))]
    assert len(ids) == len(set(ids)), "an occurrence was added twice"
    assert queue.counts(real_db).added == len(ids)
    for name, every in (("fast", 200), ("second", 1000)):
        times = due_times(ids, name)
        assert times == sorted(times)
        assert all(b - a == every for a, b in itertools.pairwise(times)), "a gap"
        assert times[0] == first[name], "the first due time was skipped"
        next_due = real_db.zscore(queue.keys.schedules_due, name)
        assert next_due == times[-1] + every, "a due time before the next one is missing"
        assert len(times) >= RACE_SECS * 1000 / every / 2
        assert (
            real_db.hget(queue.keys.schedules_last, name) == occurrence_id(name, times[-1]).encode()
        )


def run_until_each_added(queue: WorkQueue, db: redis.Redis, names: set[str]) -> list[str]:
    """Run the scheduler every 20 ms, as the schedulers of a fleet do, until each of ``names``
    has added an occurrence; what was added."""
    added: list[str] = []

    def each() -> bool:
        added.extend(queue.run_schedules(db))
        time.sleep(0.02)
        return {occurrence_time(i)[0] for i in added} >= names  # type: ignore[index]

    wait_for(each, timeout=30, what=f"an occurrence of each of {sorted(names)}")
    return added


@pytest.mark.slow
def test_catch_up_after_five_seconds_without_a_scheduler(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    policies = {"none", "one", "all"}
    for policy in policies:
        queue.schedule(real_db, policy, every=0.5, catch_up=policy)  # type: ignore[arg-type]
    first = run_until_each_added(queue, real_db, policies)  # the schedulers run...
    time.sleep(5.0)  # ...then none does for 5 s
    added = queue.run_schedules(real_db)
    count = {p: len(due_times(added, p)) for p in policies}
    assert count["none"] == 0
    assert count["one"] == 1
    assert count["all"] in (10, 11)
    times = due_times(added, "all")
    assert all(b - a == 500 for a, b in itertools.pairwise(times))
    assert times[0] == due_times(first, "all")[-1] + 500  # every missed due time, none twice
    now = time.time() * 1000
    assert due_times(added, "one")[0] > now - 1_000  # for the latest due time
    for s in queue.schedules(real_db):
        assert s.next_due is not None and s.next_due * 1000 > now - 500
    # The schedulers run again: one occurrence per due time, "none" included.
    after = run_until_each_added(queue, real_db, policies)
    assert not set(after) & set(added)


# Redis Cluster ----------------------------------------------------------------------------------

TAG = "{sched}"


def test_schedules_on_a_cluster_with_a_hash_tag(cluster: Cluster, cluster_db: RedisCluster) -> None:
    queue = WorkQueue(KeyPrefix(f"app:{TAG}"))
    assert queue.schedule(cluster_db, "tick", every=0.1, data=b"t")
    assert queue.schedule(cluster_db, "nightly", cron="0 2 * * *", tz="Europe/Paris")
    assert queue.pause_schedule(cluster_db, "nightly")
    time.sleep(0.15)
    (added,) = queue.run_schedules(cluster_db)
    item = queue.lease(cluster_db, 30, block=False)
    assert item is not None and (item.id(), item.data()) == (added, b"t")
    listed = {s.name: s for s in queue.schedules(cluster_db)}
    assert listed["nightly"].paused and listed["tick"].last_id == added
    assert queue.resume_schedule(cluster_db, "nightly")
    assert queue.remove_schedule(cluster_db, "nightly")
    slots = {
        cluster_db.keyslot(k)
        for k in (
            queue.keys.queue,
            queue.keys.schedules,
            queue.keys.schedules_due,
            queue.keys.schedules_turn,
            queue.keys.item(added),
        )
    }
    assert len(slots) == 1

    # A worker on the cluster runs the schedule in its housekeeping.
    seen: list[str] = []
    worker = Worker(
        cluster_db,
        [queue],
        lambda found: seen.append(found.id()),
        poll_secs=0.2,
        heartbeat_secs=None,
        clean_secs=None,
        schedule_secs=0.05,
    )
    thread = threading.Thread(target=lambda: worker.run(()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(seen) >= 3, timeout=30, what="occurrences")
        assert cluster_db.get(queue.keys.schedules_turn) == worker.worker_id.encode()
    finally:
        worker.stop()
        thread.join(timeout=30)
    assert len(seen) == len(set(seen))


def test_schedules_on_a_cluster_with_the_asyncio_api(cluster: Cluster) -> None:
    async def scenario() -> list[Any]:
        db = cluster.async_client()
        try:
            queue = AsyncWorkQueue(KeyPrefix(f"aio:{TAG}"))
            assert await queue.schedule(db, "tick", every=0.1, data="a")
            assert not await queue.schedule(db, "tick", every=0.1, data="a")
            await asyncio.sleep(0.15)
            added = await queue.run_schedules(db)
            assert await queue.pause_schedule(db, "tick")
            assert await queue.resume_schedule(db, "tick")
            listed = await queue.schedules(db)
            item = await queue.lease(db, 30, block=False)
            assert item is not None and item.id() == added[0] and item.data() == b"a"
            assert await queue.remove_schedule(db, "tick")
            return [added, listed]
        finally:
            await db.aclose()

    added, listed = asyncio.run(asyncio.wait_for(scenario(), 30))
    assert len(added) == 1 and [s.name for s in listed] == ["tick"]
