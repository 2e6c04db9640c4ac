"""The worker runners (threads, processes, asyncio) on a sharded queue: they drain every shard,
complete each job once, bury failures in the right shard's dead letters, heartbeat and clean;
and an idle worker's calls a second, measured.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import runner_handlers
from helpers import script_calls, wait_for
from redis_work_queue import AsyncWorker, AsyncWorkQueue, Item, KeyPrefix, Worker, WorkQueue
from redis_work_queue.health import live_workers
from runner_handlers import job
from servers import Cluster, Proc

pytestmark = pytest.mark.real_redis

KINDS = ["threads", "processes", "asyncio"]
NAME = "rsh"
TAG = "rsh-test"
SHARDS = 4
QUICK: dict[str, Any] = {
    "lease_secs": 5,
    "poll_secs": 0.2,
    "backoff": 0.05,
    "max_backoff": 0.2,
    "heartbeat_secs": 0.3,
}


@contextmanager
def running(kind: str, url: Any, **options: Any) -> Iterator[tuple[Any, dict[str, Any]]]:
    merged = {**QUICK, **options}
    limit = merged.pop("max_deliveries", None)
    shards = merged.pop("shards", SHARDS)
    worker: Any
    if kind == "asyncio":
        aqueue = AsyncWorkQueue(KeyPrefix(NAME), limit, shards=shards)
        worker = AsyncWorker(url, [aqueue], runner_handlers.arecord, **merged)
    else:
        queue = WorkQueue(KeyPrefix(NAME), limit, shards=shards)
        worker = Worker(
            url, [queue], runner_handlers.record, processes=kind == "processes", **merged
        )
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            if kind == "asyncio":
                out["stats"] = asyncio.run(worker.run(signals=()))
            else:
                out["stats"] = worker.run(signals=())
        except BaseException as err:  # reported by the test
            out["error"] = err

    before = set(multiprocessing.active_children())
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker, out
    finally:
        worker.stop()
        thread.join(timeout=60)
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join(timeout=5)
    assert not thread.is_alive(), "the worker did not stop"
    if "error" in out:
        raise out["error"]


def done(db: Any) -> list[str]:
    return [v.decode() for v in db.lrange(f"{TAG}:done", 0, -1)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_runner_drains_every_shard_once(server: Proc, kind: str) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(NAME), shards=SHARDS)
    ids = [f"j{i}" for i in range(120)]
    queue.add_items(db, [Item(job(server.url, TAG), id=i) for i in ids])
    assert all(row.stats.queued > 10 for row in queue.shard_stats(db))
    with running(kind, server.url, concurrency=3, clean_secs=0.2) as (_, out):
        wait_for(lambda: len(done(db)) >= len(ids), timeout=60, what="every job")
        wait_for(lambda: live_workers(db, queue), timeout=10, what="a heartbeat")
        # An item added to any shard later is picked up by the waiting workers.
        queue.add_item(db, Item(job(server.url, TAG), id="late"))
        wait_for(lambda: "late" in done(db), timeout=10, what="the late job")
    assert Counter(done(db)) == Counter([*ids, "late"])
    stats = queue.stats(db)
    assert (stats.queued, stats.leased, stats.expired) == (0, 0, 0)
    assert queue.counts(db).completed == len(ids) + 1
    assert out["stats"].completed == len(ids) + 1


@pytest.mark.parametrize("kind", KINDS)
def test_failures_go_to_their_shard_s_dead_letters(server: Proc, kind: str) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(NAME), shards=SHARDS, max_deliveries=1)
    ids = [f"f{i}" for i in range(8)]
    queue.add_items(db, [Item(job(server.url, TAG, fail=True), id=i) for i in ids])
    with running(kind, server.url, max_deliveries=1) as _:
        wait_for(lambda: queue.dead_count(db) == len(ids), timeout=30, what="every burial")
    assert sorted(d.id for d in queue.dead_letters(db)) == sorted(ids)
    assert sum(r.stats.dead for r in queue.shard_stats(db)) == len(ids)


def test_an_idle_worker_sends_few_calls(server: Proc) -> None:
    """An idle worker on a sharded queue on one server waits on every shard at once: about one
    call a second, whatever the shard count."""
    admin = server.client(decode_responses=True)
    with running("threads", server.url, heartbeat_secs=None, clean_secs=None, poll_secs=5):
        time.sleep(1.0)
        admin.config_resetstat()
        time.sleep(4.0)
        calls = script_calls(admin) + sum(
            int(admin.info("commandstats").get(f"cmdstat_{c}", {}).get("calls", 0))
            for c in ("blpop", "brpoplpush")
        )
    rate = calls / 4.0
    print(f"\nidle calls per second, one worker, {SHARDS} shards on one server: {rate:.1f}")
    assert rate <= 4, rate


@pytest.mark.parametrize("kind", KINDS)
def test_a_runner_drains_a_sharded_queue_on_the_cluster(
    cluster: Cluster, server: Proc, kind: str
) -> None:
    """Twelve shards over three primaries, the runner on a cluster client (the asyncio worker,
    and the worker processes and their parent, each make theirs from a ``redis+cluster://``
    URL); the handlers record on a separate server."""
    cluster.wait_healthy()
    cluster.flushall()
    db = cluster.client()
    notes = server.client()
    queue = WorkQueue(KeyPrefix(NAME), shards=12)
    ids = [f"c{i}" for i in range(150)]
    queue.add_items(db, [Item(job(server.url, TAG), id=i) for i in ids])
    # Threads on a client; asyncio and processes from a URL (each makes its cluster client).
    url = f"redis+cluster://127.0.0.1:{cluster.primaries()[0].port}"
    client: Any = cluster.client() if kind == "threads" else url
    with running(kind, client, shards=12, concurrency=3, clean_secs=0.3) as (worker, out):
        if kind == "processes":
            assert worker.processes
            wait_for(
                lambda: len(multiprocessing.active_children()) >= 3,
                timeout=30,
                what="three worker processes",
            )
        wait_for(lambda: len(done(notes)) >= len(ids), timeout=60, what="every job")
        queue.add_item(db, Item(job(server.url, TAG), id="late"))
        wait_for(lambda: "late" in done(notes), timeout=10, what="the late job")
    assert Counter(done(notes)) == Counter([*ids, "late"])
    assert queue.stats(db).queued == 0
    assert out["stats"].completed == len(ids) + 1
