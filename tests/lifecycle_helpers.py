"""Helpers of the job-lifecycle tests: a foreign deep clean, key listings, bookkeeping checks."""

from __future__ import annotations

import re

import redis
from redis.cluster import RedisCluster

_GLOB = re.compile(r"([*?\[\]\\])")


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else value


def foreign_deep_clean(db: redis.Redis, prefix: str) -> list[str]:
    """The deep clean of the reference design, as another client would write it.

    Plain redis-py commands, no script: SCAN over ``<prefix>:item:*`` and, for every item that
    exists, is not in the main queue and has no lease key, remove it from the processing list
    and push it onto the main queue. Returns the ids it requeued.
    """
    item_prefix = f"{prefix}:item:"
    queue, processing = f"{prefix}:queue", f"{prefix}:processing"
    requeued: list[str] = []
    for key in db.scan_iter(match=_GLOB.sub(r"\\\1", item_prefix) + "*", count=100):
        item_id = _text(key)[len(item_prefix) :]
        if not db.exists(f"{prefix}:item:{item_id}"):
            continue
        if db.lpos(queue, item_id) is not None:
            continue
        if db.exists(f"{prefix}:lease:{item_id}"):
            continue
        db.lrem(processing, 0, item_id)
        db.lpush(queue, item_id)
        requeued.append(item_id)
    return requeued


def keys_under(db: redis.Redis, prefix: str) -> set[str]:
    """Every key whose name starts with ``prefix`` (found with SCAN), but the queues' counters
    (``<prefix>:counts``) and the workers' duration histogram (``<prefix>:durations``), which
    stay when an item's every trace is gone."""
    pattern = _GLOB.sub(r"\\\1", prefix) + "*"
    found = {_text(key) for key in db.scan_iter(match=pattern, count=1000)}
    return {key for key in found if not key.endswith((":counts", ":durations"))}


def hash_fields(db: redis.Redis, key: str) -> set[str]:
    """The field names of a hash (empty when the key does not exist)."""
    return {_text(field) for field in db.hkeys(key)}


def assert_no_bookkeeping(db: redis.Redis, prefix: str, item_id: str) -> None:
    """Nothing of ``item_id`` is left: no data, lease, count or reason, in no list."""
    assert not db.exists(f"{prefix}:item:{item_id}")
    assert not db.exists(f"{prefix}:lease:{item_id}")
    assert item_id not in hash_fields(db, f"{prefix}:deliveries")
    assert item_id not in hash_fields(db, f"{prefix}:reasons")
    for name in ("queue", "processing"):
        assert db.lpos(f"{prefix}:{name}", item_id) is None


def reason_of(db: redis.Redis, prefix: str, item_id: str) -> str | None:
    """The last failure reason kept for a live item."""
    value = db.hget(f"{prefix}:reasons", item_id)
    return None if value is None else _text(value)


def deliveries_of(db: redis.Redis, prefix: str, item_id: str) -> int:
    """The delivery count kept for a live item (0 when none is kept)."""
    value = db.hget(f"{prefix}:deliveries", item_id)
    return 0 if value is None else int(value)


def blocked_clients(db: redis.Redis) -> int:
    """How many clients of a real server (or of every primary of a cluster) are blocked in a
    blocking command."""
    if isinstance(db, RedisCluster):
        return sum(blocked_clients(db.get_redis_connection(n)) for n in db.get_primaries())
    return sum("b" in _text(client.get("flags", "")) for client in db.client_list())
