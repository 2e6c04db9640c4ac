"""The worker runner's writes: its heartbeat (``lua/heartbeat.lua``) and its light-clean turn.

Both check the types of the keys they write before their first write, and a server out of
memory refuses them cleanly: their rows in the shared tables (``tests/checks.py``), with the
runner's keys of the layout planted with wrong types (``P:workers``, ``P:worker:<id>``,
``P:durations``, ``P:cleaned``).
"""

from __future__ import annotations

import redis

from checks import KEYS, OomCheck, State, WriteCheck, oom_test, write_check_test
from redis_work_queue import WorkQueue
from redis_work_queue.ops.health import clean_gate_steps, heartbeat_steps, workers_steps
from redis_work_queue.transport import run

WORKER = "w1"
FIELDS: dict[str, str | int | float] = {"host": "h", "pid": 7, "queues": "p"}
DURATIONS = {"completed:0.005": 1, "completed:sum_us": 3000}


def _registered(db: redis.Redis) -> None:
    # Another live worker, with a beat and durations of its own, and the fleet's clean turn.
    run(db, heartbeat_steps(KEYS, "w0", 60_000, FIELDS, DURATIONS))
    run(db, clean_gate_steps(KEYS, "w0", 60_000))


def _beat(s: State, ttl_ms: int = 60_000) -> int:
    return run(s.db, heartbeat_steps(KEYS, WORKER, ttl_ms, FIELDS, DURATIONS))


WRITE_CHECKS = [
    WriteCheck("heartbeat_steps", WORKER, _beat, writer="runner", prepare=_registered),
    WriteCheck(
        "heartbeat_steps-stop",
        WORKER,
        lambda s: _beat(s, ttl_ms=0),
        writer="runner",
        prepare=_registered,
    ),
    WriteCheck(
        "heartbeat_steps-fresh",
        WORKER,
        lambda s: run(s.db, heartbeat_steps(KEYS, WORKER, 60_000, FIELDS, {})),
        writer="runner",
    ),
    WriteCheck(
        "clean_gate_steps",
        WORKER,
        lambda s: run(s.db, clean_gate_steps(KEYS, WORKER, 60_000)),
        writer="runner",
    ),
]
#: Every row x every key the runner writes x every wrong type.
test_runner_writes_check_types_first = write_check_test(WRITE_CHECKS)


def _oom_beat(queue: WorkQueue, db: redis.Redis, ttl_ms: int) -> int:
    return run(db, heartbeat_steps(queue.keys, WORKER, ttl_ms, FIELDS, DURATIONS))


OOM_CHECKS = [
    OomCheck("heartbeat_steps", lambda q, db, _: _oom_beat(q, db, 60_000), refused=True),
    OomCheck("heartbeat_steps-stop", lambda q, db, _: _oom_beat(q, db, 0), refused=True),
    OomCheck(
        "clean_gate_steps",
        lambda q, db, _: run(db, clean_gate_steps(q.keys, WORKER, 60_000)),
        refused=True,
    ),
]
#: A heartbeat and a clean turn need memory: out of memory, they are refused and change nothing.
test_runner_writes_out_of_memory = oom_test(OOM_CHECKS)


def test_a_beat_registers_and_a_stop_removes(db: redis.Redis) -> None:
    assert run(db, heartbeat_steps(KEYS, WORKER, 60_000, FIELDS, DURATIONS)) == 1
    (worker,) = run(db, workers_steps(KEYS))
    assert (worker.id, worker.host, worker.pid, worker.queues) == (WORKER, "h", 7, ("p",))
    assert run(db, heartbeat_steps(KEYS, WORKER, 0, {}, {})) == 0
    assert run(db, workers_steps(KEYS)) == []
    assert not db.exists(KEYS.worker(WORKER))
    assert db.hget(KEYS.durations, "completed:0.005") in (b"1", "1")


def test_one_worker_takes_the_clean_turn(db: redis.Redis) -> None:
    assert run(db, clean_gate_steps(KEYS, "a", 60_000))
    assert not run(db, clean_gate_steps(KEYS, "b", 60_000))
