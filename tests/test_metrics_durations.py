"""The job duration histogram: measured by each runner, flushed with the heartbeat (and at
shutdown) into ``<P>:durations``, exported by ``metrics``; the heartbeat script's checks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import wait_for
from redis_work_queue import KeyPrefix, WorkQueue
from redis_work_queue.durations import BOUNDS, DurationRecorder, bucket_of
from redis_work_queue.errors import WrongKeyTypeError
from redis_work_queue.metrics import families, read, render_families
from redis_work_queue.ops.health import heartbeat_steps
from redis_work_queue.transport import run
from servers import Proc, start_server
from test_runner import KINDS, TAG, P, add, done, running

LONG = 0.3


@pytest.fixture
def server(tmp_path: Path) -> Any:
    proc = start_server(tmp_path)
    try:
        yield proc
    finally:
        proc.stop()


def text(value: bytes | str | None) -> str | None:
    return value.decode() if isinstance(value, bytes) else value


def histogram(db: redis.Redis) -> dict[str, tuple[list[int], float]]:
    [found] = read(db, [WorkQueue(KeyPrefix(P))])
    return found.durations


def add_jobs(db: redis.Redis, url: str) -> None:
    add(db, url, ["a", "b"], sleep=0.02)
    add(db, url, ["slow"], sleep=LONG)
    add(db, url, ["bad"], fail=True)


def check(hist: dict[str, tuple[list[int], float]]) -> None:
    completed, completed_sum = hist["completed"]
    failed, _ = hist["failed"]
    assert sum(completed) == 3 and sum(failed) == 1, hist
    # The slow job lies above 0.25 s; the sum holds at least every sleep.
    at_most_quarter = sum(completed[: BOUNDS.index("0.25") + 1])
    assert at_most_quarter <= 2
    assert completed_sum >= 2 * 0.02 + LONG


@pytest.mark.parametrize("kind", KINDS)
def test_durations_are_flushed_with_heartbeats(server: Proc, kind: str) -> None:
    db = server.client()
    add_jobs(db, server.url)
    with running(kind, server.url, max_deliveries=1, heartbeat_secs=0.2) as run_:
        run_.until(lambda: len(done(db)) == 3 and db.exists(f"{P}:dead:bad"), "the jobs")
        # Flushed by a heartbeat while the worker still runs.
        run_.until(lambda: sum(histogram(db)["completed"][0]) == 3, "a heartbeat's flush")
        run_.until(lambda: sum(histogram(db)["failed"][0]) == 1, "a heartbeat's flush")
        check(histogram(db))
        run_.stop()
    check(histogram(db))  # nothing counted twice at shutdown


@pytest.mark.parametrize("kind", KINDS)
def test_durations_left_are_flushed_at_shutdown(server: Proc, kind: str) -> None:
    db = server.client()
    add_jobs(db, server.url)
    with running(kind, server.url, max_deliveries=1, heartbeat_secs=60) as run_:
        run_.until(lambda: len(done(db)) == 3 and db.exists(f"{P}:dead:bad"), "the jobs")
        assert not db.exists(f"{P}:durations")  # the next beat is a minute away
        run_.stop()
    check(histogram(db))


def test_a_timed_out_job_counts_as_failed(server: Proc) -> None:
    db = server.client()
    add(db, server.url, ["stuck"], hang=True)
    with running("threads", server.url, max_deliveries=1, timeout=0.3) as run_:
        run_.until(lambda: db.exists(f"{P}:dead:stuck"), "the timeout")
        run_.stop()
    db.set(f"{TAG}:release", 1)
    failed, total = histogram(db)["failed"]
    assert sum(failed) == 1 and total >= 0.3
    assert sum(histogram(db)["completed"][0]) == 0


def test_the_exported_histogram_is_cumulative(server: Proc) -> None:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    db = server.client()
    keys = WorkQueue(KeyPrefix(P)).keys
    recorder = DurationRecorder()
    for seconds in (0.001, 0.004, 0.2, 0.2, 100.0):
        recorder.observe(P, seconds, "completed")
    run(db, heartbeat_steps(keys, "w", 1000, {"host": "h"}, recorder.take(P)))
    text = render_families(families(read(db, [WorkQueue(KeyPrefix(P))])))
    name = "rwq_job_duration_seconds"
    [family] = [f for f in text_string_to_metric_families(text) if f.name == name]
    samples = {
        (s.name, s.labels.get("le")): s.value
        for s in family.samples
        if s.labels["outcome"] == "completed"
    }
    assert samples[("rwq_job_duration_seconds_bucket", "0.005")] == 2
    assert samples[("rwq_job_duration_seconds_bucket", "0.1")] == 2
    assert samples[("rwq_job_duration_seconds_bucket", "0.25")] == 4
    assert samples[("rwq_job_duration_seconds_bucket", "60")] == 4
    assert samples[("rwq_job_duration_seconds_bucket", "+Inf")] == 5
    assert samples[("rwq_job_duration_seconds_count", None)] == 5
    assert samples[("rwq_job_duration_seconds_sum", None)] == pytest.approx(100.405)


def test_buckets_include_their_bound() -> None:
    assert bucket_of(0.005) == "0.005"
    assert bucket_of(0.0051) == "0.01"
    assert bucket_of(60.0) == "60"
    assert bucket_of(61.0) == "+Inf"


def test_heartbeat_checks_the_durations_key_before_writing(db: redis.Redis) -> None:
    keys = WorkQueue(KeyPrefix(P)).keys
    db.set(keys.durations, "not a hash")
    with pytest.raises(WrongKeyTypeError, match="durations"):
        run(db, heartbeat_steps(keys, "w", 1000, {"host": "h"}, {"completed:0.005": 1}))
    assert not db.exists(keys.workers) and not db.exists(keys.worker("w"))
    assert text(db.get(keys.durations)) == "not a hash"


def test_heartbeat_adds_durations_and_keeps_fields(db: redis.Redis) -> None:
    keys = WorkQueue(KeyPrefix(P)).keys
    fields = {"host": "h", "pid": 7}
    deltas = {"failed:1": 2, "failed:sum_us": 9}
    assert run(db, heartbeat_steps(keys, "w", 5000, fields, deltas)) == 1
    assert run(db, heartbeat_steps(keys, "w", 5000, fields, {"failed:1": 1})) == 1
    found = {text(k): text(v) for k, v in db.hgetall(keys.durations).items()}
    assert found == {"failed:1": "3", "failed:sum_us": "9"}
    assert text(db.hget(keys.worker("w"), "pid")) == "7"
    assert run(db, heartbeat_steps(keys, "w", 0, {}, {"completed:+Inf": 1})) == 0
    assert text(db.hget(keys.durations, "completed:+Inf")) == "1"  # flushed as it unregisters
    assert not db.exists(keys.worker("w"))


def test_recorder_takes_each_delta_once() -> None:
    recorder = DurationRecorder()
    recorder.observe("a", 0.5, "completed")
    recorder.observe("a", 0.5, "completed")
    recorder.observe("b", 2, "failed")
    assert recorder.take("a") == {"completed:0.5": 2, "completed:sum_us": 1_000_000}
    assert recorder.take("a") == {}
    recorder.add("a", {"completed:1": 1})
    assert recorder.take_all() == {
        "a": {"completed:1": 1},
        "b": {"failed:2.5": 1, "failed:sum_us": 2_000_000},
    }
    wait_for(lambda: recorder.take_all() == {}, timeout=1, what="empty")
