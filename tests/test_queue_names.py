"""Queues never reach into each other: queue ``x`` and queue ``x:<name>`` keep apart.

Names whose keys another queue's patterns would match (``x:item``, ``x:dead:y``,
``x:spark:batch``, ...) are refused; every other name, including ``x:spark`` and ``x:workers``,
is safe: the flush and deep clean of one queue leave every key of the others as it was (a full
dump of the database compared before and after).
"""

from __future__ import annotations

from typing import Any

import pytest
import redis

from helpers import dump_state, raw
from redis_work_queue import AsyncWorkQueue, InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.keyprefix import PER_KEY_NAMES, RESERVED_NAMES, QueueKeys
from test_flush import populate

REFUSED = [
    "x:item",
    "x:lease",
    "x:dead",
    "x:worker",
    "x:spark:batch",
    "x:item:b",
    "x:dead:letters",
    "{x}:dead",
    "{x}:worker:1",
    ":item",
    "a*:lease:z",
    "x:spark:batch:y",
]
ALLOWED = [
    "x",
    "item",
    "x:items",
    "x:deadline",
    "x:spark",
    "x:spark:write",
    "x:workers",
    "x:cleaned",
    "x:queue",
    "{x:dead}",
    "x:spark:batches",
]


@pytest.mark.parametrize("name", REFUSED)
def test_clashing_names_are_refused(name: str) -> None:
    for kind in (WorkQueue, AsyncWorkQueue):
        with pytest.raises(InvalidArgumentError) as raised:
            kind(KeyPrefix(name))
        message = str(raised.value)
        assert repr(name) in message
        assert "Rename that segment" in message
    with pytest.raises(InvalidArgumentError):
        QueueKeys(KeyPrefix(name))


@pytest.mark.parametrize("name", ALLOWED)
def test_other_names_are_accepted(name: str) -> None:
    assert WorkQueue(KeyPrefix(name)).keys.prefix == name


def test_reserved_names() -> None:
    keys = QueueKeys(KeyPrefix("p"))
    used = {k.split(":")[1] for k in (*keys.fixed(), *keys.patterns())}
    assert used <= set(RESERVED_NAMES)
    assert {n.split(":")[0] for n in PER_KEY_NAMES} <= set(RESERVED_NAMES)


def fill(db: redis.Redis, name: str) -> None:
    """Queue ``name`` in every state, with Spark records too."""
    populate(db, name)
    keys = QueueKeys(KeyPrefix(name))
    raw(db, "HSET", keys.spark_write, "rows", 3)
    raw(db, "SET", keys.spark_batch("7"), "a,b")


GROUPS = [
    ["x", "x:spark", "x:workers", "x:queue", "x:spark:write", "x:deadline"],
    ["{x}", "{x}:spark", "{x}:workers", "{x}:items"],
    ["x*", "x*:spark", "x?:spark", "x[a]:spark", "x*:workers"],
]
CASES = [(group, name) for group in GROUPS for name in group]


def own_keys(db: redis.Redis, group: list[str], name: str) -> tuple[dict[bytes, Any], set[bytes]]:
    """Fill every queue of ``group``, ``name`` last: the state without it, and its keys."""
    for other in group:
        if other != name:
            fill(db, other)
    before = dump_state(db)
    fill(db, name)
    added = set(dump_state(db)) - set(before)
    assert added
    return before, added


@pytest.mark.parametrize(("group", "name"), CASES, ids=[f"{n}" for _, n in CASES])
def test_flush_of_one_queue_spares_the_others(
    bytes_db: redis.Redis, group: list[str], name: str
) -> None:
    before, added = own_keys(bytes_db, group, name)
    report = WorkQueue(KeyPrefix(name)).flush(bytes_db)
    assert dump_state(bytes_db) == before
    assert report.keys == len(added)


@pytest.mark.parametrize(("group", "name"), CASES, ids=[f"{n}" for _, n in CASES])
def test_deep_clean_of_one_queue_spares_the_others(
    bytes_db: redis.Redis, group: list[str], name: str
) -> None:
    before, _ = own_keys(bytes_db, group, name)
    queue = WorkQueue(KeyPrefix(name))
    # An item lost from both lists, for the deep clean to find.
    queue.add_item(bytes_db, Item(b"lost", id="lost"))
    raw(bytes_db, "LREM", queue.keys.queue, 0, "lost")
    added = set(dump_state(bytes_db)) - set(before)
    report = queue.deep_clean(bytes_db)
    assert report.requeued == 2  # the lost item, and populate's item whose lease expired
    after = dump_state(bytes_db)
    assert {k: v for k, v in after.items() if k not in added} == before
