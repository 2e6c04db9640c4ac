"""The deep clean: finds items in neither list, without KEYS, without touching other queues.

Its behaviour next to live worker processes and other cleaners is in test_processes.py.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from helpers import b, dump_state, keys_left, lrange, wait_for
from plugins.backends import Backend
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue, scripts, transport
from redis_work_queue.ops import cleaning
from redis_work_queue.ops.cleaning import CLEAN_FIRST

QUEUE = KeyPrefix("dc")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_an_id_removed_behind_the_recheck_walk_hides_no_held_id",
    "test_deep_clean_sends_no_keys_command",
    "test_does_not_touch_leased_items",
    "test_forgets_bookkeeping_of_items_that_no_longer_exist",
    "test_held_id_met_by_a_light_clean_is_requeued_once",
    "test_held_item_dropped_by_a_worker_is_requeued_once",
    "test_held_item_leased_by_a_foreign_client_is_left_alone",
    "test_holds_of_a_crashed_deep_clean_lapse",
    "test_light_clean_requeues_a_held_id_it_pops",
    "test_many_items_over_several_steps",
    "test_processing_list_deleted_after_leases_ran_out",
    "test_recovers_expired_leases_without_duplicating",
    "test_repairs_item_in_neither_list",
    "test_repeated_deep_cleans_do_not_duplicate",
    "test_suspect_leased_before_the_hold",
    "test_suspect_moved_to_processing_before_the_hold",
    "test_suspect_requeued_by_another_deep_clean_before_the_hold",
}


def test_empty(db: redis.Redis, queue: WorkQueue) -> None:
    assert queue.deep_clean(db) == CleanReport(examined=0, requeued=0, dropped=0)
    assert keys_left(db) == []


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


def test_recovers_expired_leases_without_duplicating(db: redis.Redis, queue: WorkQueue) -> None:
    """The deep clean recovers what a light clean would (an expired lease on the processing
    list), and never queues a queued, leased or processing id a second time."""
    for i in range(6):
        queue.add_item(db, Item(b"", id=str(i)))
    queue.lease(db, 30, block=False)  # "0": leased
    queue.lease(db, 30, block=False)  # "1": leased, lease expired below
    db.delete("dc:lease:1")
    assert queue.deep_clean(db) == CleanReport(examined=6, requeued=1, dropped=0)
    assert lrange(db, "dc:processing") == [b"0"]
    assert queue.deep_clean(db) == CleanReport(examined=6, requeued=0, dropped=0)
    assert queue.light_clean(db).requeued == 0
    queued = lrange(db, "dc:queue")
    assert sorted(queued) == [b"1", b"2", b"3", b"4", b"5"]
    assert b(db.hget("dc:reasons", "1")) == b"lease expired"


def test_buries_an_expired_last_delivery_as_the_light_clean(db: redis.Redis) -> None:
    queue = WorkQueue(QUEUE, max_deliveries=1)
    queue.add_item(db, Item(b"d", id="x"))
    assert queue.lease(db, 30, block=False) is not None
    db.delete("dc:lease:x")
    assert queue.deep_clean(db) == CleanReport(examined=1, dead=1)
    assert [d.id for d in queue.dead_letters(db)] == ["x"]
    assert lrange(db, "dc:processing") == [] == lrange(db, "dc:queue")


def test_processing_list_deleted_after_leases_ran_out(db: redis.Redis, queue: WorkQueue) -> None:
    for i in range(40):
        queue.add_item(db, Item(b"", id=str(i)))
    for _ in range(30):
        assert queue.lease(db, 30, block=False) is not None
    db.delete("dc:processing", *[f"dc:lease:{i}" for i in range(30)])
    assert queue.deep_clean(db) == CleanReport(examined=40, requeued=30)
    queued = lrange(db, "dc:queue")
    assert sorted(queued) == sorted(str(i).encode() for i in range(40))
    assert not db.keys("dc:lease:*")


def test_forgets_bookkeeping_of_items_that_no_longer_exist(
    db: redis.Redis, queue: WorkQueue
) -> None:
    queue.add_item(db, Item(b"", id="kept"))
    db.hset("dc:deliveries", mapping={"gone": 2, "kept": 1})
    db.hset("dc:reasons", mapping={"gone": "boom", "other": "x"})
    report = queue.deep_clean(db)
    assert report.forgotten == 2
    assert [b(k) for k in db.hkeys("dc:deliveries")] == [b"kept"]
    assert not db.exists("dc:reasons")


def test_many_items_over_several_steps(db: redis.Redis, queue: WorkQueue) -> None:
    lost = CLEAN_FIRST * 7 + 1
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
    assert "KEYS" not in sent
    assert all(not name.startswith("KEYS") for name in sent)
    scan = scripts.load("deep_clean_scan").script.decode()
    assert "redis.call('SCAN'" in scan
    for name in ("deep_clean_scan", "deep_clean_walk", "deep_clean_hold", "deep_clean"):
        assert "'KEYS'" not in scripts.load(name).script.decode()


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


def _before_script(
    db: redis.Redis, monkeypatch: pytest.MonkeyPatch, name: str, action: Any
) -> list[int]:
    """Run ``action()`` just before the deep clean's first call of script ``name``.

    The calls go as scripts (EVALSHA), so that the spy can tell which script a call runs.
    """
    transport.use_functions(db, "never")
    script = scripts.load(name)
    original = db.execute_command
    fired: list[int] = []

    def spy(*args: Any, **options: Any) -> Any:
        command = args[0].upper() if isinstance(args[0], str) else args[0]
        is_it = (command == "EVALSHA" and args[1] in (script.sha, script.sha.encode())) or (
            command == "EVAL" and args[1] == script.script
        )
        if is_it and not fired:
            fired.append(1)
            action()
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    return fired


def test_suspect_requeued_by_another_deep_clean_before_the_hold(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another deep clean requeues the lost items after this one's first walk: they are held,
    met on the main queue by the second walk, released, and never queued a second time."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.mset({f"dc:item:{i}": b"" for i in range(5)})
    fired = _before_script(db, monkeypatch, "deep_clean_hold", lambda: queue.deep_clean(other))
    assert queue.deep_clean(db).requeued == 0
    assert fired
    queued = lrange(other, "dc:queue")
    assert sorted(queued) == [str(i).encode() for i in range(5)]
    assert not other.keys("dc:lease:*")


def test_suspect_moved_to_processing_before_the_hold(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first walk the lost item is requeued by another cleaner and moved to the
    processing list by a worker that dies before claiming it: it is requeued once, from the
    processing list, never left on both lists."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:m", b"")

    def requeue_and_move() -> None:
        assert queue.deep_clean(other).requeued == 1
        other.rpoplpush("dc:queue", "dc:processing")  # a worker's blocking move, no claim yet

    fired = _before_script(db, monkeypatch, "deep_clean_hold", requeue_and_move)
    assert queue.deep_clean(db).requeued == 1
    assert fired
    assert lrange(other, "dc:queue") == [b"m"]
    assert lrange(other, "dc:processing") == []
    assert not other.exists("dc:lease:m")


def test_suspect_leased_before_the_hold(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first walk the lost item is requeued and leased; its processing entry is then
    lost too. The deep clean must not requeue a leased item."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:l", b"")
    leased: list[Any] = []

    def requeue_and_lease() -> None:
        queue.deep_clean(other)
        leased.append(queue.lease(other, 30, block=False))
        other.delete("dc:processing")

    fired = _before_script(db, monkeypatch, "deep_clean_hold", requeue_and_lease)
    assert queue.deep_clean(db).requeued == 0
    assert fired
    assert leased[0] is not None
    assert queue.queue_len(other) == 0
    assert b(other.get("dc:lease:l")).startswith(b(leased[0].lease_token))


def test_held_item_dropped_by_a_worker_is_requeued_once(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suspect that was in fact queued (another deep clean requeued it after the first walk)
    is held; a worker's lease then pops it and drops it as a stray copy of a leased item before
    the second walk reaches it. It is in neither list: the last step queues it, once."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:w", b"")
    fired = _before_script(db, monkeypatch, "deep_clean_hold", lambda: queue.deep_clean(other))
    taken: list[Any] = []
    original = db.execute_command
    walk = scripts.load("deep_clean_walk")
    transport.use_functions(db, "never")  # calls as EVALSHA, which the spy tells apart

    def spy(*args: Any, **options: Any) -> Any:
        is_walk = args[0] in ("EVALSHA", b"EVALSHA") and args[1] in (walk.sha, walk.sha.encode())
        if is_walk and other.exists("dc:lease:w") and not taken:
            taken.append(queue.lease(other, 30, block=False))  # pops "w", cannot lease it
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    assert queue.deep_clean(db).requeued == 1
    assert fired
    assert taken == [None]
    assert lrange(other, "dc:queue") == [b"w"]
    assert lrange(other, "dc:processing") == []
    assert not other.exists("dc:lease:w")


def test_held_item_leased_by_a_foreign_client_is_left_alone(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client of another implementation moves a held id to the processing list and sets its
    lease (over the hold) before the last step: the item is leased, and stays so."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:f", b"")

    def requeue_then_foreign_lease() -> None:
        queue.deep_clean(other)
        other.rpoplpush("dc:queue", "dc:processing")
        other.set("dc:lease:f", "foreign-session", ex=30)

    fired = _before_script(db, monkeypatch, "deep_clean_hold", requeue_then_foreign_lease)
    assert queue.deep_clean(db).requeued == 0
    assert fired
    assert lrange(other, "dc:queue") == []
    assert lrange(other, "dc:processing") == [b"f"]
    assert b(other.get("dc:lease:f")) == b"foreign-session"


def test_held_id_met_by_a_light_clean_is_requeued_once(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held id on the processing list (its lease expired) is requeued by whichever light
    clean pops it first, with its hold; the deep clean's last step then leaves it alone."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    queue.add_item(db, Item(b"", id="e"))
    assert queue.lease(db, 30, block=False) is not None
    db.delete("dc:lease:e")
    hold = scripts.load("light_clean")
    fired = _before_script(db, monkeypatch, hold.name, lambda: queue.light_clean(other))
    assert other.get("dc:lease:e") is None
    assert queue.deep_clean(db).requeued == 0  # the other light clean did it
    assert fired
    assert lrange(other, "dc:queue") == [b"e"]
    assert lrange(other, "dc:processing") == []
    assert not other.exists("dc:lease:e")


def test_light_clean_requeues_a_held_id_it_pops(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"", id="h"))
    assert queue.lease(db, 30, block=False) is not None
    db.set("dc:lease:h", "deep-clean:0123", px=60_000)  # a deep clean's hold
    assert queue.light_clean(db) == CleanReport(examined=1, requeued=1)
    assert lrange(db, "dc:queue") == [b"h"]
    assert not db.exists("dc:lease:h")


def test_holds_of_a_crashed_deep_clean_lapse(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deep clean that dies after holding its suspects leaves holds that lapse; the item is
    then as before, and the next deep clean queues it once."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    db.set("dc:item:c", b"")
    monkeypatch.setattr(cleaning, "HOLD_MS", 300)

    hold = scripts.load("deep_clean_hold")
    transport.use_functions(db, "never")  # calls as EVALSHA, which the spy tells apart
    original = db.execute_command

    def spy(*args: Any, **options: Any) -> Any:
        reply = original(*args, **options)
        if args[1] in (hold.sha, hold.sha.encode(), hold.script):
            raise ConnectionError("the cleaner died")
        return reply

    monkeypatch.setattr(db, "execute_command", spy)
    with pytest.raises(ConnectionError):
        queue.deep_clean(db)
    assert b(other.get("dc:lease:c")).startswith(b"deep-clean:")
    assert queue.deep_clean(other).requeued == 0  # held: not this run's business
    wait_for(lambda: not other.exists("dc:lease:c"), timeout=10, what="the hold to lapse")
    assert queue.deep_clean(other).requeued == 1
    assert lrange(other, "dc:queue") == [b"c"]


@pytest.mark.parametrize("remove", ["cancel", "reschedule"])
def test_an_id_removed_behind_the_recheck_walk_hides_no_held_id(
    backend: Backend, sync_queue: WorkQueue, monkeypatch: pytest.MonkeyPatch, remove: str
) -> None:
    """A delayed item falls due after the first walk: it is held, on the main queue. The second
    walk reads the queue two entries a step; between its steps an id it has read is removed from
    inside the queue (cancelled or rescheduled), which moves the later entries one place towards
    the head. The walk still meets the held id, and the last step does not queue it again."""
    queue = sync_queue  # spies on the synchronous driver
    db = backend.client()
    other = backend.client()
    monkeypatch.setattr(cleaning, "WALK_MAX", 2)
    queue.add_items(db, [Item(b"", id="a"), Item(b"", id="b")])  # queue: b, a (a leased next)
    queue.add_item(db, Item(b"", id="x"), delay=60)

    def fall_due() -> None:
        assert queue.promote(other, "x")  # to the leasing end: a, x... read from the head: b, a, x

    fired = _before_script(db, monkeypatch, "deep_clean_hold", fall_due)
    walk = scripts.load("deep_clean_walk")
    original = db.execute_command
    removed: list[str] = []

    def spy(*args: Any, **options: Any) -> Any:
        is_walk = args[0] in ("EVALSHA", b"EVALSHA") and args[1] in (walk.sha, walk.sha.encode())
        # The recheck's second step (a run's token, from index 2): "b" was read, "x" is next.
        if is_walk and str(args[5]) == "2" and args[-1] and not removed:
            if remove == "cancel":
                assert queue.cancel(other, "b")
            else:
                assert queue.reschedule(other, "b", 60)
            removed.append("b")
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    assert queue.deep_clean(db).requeued == 0
    assert fired and removed
    assert lrange(other, "dc:queue") == [b"a", b"x"]
    assert not other.exists("dc:lease:x")


def test_a_walk_step_starts_back_by_the_removals_since_the_last(db: redis.Redis) -> None:
    """Cancels and reschedules count their removals from inside the main queue (and nothing
    else); a walk step reads from its index less those counted since the last step, and from
    the head when the count went back (its key deleted)."""
    queue = WorkQueue(QUEUE)
    keys = queue.ops.keys
    queue.add_items(db, [Item(b"", id=str(i)) for i in range(6)])  # head to tail: 5, 4, ... 0
    queue.add_item(db, Item(b"", id="later"), delay=60)
    queue.cancel(db, "later")  # delayed: not on the main queue, not counted
    assert db.get("dc:removals") is None
    queue.cancel(db, "4")
    queue.reschedule(db, "1", 60)
    assert b(db.get("dc:removals")) == b"2"

    def step(first: int, removals: int | None) -> list[Any]:
        reply = transport.execute(db, cleaning.deep_clean_walk_call(keys, first, 2, removals, ""))
        return [int(reply[1]), [b(i) for i in reply[2]], int(reply[3]), int(reply[4])]

    assert step(3, None) == [1, [b"0"], 3, 2]  # the walk's first step: read as asked
    assert step(3, 1) == [2, [b"2", b"0"], 2, 2]  # one removal since its last step
    assert step(3, 2) == [1, [b"0"], 3, 2]
    db.delete("dc:removals")
    assert step(3, 2) == [2, [b"5", b"3"], 0, 0]
