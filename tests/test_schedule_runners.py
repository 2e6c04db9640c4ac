"""Schedules run by the worker runners (threads, processes, asyncio) in their housekeeping, at
most once per interval across the fleet, and by ``rwq scheduler``; the ``rwq schedule`` and
``rwq schedules`` commands."""

from __future__ import annotations

import asyncio
import itertools
import json
import multiprocessing
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

import runner_handlers
from checks import limit
from helpers import wait_for
from redis_work_queue import AsyncWorker, AsyncWorkQueue, KeyPrefix, Worker, WorkQueue
from redis_work_queue.ops import schedules as ops
from redis_work_queue.ops.schedules import occurrence_id, occurrence_time
from redis_work_queue.transport import run
from runner_handlers import job
from test_cli_ops import TESTS_DIR, env, one_line, rwq

P = "sr"
TAG = "sr-test"
KINDS = ["threads", "processes", "asyncio"]
JOIN_SECS = 60.0
QUICK: dict[str, Any] = {
    "lease_secs": 5,
    "poll_secs": 0.2,
    "backoff": 0.05,
    "max_backoff": 0.2,
    "heartbeat_secs": 0.3,
    "schedule_secs": 0.1,
}


@contextmanager
def running(kind: str, url: str, **options: Any) -> Iterator[Any]:
    """Run a worker of ``kind`` on queue P in a thread; stop it after."""
    merged = {**QUICK, **options}
    worker: Any
    if kind == "asyncio":
        worker = AsyncWorker(url, [AsyncWorkQueue(KeyPrefix(P))], runner_handlers.arecord, **merged)
    else:
        worker = Worker(
            url,
            [WorkQueue(KeyPrefix(P))],
            runner_handlers.record,
            processes=kind == "processes",
            **merged,
        )
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["stats"] = (
                asyncio.run(worker.run(signals=())) if kind == "asyncio" else worker.run(signals=())
            )
        except BaseException as err:  # reported by the test
            out["error"] = err

    before = set(multiprocessing.active_children())
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=JOIN_SECS)
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join(timeout=5)
    assert "error" not in out, out


def done(db: redis.Redis) -> list[str]:
    return [i.decode() for i in db.lrange(f"{TAG}:done", 0, -1)]


def grid(ids: list[str], every_ms: int) -> list[int]:
    """The due times of occurrence ids, sorted; checked to be consecutive times of the grid."""
    times = sorted(round(occurrence_time(i)[1] * 1000) for i in ids)  # type: ignore[index]
    assert all(b - a == every_ms for a, b in itertools.pairwise(times)), times
    return times


@pytest.mark.parametrize("kind", KINDS)
def test_two_workers_add_each_occurrence_once_and_run_it(
    real_db: redis.Redis, redis_url: str, kind: str
) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(real_db, "tick", every=0.2, catch_up="all", data=job(redis_url, TAG))
    with running(kind, redis_url) as one, running(kind, redis_url) as two:
        wait_for(lambda: len(done(real_db)) >= 8, timeout=JOIN_SECS, what="eight occurrences")
        owners = {real_db.get(queue.keys.schedules_turn) for _ in range(20)} - {None}
        assert owners <= {one.worker_id.encode(), two.worker_id.encode()} and owners
    seen = done(real_db)
    assert len(seen) == len(set(seen))  # each run once
    # Every occurrence added: run, or still queued (or given back) when the workers stopped.
    left = real_db.lrange(queue.keys.queue, 0, -1) + real_db.lrange(queue.keys.processing, 0, -1)
    every = set(seen) | {i.decode() for i in left}
    assert queue.counts(real_db).added == len(every)
    times = grid(list(every), 200)  # no gap, no duplicate
    (listed,) = queue.schedules(real_db)
    assert listed.last_id == occurrence_id("tick", times[-1])


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_queue_without_schedules_gets_no_schedule_key(
    real_db: redis.Redis, redis_url: str, kind: str
) -> None:
    with running(kind, redis_url):
        wait_for(lambda: real_db.exists(f"{P}:workers"), timeout=JOIN_SECS, what="a beat")
        threading.Event().wait(0.5)
    assert real_db.keys(f"{P}:schedules*") == []


def test_schedule_secs_none_leaves_the_schedules_alone(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(real_db, "tick", every=0.1, data=job(redis_url, TAG))
    with running("threads", redis_url, schedule_secs=None):
        wait_for(lambda: real_db.exists(f"{P}:workers"), timeout=JOIN_SECS, what="a beat")
        threading.Event().wait(0.5)
    assert done(real_db) == [] and not real_db.exists(queue.keys.schedules_turn)


def test_the_turn_goes_to_one_caller_per_interval(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(real_db, "tick", every=0.1)
    threading.Event().wait(0.15)
    first = run(real_db, ops.run_steps(queue.keys, owner="w1", turn_ms=400))
    second = run(real_db, ops.run_steps(queue.keys, owner="w2", turn_ms=400))
    assert len(first) == 1 and second == []
    assert real_db.get(queue.keys.schedules_turn) == b"w1"
    assert 0 < real_db.pttl(queue.keys.schedules_turn) <= 400
    threading.Event().wait(0.45)
    assert len(run(real_db, ops.run_steps(queue.keys, owner="w2", turn_ms=400))) == 1
    assert real_db.get(queue.keys.schedules_turn) == b"w2"


@pytest.mark.parametrize("bad", [0, -1, float("nan"), "1"])
def test_a_bad_schedule_secs_is_refused(redis_url: str, bad: object) -> None:
    with pytest.raises(ValueError, match="schedule_secs"):
        Worker(redis_url, [WorkQueue(KeyPrefix(P))], runner_handlers.record, schedule_secs=bad)  # type: ignore[arg-type]


# The command line -------------------------------------------------------------------------------


def test_rwq_schedule_add_list_pause_resume_remove(real_db: redis.Redis, redis_url: str) -> None:
    url = ("--url", redis_url)
    result = rwq(
        *url, "schedule", "add", P, "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Paris"
    )
    assert result.returncode == 0 and "saved" in result.stdout, result.stderr
    result = rwq(
        *url, "schedule", "add", P, "nightly", "--cron", "0 2 * * *", "--tz", "Europe/Paris"
    )
    assert "unchanged" in result.stdout
    result = rwq(*url, "schedule", "add", P, "poll", "--every", "30", "--overlap", "skip", "--json")
    assert json.loads(result.stdout) == {"queue": P, "schedule": "poll", "changed": True}
    assert rwq(*url, "schedule", "pause", P, "poll").stdout.strip() == f"{P} poll: paused"
    assert "already paused" in rwq(*url, "schedule", "pause", P, "poll").stdout
    result = rwq(*url, "schedules", P)
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["queue", "schedule", "when", "tz"]
    assert "paused" in lines[1] and "poll" in lines[1]
    assert "0 2 * * *" in lines[2] and "Europe/Paris" in lines[2] and "running" in lines[2]
    listed = json.loads(rwq(*url, "schedules", P, "--json").stdout)[P]
    assert [(s["name"], s["paused"], s["overlap"]) for s in listed] == [
        ("poll", True, "skip"),
        ("nightly", False, "add"),
    ]
    assert rwq(*url, "schedule", "resume", P, "poll").stdout.strip() == f"{P} poll: resumed"
    assert rwq(*url, "schedule", "remove", P, "poll").returncode == 0
    result = rwq(*url, "schedule", "remove", P, "poll")
    assert result.returncode == 1 and "no schedule 'poll'" in one_line(result)
    result = rwq(*url, "schedule", "add", P, "bad", "--cron", "61 * * * *")
    assert result.returncode == 2 and "minute field '61'" in one_line(result)
    result = rwq(*url, "schedule", "add", P, "a@b", "--every", "1")
    assert result.returncode == 2 and "'@'" in one_line(result)
    assert [s.name for s in WorkQueue(KeyPrefix(P)).schedules(real_db)] == ["nightly"]


def test_rwq_scheduler_once_and_until_stopped(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(real_db, "tick", every=0.1, catch_up="all")
    threading.Event().wait(0.35)
    result = rwq("--url", redis_url, "scheduler", P, "--once")
    assert result.returncode == 0, result.stderr
    added = [json.loads(line)["added"] for line in result.stdout.splitlines()]
    assert len(added) >= 3 and queue.queue_len(real_db) == len(added)
    grid(added, 100)
    result = rwq("--url", "redis://127.0.0.1:1/0", "scheduler", P, "--once", "--json")
    assert result.returncode == 3
    # Until SIGTERM, which ends it with 0.
    real_db.delete(queue.keys.queue)
    proc = subprocess.Popen(
        [sys.executable, "-m", "redis_work_queue.cli", "--url", redis_url, "scheduler", P],
        env=env(),
        cwd=TESTS_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(lambda: queue.queue_len(real_db) >= 3, timeout=JOIN_SECS, what="occurrences")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=JOIN_SECS)
    assert proc.returncode == 0 and out == "" and err == "", err
    grid([i.decode() for i in real_db.lrange(queue.keys.queue, 0, -1)], 100)


def test_rwq_scheduler_waits_out_a_server_out_of_memory(
    full_db: redis.Redis, module_redis: Any
) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.schedule(full_db, "tick", every=0.1)
    limit(full_db)
    proc = subprocess.Popen(
        [sys.executable, "-m", "redis_work_queue.cli", "--url", module_redis.url, "scheduler", P],
        env=env(),
        cwd=TESTS_DIR,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        threading.Event().wait(1.5)
        assert proc.poll() is None and queue.queue_len(full_db) == 0
        full_db.config_set("maxmemory", 0)
        wait_for(lambda: queue.queue_len(full_db) > 0, timeout=JOIN_SECS, what="occurrences")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=JOIN_SECS)
    assert proc.returncode == 0 and out == ""
    lines = err.strip().splitlines()
    warned = [line for line in lines if "cannot take the schedules' writes now" in line]
    assert len(warned) == 1 and "maxmemory" in warned[0], err  # once per outage
    assert "Traceback" not in err
