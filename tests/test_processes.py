"""Several processes on one queue: racing completions, draining workers, a worker killed
mid-job, and deep cleans running next to live workers and other cleaners.

Every process is spawned (not forked), every wait has a deadline, and leftovers are killed.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

import workers
from helpers import lrange, traces, wait_for
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue

CTX = multiprocessing.get_context("spawn")
JOIN_SECS = 60.0

pytestmark = pytest.mark.slow


@contextmanager
def processes(*specs: tuple[Any, tuple[Any, ...]]) -> Iterator[list[Any]]:
    """Start one spawned process per (target, args); kill whatever is left at the end."""
    started = []
    try:
        for target, args in specs:
            process = CTX.Process(target=target, args=args, daemon=True)
            process.start()
            started.append(process)
        yield started
    finally:
        for process in started:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


def join_all(started: list[Any], timeout: float = JOIN_SECS) -> None:
    deadline = time.monotonic() + timeout
    for process in started:
        process.join(timeout=max(0.1, deadline - time.monotonic()))
    alive = [p.pid for p in started if p.is_alive()]
    assert not alive, f"processes still running after {timeout} s: {alive}"
    codes = [p.exitcode for p in started]
    assert codes == [0] * len(started), f"exit codes {codes}"


def records(db: redis.Redis, key: str) -> list[dict[str, Any]]:
    return [json.loads(entry) for entry in db.lrange(key, 0, -1)]


def check_no_overlapping_leases(leases: list[dict[str, Any]]) -> None:
    """No item was leased while another lease of it was live.

    A lease is certainly live from when its lease call returned (``got``) until the earlier of
    its holder calling complete() and its expiry (at least ``lease_secs`` after the call
    started): two such intervals of the same id must never intersect.
    """
    by_id: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for lease in leases:
        by_id[lease["id"]].append(lease)
    for item_id, entries in by_id.items():
        spans = [(e["got"], min(e["completing"], e["asked"] + e["lease_secs"]), e) for e in entries]
        for n, (start_a, end_a, a) in enumerate(spans):
            for start_b, end_b, other in spans[n + 1 :]:
                assert not (start_a < end_b and start_b < end_a), (
                    f"{item_id!r} leased twice while a lease was live: {a} / {other}"
                )


def test_racing_processes_complete_each_item_once(real_backend: Backend) -> None:
    """8 processes all complete the same 50 items: exactly one True per item overall."""
    db = real_backend.client()
    queue = WorkQueue(KeyPrefix("race"))
    ids = [f"race-{i}" for i in range(50)]
    for item_id in ids:
        queue.add_item(db, Item(b"x", id=item_id))
    for _ in range(25):
        queue.lease(db, 60, block=False)  # half leased, half still queued
    barrier = CTX.Barrier(8)
    specs = [
        (
            workers.complete_racer,
            (real_backend.url, "race", ids, n % 2 == 1, barrier, "race-results:wins"),
        )
        for n in range(8)
    ]
    with processes(*specs) as started:
        join_all(started)
    wins = records(db, "race-results:wins")
    counts = Counter(win["id"] for win in wins)
    assert set(counts) == set(ids)
    assert all(count == 1 for count in counts.values()), counts
    assert queue.processing(db) == 0
    # The ids still queued belong to completed items: they are dropped, never leased.
    assert queue.queue_len(db) == 25
    assert queue.lease(db, 60, block=False) is None
    assert traces(db, "race:*") == []


def test_worker_processes_drain_a_queue(real_backend: Backend) -> None:
    """4 worker processes drain 500 items: none leased twice while leased, each completed
    exactly once, and every lease token is the one written to the lease key."""
    db = real_backend.client()
    queue = WorkQueue(KeyPrefix("drain"))
    total = 500
    specs = [
        (workers.drain_worker, (real_backend.url, "drain", 60.0, "drain-rec", "drain-stop", 60.0))
        for _ in range(4)
    ]
    with processes(*specs) as started:
        # Start the work once every worker waits on the empty queue, so that all take part.
        wait_for(
            lambda: int(db.info("clients")["blocked_clients"]) >= 4,
            timeout=30,
            what="4 workers blocked on the empty queue",
        )
        pipe = db.pipeline()
        for i in range(total):
            queue.add_unique_item_to_pipeline(pipe, Item(f"job-{i}".encode(), id=f"job-{i}"))
        pipe.execute()
        wait_for(lambda: db.llen("drain-rec") >= total, timeout=60, what="all items done")
        db.set("drain-stop", 1)
        join_all(started)
    leases = records(db, "drain-rec")
    assert len(leases) == total
    ids = Counter(lease["id"] for lease in leases)
    assert set(ids) == {f"job-{i}" for i in range(total)}
    assert max(ids.values()) == 1
    assert all(lease["completed"] is True for lease in leases)
    assert all(lease["data"] == lease["id"] for lease in leases)
    assert all(lease["token"] and lease["token"] == lease["stored_token"] for lease in leases)
    check_no_overlapping_leases(leases)
    assert len({lease["pid"] for lease in leases}) >= 2, "only one worker did any work"
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0
    assert traces(db, "drain:*") == []


def test_sigkilled_worker_item_is_recovered(real_backend: Backend) -> None:
    """A worker SIGKILLed after leasing and before completing: once its lease expires the
    light clean requeues the item and another worker completes it."""
    db = real_backend.client()
    queue = WorkQueue(KeyPrefix("kill"))
    queue.add_item(db, Item(b"precious", id="victim"))
    leased_event = CTX.Event()
    spec = (workers.lease_and_hang, (real_backend.url, "kill", 0.5, "kill-leased", leased_event))
    with processes(spec) as (doomed,):
        assert leased_event.wait(timeout=30), "the worker never leased the item"
        assert json.loads(db.get("kill-leased"))["id"] == "victim"
        assert db.exists("kill:lease:victim")
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.join(timeout=10)
        assert doomed.exitcode == -signal.SIGKILL
    # While its lease is live nothing is requeued (unless it has already expired).
    report = queue.light_clean(db)
    if db.exists("kill:lease:victim"):
        assert report.requeued == 0
    assert lrange(db, "kill:processing") in ([b"victim"], [])
    wait_for(lambda: not db.exists("kill:lease:victim"), timeout=5, what="the lease to expire")
    requeued = report.requeued + queue.light_clean(db).requeued
    assert requeued == 1
    assert lrange(db, "kill:queue") == [b"victim"]
    spec = (workers.drain_worker, (real_backend.url, "kill", 30.0, "kill-rec", "kill-stop", 30.0))
    with processes(spec) as started:
        wait_for(lambda: db.llen("kill-rec") >= 1, timeout=30, what="the item to be completed")
        db.set("kill-stop", 1)
        join_all(started)
    (done,) = records(db, "kill-rec")
    assert done["id"] == "victim"
    assert done["data"] == "precious"
    assert done["completed"] is True
    assert done["pid"] != doomed.pid
    assert traces(db, "kill:*") == []


def test_deep_clean_next_to_workers_and_other_cleaners(real_backend: Backend) -> None:
    """Worker processes drain a queue while cleaner processes run deep and light cleans and
    this process runs deep cleans too, and items keep arriving, many of them "lost" (data key
    only, in neither list). No item is ever queued twice or requeued while leased; every item
    is completed exactly once."""
    db = real_backend.client()
    prefix = "deep"
    queue = WorkQueue(KeyPrefix(prefix))
    total = 600
    url = real_backend.url
    stop = "deep-stop"
    specs = [
        *[(workers.drain_worker, (url, prefix, 60.0, "deep-rec", stop, 60.0)) for _ in range(3)],
        *[(workers.cleaner, (url, prefix, stop, "deep-cleaners", 60.0)) for _ in range(2)],
    ]
    duplicates: list[list[bytes]] = []
    local_requeued = [0]
    halt = threading.Event()

    def monitor() -> None:
        client = real_backend.client()
        while not halt.is_set():
            for key in (f"{prefix}:queue", f"{prefix}:processing"):
                listed = client.lrange(key, 0, -1)
                repeated = [i for i, n in Counter(listed).items() if n > 1]
                if repeated:
                    duplicates.append(repeated)
            halt.wait(0.002)

    def deep_cleaner() -> None:
        client = real_backend.client()
        while not halt.is_set():
            local_requeued[0] += queue.deep_clean(client).requeued

    threads = [threading.Thread(target=monitor, daemon=True)]
    threads.append(threading.Thread(target=deep_cleaner, daemon=True))
    with processes(*specs) as started:
        for thread in threads:
            thread.start()
        try:
            producer = real_backend.client()
            for start in range(0, total, 50):
                pipe = producer.pipeline(transaction=False)
                for i in range(start, start + 50):
                    item = Item(f"d{i}".encode(), id=f"it-{i}")
                    if i % 3 == 0:
                        queue.add_unique_item_to_pipeline(pipe, item)
                    else:  # lost: a client died between SET and LPUSH
                        pipe.set(queue.keys.item(item.id()), item.data())
                pipe.execute()
            wait_for(lambda: db.llen("deep-rec") >= total, timeout=60, what="every item done")
        finally:
            db.set(stop, 1)
            halt.set()
            for thread in threads:
                thread.join(timeout=30)
        join_all(started)
    assert not any(thread.is_alive() for thread in threads)
    assert duplicates == [], f"ids listed twice: {duplicates[:5]}"
    leases = records(db, "deep-rec")
    counts = Counter(lease["id"] for lease in leases)
    assert set(counts) == {f"it-{i}" for i in range(total)}
    assert max(counts.values()) == 1, [i for i, n in counts.items() if n > 1][:10]
    assert all(lease["completed"] is True for lease in leases)
    assert all(lease["token"] == lease["stored_token"] for lease in leases)
    check_no_overlapping_leases(leases)
    cleaner_reports = records(db, "deep-cleaners")
    assert len(cleaner_reports) == 2
    lost = sum(1 for i in range(total) if i % 3 != 0)
    deep_total = local_requeued[0] + sum(r["deep"] for r in cleaner_reports)
    assert deep_total == lost  # each lost item requeued once, by exactly one deep clean
    assert queue.queue_len(db) == 0
    assert queue.processing(db) == 0
    assert traces(db, f"{prefix}:*") == []
