"""Rate limits: one token bucket per queue in Redis (``<prefix>:rate``), enforced by the lease
and claim scripts for the whole fleet; a refused lease is told its wait, which a blocking lease
(and so every runner) sleeps; the limit is declared by a queue object, changed at run time, and
shown by ``stats()``. Its rows of the write-check and out-of-memory tables are here too."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import redis

import flow_handlers
from checks import (
    KEYS,
    LEASE_SECS,
    PREFIX,
    OomCheck,
    State,
    WriteCheck,
    oom_test,
    pushing_when_blocked,
    write_check_test,
)
from helpers import keys_left, wait_for
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    RateLimit,
    Worker,
    WorkQueue,
    lease_from,
)
from redis_work_queue.calls import Steps
from redis_work_queue.errors import InvalidArgumentTypeError
from redis_work_queue.ops.lease import RATE_WAIT, LeasePlan, LeaseRequest
from redis_work_queue.transport import run
from servers import Proc

QUEUE = KeyPrefix("rl")
RATE = "rl:rate"


def _fill(db: redis.Redis, queue: WorkQueue, n: int, prefix: str = "i") -> None:
    assert all(queue.add_items(db, [Item(b"d", id=f"{prefix}{k}") for k in range(n)]))


# Bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((0, 1), InvalidArgumentError),
        ((-1, 1), InvalidArgumentError),
        ((math.nan, 1), InvalidArgumentError),
        ((math.inf, 1), InvalidArgumentError),
        (("5", 1), InvalidArgumentTypeError),
        ((True, 1), InvalidArgumentTypeError),
        ((5, 0), InvalidArgumentError),
        ((5, -2), InvalidArgumentError),
        ((5, math.inf), InvalidArgumentError),
        ((5, 0.0001), InvalidArgumentError),
        ((5, None), InvalidArgumentTypeError),
    ],
)
def test_a_bad_limit_is_refused_naming_the_field(args: tuple[Any, Any], error: type) -> None:
    with pytest.raises(error, match=r"RateLimit (count|per_secs)"):
        RateLimit(*args)


@pytest.mark.parametrize("burst", [0, -1, 1.5, True, "2"])
def test_a_bad_burst_is_refused(burst: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="burst"):
        RateLimit(5, 1, burst=burst)


def test_a_limit_that_is_not_a_rate_limit_is_refused_before_anything_is_written(
    db: redis.Redis, queue: WorkQueue
) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="rate_limit must be a RateLimit"):
        type(queue)(QUEUE, rate_limit=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentTypeError, match="set_rate_limit's limit"):
        queue.set_rate_limit(db, (5, 1))  # type: ignore[arg-type]
    assert keys_left(db) == []


# Enforcement -------------------------------------------------------------------------------------


def test_a_queue_without_a_limit_writes_no_rate_key(db: redis.Redis, queue: WorkQueue) -> None:
    _fill(db, queue, 3)
    assert len(queue.lease_many(db, LEASE_SECS, 3, block=False)) == 3
    assert not db.exists(RATE)
    assert queue.stats(db).rate_limit is None
    queue.set_rate_limit(db, None)  # removing a limit that was never set writes nothing
    assert not db.exists(RATE)


def test_a_lease_takes_at_most_the_burst_then_nothing(db: redis.Redis, queue: WorkQueue) -> None:
    _fill(db, queue, 10)
    queue.set_rate_limit(db, RateLimit(1, 60, burst=3))
    assert len(queue.lease_many(db, LEASE_SECS, 10, block=False)) == 3
    assert queue.lease(db, LEASE_SECS, block=False) is None
    assert queue.lease_many(db, LEASE_SECS, 5, block=False) == []
    assert queue.stats(db).rate_limit == RateLimit(1, 60, burst=3)
    assert queue.stats(db).queued == 7


def test_at_most_once_leases_count_too(db: redis.Redis, queue: WorkQueue) -> None:
    _fill(db, queue, 5)
    queue.set_rate_limit(db, RateLimit(1, 60, burst=2))
    assert queue.lease(db, LEASE_SECS, block=False, at_most_once=True) is not None
    assert queue.lease(db, LEASE_SECS, block=False, at_most_once=True) is not None
    assert queue.lease(db, LEASE_SECS, block=False, at_most_once=True) is None


def test_the_bucket_refills_at_the_rate(db: redis.Redis, queue: WorkQueue) -> None:
    _fill(db, queue, 10)
    queue.set_rate_limit(db, RateLimit(20, 1))  # one item every 50 ms
    assert queue.lease(db, LEASE_SECS, block=False) is not None
    assert queue.lease(db, LEASE_SECS, block=False) is None
    time.sleep(0.06)
    assert queue.lease(db, LEASE_SECS, block=False) is not None


def test_a_limit_set_at_run_time_applies_to_every_client(db: redis.Redis, queue: WorkQueue) -> None:
    other = WorkQueue(QUEUE)  # another process's queue object, declaring nothing
    _fill(db, queue, 10)
    other.set_rate_limit(db, RateLimit(1, 60, burst=2))
    assert len(queue.lease_many(db, LEASE_SECS, 10, block=False)) == 2
    queue.set_rate_limit(db, None)
    assert len(queue.lease_many(db, LEASE_SECS, 10, block=False)) == 8
    assert queue.stats(db).rate_limit is None


def test_a_faster_limit_set_at_run_time_takes_effect_at_once(
    db: redis.Redis, queue: WorkQueue
) -> None:
    _fill(db, queue, 5)
    queue.set_rate_limit(db, RateLimit(1, 60, burst=2))
    assert len(queue.lease_many(db, LEASE_SECS, 5, block=False)) == 2
    queue.set_rate_limit(db, RateLimit(20, 1))  # one item every 50 ms
    started = time.monotonic()
    assert all(queue.lease(db, LEASE_SECS, timeout=3) is not None for _ in range(3))
    assert time.monotonic() - started < 1.5


def test_a_declared_limit_is_stored_by_the_first_lease_unless_one_was_set(db: redis.Redis) -> None:
    first = WorkQueue(QUEUE, rate_limit=RateLimit(2, 60, burst=2))
    assert first.rate_limit == RateLimit(2, 60, burst=2)
    _fill(db, first, 10)
    assert not db.exists(RATE)  # declared, not stored yet
    assert len(first.lease_many(db, LEASE_SECS, 10, block=False)) == 2
    assert first.stats(db).rate_limit == RateLimit(2, 60, burst=2)
    # Another object declaring another limit does not replace the one stored...
    second = WorkQueue(QUEUE, rate_limit=RateLimit(100, 1, burst=100))
    assert second.lease(db, LEASE_SECS, block=False) is None
    assert second.stats(db).rate_limit == RateLimit(2, 60, burst=2)
    # ...set_rate_limit does, and a removal stays removed for declarations made later.
    second.set_rate_limit(db, None)
    third = WorkQueue(QUEUE, rate_limit=RateLimit(1, 60))
    assert len(third.lease_many(db, LEASE_SECS, 10, block=False)) == 8


def test_a_limited_queue_does_not_hold_back_the_next_queue(db: redis.Redis) -> None:
    limited, free = WorkQueue(QUEUE), WorkQueue(KeyPrefix("rl2"))
    _fill(db, limited, 3, "l")
    _fill(db, free, 3, "f")
    limited.set_rate_limit(db, RateLimit(1, 60))
    got = [lease_from(db, [limited, free], LEASE_SECS, block=False) for _ in range(4)]
    assert [(q.name.prefix, item.id()) for q, item in got if item] == [
        ("rl", "l0"),
        ("rl2", "f0"),
        ("rl2", "f1"),
        ("rl2", "f2"),
    ]


def _raw_look(queue: WorkQueue, waiter: str = "", register_ms: int = 0) -> Steps[Any]:
    request = LeaseRequest.of(LEASE_SECS)
    return (yield queue.ops.plan.lease(request, "t", 1, register_ms, waiter))


def test_waiting_callers_are_given_turns_one_token_apart_in_order(
    db: redis.Redis, sync_queue: WorkQueue
) -> None:
    """A refused caller that will wait gets a turn and its token: a caller that comes after it,
    waiting or not, cannot take that token; at its turn it leases."""
    _fill(db, sync_queue, 10)
    sync_queue.set_rate_limit(db, RateLimit(10, 1))  # one item every 100 ms
    assert isinstance(run(db, _raw_look(sync_queue)), list)
    waits = [RATE_WAIT - run(db, _raw_look(sync_queue, f"w{k}", 2000)) for k in range(3)]
    assert 0 <= waits[0] <= 100, waits
    turns = [int(db.hget(RATE, f"r:w{k}") or 0) for k in range(3)]
    assert [b - a for a, b in itertools.pairwise(turns)] == pytest.approx([100, 100], abs=1)
    # A caller that will not wait is told when it might come back, but gets no turn.
    assert RATE_WAIT - run(db, _raw_look(sync_queue)) >= waits[2]
    # Looking again before its turn, a waiter keeps it; at its turn it leases.
    assert RATE_WAIT - run(db, _raw_look(sync_queue, "w1", 2000)) <= waits[1]
    time.sleep(waits[1] / 1000 + 0.01)
    assert isinstance(run(db, _raw_look(sync_queue, "w1", 2000)), list)
    assert not db.hexists(RATE, "r:w1")
    # One that gives up its turn (it will not wait again) gives its token back.
    tokens = float(db.hget(RATE, "tokens") or 0)
    assert run(db, _raw_look(sync_queue, "w2", 0)) <= RATE_WAIT
    assert not db.hexists(RATE, "r:w2")
    # (up to the bucket's cap, burst less the turns that have come: w0's here, so it is 0)
    assert float(db.hget(RATE, "tokens") or 0) >= max(tokens, 0)


def test_waiters_late_to_their_turns_are_handed_out_no_faster_than_the_limit(
    db: redis.Redis, sync_queue: WorkQueue
) -> None:
    """Three waiters come together, long after their turns: one item at once (the burst), the
    others keep their turns and are told the next steps, one token apart."""
    _fill(db, sync_queue, 10)
    sync_queue.set_rate_limit(db, RateLimit(10, 1))  # one item every 100 ms
    assert isinstance(run(db, _raw_look(sync_queue)), list)
    for k in range(3):
        assert run(db, _raw_look(sync_queue, f"w{k}", 2000)) <= RATE_WAIT
    time.sleep(0.5)
    replies = [run(db, _raw_look(sync_queue, f"w{k}", 2000)) for k in range(3)]
    assert isinstance(replies[0], list)
    assert all(isinstance(r, int) and r <= RATE_WAIT for r in replies[1:]), replies
    assert 0 <= RATE_WAIT - replies[1] <= 100
    assert db.hexists(RATE, "r:w1") and db.hexists(RATE, "r:w2")


def test_a_blocking_lease_sleeps_until_its_turn(db: redis.Redis, queue: WorkQueue) -> None:
    _fill(db, queue, 5)
    queue.set_rate_limit(db, RateLimit(4, 1))  # one item every 250 ms
    assert queue.lease(db, LEASE_SECS, block=False) is not None
    started = time.monotonic()
    assert queue.lease(db, LEASE_SECS, timeout=5) is not None
    assert 0.2 <= time.monotonic() - started < 0.6
    # A timeout shorter than the wait ends the lease empty-handed, on time.
    started = time.monotonic()
    assert queue.lease(db, LEASE_SECS, timeout=0.1) is None
    assert time.monotonic() - started < 0.3


def test_an_item_that_wakes_a_blocked_worker_waits_for_its_turn(
    real_db: redis.Redis, sync_queue: WorkQueue
) -> None:
    """The blocking pop moves an item that the limit holds back: the claim gives it back to
    the leasing end, and the lease sleeps until its turn."""
    db = real_db
    sync_queue.set_rate_limit(db, RateLimit(2, 1))  # one item every 500 ms
    _fill(db, sync_queue, 1, "first")
    assert sync_queue.lease(db, LEASE_SECS, block=False) is not None
    leased_at = time.monotonic()

    def add_later() -> None:
        time.sleep(0.05)
        sync_queue.add_item(db, Item(b"d", id="late"))

    adder = threading.Thread(target=add_later)
    adder.start()
    item = sync_queue.lease(db, LEASE_SECS, timeout=5)
    adder.join()
    assert item is not None and item.id() == "late"
    assert time.monotonic() - leased_at >= 0.4


# Runners -----------------------------------------------------------------------------------------

KINDS = ["threads", "processes", "asyncio"]
TAG = "rl-test"


@contextmanager
def _running(kind: str, url: str, **options: Any) -> Iterator[Any]:
    common: dict[str, Any] = {
        "lease_secs": 5,
        "poll_secs": 0.5,
        "heartbeat_secs": None,
        "clean_secs": None,
        **options,
    }
    if kind == "asyncio":
        worker: Any = AsyncWorker(url, [AsyncWorkQueue(QUEUE)], flow_handlers.astamp, **common)
    else:
        queues = [WorkQueue(QUEUE)]
        worker = Worker(url, queues, flow_handlers.stamp, processes=kind == "processes", **common)
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["stats"] = (
                asyncio.run(worker.run(signals=())) if kind == "asyncio" else worker.run(signals=())
            )
        except BaseException as err:  # reported by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        yield worker
    finally:
        worker.stop()
        thread.join(timeout=60)
    assert "error" not in out, out


def _times(db: redis.Redis) -> list[float]:
    return sorted(float(v) for v in db.lrange(f"{TAG}:at", 0, -1))


@pytest.mark.parametrize("kind", KINDS)
def test_every_runner_keeps_to_the_limit_and_sleeps_exactly_its_wait(
    server: Proc, kind: str
) -> None:
    """20 items at 10 per second (burst 1) on 4 slots: the handlers finish one every 100 ms
    or so, never faster than the bucket allows, and the whole run takes about 1.9 s (the
    workers are not starved by their own sleeping)."""
    db = server.client()
    queue = WorkQueue(QUEUE)
    queue.set_rate_limit(db, RateLimit(10, 1))
    n = 20
    queue.add_items(db, [Item(flow_handlers.job(server.url, TAG), id=f"j{k}") for k in range(n)])
    with _running(kind, server.url, concurrency=4):
        wait_for(lambda: db.llen(f"{TAG}:done") == n, timeout=30, what="the jobs")
    times = _times(db)
    span = times[-1] - times[0]
    assert span >= (n - 1) / 10 - 0.1, span
    assert span <= (n - 1) / 10 + 1.5, span
    # Over any window of t seconds: at most burst + t * rate completions (50 ms of slack for
    # the handlers' own timing).
    for i, start in enumerate(times):
        inside = sum(1 for t in times[i:] if t - start <= 0.5)
        assert inside <= 1 + 0.55 * 10, (start, inside)


# The shared tables -------------------------------------------------------------------------------


def _limited(db: redis.Redis, tokens: str = "5") -> None:
    db.hset(KEYS.rate, mapping={"count": "1", "per_ms": "60000", "burst": "5", "tokens": tokens})
    db.hset(KEYS.rate, "at", int(time.time() * 1000))


def _refused(db: redis.Redis) -> None:
    _limited(db, "0")


def _claim_refused(s: State) -> Any:
    with pushing_when_blocked(s):
        return WorkQueue(PREFIX).lease(s.db, LEASE_SECS, timeout=0.3)


def _declaring(queue: WorkQueue) -> WorkQueue:
    return type(queue)(PREFIX, rate_limit=RateLimit(1, 60))


WRITE_CHECKS = [
    WriteCheck(
        "set_rate_limit", "a", lambda s: WorkQueue(PREFIX).set_rate_limit(s.db, RateLimit(5, 1))
    ),
    WriteCheck("set_rate_limit-none", "a", lambda s: WorkQueue(PREFIX).set_rate_limit(s.db, None)),
    WriteCheck(
        "lease-declared",
        "a",
        lambda s: WorkQueue(PREFIX, rate_limit=RateLimit(1, 60)).lease(
            s.db, LEASE_SECS, block=False
        ),
    ),
    WriteCheck(
        "lease-rate",
        "a",
        lambda s: WorkQueue(PREFIX).lease_many(s.db, LEASE_SECS, 3, block=False),
        prepare=_limited,
    ),
    WriteCheck(
        "lease-rate-refused",
        "a",
        lambda s: WorkQueue(PREFIX).lease(s.db, LEASE_SECS, block=False),
        prepare=_refused,
    ),
    WriteCheck("lease-rate-claim", "late", _claim_refused, queued=False, prepare=_refused),
]
#: Every row x every key the scripts write x every wrong type.
test_rate_limit_calls_check_types_first = write_check_test(WRITE_CHECKS)


OOM_CHECKS = [
    OomCheck(
        "set_rate_limit", lambda q, db, _: q.set_rate_limit(db, RateLimit(5, 1)), refused=True
    ),
    OomCheck(
        "lease-declared",
        lambda q, db, _: _declaring(q).lease(db, LEASE_SECS, block=False),
        refused=True,
    ),
]
#: Setting or declaring a limit needs memory: out of memory, it is refused and changes nothing.
test_rate_limit_calls_out_of_memory = oom_test(OOM_CHECKS)


def test_metrics_export_the_limit_as_items_per_second(db: redis.Redis) -> None:
    from redis_work_queue import metrics  # noqa: PLC0415 (the exporter's module)

    limited, free = WorkQueue(QUEUE), WorkQueue(KeyPrefix("rl2"))
    limited.set_rate_limit(db, RateLimit(100, 2, burst=5))
    text = metrics.render(db, [limited, free])
    assert 'rwq_rate_limit_per_second{queue="rl"} 50\n' in text
    assert 'rwq_rate_limit_per_second{queue="rl2"}' not in text


def test_rwq_rate_limit_shows_sets_and_removes(real_db: redis.Redis, redis_url: str) -> None:
    from test_cli_ops import rwq  # noqa: PLC0415 (the command line's runner)

    shown = rwq("--url", redis_url, "rate-limit", "rl")
    assert (shown.returncode, shown.stdout) == (0, "rl: no rate limit\n"), shown.stderr
    set_ = rwq("--url", redis_url, "rate-limit", "rl", "100", "1", "--burst", "5")
    assert (set_.returncode, set_.stdout) == (0, "rl: 100 per 1 s, burst 5\n"), set_.stderr
    assert WorkQueue(QUEUE).stats(real_db).rate_limit == RateLimit(100, 1, burst=5)
    as_json = rwq("--url", redis_url, "--json", "rate-limit", "rl")
    assert json.loads(as_json.stdout) == {"rl": {"count": 100, "per_secs": 1.0, "burst": 5}}
    bad = rwq("--url", redis_url, "rate-limit", "rl", "0", "1")
    assert bad.returncode == 2 and "RateLimit count must be positive" in bad.stderr
    assert rwq("--url", redis_url, "rate-limit", "rl", "100").returncode == 2
    assert rwq("--url", redis_url, "rate-limit", "rl", "--off").returncode == 0
    assert WorkQueue(QUEUE).stats(real_db).rate_limit is None


def test_a_waiter_served_by_another_queue_gives_its_turn_back(
    db: redis.Redis, sync_queue: WorkQueue
) -> None:
    """A blocking lease over a limited queue and a free one: the limited queue's turn is taken
    only when the call leases nothing, and given back when a later look is served elsewhere."""
    limited, free = sync_queue, WorkQueue(KeyPrefix("rl2"))
    _fill(db, limited, 5)
    limited.set_rate_limit(db, RateLimit(1, 60))
    assert limited.lease(db, LEASE_SECS, block=False) is not None  # the one token
    free.add_item(db, Item(b"", id="f"))
    plan = LeasePlan([limited.ops, free.ops])
    request = LeaseRequest.of(LEASE_SECS)

    def look() -> Steps[Any]:
        return (yield plan.lease(request, "t", 1, 2000, "w"))

    reply = run(db, look())
    assert isinstance(reply, list) and reply[1] in ("f", b"f")  # from the free queue
    assert not db.hexists(RATE, "r:w")  # no turn taken on the way
    reply = run(db, look())
    assert isinstance(reply, int) and reply <= RATE_WAIT  # nothing anywhere: a turn
    assert db.hexists(RATE, "r:w")
    free.add_item(db, Item(b"", id="g"))
    reply = run(db, look())
    assert isinstance(reply, list)  # served by the free queue: the turn goes back
    assert not db.hexists(RATE, "r:w")


def test_a_lapsed_turn_is_dropped_and_no_more_than_64_turns_are_kept(
    db: redis.Redis, sync_queue: WorkQueue
) -> None:
    """A waiter that died leaves its turn: it is dropped a window after it came. At most 64
    turns are kept: a waiter beyond them is told its wait without a turn."""
    _fill(db, sync_queue, 5)
    sync_queue.set_rate_limit(db, RateLimit(10, 1))
    assert isinstance(run(db, _raw_look(sync_queue)), list)
    now = int(db.time()[0]) * 1000
    db.hset(RATE, "r:dead", now - 1500)  # its turn came 1.5 windows ago
    assert run(db, _raw_look(sync_queue, "w", 2000)) <= RATE_WAIT
    assert not db.hexists(RATE, "r:dead") and db.hexists(RATE, "r:w")
    db.hset(RATE, mapping={f"r:x{k}": now + 60_000 for k in range(63)})  # 64 with w's
    assert run(db, _raw_look(sync_queue, "late", 2000)) <= RATE_WAIT
    assert not db.hexists(RATE, "r:late")
