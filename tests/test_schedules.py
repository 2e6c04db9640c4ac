"""Schedules: definitions, the exactly-once add, catch-up, overlap, time zones and DST, bad input,
and the write-check and out-of-memory rows of the schedule operations."""

from __future__ import annotations

import itertools
import sys
import time
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
import redis
from cronsim import CronSim

from checks import KEYS, PREFIX, OomCheck, State, WriteCheck, limit, oom_test, write_check_test
from helpers import dump_state, lrange, raw
from redis_work_queue import InvalidArgumentError, KeyPrefix, Schedule, WorkQueue
from redis_work_queue.ops import schedules as ops
from redis_work_queue.ops.schedules import Spec, occurrence_id, occurrence_time
from redis_work_queue.transport import run

QUEUE = KeyPrefix("sched")


def server_ms(db: redis.Redis) -> int:
    seconds, micros = db.time()
    return int(seconds) * 1000 + int(micros) // 1000


def due_ms(db: redis.Redis, queue: WorkQueue, name: str) -> float:
    score = db.zscore(queue.keys.schedules_due, name)
    assert score is not None
    return score


def set_due(db: redis.Redis, queue: WorkQueue, name: str, ms: int) -> None:
    """Move a schedule's next due time, as if no scheduler had run since ``ms``."""
    db.zadd(queue.keys.schedules_due, {name: ms})


def queued(db: redis.Redis, queue: WorkQueue) -> list[str]:
    """The ids on the main queue, oldest first."""
    return [i.decode() for i in reversed(lrange(db, queue.keys.queue))]


# Defining, listing, pausing, removing -----------------------------------------------------------


def test_a_schedule_is_stored_listed_and_declared_again_unchanged(
    db: redis.Redis, queue: WorkQueue
) -> None:
    assert queue.schedule(db, "tick", every=30, data=b"payload") is True
    before = dump_state(db)
    # Declared again as it is (every worker may do so at start): nothing changes.
    assert queue.schedule(db, "tick", every=30, data=b"payload") is False
    assert dump_state(db) == before
    now = server_ms(db)
    (found,) = queue.schedules(db)
    assert isinstance(found, Schedule)
    assert (found.name, found.every, found.cron, found.tz, found.paused) == (
        "tick",
        30.0,
        None,
        "UTC",
        False,
    )
    assert found.next_due is not None and found.last_id is None
    # On whole intervals since the epoch, the first after now.
    assert found.next_due * 1000 % 30_000 == 0
    assert now < found.next_due * 1000 <= now + 30_000
    assert raw(db, "HGET", queue.keys.schedules_data, "tick") == b"payload"


def test_a_changed_schedule_replaces_the_old_and_a_paused_one_stays_paused(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.schedule(db, "job", every=30)
    assert queue.pause_schedule(db, "job") is True
    assert queue.pause_schedule(db, "job") is False
    assert queue.schedule(db, "job", cron="0 2 * * *", tz="Europe/Paris", data="new") is True
    (found,) = queue.schedules(db)
    assert found.cron == "0 2 * * *" and found.every is None and found.tz == "Europe/Paris"
    assert found.paused and found.next_due is None
    assert raw(db, "HGET", queue.keys.schedules_data, "job") == b"new"
    assert queue.resume_schedule(db, "job") is True
    assert queue.resume_schedule(db, "job") is False
    (found,) = queue.schedules(db)
    assert not found.paused and found.next_due is not None
    local = datetime.fromtimestamp(found.next_due, ZoneInfo("Europe/Paris"))
    assert (local.hour, local.minute, local.second) == (2, 0, 0)


def test_pause_resume_and_remove(db: redis.Redis, queue: WorkQueue) -> None:
    queue.schedule(db, "a", every=0.1)
    queue.schedule(db, "b", every=0.1)
    assert queue.pause_schedule(db, "a")
    time.sleep(0.25)
    added = queue.run_schedules(db)
    assert [occurrence_time(i)[0] for i in added] == ["b"]  # type: ignore[index]
    # A resumed schedule skips the times that passed while it was paused.
    now = server_ms(db)
    assert queue.resume_schedule(db, "a")
    assert due_ms(db, queue, "a") > now
    names = [s.name for s in queue.schedules(db)]
    assert sorted(names) == ["a", "b"]
    assert queue.remove_schedule(db, "a") is True
    assert queue.remove_schedule(db, "a") is False
    assert queue.pause_schedule(db, "a") is False
    assert queue.resume_schedule(db, "a") is False
    assert [s.name for s in queue.schedules(db)] == ["b"]
    # The occurrences a removed schedule added stay; nothing of it is left.
    assert queue.remove_schedule(db, "b")
    assert added[0] in queued(db, queue)
    for key in (
        queue.keys.schedules,
        queue.keys.schedules_data,
        queue.keys.schedules_due,
        queue.keys.schedules_last,
    ):
        assert not db.exists(key)


def test_listing_reads_in_pages(db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "LIST_CHUNK", 3)
    queue = WorkQueue(QUEUE)
    for k in range(8):
        queue.schedule(db, f"s{k}", every=10 + k)
    queue.pause_schedule(db, "s5")
    found = queue.schedules(db)
    assert sorted(s.name for s in found) == [f"s{k}" for k in range(8)]
    assert found[0].name == "s5" and found[0].paused  # paused ones first
    dues = [s.next_due for s in found[1:]]
    assert dues == sorted(dues)  # type: ignore[type-var]


# Occurrences ------------------------------------------------------------------------------------


def test_occurrences_are_ordinary_items_with_ids_of_name_and_due_time(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.schedule(db, "tick", every=30, data=b"work")
    now = server_ms(db)
    set_due(db, queue, "tick", now - now % 30_000)  # due
    (first,) = queue.run_schedules(db)
    assert queue.run_schedules(db) == []  # nothing more is due yet
    name, due = occurrence_time(first)  # type: ignore[misc]
    assert name == "tick" and round(due * 1000) == now - now % 30_000
    assert first == occurrence_id("tick", round(due * 1000))
    assert first.startswith("tick@") and first.endswith("Z")
    item = queue.lease(db, 30, block=False)
    assert item is not None and item.id() == first and item.data() == b"work"
    assert queue.complete(db, item)
    (listed,) = queue.schedules(db)
    assert listed.last_id == first
    assert listed.next_due is not None and listed.next_due * 1000 > due * 1000
    assert queue.counts(db).added == 1


def test_an_occurrence_still_queued_stays_and_the_next_is_added_beside_it(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.schedule(db, "tick", every=0.1)
    ids: list[str] = []
    for _ in range(3):
        time.sleep(0.15)
        ids += queue.run_schedules(db)
    assert len(ids) == 3 and len(set(ids)) == 3
    assert queued(db, queue) == ids


def test_overlap_skip_adds_nothing_while_the_last_occurrence_exists(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.schedule(db, "tick", every=0.1, overlap="skip")
    time.sleep(0.15)
    (first,) = queue.run_schedules(db)
    time.sleep(0.15)
    assert queue.run_schedules(db) == []  # queued: skipped, and the due time moved on
    item = queue.lease(db, 30, block=False)
    assert item is not None and item.id() == first
    time.sleep(0.15)
    assert queue.run_schedules(db) == []  # leased: skipped too
    assert queue.complete(db, item)
    time.sleep(0.15)
    (second,) = queue.run_schedules(db)
    assert second > first


def test_start_and_end_bound_the_due_times(db: redis.Redis, queue: WorkQueue) -> None:
    now = server_ms(db) / 1000
    start = now + 3600
    queue.schedule(db, "later", every=0.1, start=start, end=start + 0.25)
    queue.schedule(db, "over", every=1, start=now - 10, end=now - 5)
    queue.schedule(db, "window", every=10, end=now - 1)
    listed = {s.name: s for s in queue.schedules(db)}
    assert listed["later"].next_due == pytest.approx(start, abs=0.001)  # not before start
    assert listed["later"].start == pytest.approx(start, abs=0.001)
    assert listed["over"].next_due is None and not listed["over"].paused  # none left
    assert queue.run_schedules(db) == []
    # As if the window's last due time had been missed: its one occurrence is added, and no
    # due time is left after it.
    last = int(now * 1000 - 1_000) // 10_000 * 10_000
    set_due(db, queue, "window", last)
    (added,) = queue.run_schedules(db)
    assert added == occurrence_id("window", last)
    listed = {s.name: s for s in queue.schedules(db)}
    assert listed["window"].next_due is None and listed["window"].last_id == added


def test_start_and_end_in_the_due_times_computed() -> None:
    spec = Spec.of(None, 0.1, "UTC", 1_000, 1_000.25, "all", "add")
    assert spec.after(0) == 1_000_000  # the first at start
    assert spec.after(1_000_000) == 1_000_100
    assert spec.after(1_000_200) is None  # none left before end
    assert spec.plan(1_000_000, 2_000_000) == ([1_000_000, 1_000_100, 1_000_200], None)
    cron = Spec.of("0 * * * *", None, "UTC", 3_600 * 10 + 1, 3_600 * 12, "one", "add")
    assert cron.after(0) == 3_600_000 * 11
    assert cron.after(3_600_000 * 11) == 3_600_000 * 12
    assert cron.after(3_600_000 * 12) is None


# Exactly once -----------------------------------------------------------------------------------


def test_racing_schedulers_add_each_occurrence_once(db: redis.Redis) -> None:
    one, two = WorkQueue(QUEUE), WorkQueue(QUEUE)
    one.schedule(db, "tick", every=0.1, catch_up="all")
    seen: list[str] = []
    for _ in range(10):
        time.sleep(0.05)
        seen += one.run_schedules(db) + two.run_schedules(db)
    assert len(seen) == len(set(seen)) == len(queued(db, one))
    times = [round(occurrence_time(i)[1] * 1000) for i in seen]  # type: ignore[index]
    assert times == sorted(times)
    assert all(b - a == 100 for a, b in itertools.pairwise(times))  # no gap, no duplicate


def test_a_scheduler_that_read_a_stale_due_time_adds_nothing(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.schedule(db, "tick", every=0.1)
    time.sleep(0.15)
    due = int(due_ms(db, queue, "tick"))
    spec = raw(db, "HGET", queue.keys.schedules, "tick").decode()
    late = ops.schedule_fire_call(
        queue.keys, *ops.firing("tick", spec, due, due + 100, False, [occurrence_id("tick", due)])
    )
    assert len(queue.run_schedules(db)) == 1  # another scheduler moved it first
    before = dump_state(db)
    assert run(db, _steps(late)) == [-1]
    assert dump_state(db) == before
    # So is one whose schedule changed since it read it, even with the same due time.
    set_due(db, queue, "tick", due)
    other = ops.schedule_fire_call(
        queue.keys, *ops.firing("tick", spec.replace("add", "skip"), due, due + 100, False, ["x"])
    )
    before = dump_state(db)
    assert run(db, _steps(other)) == [-1]
    assert dump_state(db) == before


def _steps(call: object):  # type: ignore[no-untyped-def]
    return (yield call)


# Catch-up ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "expected"), [("none", 0), ("one", 1), ("all", 10)])
def test_catch_up_after_five_seconds_without_a_scheduler(
    db: redis.Redis, queue: WorkQueue, policy: str, expected: int
) -> None:
    queue.schedule(db, "tick", every=0.5, catch_up=policy)  # type: ignore[arg-type]
    # As if the fleet had been down for 5 s: the due time the schedule holds passed 5 s ago.
    now = server_ms(db)
    set_due(db, queue, "tick", now - now % 500 - 4_500)
    added = queue.run_schedules(db)
    assert len(added) in (expected, expected + (policy == "all"))
    times = [round(occurrence_time(i)[1] * 1000) for i in added]  # type: ignore[index]
    assert all(t <= server_ms(db) for t in times)
    if added:
        assert max(times) > now - 500  # the latest due time that passed
    if policy == "all":
        assert all(b - a == 500 for a, b in itertools.pairwise(times))
    assert due_ms(db, queue, "tick") > now  # the next due time is in the future
    # A second run adds nothing it added already, and at most the one occurrence that may have
    # come due since (a slow machine can take more than the 0.5 s interval between the calls).
    again = queue.run_schedules(db)
    assert not set(again) & set(added) and len(again) <= 1
    if again:
        assert occurrence_time(again[0])[1] * 1000 > max(times, default=now - 5_000)  # type: ignore[index]


def test_catch_up_none_adds_a_due_time_seen_a_little_late(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.schedule(db, "tick", every=10, catch_up="none")
    now = server_ms(db)
    set_due(db, queue, "tick", now - now % 10_000)  # passed less than 10 s ago, the only one
    assert len(queue.run_schedules(db)) == 1


def test_catch_up_all_adds_at_most_the_latest_hundred() -> None:
    spec = Spec.of(None, 1, "UTC", None, None, "all", "add")
    times, next_ms = spec.plan(0, 1_000_000)
    assert len(times) == ops.CATCH_UP_LIMIT and times[-1] == 1_000_000
    assert next_ms == 1_001_000
    skip = Spec.of(None, 1, "UTC", None, None, "all", "skip")
    assert skip.plan(0, 1_000_000)[0] == [1_000_000]


# Time zones and DST -----------------------------------------------------------------------------

#: (zone, spring-forward day, fall-back day) of two zones.
ZONES = [
    ("Europe/Paris", datetime(2026, 3, 29), datetime(2026, 10, 25)),
    ("America/New_York", datetime(2026, 3, 8), datetime(2026, 11, 1)),
]


def _library_times(expr: str, zone: ZoneInfo, start: datetime, n: int) -> list[int]:
    it = CronSim(expr, start.replace(tzinfo=zone))
    return [round(next(it).timestamp() * 1000) for _ in range(n)]


def _our_times(spec: Spec, start_ms: int, n: int) -> list[int]:
    out, t = [], start_ms
    for _ in range(n):
        t = spec.after(t)  # type: ignore[assignment]
        out.append(t)
    return out


@pytest.mark.parametrize(("zone_name", "spring", "fall"), ZONES)
@pytest.mark.parametrize("expr", ["30 2 * * *", "30 * * * *", "0 3 * * *", "*/20 1-3 * * *"])
def test_next_times_across_both_transitions_are_the_cron_library_s(
    zone_name: str, spring: datetime, fall: datetime, expr: str
) -> None:
    zone = ZoneInfo(zone_name)
    spec = Spec.of(expr, None, zone_name, None, None, "one", "add")
    for day in (spring, fall):
        start = day - timedelta(hours=12)
        start_ms = round(start.replace(tzinfo=zone).timestamp() * 1000)
        assert _our_times(spec, start_ms, 30) == _library_times(expr, zone, start, 30)


@pytest.mark.parametrize(("zone_name", "spring", "fall"), ZONES)
def test_a_fixed_time_runs_once_on_both_transition_nights(
    zone_name: str, spring: datetime, fall: datetime
) -> None:
    zone = ZoneInfo(zone_name)
    spec = Spec.of("30 1,2 * * *", None, zone_name, None, None, "one", "add")
    daily = Spec.of("30 2 * * *", None, zone_name, None, None, "one", "add")
    for day in (spring, fall):
        begin = round(day.replace(tzinfo=zone).timestamp() * 1000)
        runs = [t for t in _our_times(daily, begin, 3) if t < begin + 86_400_000]
        assert len(runs) == 1, [datetime.fromtimestamp(t / 1000, zone) for t in runs]
        local = datetime.fromtimestamp(runs[0] / 1000, zone)
        if day is spring:  # 02:30 does not exist: run once, when the clocks jump to 03:00
            assert (local.hour, local.minute) == (3, 0)
        else:  # 02:30 exists twice (Paris) or not in the repeated hour (New York): once
            assert (local.hour, local.minute) == (2, 30)
        both = [t for t in _our_times(spec, begin, 4) if t < begin + 86_400_000]
        assert len(both) == 2 and len(set(both)) == 2


@pytest.mark.parametrize(("zone_name", "spring", "fall"), ZONES)
def test_an_hourly_job_runs_at_each_real_hour_across_both_transitions(
    zone_name: str, spring: datetime, fall: datetime
) -> None:
    zone = ZoneInfo(zone_name)
    spec = Spec.of("30 * * * *", None, zone_name, None, None, "one", "add")
    for day, hours in ((spring, 23), (fall, 25)):
        begin = round(day.replace(tzinfo=zone).timestamp() * 1000)
        end = round((day + timedelta(days=1)).replace(tzinfo=zone).timestamp() * 1000)
        runs = [t for t in _our_times(spec, begin, 30) if t < end]
        assert len(runs) == hours
        assert all(b - a == 3_600_000 for a, b in itertools.pairwise(runs))


def test_catch_up_of_a_cron_schedule_reads_the_library_backwards() -> None:
    spec = Spec.of("*/10 * * * * *", None, "UTC", None, None, "all", "add")
    base = round(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1000)
    times, next_ms = spec.plan(base, base + 35_500)
    assert times == [base + k * 10_000 for k in range(4)] and next_ms == base + 40_000
    times, _ = spec.plan(base, base + 10 * 86_400_000)  # ten days down: the latest hundred
    assert len(times) == ops.CATCH_UP_LIMIT and times[-1] == base + 10 * 86_400_000


# Bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "options", "words"),
    [
        ("x", {"cron": "61 * * * *"}, ["minute", "'61'"]),
        ("x", {"cron": "0 25 * * *"}, ["hour", "'25'"]),
        ("x", {"cron": "0 0 32 * *"}, ["day-of-month", "'32'"]),
        ("x", {"cron": "0 0 * 13 *"}, ["month", "'13'"]),
        ("x", {"cron": "0 0 * * 9"}, ["day-of-week", "'9'"]),
        ("x", {"cron": "99 0 0 * * *"}, ["second", "'99'"]),
        ("x", {"cron": "* * *"}, ["3 fields", "five"]),
        ("x", {"cron": 5}, ["cron", "str"]),
        ("x", {"every": 1, "tz": "Mars/Olympus"}, ["tz", "Mars/Olympus"]),
        ("x", {"every": 0.01}, ["every", "0.1"]),
        ("x", {"every": float("nan")}, ["every", "finite"]),
        ("x", {"every": float("inf")}, ["every", "finite"]),
        ("x", {"every": "5"}, ["every", "str"]),
        ("x", {}, ["exactly one of cron", "every"]),
        ("x", {"cron": "* * * * *", "every": 1}, ["exactly one of cron"]),
        ("x", {"every": 1, "start": 200.0, "end": 100.0}, ["end", "before start"]),
        ("x", {"every": 1, "start": datetime(2026, 1, 1)}, ["start", "naive"]),
        ("x", {"every": 1, "catch_up": "some"}, ["catch_up", "none, one, all"]),
        ("x", {"every": 1, "overlap": "queue"}, ["overlap", "add, skip"]),
        ("x", {"every": 1, "data": 5}, ["data", "bytes"]),
        ("a@b", {"every": 1}, ["'@'", "a-b"]),
        ("", {"every": 1}, ["name", "1 to 200"]),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    db: redis.Redis, queue: WorkQueue, name: str, options: dict[str, object], words: list[str]
) -> None:
    queue.schedule(db, "kept", every=30)
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError) as caught:
        queue.schedule(db, name, **options)  # type: ignore[arg-type]
    for word in words:
        assert word in str(caught.value), caught.value
    assert dump_state(db) == before


def test_bad_names_and_limits_are_refused_by_every_operation(
    db: redis.Redis, queue: WorkQueue
) -> None:
    for call in (queue.pause_schedule, queue.resume_schedule, queue.remove_schedule):
        with pytest.raises(InvalidArgumentError, match="'@'"):
            call(db, "a@b")
    with pytest.raises(InvalidArgumentError, match="limit"):
        queue.run_schedules(db, limit=0)


def test_a_cron_schedule_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cronsim", None)
    with pytest.raises(ImportError) as caught:
        Spec.of("0 2 * * *", None, "UTC", None, None, "one", "add")
    text = str(caught.value)
    assert "pip install 'redis-work-queue-lua[schedules]'" in text
    assert "pip install '.[schedules]'" in text and ".whl" in text
    # An interval schedule needs no extra.
    assert Spec.of(None, 5, "UTC", None, None, "one", "add").every_ms == 5000


# The shared tables ------------------------------------------------------------------------------


def _due_schedule(db: redis.Redis) -> None:
    queue = WorkQueue(PREFIX)
    queue.schedule(db, "tick", every=0.1)
    queue.schedule(db, "once", every=0.1, overlap="skip")
    now = server_ms(db)
    for name in ("tick", "once"):
        db.zadd(KEYS.schedules_due, {name: now - now % 100 - 300})


def _q() -> WorkQueue:
    return WorkQueue(PREFIX)


def _existing(db: redis.Redis) -> None:
    _q().schedule(db, "tick", every=0.1)


def _paused(db: redis.Redis) -> None:
    _q().schedule(db, "tick", every=0.1)
    _q().pause_schedule(db, "tick")


def _turn(s: State) -> object:
    return run(s.db, ops.run_steps(KEYS, owner="w1", turn_ms=60_000))


WRITE_CHECKS = [
    WriteCheck("schedule", "a", lambda s: _q().schedule(s.db, "tick", every=0.1, data=b"d")),
    WriteCheck(
        "schedule-replace", "a", lambda s: _q().schedule(s.db, "tick", every=5), prepare=_existing
    ),
    WriteCheck(
        "pause_schedule", "a", lambda s: _q().pause_schedule(s.db, "tick"), prepare=_existing
    ),
    WriteCheck(
        "resume_schedule", "a", lambda s: _q().resume_schedule(s.db, "tick"), prepare=_paused
    ),
    WriteCheck(
        "remove_schedule", "a", lambda s: _q().remove_schedule(s.db, "tick"), prepare=_existing
    ),
    WriteCheck(
        "run_schedules",
        "a",
        lambda s: _q().run_schedules(s.db),
        prepare=_due_schedule,
    ),
    WriteCheck("run_schedules-turn", "a", _turn, prepare=_due_schedule, writer="runner"),
]
test_schedule_writes_check_types_first = write_check_test(WRITE_CHECKS)

OOM_CHECKS = [
    OomCheck("schedule", lambda q, db, _: q.schedule(db, "tick", every=1), refused=True),
    OomCheck("pause_schedule", lambda q, db, _: q.pause_schedule(db, "tick")),
    OomCheck("resume_schedule", lambda q, db, _: q.resume_schedule(db, "tick")),
    OomCheck("remove_schedule", lambda q, db, _: q.remove_schedule(db, "tick")),
    OomCheck("run_schedules", lambda q, db, _: q.run_schedules(db)),
]
test_schedule_writes_out_of_memory = oom_test(OOM_CHECKS)


def test_a_due_schedule_on_a_server_out_of_memory_changes_nothing(full_db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.schedule(full_db, "tick", every=0.1)
    queue.schedule(full_db, "paused", every=0.1)
    queue.pause_schedule(full_db, "paused")
    time.sleep(0.15)
    limit(full_db)
    before = dump_state(full_db)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        queue.run_schedules(full_db)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        queue.schedule(full_db, "tick", every=5)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        queue.resume_schedule(full_db, "paused")
    # Reads still work, and a declaration that changes nothing writes nothing.
    assert len(queue.schedules(full_db)) == 2
    assert queue.schedule(full_db, "tick", every=0.1) is False
    assert dump_state(full_db) == before


def test_a_turn_calls_again_while_the_limit_was_due(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    now = server_ms(db)
    for k in range(60):  # hourly: the next due time cannot come while the test runs
        queue.schedule(db, f"s{k}", every=3600)
        set_due(db, queue, f"s{k}", now - now % 3_600_000)
    assert len(queue.run_schedules(db)) == ops.DUE_LIMIT  # one call: the limit
    assert len(queue.run_schedules(db, limit=3)) == 3
    added = run(db, ops.turn_steps(queue.keys))  # a turn: calls again while the limit was due
    assert len(added) == 60 - ops.DUE_LIMIT - 3
    assert len(set(queued(db, queue))) == 60


def test_a_replaced_schedule_keeps_its_last_id_and_a_flush_removes_schedules(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.schedule(db, "tick", every=0.1, overlap="skip")
    time.sleep(0.15)
    (first,) = queue.run_schedules(db)
    queue.schedule(db, "tick", every=0.2, overlap="skip")
    (listed,) = queue.schedules(db)
    assert listed.last_id == first and listed.every == 0.2
    time.sleep(0.25)
    assert queue.run_schedules(db) == []  # its last occurrence is still queued
    queue.flush(db)
    assert queue.schedules(db) == []
    assert not [
        k for k in db.keys("*") if b"schedules" in (k if isinstance(k, bytes) else k.encode())
    ]


def test_resuming_a_schedule_replaced_meanwhile_reads_it_again_then_gives_up() -> None:
    keys = WorkQueue(QUEUE).keys
    text = Spec.of(None, 5, "UTC", None, None, "one", "add").dumps().encode()
    steps = ops.resume_steps(keys, "tick")
    call = next(steps)
    for tries in range(ops.RESUME_TRIES):
        assert call.args == ("HGET", keys.schedules, "tick")  # type: ignore[union-attr]
        steps.send(text)  # the definition; then the server's time
        call = steps.send((b"1700000000", b"0"))
        assert call.script.name == "schedule_change"  # type: ignore[union-attr]
        assert call.args[3:5] == (text.decode(), 1_700_000_005_000)  # type: ignore[union-attr]
        if tries < ops.RESUME_TRIES - 1:
            call = steps.send(-1)  # replaced meanwhile: read again
    with pytest.raises(ops.ConcurrentChangeError, match="resume it again"):
        steps.send(-1)


def test_utc_needs_no_zone_database(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(key: str) -> None:
        raise ops.ZoneInfoNotFoundError(key)

    monkeypatch.setattr(ops, "ZoneInfo", missing)
    spec = Spec.of("0 2 * * *", None, "UTC", None, None, "one", "add")
    assert spec.after(0) == 2 * 3_600_000
    with pytest.raises(InvalidArgumentError, match="pip install tzdata"):
        Spec.of("0 2 * * *", None, "Europe/Paris", None, None, "one", "add")
