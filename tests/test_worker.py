"""The Worker runner: threads and processes, lease renewal, retries with backoff ending in dead
letters, clean stops (stop(), SIGTERM, SIGINT, a second signal) and the ``rwq worker`` command.

Every handler call is recorded in Redis by ``lifecycle_handlers.handle``; every wait has a
deadline and every process started here is killed in a ``finally``.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import wait_for
from lifecycle_handlers import calls, handle, job, log
from lifecycle_helpers import blocked_clients, hash_fields, keys_under
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.worker import Worker, WorkerStats, load_handler

P = "wk"
TAG = "wk-test"
TESTS_DIR = Path(__file__).resolve().parent
JOIN_SECS = 20.0


def add_jobs(db: redis.Redis, queue: WorkQueue, url: str, n: int, **options: Any) -> list[str]:
    ids = [f"job-{i:03d}" for i in range(n)]
    for item_id in ids:
        assert queue.add_item(db, Item(job(url, TAG, **options), id=item_id))
    return ids


def assert_no_keys_left(db: redis.Redis) -> None:
    """Nothing of the queue is left but the fleet's clean gate, which expires on its own."""
    left = keys_under(db, f"{P}:")
    assert left <= {f"{P}:cleaned"}, left
    for key in left:
        assert db.pttl(key) > 0


def drained(db: redis.Redis, queue: WorkQueue) -> bool:
    return queue.queue_len(db) == 0 and queue.processing(db) == 0


@contextmanager
def running(worker: Worker) -> Iterator[dict[str, Any]]:
    """Run ``worker`` in a thread; stop it (and kill any process it left) on the way out."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["stats"] = worker.run()
        except BaseException as err:  # reported by the test
            out["error"] = err

    before = set(multiprocessing.active_children())
    thread = threading.Thread(target=target, name="test-worker", daemon=True)
    thread.start()
    try:
        yield out
    finally:
        worker.stop()
        if "stats" not in out:
            # The test failed before run() returned: do not wait for its jobs.
            for child in set(multiprocessing.active_children()) - before:
                child.kill()
        thread.join(timeout=JOIN_SECS)
        for child in set(multiprocessing.active_children()) - before:
            child.kill()
            child.join(timeout=5)
        assert not thread.is_alive(), "the worker did not stop"
        if "error" in out:
            raise out["error"]


def finish(worker: Worker, out: dict[str, Any], thread_wait: Callable[[], bool]) -> WorkerStats:
    """Wait for ``thread_wait``, stop the worker and return its stats."""
    wait_for(thread_wait, timeout=JOIN_SECS, interval=0.01)
    worker.stop()
    wait_for(lambda: "stats" in out or "error" in out, timeout=JOIN_SECS, what="run() to return")
    if "error" in out:
        raise out["error"]
    stats: WorkerStats = out["stats"]
    return stats


def max_overlap(records: list[dict[str, Any]]) -> int:
    """The largest number of handler calls that ran at the same time."""
    events = sorted([(r["start"], 1) for r in records] + [(r["end"], -1) for r in records])
    best = now = 0
    for _, step in events:
        now += step
        best = max(best, now)
    return best


# Arguments --------------------------------------------------------------------------------------


def test_worker_rejects_bad_arguments(redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix(P))
    for kwargs in (
        {"concurrency": 0},
        {"concurrency": True},
        {"lease_secs": 0},
        {"poll_secs": -1},
        {"backoff": -1},
        {"backoff": 10, "max_backoff": 1},
    ):
        with pytest.raises(InvalidArgumentError):
            Worker(redis_url, [queue], handle, **kwargs)
    with pytest.raises(InvalidArgumentError):
        Worker(redis_url, [], handle)
    with pytest.raises(InvalidArgumentError):
        Worker(redis_url, [queue], "not callable")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        Worker(redis.Redis.from_url(redis_url), [queue], handle, processes=True)


def test_load_handler() -> None:
    assert load_handler("lifecycle_handlers:handle") is handle
    for bad in ("lifecycle_handlers", "lifecycle_handlers:nope", "no_such_module:f", ":f"):
        with pytest.raises(InvalidArgumentError):
            load_handler(bad)


def test_retry_delay_backs_off_exponentially(redis_url: str) -> None:
    worker = Worker(redis_url, [WorkQueue(KeyPrefix(P))], handle, backoff=0.5, max_backoff=3)
    for deliveries, base in ((1, 0.5), (2, 1.0), (3, 2.0), (4, 3.0), (10, 3.0)):
        delay = worker.retry_delay(deliveries)
        assert base <= delay <= base * 1.1 + 1e-9
    assert Worker(redis_url, [WorkQueue(KeyPrefix(P))], handle, backoff=0).retry_delay(3) == 0


# Draining ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("connect", ["url", "client", "str-client"])
def test_threads_drain_the_queue_each_item_exactly_once(
    real_db: redis.Redis, redis_url: str, connect: str
) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    ids = add_jobs(db, queue, redis_url, 40, sleep=0.02)
    target: Any = redis_url
    if connect != "url":
        target = redis.Redis.from_url(redis_url, decode_responses=connect == "str-client")
    worker = Worker(target, [queue], handle, lease_secs=10, concurrency=4, poll_secs=0.1)
    with running(worker) as out:
        stats = finish(worker, out, lambda: drained(db, queue) and len(calls(db, TAG)) == 40)
    assert stats == WorkerStats(completed=40, failed=0, lost=0)
    assert calls(db, TAG) == dict.fromkeys(ids, 1)
    records = log(db, TAG)
    assert sorted(r["id"] for r in records) == ids
    assert all(r["deliveries"] == 1 and r["outcome"] == "ok" for r in records)
    assert max_overlap(records) >= 2, "the four handlers never ran in parallel"
    assert_no_keys_left(db)


def test_processes_drain_the_queue_each_item_exactly_once(
    real_db: redis.Redis, redis_url: str
) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    ids = add_jobs(db, queue, redis_url, 30, sleep=0.03)
    worker = Worker(
        redis_url, [queue], handle, lease_secs=10, concurrency=3, processes=True, poll_secs=0.1
    )
    with running(worker) as out:
        stats = finish(worker, out, lambda: drained(db, queue) and len(calls(db, TAG)) == 30)
    assert stats == WorkerStats(completed=30, failed=0, lost=0)
    assert calls(db, TAG) == dict.fromkeys(ids, 1)
    records = log(db, TAG)
    pids = {r["pid"] for r in records}
    assert os.getpid() not in pids
    assert len(pids) >= 2, "the items were not shared between worker processes"
    assert_no_keys_left(db)


def test_higher_priority_queue_first(real_db: redis.Redis, redis_url: str) -> None:
    db = real_db
    high, low = WorkQueue(KeyPrefix(f"{P}-high")), WorkQueue(KeyPrefix(f"{P}-low"))
    for i in range(3):
        low.add_item(db, Item(job(redis_url, TAG), id=f"low-{i}"))
        high.add_item(db, Item(job(redis_url, TAG), id=f"high-{i}"))
    worker = Worker(redis_url, [high, low], handle, lease_secs=10, concurrency=1, poll_secs=0.1)
    with running(worker) as out:
        finish(worker, out, lambda: len(calls(db, TAG)) == 6)
    order = [r["id"] for r in log(db, TAG)]
    assert order == [f"high-{i}" for i in range(3)] + [f"low-{i}" for i in range(3)]


def test_lost_counts_an_item_completed_elsewhere(real_db: redis.Redis, redis_url: str) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    queue.add_item(db, Item(b"x", id="a"))
    done = threading.Event()

    def sneaky(item: Item) -> None:
        assert queue.complete(db, Item(b"", id=item.id()))  # someone else completes it
        done.set()

    worker = Worker(redis_url, [queue], sneaky, lease_secs=10, poll_secs=0.1)
    with running(worker) as out:
        stats = finish(worker, out, done.is_set)
    assert stats == WorkerStats(completed=0, failed=0, lost=1)


# Lease renewal ----------------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_job_longer_than_its_lease_is_delivered_once(
    real_db: redis.Redis, redis_url: str, processes: bool
) -> None:
    """A 2.5 s job on a 0.6 s lease, with a second worker idle and a light clean every 0.1 s."""
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    [item_id] = add_jobs(db, queue, redis_url, 1, sleep=2.5)
    stop_cleaning = threading.Event()
    cleaned = {"rounds": 0, "requeued": 0, "dead": 0}

    def clean() -> None:
        cleaner_db = redis.Redis.from_url(redis_url)
        while not stop_cleaning.wait(0.1):
            report = queue.light_clean(cleaner_db)
            cleaned["rounds"] += 1
            cleaned["requeued"] += report.requeued
            cleaned["dead"] += report.dead

    cleaner = threading.Thread(target=clean, daemon=True)
    cleaner.start()
    worker = Worker(
        redis_url,
        [queue],
        handle,
        lease_secs=0.6,
        concurrency=2,
        processes=processes,
        poll_secs=0.1,
    )
    try:
        with running(worker) as out:
            stats = finish(worker, out, lambda: drained(db, queue) and bool(log(db, TAG)))
    finally:
        stop_cleaning.set()
        cleaner.join(timeout=5)
    assert cleaned["rounds"] >= 15
    assert cleaned["requeued"] == 0
    assert calls(db, TAG) == {item_id: 1}
    [record] = log(db, TAG)
    assert record["deliveries"] == 1
    assert record["end"] - record["start"] >= 2.5
    assert stats == WorkerStats(completed=1, failed=0, lost=0)
    assert_no_keys_left(db)


# Failures, backoff and dead letters -------------------------------------------------------------


def test_failures_back_off_then_dead_letter(real_db: redis.Redis, redis_url: str) -> None:
    db = real_db
    backoff = 0.1
    queue = WorkQueue(KeyPrefix(P), max_deliveries=3)
    ids = add_jobs(db, queue, redis_url, 2, fail=True)
    worker = Worker(
        redis_url,
        [queue],
        handle,
        lease_secs=10,
        concurrency=2,
        backoff=backoff,
        max_backoff=1,
        poll_secs=0.1,
    )
    with running(worker) as out:
        stats = finish(worker, out, lambda: queue.dead_count(db) == 2)
    assert stats == WorkerStats(completed=0, failed=6, lost=0)
    assert calls(db, TAG) == dict.fromkeys(ids, 3)
    records = log(db, TAG)
    for item_id in ids:
        tries = [r for r in records if r["id"] == item_id]
        assert [r["deliveries"] for r in tries] == [1, 2, 3]
        for n in (1, 2):
            gap = tries[n]["start"] - tries[n - 1]["end"]
            expected = backoff * 2 ** (n - 1)
            assert gap >= expected - 0.01, f"retry {n} came after {gap:.3f} s"
            assert gap < expected * 1.1 + 0.5, f"retry {n} came after {gap:.3f} s"
    dead = queue.dead_letters(db)
    assert sorted(d.id for d in dead) == ids
    for letter in dead:
        assert letter.deliveries == 3
        assert "HandlerFailure" in letter.reason
        assert "failing delivery 3" in letter.reason
    assert queue.queue_len(db) == 0
    assert hash_fields(db, f"{P}:deliveries") == set()
    assert hash_fields(db, f"{P}:reasons") == set()


def test_retry_then_success(real_db: redis.Redis, redis_url: str) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P), max_deliveries=5)
    [item_id] = add_jobs(db, queue, redis_url, 1, fail_until=2)
    worker = Worker(redis_url, [queue], handle, lease_secs=10, backoff=0.02, poll_secs=0.1)
    with running(worker) as out:
        stats = finish(worker, out, lambda: drained(db, queue) and len(log(db, TAG)) == 3)
    assert stats == WorkerStats(completed=1, failed=2, lost=0)
    assert [r["outcome"] for r in log(db, TAG)] == ["failed", "failed", "ok"]
    assert [r["deliveries"] for r in log(db, TAG)] == [1, 2, 3]
    assert queue.dead_count(db) == 0
    assert_no_keys_left(db)
    assert item_id in calls(db, TAG)


# Stopping ---------------------------------------------------------------------------------------


def test_stop_finishes_the_running_job_and_leases_nothing_more(
    real_db: redis.Redis, redis_url: str
) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    go = f"{TAG}:go"
    ids = add_jobs(db, queue, redis_url, 3, wait_key=go)
    worker = Worker(redis_url, [queue], handle, lease_secs=10, concurrency=1, poll_secs=0.1)
    with running(worker) as out:
        wait_for(lambda: db.llen(f"{TAG}:started") == 1, timeout=JOIN_SECS, what="first job")
        worker.stop()
        db.set(go, 1)
        wait_for(lambda: "stats" in out or "error" in out, timeout=JOIN_SECS, what="stop")
    assert out["stats"] == WorkerStats(completed=1, failed=0, lost=0)
    assert calls(db, TAG) == {ids[0]: 1}
    assert queue.queue_len(db) == 2
    assert queue.processing(db) == 0
    assert hash_fields(db, f"{P}:deliveries") == set()  # the others were never leased


def test_stop_while_waiting_for_work_spends_no_delivery(
    real_db: redis.Redis, redis_url: str
) -> None:
    """A worker told to stop while it waits on an empty queue leases nothing more: an item that
    arrives then is not leased (its delivery is not spent, it is not buried)."""
    db = real_db
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    worker = Worker(redis_url, [queue], handle, lease_secs=10, concurrency=1, poll_secs=2)
    with running(worker) as out:
        wait_for(lambda: blocked_clients(db) == 1, timeout=JOIN_SECS, what="the worker to wait")
        worker.stop()
        [item_id] = add_jobs(db, queue, redis_url, 1)
        wait_for(lambda: "stats" in out or "error" in out, timeout=JOIN_SECS, what="stop")
    assert out["stats"] == WorkerStats()
    assert calls(db, TAG) == {}
    assert queue.dead_count(db) == 0, "the item was buried without ever being handled"
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.deliveries) == (item_id, 1)


# Signals and the rwq worker command -------------------------------------------------------------


def rwq_command() -> list[str]:
    script = Path(sys.executable).with_name("rwq")
    return [str(script)] if script.exists() else [sys.executable, "-m", "redis_work_queue.cli"]


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS_DIR), env.get("PYTHONPATH", "")) if p)
    env.pop("REDIS_URL", None)
    return env


@contextmanager
def rwq_worker(url: str, tmp_path: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """Start ``rwq -v --url URL worker ARGS`` with its output in files; kill it on the way out."""
    out = (tmp_path / "stdout.txt").open("w")
    err = (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(
        [*rwq_command(), "-v", "--url", url, "worker", *args],
        cwd=TESTS_DIR,
        env=subprocess_env(),
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=err,
        text=True,
        start_new_session=True,  # a stray signal to the test's group does not reach it
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        out.close()
        err.close()


def stderr_of(tmp_path: Path) -> str:
    return (tmp_path / "stderr.txt").read_text()


def stdout_of(tmp_path: Path) -> str:
    return (tmp_path / "stdout.txt").read_text()


def wait_exit(proc: subprocess.Popen[str], tmp_path: Path, timeout: float = JOIN_SECS) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"rwq worker did not exit:\n{stderr_of(tmp_path)}") from None


@pytest.mark.parametrize(
    ("signum", "mode"),
    [
        (signal.SIGTERM, "threads"),
        (signal.SIGINT, "threads"),
        (signal.SIGTERM, "processes"),
    ],
)
def test_signal_stops_gracefully(
    real_db: redis.Redis, redis_url: str, tmp_path: Path, signum: signal.Signals, mode: str
) -> None:
    """The first signal: running jobs finish and are completed, nothing more is leased."""
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    go = f"{TAG}:go"
    add_jobs(db, queue, redis_url, 5, wait_key=go)
    workers = 1 if mode == "threads" else 2
    extra = ["--processes"] if mode == "processes" else []
    args = [f"--concurrency={workers}", "--lease-secs=5", *extra]
    with rwq_worker(redis_url, tmp_path, "lifecycle_handlers:handle", P, *args) as proc:
        wait_for(
            lambda: db.llen(f"{TAG}:started") == workers or proc.poll() is not None,
            timeout=JOIN_SECS,
            what="the jobs to start",
        )
        assert proc.poll() is None, stderr_of(tmp_path)
        proc.send_signal(signum)
        # The parent (and, in process mode, each child) says it is stopping.
        needed = 1 if mode == "threads" else 1 + workers
        wait_for(
            lambda: stderr_of(tmp_path).count("finishing running jobs") >= needed,
            timeout=JOIN_SECS,
            what="the stop to be noticed",
        )
        db.set(go, 1)
        assert wait_exit(proc, tmp_path) == 0, stderr_of(tmp_path)
    assert f"completed {workers}, failed 0, lost 0" in stdout_of(tmp_path)
    assert db.llen(f"{TAG}:started") == workers
    assert set(calls(db, TAG).values()) == {1}
    assert queue.queue_len(db) == 5 - workers
    assert queue.processing(db) == 0
    assert hash_fields(db, f"{P}:deliveries") == set()


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_second_signal_releases_held_items(
    real_db: redis.Redis, redis_url: str, tmp_path: Path, mode: str
) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    [item_id] = add_jobs(db, queue, redis_url, 1, wait_key=f"{TAG}:never", wait_secs=25)
    extra = ["--processes"] if mode == "processes" else []
    with rwq_worker(
        redis_url, tmp_path, "lifecycle_handlers:handle", P, "--lease-secs=30", *extra
    ) as proc:
        wait_for(
            lambda: db.llen(f"{TAG}:started") == 1 or proc.poll() is not None,
            timeout=JOIN_SECS,
            what="the job to start",
        )
        assert proc.poll() is None, stderr_of(tmp_path)
        proc.send_signal(signal.SIGTERM)
        # Parent and, in process mode, its child say they are stopping: the first signal has
        # been handled everywhere before the second is sent.
        needed = 1 if mode == "threads" else 2
        wait_for(
            lambda: stderr_of(tmp_path).count("finishing running jobs") >= needed,
            timeout=JOIN_SECS,
            what="the first signal to be noticed",
        )
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert wait_exit(proc, tmp_path, timeout=10) == 0, stderr_of(tmp_path)
        assert time.monotonic() - started < 5
    assert queue.processing(db) == 0
    assert queue.queue_len(db) == 1
    assert not db.exists(f"{P}:lease:{item_id}")
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.deliveries) == (item_id, 2)


def test_rwq_worker_retries_with_backoff_into_dead_letters(
    real_db: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    db = real_db
    queue = WorkQueue(KeyPrefix(P), max_deliveries=2)
    [item_id] = add_jobs(db, queue, redis_url, 1, fail=True)
    args = ["--max-deliveries=2", "--backoff=0.2", "--lease-secs=5"]
    with rwq_worker(redis_url, tmp_path, "lifecycle_handlers:handle", P, *args) as proc:
        wait_for(
            lambda: queue.dead_count(db) == 1 or proc.poll() is not None,
            timeout=JOIN_SECS,
            what="the dead letter",
        )
        assert proc.poll() is None, stderr_of(tmp_path)
        proc.send_signal(signal.SIGTERM)
        assert wait_exit(proc, tmp_path) == 0, stderr_of(tmp_path)
    assert "completed 0, failed 2, lost 0" in stdout_of(tmp_path)
    tries = log(db, TAG)
    assert [r["deliveries"] for r in tries] == [1, 2]
    assert tries[1]["start"] - tries[0]["end"] >= 0.19
    [dead] = queue.dead_letters(db)
    assert (dead.id, dead.deliveries) == (item_id, 2)
    assert "HandlerFailure" in dead.reason


def test_rwq_worker_with_a_bad_handler_fails_cleanly(redis_url: str, tmp_path: Path) -> None:
    with rwq_worker(redis_url, tmp_path, "lifecycle_handlers:no_such_function", P) as proc:
        code = wait_exit(proc, tmp_path)
    assert code in (1, 2)
    assert "no_such_function" in stderr_of(tmp_path)


def test_quick_double_ctrl_c_aborts_worker_processes(
    real_db: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    """A double Ctrl-C (the second SIGINT soon after the first was handled) must abort every
    worker process: held items are released and the command exits at once."""
    db = real_db
    queue = WorkQueue(KeyPrefix(P))
    workers = 4
    ids = add_jobs(db, queue, redis_url, workers, wait_key=f"{TAG}:never", wait_secs=25)
    args = ["--processes", f"--concurrency={workers}", "--lease-secs=30"]
    with rwq_worker(redis_url, tmp_path, "lifecycle_handlers:handle", P, *args) as proc:
        wait_for(
            lambda: db.llen(f"{TAG}:started") == workers or proc.poll() is not None,
            timeout=JOIN_SECS,
            what="the jobs to start",
        )
        assert proc.poll() is None, stderr_of(tmp_path)
        proc.send_signal(signal.SIGINT)
        wait_for(
            lambda: "SIGINT: finishing running jobs" in stderr_of(tmp_path),
            timeout=JOIN_SECS,
            what="the first Ctrl-C to be handled",
        )
        proc.send_signal(signal.SIGINT)
        assert wait_exit(proc, tmp_path, timeout=5) == 0, stderr_of(tmp_path)
    assert queue.processing(db) == 0
    assert queue.queue_len(db) == workers
    leased = [queue.lease(db, 30, block=False) for _ in ids]
    assert sorted((i.id(), i.deliveries) for i in leased if i is not None) == [
        (item_id, 2) for item_id in ids
    ]
