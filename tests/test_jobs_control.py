"""Job control by id: cancel (a waiting item removed, a leased one signalled to its holder through
``renew_outcome``), promote, retry and reschedule, each one script call that says whether it
acted; on both APIs, every backend and a Redis Cluster with a ``{tag}`` prefix; a cancelled item
is never handed out again, by this library or by a client of the reference design; the
write-check and out-of-memory rows of each; ``rwq cancel|promote|retry``."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from checks import LEASE_SECS, PREFIX, OomCheck, State, WriteCheck, oom_test, write_check_test
from helpers import dump_state, keys_of
from redis_work_queue import (
    Cancelled,
    InvalidArgumentError,
    Item,
    ItemState,
    KeyPrefix,
    Renewed,
    WorkQueue,
)
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.results import QueueCounts
from test_cli_ops import rwq

QUEUE = KeyPrefix("jc")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_a_signalled_lease_lapses_and_the_item_is_never_delivered_again",
    "test_promote_a_delayed_item",
    "test_promote_drops_a_leftover_entry",
    "test_reschedule_a_queued_item",
}
QUEUE_OPTIONS = {"max_deliveries": 2}
KEYS = QueueKeys(QUEUE)


def lease(db: redis.Redis, queue: WorkQueue, secs: float = 30) -> Item:
    item = queue.lease(db, secs, block=False)
    assert item is not None
    return item


def reference_lease(db: redis.Redis, keys: QueueKeys) -> tuple[str, bytes | None] | None:
    """A lease as the reference client takes one: move the id, read its data, set the lease
    (only when there is data: the reference client hands out nothing for an id without)."""
    moved = db.rpoplpush(keys.queue, keys.processing)
    if moved is None:
        return None
    item_id = moved.decode() if isinstance(moved, bytes) else moved
    data = db.get(keys.item(item_id))
    if data is not None:
        db.set(keys.lease(item_id), "reference-session", ex=30)
    return item_id, data.encode() if isinstance(data, str) else data


# cancel -----------------------------------------------------------------------------------------


def test_cancel_a_queued_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    assert queue.cancel(db, "a") == Cancelled.REMOVED
    assert queue.state(db, "a") == ItemState("a", "gone")
    assert queue.queue_len(db) == 1  # its id is gone from the queue too
    assert db.exists(keys_of(queue, "a").item("a")) == 0
    assert [lease(db, queue).id()] == ["b"]
    assert queue.lease(db, 30, block=False) is None
    assert queue.counts(db).cancelled == 1


def test_cancel_a_delayed_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="d"), delay=0.2)
    assert queue.cancel(db, "d") == Cancelled.REMOVED
    assert (
        db.zcard(KEYS.delayed) == 0
        and db.exists(keys_of(queue, "d").lease("d"), keys_of(queue, "d").item("d")) == 0
    )
    time.sleep(0.3)
    assert queue.lease(db, 30, block=False) is None


def test_cancel_a_leased_item_is_signalled_to_its_holder(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"l", id="l"))
    item = lease(db, queue)
    assert queue.cancel(db, "l") == Cancelled.SIGNALLED
    found = queue.state(db, "l")
    assert (found.state, found.cancelled) == ("gone", True)
    assert queue.renew_outcome(db, item, 30) == Renewed.CANCELLED
    assert not queue.renew_outcome(db, item, 30)
    assert queue.renew(db, item, 30) is False
    assert queue.renew_many(db, [item], 30) == [False]
    assert queue.complete(db, item) is False  # its data is gone: nothing to complete
    assert queue.cancel(db, "l") == Cancelled.NOT_FOUND
    assert queue.counts(db) == QueueCounts(added=1, cancelled=1)


def test_a_signalled_lease_lapses_and_the_item_is_never_delivered_again(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"l", id="l"))
    item = lease(db, queue, secs=0.2)
    assert queue.cancel(db, "l") == Cancelled.SIGNALLED
    assert db.pttl(keys_of(queue, "l").lease("l")) <= 200  # the mark keeps the lease's time to live
    time.sleep(0.3)
    queue.light_clean(db)
    assert queue.lease(db, 30, block=False) is None
    assert reference_lease(db, KEYS) is None
    assert db.llen(KEYS.processing) == 0
    assert queue.renew_outcome(db, item, 30) == Renewed.NOT_HELD


def test_a_cancelled_item_is_not_handed_out_by_the_reference_client(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    # An id far from both ends of the queue stays on it (no scan): no client hands it out.
    assert queue.cancel(db, "a") == Cancelled.REMOVED
    db.rpush(KEYS.queue, "a")  # as if it had been left behind
    assert reference_lease(db, KEYS) == ("a", None)
    assert reference_lease(db, KEYS) == ("b", b"b")


def test_an_id_deep_in_a_long_queue_is_left_for_the_lease_to_drop(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE)
    queue.add_items(db, [Item(b"", id=f"i{n}") for n in range(2500)])
    assert queue.cancel(db, "i1250") == Cancelled.REMOVED
    assert queue.queue_len(db) == 2500  # not scanned for: the id stays on the queue
    assert queue.cancel(db, "i0") == Cancelled.REMOVED  # next to be leased: removed
    assert queue.cancel(db, "i2499") == Cancelled.REMOVED  # newest: removed
    assert queue.queue_len(db) == 2498
    leased = [item.id() for item in queue.lease_many(db, 30, 2500, block=False)]
    assert len(leased) == 2497 and "i1250" not in leased


def test_cancel_an_expired_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"e", id="e"))
    item = lease(db, queue)
    db.delete(keys_of(queue, "e").lease("e"))
    assert queue.state(db, "e").state == "expired"
    assert queue.cancel(db, "e") == Cancelled.REMOVED
    queue.light_clean(db)
    assert queue.lease(db, 30, block=False) is None
    assert queue.complete(db, item) is False


def test_cancel_dead_or_gone_changes_nothing(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"x", id="x"))
    for _ in range(2):
        assert queue.release(db, lease(db, queue), reason="no")
    assert queue.state(db, "x").state == "dead"
    before = dump_state(db)
    assert queue.cancel(db, "x") == Cancelled.NOT_FOUND
    assert not queue.cancel(db, "never")
    assert dump_state(db) == before


# promote, retry, reschedule ---------------------------------------------------------------------


def test_promote_a_delayed_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    queue.add_item(db, Item(b"d", id="d"), delay=60)
    assert queue.promote(db, "d") is True
    assert queue.state(db, "d") == ItemState("d", "queued")
    assert db.exists(keys_of(queue, "d").lease("d")) == 0 and db.zcard(KEYS.delayed) == 0
    assert lease(db, queue).id() == "d"  # next to be leased
    before = dump_state(db)
    for other in ("a", "d", "never"):  # queued, leased, gone
        assert queue.promote(db, other) is False
    assert dump_state(db) == before


def test_promote_drops_a_leftover_entry(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="d"))
    db.zadd(KEYS.delayed, {"d": 1})  # an entry left behind by a client of another kind
    lease(db, queue)
    assert queue.promote(db, "d") is False
    assert db.zcard(KEYS.delayed) == 0
    assert queue.state(db, "d").state == "leased"


def test_retry_a_dead_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"x", id="x"))
    for _ in range(2):
        queue.release(db, lease(db, queue), reason="no")
    assert queue.retry(db, "x") is True
    assert queue.state(db, "x") == ItemState("x", "queued")
    assert lease(db, queue).deliveries == 1
    assert queue.retry(db, "x") is False  # leased, not dead
    assert queue.retry(db, "never") is False
    assert queue.counts(db).requeued == 1


def test_reschedule_a_queued_item(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"a", id="a"), Item(b"b", id="b")])
    before = time.time()
    assert queue.reschedule(db, "a", 0.3) is True
    found = queue.state(db, "a")
    assert found.state == "delayed" and found.due_at is not None
    assert before + 0.2 < found.due_at < time.time() + 0.4
    assert db.lrange(KEYS.queue, 0, -1) in ([b"b"], ["b"])
    assert lease(db, queue).id() == "b"
    assert queue.lease(db, 30, block=False) is None
    time.sleep(0.35)
    assert lease(db, queue).id() == "a"


def test_reschedule_a_delayed_item_earlier_and_later(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="d"), delay=60)
    due = datetime.now(timezone.utc) + timedelta(hours=1)
    assert queue.reschedule(db, "d", due) is True
    found = queue.state(db, "d").due_at
    assert found is not None and abs(found - due.timestamp()) < 0.01
    assert (
        db.pttl(keys_of(queue, "d").lease("d")) > 3_500_000
    )  # the delay lease follows the due time
    assert queue.reschedule(db, "d", 0) is True
    assert lease(db, queue).id() == "d"


def test_reschedule_refuses_leased_expired_dead_and_gone(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"l", id="l"), Item(b"e", id="e")])
    lease(db, queue)
    lease(db, queue)
    db.delete(keys_of(queue, "e").lease("e"))  # expired, on the processing list
    before = dump_state(db)
    for item_id in ("l", "e", "never"):
        assert queue.reschedule(db, item_id, 10) is False, item_id
    assert dump_state(db) == before


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda q, db: q.cancel(db, 5), "item_id"),
        (lambda q, db: q.promote(db, None), "item_id"),
        (lambda q, db: q.retry(db, b"x"), "item_id"),
        (lambda q, db: q.reschedule(db, "x", -1), "delay"),
        (lambda q, db: q.reschedule(db, "x", None), "delay"),
        (lambda q, db: q.reschedule(db, "x", datetime(2030, 1, 1)), "timezone"),
        (lambda q, db: q.reschedule(db, 1, 5), "item_id"),
        (lambda q, db: q.renew_outcome(db, Item(b"x", id="x"), 5), "lease"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(
    db: redis.Redis, queue: WorkQueue, call: Any, match: str
) -> None:
    queue.add_item(db, Item(b"x", id="x"))
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match=match):
        call(queue, db)
    assert dump_state(db) == before


# A Redis Cluster --------------------------------------------------------------------------------


def test_every_transition_on_a_cluster_with_a_hash_tag(cluster_db: RedisCluster) -> None:
    queue = WorkQueue(KeyPrefix("app:{jobs}:jc"), max_deliveries=1)
    queue.add_items(cluster_db, [Item(b"a", id="a"), Item(b"b", id="b"), Item(b"c", id="c")])
    queue.add_item(cluster_db, Item(b"d", id="d"), delay=60)
    queue.add_item(cluster_db, Item(b"e", id="e"), delay=60)
    assert queue.cancel(cluster_db, "a") == Cancelled.REMOVED
    assert queue.cancel(cluster_db, "e") == Cancelled.REMOVED
    assert queue.promote(cluster_db, "d") is True
    assert queue.reschedule(cluster_db, "c", 60) is True
    held = queue.lease(cluster_db, 30, block=False)
    assert held is not None and held.id() == "d"
    assert queue.cancel(cluster_db, "d") == Cancelled.SIGNALLED
    assert queue.renew_outcome(cluster_db, held, 30) == Renewed.CANCELLED
    b = queue.lease(cluster_db, 30, block=False)
    assert b is not None and b.id() == "b"
    assert queue.release(cluster_db, b, reason="no")
    assert queue.retry(cluster_db, "b") is True
    states = queue.states(cluster_db, ["a", "b", "c", "d", "e"])
    assert [s.state for s in states] == ["gone", "queued", "delayed", "gone", "gone"]
    assert queue.counts(cluster_db).cancelled == 3


# The command line -------------------------------------------------------------------------------


def test_rwq_cancel_promote_retry(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(QUEUE, max_deliveries=1)
    queue.add_items(real_db, [Item(b"a", id="a"), Item(b"x", id="x")])
    queue.add_item(real_db, Item(b"d", id="d"), delay=60)
    result = rwq("--url", redis_url, "cancel", "jc", "a", "nothing", "--json")
    assert result.returncode == 1, result.stderr
    assert json.loads(result.stdout) == {
        "queue": "jc",
        "cancelled": ["a"],
        "not_found": ["nothing"],
    }
    result = rwq("--url", redis_url, "promote", "jc", "d")
    assert (result.returncode, result.stdout) == (0, "promoted d\n")
    x = lease(real_db, queue)
    assert x.id() == "d"
    x = lease(real_db, queue)
    queue.release(real_db, x, reason="no")
    result = rwq("--url", redis_url, "retry", "jc", "x", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["retried"] == ["x"]
    assert queue.state(real_db, "x").state == "queued"


# The shared tables ------------------------------------------------------------------------------


def q() -> WorkQueue:
    return WorkQueue(PREFIX)


def _renew_outcome(s: State) -> Any:
    return q().renew_outcome(s.db, s.held, LEASE_SECS)


WRITE_CHECKS = [
    WriteCheck("cancel-queued", "a", lambda s: q().cancel(s.db, "a"), covers="cancel"),
    WriteCheck("cancel-delayed", "later", lambda s: q().cancel(s.db, "later"), covers="cancel"),
    WriteCheck("cancel-leased", "held", lambda s: q().cancel(s.db, "held"), covers="cancel"),
    WriteCheck("cancel-expired", "stale", lambda s: q().cancel(s.db, "stale"), covers="cancel"),
    WriteCheck("promote", "later", lambda s: q().promote(s.db, "later")),
    WriteCheck("retry", "dead1", lambda s: q().retry(s.db, "dead1")),
    WriteCheck("reschedule-queued", "b", lambda s: q().reschedule(s.db, "b", 30)),
    WriteCheck("reschedule-delayed", "later", lambda s: q().reschedule(s.db, "later", 60)),
    WriteCheck("renew_outcome", "held", _renew_outcome),
]
OOM_CHECKS = [
    OomCheck("cancel-queued", lambda queue, db, _: queue.cancel(db, "a")),
    OomCheck("cancel-leased", lambda queue, db, held: queue.cancel(db, held.id())),
    OomCheck("promote", lambda queue, db, _: queue.promote(db, "later")),
    OomCheck("retry", lambda queue, db, _: queue.retry(db, "dead1"), refused=True),
    OomCheck("reschedule-queued", lambda queue, db, _: queue.reschedule(db, "b", 30)),
    OomCheck("reschedule-delayed", lambda queue, db, _: queue.reschedule(db, "later", 60)),
    OomCheck("renew_outcome", lambda queue, db, held: queue.renew_outcome(db, held, 30)),
]
test_job_control_checks_types_before_writing = write_check_test(WRITE_CHECKS)
test_job_control_out_of_memory = oom_test(OOM_CHECKS)
