"""A key named like an item's data key but of another type (``P:item:zz`` a hash) is not an
item: the deep clean leaves it alone, queues nothing for it and counts nothing, run after run."""

from __future__ import annotations

import pytest
import redis

from helpers import dump_state, lrange
from redis_work_queue import Item, KeyPrefix, WorkQueue

QUEUE = KeyPrefix("dct")
WRONG = {
    "hash": lambda db, key: db.hset(key, "f", "v"),
    "list": lambda db, key: db.rpush(key, "v"),
    "set": lambda db, key: db.sadd(key, "v"),
    "zset": lambda db, key: db.zadd(key, {"v": 1}),
}


@pytest.mark.parametrize("kind", sorted(WRONG))
def test_a_data_key_of_another_type_is_never_requeued(
    db: redis.Redis, queue: WorkQueue, kind: str
) -> None:
    WRONG[kind](db, "dct:item:zz")
    queue.add_item(db, Item(b"q", id="queued"))
    db.set("dct:item:lost", b"l")  # a real item, in neither list
    first = queue.deep_clean(db)
    assert first.requeued == 1
    assert sorted(lrange(db, "dct:queue")) == [b"lost", b"queued"]
    counts = queue.counts(db)
    before = dump_state(db)
    for _ in range(3):
        report = queue.deep_clean(db)
        assert (report.requeued, report.dropped, report.dead) == (0, 0, 0), report
    assert queue.counts(db) == counts
    assert dump_state(db) == before
    assert db.type("dct:item:zz") in (kind, kind.encode())
    assert sorted(lrange(db, "dct:queue")) == [b"lost", b"queued"]
    assert queue.stats(db).queued == 2
