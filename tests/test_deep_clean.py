"""The deep clean: finds items in neither list, without KEYS, without touching other queues.

Its behaviour next to live worker processes and other cleaners is in test_processes.py.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from conftest import Backend
from helpers import b, dump_state, lrange
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue, scripts
from redis_work_queue.ops import RECHECK_CHUNK, SCAN_COUNT

QUEUE = KeyPrefix("dc")


@pytest.fixture
def sync_queue() -> WorkQueue:
    return WorkQueue(QUEUE)


@pytest.fixture
def queue(queue_kind: Callable[..., WorkQueue]) -> WorkQueue:
    return queue_kind(QUEUE)


def test_empty(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.deep_clean(db) == CleanReport(examined=0, requeued=0, dropped=0)
    assert db.dbsize() == 0


def test_repairs_item_in_neither_list(db: redis.Redis, queue: WorkQueue) -> None:
    db.set("dc:item:lost", b"data")  # a client died between SET and LPUSH
    assert queue.deep_clean(db) == CleanReport(examined=1, requeued=1, dropped=0)
    assert lrange(db, "dc:queue") == [b"lost"]
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data()) == ("lost", b"data")
    assert queue.complete(db, item) is True
    assert queue.deep_clean(db) == CleanReport(examined=0, requeued=0, dropped=0)


def test_does_not_touch_leased_items(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"", id="held"))
    held = queue.lease(db, 30, block=False)
    assert held is not None
    db.delete("dc:processing")  # leased, and (somehow) in neither list
    before = dump_state(db)
    assert queue.deep_clean(db) == CleanReport(examined=1, requeued=0, dropped=0)
    assert dump_state(db) == before
    assert queue.queue_len(db) == 0


def test_does_not_duplicate_queued_or_processing_ids(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(6):
        queue.add_item(db, Item(b"", id=str(i)))
    queue.lease(db, 30, block=False)  # "0": leased
    queue.lease(db, 30, block=False)  # "1": leased, lease expired below
    db.delete("dc:lease:1")
    before = dump_state(db)
    assert queue.deep_clean(db) == CleanReport(examined=6, requeued=0, dropped=0)
    assert dump_state(db) == before  # "1" is the light clean's business
    assert queue.light_clean(db).requeued == 1
    assert queue.deep_clean(db).requeued == 0
    queued = lrange(db, "dc:queue")
    assert sorted(queued) == [b"1", b"2", b"3", b"4", b"5"]


def test_many_items_over_several_steps(db: redis.Redis, queue: WorkQueue) -> None:
    lost = SCAN_COUNT * 2 + RECHECK_CHUNK * 3 + 1
    db.mset({f"dc:item:lost-{i}": b"x" for i in range(lost)})
    for i in range(300):
        queue.add_item(db, Item(b"", id=f"queued-{i}"))
    for _ in range(100):
        queue.lease(db, 30, block=False)
    report = queue.deep_clean(db)
    assert report.examined == lost + 300
    assert report.requeued == lost
    queued = lrange(db, "dc:queue")
    assert len(queued) == len(set(queued)) == lost + 200
    assert queue.deep_clean(db).requeued == 0
    assert queue.processing(db) == 100


def test_repeated_deep_cleans_do_not_duplicate(db: redis.Redis, queue: WorkQueue) -> None:
    db.mset({f"dc:item:{i}": b"" for i in range(50)})
    assert queue.deep_clean(db).requeued == 50
    for _ in range(3):
        assert queue.deep_clean(db).requeued == 0
    assert Counter(lrange(db, "dc:queue")).most_common(1)[0][1] == 1


def test_deep_clean_sends_no_keys_command(
    db: redis.Redis, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = sync_queue  # spies on the synchronous driver
    db.mset({f"dc:item:{i}": b"" for i in range(30)})
    queue.add_item(db, Item(b"", id="queued"))
    sent: list[str] = []
    original = db.execute_command

    def spy(*args: Any, **options: Any) -> Any:
        name = args[0]
        sent.append((name.decode() if isinstance(name, bytes) else str(name)).upper())
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    report = queue.deep_clean(db)
    assert report.requeued == 30
    assert "SCAN" in sent
    assert "KEYS" not in sent
    assert all(not name.startswith("KEYS") for name in sent)


GLOB_PAIRS = [
    ("a*", "ab"),
    ("a?", "ab"),
    ("a[b]", "ab"),
    ("a[!c]", "ab"),
    ("a\\", "a"),
    ("*", "x"),
]


@pytest.mark.parametrize(("mine", "theirs"), GLOB_PAIRS, ids=[m for m, _ in GLOB_PAIRS])
def test_glob_characters_in_prefix_never_touch_other_queues(
    backend: Backend, mine: str, theirs: str
) -> None:
    """A queue named ``a*`` must never examine or touch queue ``ab``, and so on."""
    db = backend.client()
    mine_q = WorkQueue(KeyPrefix(mine))
    theirs_q = WorkQueue(KeyPrefix(theirs))
    # Their lost items (data key only), with ids that also exist as our lost items.
    db.mset({f"{theirs}:item:{i}": b"theirs" for i in range(5)})
    db.mset({f"{mine}:item:{i}": b"mine" for i in range(3)})
    their_keys = {k: v for k, v in dump_state(db).items() if k.startswith(b(theirs + ":"))}
    report = mine_q.deep_clean(db)
    assert report == CleanReport(examined=3, requeued=3, dropped=0)
    after = {k: v for k, v in dump_state(db).items() if k.startswith(b(theirs + ":"))}
    assert after == their_keys
    assert theirs_q.queue_len(db) == 0
    assert sorted(lrange(db, f"{mine}:queue")) == [b"0", b"1", b"2"]
    # And the other way round.
    assert theirs_q.deep_clean(db) == CleanReport(examined=5, requeued=5, dropped=0)
    assert mine_q.queue_len(db) == 3


def _before_recheck(db: redis.Redis, monkeypatch: pytest.MonkeyPatch, action: Any) -> list[int]:
    """Run ``action()`` just before the deep clean's first re-check script call, i.e. after it
    has taken its (now stale) snapshot of the lists."""
    recheck = scripts.load("deep_clean")
    original = db.execute_command
    fired: list[int] = []

    def spy(*args: Any, **options: Any) -> Any:
        name = args[0].upper() if isinstance(args[0], str) else args[0]
        is_recheck = (name == "EVALSHA" and args[1] in (recheck.sha, recheck.sha.encode())) or (
            name == "EVAL" and args[1] == recheck.script
        )
        if is_recheck and not fired:
            fired.append(1)
            action()
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    return fired


def test_recheck_sees_another_deep_clean(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another deep clean requeues the lost items between this one's snapshot and re-check:
    they must not be queued a second time."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.mset({f"dc:item:{i}": b"" for i in range(5)})
    fired = _before_recheck(db, monkeypatch, lambda: queue.deep_clean(other))
    assert queue.deep_clean(db).requeued == 0
    assert fired
    queued = lrange(other, "dc:queue")
    assert sorted(queued) == [str(i).encode() for i in range(5)]


def test_recheck_sees_a_move_to_processing(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between snapshot and re-check the lost item is requeued by another cleaner and moved to
    the processing list by a worker that has not claimed it yet: it must not be pushed back
    onto the main queue (it would be both queued and on the processing list)."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:m", b"")

    def requeue_and_move() -> None:
        assert queue.deep_clean(other).requeued == 1
        other.rpoplpush("dc:queue", "dc:processing")  # a worker's blocking move, no claim yet

    fired = _before_recheck(db, monkeypatch, requeue_and_move)
    assert queue.deep_clean(db).requeued == 0
    assert fired
    assert lrange(other, "dc:queue") == []
    assert lrange(other, "dc:processing") == [b"m"]


def test_recheck_sees_a_lease(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between snapshot and re-check the lost item is requeued and leased; its processing
    entry is then lost too. The deep clean must not requeue a leased item."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:l", b"")
    leased: list[Any] = []

    def requeue_and_lease() -> None:
        queue.deep_clean(other)
        leased.append(queue.lease(other, 30, block=False))
        other.delete("dc:processing")

    fired = _before_recheck(db, monkeypatch, requeue_and_lease)
    assert queue.deep_clean(db).requeued == 0
    assert fired
    assert leased[0] is not None
    assert queue.queue_len(other) == 0
