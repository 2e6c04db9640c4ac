"""KeyPrefix and the key layout, including Redis Cluster slot safety of every key."""

from __future__ import annotations

import pytest
import redis
from redis.crc import key_slot

from helpers import raw
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue, WorkQueueError
from redis_work_queue.keyprefix import QueueKeys, glob_escape


def test_of() -> None:
    assert KeyPrefix("cv:").of("abc") == "cv:abc"
    assert KeyPrefix("").of("x") == "x"


def test_concat() -> None:
    base = KeyPrefix("app:")
    nested = KeyPrefix.concat(base, "jobs")
    assert isinstance(nested, KeyPrefix)
    assert nested.prefix == "app:jobs"
    assert nested.of(":queue") == "app:jobs:queue"
    assert base.prefix == "app:"  # unchanged
    assert KeyPrefix.concat(KeyPrefix.concat(base, "a:"), "b") == KeyPrefix("app:a:b")


def test_equality_hash_repr() -> None:
    assert KeyPrefix("a") == KeyPrefix("a")
    assert KeyPrefix("a") != KeyPrefix("b")
    assert KeyPrefix("a") != "a"
    assert len({KeyPrefix("a"), KeyPrefix("a")}) == 1
    assert repr(KeyPrefix("a")) == "KeyPrefix('a')"


@pytest.mark.parametrize("bad", [b"bytes", None, 7, KeyPrefix("nested")])
def test_non_str_prefix_rejected(bad: object) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        KeyPrefix(bad)  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)  # as before, for code that catches TypeError
    assert isinstance(raised.value, WorkQueueError)
    assert f"not {type(bad).__name__}" in str(raised.value)


def test_queue_needs_a_keyprefix() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        WorkQueue("plain-string")  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)


def test_of_and_concat_refuse_what_is_not_a_str_or_prefix() -> None:
    with pytest.raises(InvalidArgumentError, match="not bytes") as raised:
        KeyPrefix("a:").of(b"b")  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)
    with pytest.raises(InvalidArgumentError, match="KeyPrefix first, not str") as raised:
        KeyPrefix.concat("a:", "b")  # type: ignore[arg-type]
    assert isinstance(raised.value, TypeError)
    with pytest.raises(InvalidArgumentError, match="not int"):
        KeyPrefix.concat(KeyPrefix("a:"), 7)  # type: ignore[arg-type]


def test_key_layout() -> None:
    keys = QueueKeys(KeyPrefix("p"))
    assert keys.queue == "p:queue"
    assert keys.processing == "p:processing"
    assert keys.item("i") == "p:item:i"
    assert keys.lease("i") == "p:lease:i"


def test_glob_escape() -> None:
    assert glob_escape("plain:text") == "plain:text"
    assert glob_escape("a*b?c[d]e\\f") == "a\\*b\\?c\\[d\\]e\\\\f"
    assert QueueKeys(KeyPrefix("q*")).item_pattern() == "q\\*:item:*"


@pytest.mark.parametrize("prefix", ["jobs{tag}", "{tag}", "{tag}:jobs", "x{tag}y{other}"])
def test_every_key_shares_the_hash_slot(db: redis.Redis, prefix: str) -> None:
    """With a ``{tag}`` in the prefix, every key the library creates lands in one slot."""
    queue = WorkQueue(KeyPrefix(prefix))
    expected_slot = key_slot(b"{tag}")
    seen: set[bytes] = set()

    def record() -> None:
        seen.update(raw(db, "KEYS", "*"))

    ids = ["plain", "{other}", "x{y}z", "sp ace", "ü", "*?[]\\"]
    for item_id in ids:
        queue.add_item(db, Item(b"d", id=item_id))
    queue.add_unique_item(db, Item(b"d"))
    record()
    leased = [queue.lease(db, 30, block=False) for _ in range(3)]
    record()
    queue.lease(db, 0.01, block=False)  # leaves a lease that expires
    record()
    assert leased[0] is not None
    queue.complete(db, leased[0])
    queue.light_clean(db)
    queue.deep_clean(db)
    record()
    assert seen, "the queue created no keys"
    slots = {key: key_slot(key) for key in seen}
    assert set(slots.values()) == {expected_slot}, slots
    for key in seen:
        assert key.startswith(prefix.encode())


NAMES_SCRIPT = """--#include queue.lua
local q = queue_at(1)
return {q.queue, q.processing, q.item .. 'x', q.lease .. 'x', q.deliveries, q.reasons,
  q.delayed, q.dead, q.dead_item .. 'x', q.waiting, q.wake, q.workers, q.worker .. 'x', q.counts}
"""


@pytest.mark.parametrize("prefix", ["jobs", "{tag}:jobs", "a*b?[c]", "é: x"])
def test_lua_names_the_keys_as_queue_keys_does(bytes_db: redis.Redis, prefix: str) -> None:
    """The scripts name a queue's keys from its prefix (lua/include/queue.lua); keyprefix.py
    names them for Python. Both must agree."""
    from redis_work_queue import loader, scripts, transport  # noqa: PLC0415
    from redis_work_queue.calls import ScriptCall  # noqa: PLC0415

    script = scripts.Script("names", loader.assemble_text(NAMES_SCRIPT, "names").text)
    keys = QueueKeys(KeyPrefix(prefix))
    reply = transport.execute(bytes_db, ScriptCall(script, keys.script_keys, keys.script_args))
    expected = [
        keys.queue,
        keys.processing,
        keys.item("x"),
        keys.lease("x"),
        keys.deliveries,
        keys.reasons,
        keys.delayed,
        keys.dead,
        keys.dead_item("x"),
        keys.waiting,
        keys.wake,
        keys.workers,
        keys.worker("x"),
        keys.counts,
    ]
    assert [bytes(r).decode() for r in reply] == expected
