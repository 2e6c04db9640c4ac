"""Inspection: peek (positions like RQ.INSPECT, negative starts from the newest), pending (oldest
lease first, expired leases shown as such), stats, and ``rwq info``; and a model-based test that
drives the queue through a random sequence of operations next to a small Python model and
checks after every step that stats, peek, pending, the bookkeeping and the dead letters agree.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import pytest
import redis

from helpers import raw, wait_for
from plugins.backends import Backend
from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.results import PendingItem, QueuedItem, QueueStats

QUEUE = KeyPrefix("insp")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_item_data_reads_one_whole_value",
    "test_peek_every_page_matches_the_list",
    "test_peek_in_leasing_order",
    "test_peek_negative_start_before_the_oldest",
    "test_peek_negative_start_counts_from_the_newest",
    "test_peek_with_a_preview_cuts_the_data_and_gives_the_whole_size",
    "test_pending_oldest_lease_first_with_its_lease",
    "test_pending_shows_expired_leases",
}


def _add(db: redis.Redis, queue: WorkQueue, n: int) -> list[str]:
    ids = [f"i{k}" for k in range(n)]
    queue.add_items(db, [Item(f"d{k}", id=i) for k, i in enumerate(ids)])
    return ids


def expected_page(ids: list[str], start: int, count: int) -> list[tuple[int, str]]:
    """The (position, id) pairs a page shows: positions ``start`` .. ``start + count - 1``
    (a negative start counts from the newest: -1 is the last added), those that exist."""
    first = start if start >= 0 else len(ids) + start
    return [(p, ids[p]) for p in range(first, first + count) if 0 <= p < len(ids)]


# peek -------------------------------------------------------------------------------------------


def test_peek_in_leasing_order(db: redis.Redis, queue: WorkQueue) -> None:
    ids = _add(db, queue, 5)
    page = queue.peek(db)
    assert page == [QueuedItem(p, i, f"d{p}".encode()) for p, i in enumerate(ids)]
    assert [(p.position, p.id) for p in queue.peek(db, 0, 2)] == [(0, "i0"), (1, "i1")]
    assert [(p.position, p.id) for p in queue.peek(db, 3, 10)] == [(3, "i3"), (4, "i4")]
    assert queue.peek(db, 5, 3) == []
    assert queue.peek(db, 50, 3) == []
    # peeking takes nothing
    item = queue.lease(db, 30, block=False)
    assert item is not None
    assert item.id() == "i0"
    assert [p.position for p in queue.peek(db)] == [0, 1, 2, 3]


def test_peek_negative_start_counts_from_the_newest(db: redis.Redis, queue: WorkQueue) -> None:
    ids = _add(db, queue, 5)
    assert queue.peek(db, -1, 1) == [QueuedItem(4, "i4", b"d4")]
    assert [(p.position, p.id) for p in queue.peek(db, -1, 10)] == [(4, "i4")]
    # like RQ.INSPECT key -2 2: the last two, in leasing order
    assert [(p.position, p.id) for p in queue.peek(db, -2, 2)] == [(3, "i3"), (4, "i4")]
    assert [(p.position, p.id) for p in queue.peek(db, -3, 2)] == [(2, "i2"), (3, "i3")]
    assert [(p.position, p.id) for p in queue.peek(db, -5, 5)] == expected_page(ids, -5, 5)


@pytest.mark.parametrize(("start", "count"), [(-10, 10), (-6, 2), (-7, 3), (-8, 2), (-6, 1)])
def test_peek_negative_start_before_the_oldest(
    bytes_db: redis.Redis, queue: WorkQueue, start: int, count: int
) -> None:
    """A negative start further back than the queue is long: the page holds the positions of
    the range that exist, labelled with their real positions (0 = next to be leased)."""
    db = bytes_db
    ids = _add(db, queue, 5)
    page = queue.peek(db, start, count)
    assert [(p.position, p.id) for p in page] == expected_page(ids, start, count)


def test_peek_every_page_matches_the_list(db: redis.Redis, queue: WorkQueue) -> None:
    ids = _add(db, queue, 7)
    for start in range(-7, 9):
        for count in (1, 2, 3, 7, 20):
            page = queue.peek(db, start, count)
            assert [(p.position, p.id) for p in page] == expected_page(ids, start, count), (
                start,
                count,
            )
            assert all(p.data == f"d{p.position}".encode() for p in page)


def test_peek_shows_leftover_ids_without_data(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, 3)
    assert queue.complete(db, Item(b"", id="i1"))  # completed while queued: its id stays
    assert [(p.id, p.data) for p in queue.peek(db)] == [
        ("i0", b"d0"),
        ("i1", None),
        ("i2", b"d2"),
    ]
    assert queue.stats(db).queued == 3
    assert [i.id() for i in queue.lease_many(db, 30, 3, block=False)] == ["i0", "i2"]
    assert queue.peek(db) == []


def test_peek_with_a_preview_cuts_the_data_and_gives_the_whole_size(
    db: redis.Redis, queue: WorkQueue
) -> None:
    datas = [b"", b"abc", b"exactly8", b"\x00\xff" * 150, "é".encode() * 10]
    queue.add_items(db, [Item(d, id=f"p{n}") for n, d in enumerate(datas)])
    queue.add_item(db, Item(b"soon gone", id="gone"))
    assert queue.complete(db, Item(b"", id="gone"))  # its id stays in the queue, without data
    page = queue.peek(db, 0, 10, preview_bytes=8)
    assert [(p.id, p.data, p.size, p.truncated) for p in page] == [
        ("p0", b"", 0, False),
        ("p1", b"abc", 3, False),
        ("p2", b"exactly8", 8, False),
        ("p3", b"\x00\xff" * 4, 300, True),
        ("p4", "é".encode() * 4, 20, True),
        ("gone", None, None, False),
    ]
    sizes = queue.peek(db, 0, 10, preview_bytes=0)
    assert [(p.data, p.size) for p in sizes[:5]] == [(b"", len(d)) for d in datas]
    whole = queue.peek(db, 0, 10)
    assert [(p.data, p.size, p.truncated) for p in whole[:5]] == [(d, len(d), False) for d in datas]
    assert queue.peek(db, -2, 1, preview_bytes=2) == [QueuedItem(4, "p4", b"\xc3\xa9", 20)]


@pytest.mark.parametrize("bad", [-1, 1.5, "8", True])
def test_preview_bytes_must_be_an_int_of_at_least_zero(
    db: redis.Redis, queue: WorkQueue, bad: Any
) -> None:
    _add(db, queue, 1)
    with pytest.raises(InvalidArgumentError, match="preview_bytes"):
        queue.peek(db, 0, 1, preview_bytes=bad)
    with pytest.raises(InvalidArgumentError, match="preview_bytes"):
        queue.dead_letters(db, 0, 1, preview_bytes=bad)


def test_item_data_reads_one_whole_value(db: redis.Redis, queue: WorkQueue) -> None:
    big = bytes(range(256)) * 40
    queue.add_item(db, Item(big, id="big"))
    queue.add_item(db, Item(b"", id="empty"))
    assert queue.item_data(db, "big") == big
    assert queue.item_data(db, "empty") == b""
    assert queue.item_data(db, "nope") is None
    assert queue.item_data(db, "big", dead=True) is None  # not a dead letter
    held = queue.lease(db, 30, block=False)
    assert held is not None and held.id() == "big"
    assert queue.item_data(db, "big") == big  # leased items too
    with pytest.raises(InvalidArgumentError, match="item_id"):
        queue.item_data(db, 7)  # type: ignore[arg-type]


def test_a_preview_reads_a_bounded_number_of_bytes(real_db: redis.Redis) -> None:
    """Measured by the server: what it wrote to clients while answering the peek."""
    queue = WorkQueue(KeyPrefix("insp-big"))
    queue.add_items(real_db, [Item(bytes([n]) * 1_000_000, id=f"b{n}") for n in range(20)])

    def sent() -> int:
        return int(real_db.info("stats")["total_net_output_bytes"])

    before = sent()
    page = queue.peek(real_db, 0, 20, preview_bytes=100)
    cost = sent() - before
    assert [(p.data, p.size) for p in page] == [(bytes([n]) * 100, 1_000_000) for n in range(20)]
    assert cost < 20_000, cost
    before = sent()
    assert queue.item_data(real_db, "b3") == b"\x03" * 1_000_000
    assert 1_000_000 <= sent() - before < 1_010_000
    before = sent()
    assert len(queue.peek(real_db, 0, 20)) == 20
    assert sent() - before > 20_000_000  # without a preview: every value whole


@pytest.mark.parametrize(("start", "count"), [(0, 0), (0, -1), (1.0, 5), (0, 2.5), (None, 1)])
def test_page_arguments_are_checked(
    db: redis.Redis, queue: WorkQueue, start: Any, count: Any
) -> None:
    with pytest.raises(InvalidArgumentError):
        queue.peek(db, start, count)
    with pytest.raises(InvalidArgumentError):
        queue.pending(db, start, count)


# pending ----------------------------------------------------------------------------------------


def test_pending_oldest_lease_first_with_its_lease(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, 4)
    before = time.time()
    first = queue.lease(db, 30, block=False)
    second = queue.lease(db, 5, block=False)
    third = queue.lease(db, 60, block=False)
    after = time.time()
    assert first and second and third
    rows = queue.pending(db)
    assert [r.id for r in rows] == ["i0", "i1", "i2"]
    assert [r.deliveries for r in rows] == [1, 1, 1]
    assert [r.lease_token for r in rows] == [
        first.lease_token,
        second.lease_token,
        third.lease_token,
    ]
    for row, secs in zip(rows, (30, 5, 60), strict=True):
        assert not row.expired
        assert row.leased_at is not None
        assert before - 0.01 <= row.leased_at <= after + 0.01
        assert row.lease_left is not None
        assert secs - 2 < row.lease_left <= secs
    assert [r.id for r in queue.pending(db, 1, 1)] == ["i1"]
    assert [r.id for r in queue.pending(db, -1, 1)] == ["i2"]  # the newest lease
    assert [r.id for r in queue.pending(db, -2, 5)] == ["i1", "i2"]
    assert queue.pending(db, 3, 5) == []


def test_pending_shows_expired_leases(db: redis.Redis, queue: WorkQueue) -> None:
    _add(db, queue, 2)
    a = queue.lease(db, 30, block=False)
    b = queue.lease(db, 0.05, block=False)
    assert a and b
    wait_for(lambda: not db.exists(queue.keys.lease("i1")), timeout=5, what="the lease to lapse")
    rows = queue.pending(db)
    assert rows[0] == PendingItem("i0", 1, rows[0].leased_at, rows[0].lease_left, a.lease_token)
    assert not rows[0].expired
    assert rows[1] == PendingItem("i1", 1, None, None, None)
    assert rows[1].expired
    assert queue.stats(db) == QueueStats(queued=0, leased=1, expired=1, delayed=0, dead=0)
    queue.light_clean(db)
    assert [r.id for r in queue.pending(db)] == ["i0"]
    assert queue.stats(db) == QueueStats(queued=1, leased=1, expired=0, delayed=0, dead=0)
    again = queue.lease(db, 30, block=False)
    assert again is not None
    assert [(r.id, r.deliveries) for r in queue.pending(db)] == [("i0", 1), ("i1", 2)]


def test_stats_of_every_state(bytes_db: redis.Redis) -> None:
    db = bytes_db
    queue = WorkQueue(QUEUE, max_deliveries=1)
    assert queue.stats(db) == QueueStats(0, 0, 0, 0, 0)
    _add(db, queue, 6)
    queue.add_item(db, Item(b"", id="later"), delay=60)
    leased = queue.lease_many(db, 30, 4, block=False)
    db.delete(queue.keys.lease(leased[0].id()))  # expired, awaiting a clean
    assert queue.release(db, leased[1], reason="boom")  # buried (max 1 delivery)
    assert queue.stats(db) == QueueStats(queued=2, leased=2, expired=1, delayed=1, dead=1)


def test_stats_beyond_one_chunk_of_the_processing_list(bytes_db: redis.Redis) -> None:
    db = bytes_db
    queue = WorkQueue(QUEUE)
    queue.add_items(db, [Item(b"", id=str(i)) for i in range(2600)])
    leased: list[Item] = []
    while len(leased) < 2500:
        leased += queue.lease_many(db, 30, 100, block=False)
    pipe = db.pipeline(transaction=False)
    for item in leased[::4]:  # 625 expired, spread over both chunks
        pipe.delete(queue.keys.lease(item.id()))
    pipe.execute()
    assert queue.stats(db) == QueueStats(queued=100, leased=1875, expired=625, delayed=0, dead=0)


# rwq info ---------------------------------------------------------------------------------------


def _rwq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_rwq_info_shows_the_stats(real_backend: Backend) -> None:
    db = real_backend.client()
    queue = WorkQueue(KeyPrefix("info-a"), max_deliveries=1)
    _add(db, queue, 5)
    queue.add_item(db, Item(b"", id="later"), delay=60)
    leased = queue.lease_many(db, 30, 3, block=False)
    db.delete(queue.keys.lease(leased[0].id()))
    queue.release(db, leased[1])
    other = WorkQueue(KeyPrefix("info-b"))
    other.add_item(db, Item(b"", id="x"))
    expected = {
        "info-a": asdict(QueueStats(queued=2, leased=1, expired=1, delayed=1, dead=1)),
        "info-b": asdict(QueueStats(queued=1, leased=0, expired=0, delayed=0, dead=0)),
    }
    assert {n: asdict(WorkQueue(KeyPrefix(n)).stats(db)) for n in expected} == expected
    done = _rwq(real_backend.url, "info", "info-a", "info-b", "--json")
    assert done.returncode == 0, done.stderr
    server_fields = {"maxmemory_policy": "noeviction", "eviction_warning": None}
    assert json.loads(done.stdout) == {n: {**row, **server_fields} for n, row in expected.items()}
    done = _rwq(real_backend.url, "info", "info-a", "info-b")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = lines[0].split()
    assert header[0] == "queue"
    assert set(header[1:]) == {"queued", "leased", "expired", "delayed", "dead"}
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    for name, stats in expected.items():
        assert [int(v) for v in rows[name]] == [stats[c] for c in header[1:]]


# The model --------------------------------------------------------------------------------------

FAR = 10**6  # seconds: a delay that never falls due by itself during the test
MAX_DELIVERIES = 2


@dataclass
class Model:
    """What the queue should hold, written from the documented semantics."""

    max_deliveries: int
    data: dict[str, bytes] = field(default_factory=dict)
    queue: list[str] = field(default_factory=list)  # leasing order: [0] is next
    processing: list[str] = field(default_factory=list)  # oldest lease first
    leases: dict[str, str] = field(default_factory=dict)  # id -> token, or "delayed"
    deliveries: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    delayed: dict[str, int | None] = field(default_factory=dict)  # id -> due rank, None: far
    dead: dict[str, tuple[bytes, int, str]] = field(default_factory=dict)

    def forget(self, item_id: str) -> None:
        self.deliveries.pop(item_id, None)
        self.reasons.pop(item_id, None)

    def bury(self, item_id: str, reason: str | None) -> None:
        self.dead[item_id] = (self.data.pop(item_id), self.deliveries.get(item_id, 0), reason or "")
        self.leases.pop(item_id, None)
        self.forget(item_id)

    def add(self, item_id: str, data: bytes, delayed: bool) -> bool:
        if item_id in self.data:
            return False
        self.data[item_id] = data
        if delayed:
            self.delayed[item_id] = None
            self.leases[item_id] = "delayed"
        else:
            self.queue.append(item_id)
        return True

    def due(self) -> list[str]:
        ranked = [(rank, i) for i, rank in self.delayed.items() if rank is not None]
        return [i for _, i in sorted(ranked)]

    def promote(self, limit: int) -> None:
        front = []
        for item_id in self.due()[:limit]:
            del self.delayed[item_id]
            if self.leases.get(item_id) == "delayed":
                del self.leases[item_id]
                if item_id in self.data:
                    front.append(item_id)
        self.queue[:0] = front

    def lease(self, count: int) -> list[str]:
        """The ids handed out, in order; their tokens are filled in by ``leased``."""
        self.promote(100)
        out: list[str] = []
        while len(out) < count and self.queue:
            item_id = self.queue.pop(0)
            if item_id not in self.data:
                self.forget(item_id)
                continue
            if item_id in self.leases:
                continue  # a stray copy of a leased (or delayed) item
            n = self.deliveries.get(item_id, 0)
            if self.max_deliveries and n >= self.max_deliveries:
                self.bury(item_id, self.reasons.get(item_id))
                continue
            self.deliveries[item_id] = n + 1
            self.leases[item_id] = "?"
            self.processing.append(item_id)
            out.append(item_id)
        return out

    def complete(self, item_id: str) -> bool:
        existed = self.data.pop(item_id, None) is not None
        if item_id in self.processing:
            self.processing.remove(item_id)  # the oldest entry (LREM from the tail)
        self.leases.pop(item_id, None)
        self.delayed.pop(item_id, None)
        self.forget(item_id)
        return existed

    def release(self, item_id: str, token: str | None, delayed: bool, reason: str | None) -> bool:
        if self.leases.get(item_id) != token:
            return False
        del self.leases[item_id]
        self.processing.remove(item_id)
        if reason is not None:
            self.reasons[item_id] = reason
        n = self.deliveries.get(item_id, 0)
        if self.max_deliveries and n >= self.max_deliveries:
            self.bury(item_id, self.reasons.get(item_id))
        elif delayed:
            self.delayed[item_id] = None
            self.leases[item_id] = "delayed"
        else:
            self.queue.append(item_id)
        return True

    def light_clean(self) -> tuple[int, int, int, int]:
        examined = requeued = dropped = buried = 0
        for _ in range(len(self.processing)):
            item_id = self.processing.pop(0)
            examined += 1
            if item_id not in self.data:
                self.forget(item_id)
                dropped += 1
            elif item_id in self.leases:
                self.processing.append(item_id)
            else:
                n = self.deliveries.get(item_id, 0)
                if self.max_deliveries and n >= self.max_deliveries:
                    self.bury(item_id, "lease expired")
                    buried += 1
                else:
                    if n > 0:
                        self.reasons[item_id] = "lease expired"
                    self.queue.append(item_id)
                    requeued += 1
        return examined, requeued, dropped, buried

    def stats(self) -> QueueStats:
        live = sum(1 for i in self.processing if i in self.leases)
        return QueueStats(
            queued=len(self.queue),
            leased=live,
            expired=len(self.processing) - live,
            delayed=len(self.delayed),
            dead=len(self.dead),
        )


def _hash(db: redis.Redis, key: str) -> dict[str, str]:
    flat = raw(db, "HGETALL", key)
    pairs = flat.items() if isinstance(flat, dict) else zip(flat[0::2], flat[1::2], strict=True)
    return {k.decode(): v.decode() for k, v in pairs}


def check(db: redis.Redis, queue: WorkQueue, model: Model, step: int, what: str) -> None:
    where = f"step {step} ({what})"
    assert queue.stats(db) == model.stats(), where
    assert queue.peek(db, 0, 10_000) == [
        QueuedItem(p, i, model.data.get(i)) for p, i in enumerate(model.queue)
    ], where
    rows = queue.pending(db, 0, 10_000)
    assert [(r.id, r.deliveries, r.expired) for r in rows] == [
        (i, model.deliveries.get(i, 0), i not in model.leases) for i in model.processing
    ], where
    for row in rows:
        if not row.expired:
            assert row.lease_token == model.leases[row.id], where
    assert _hash(db, queue.keys.deliveries) == {k: str(v) for k, v in model.deliveries.items()}, (
        where
    )
    assert _hash(db, queue.keys.reasons) == model.reasons, where
    dead = {d.id: (d.data, d.deliveries, d.reason) for d in queue.dead_letters(db, 0, 10_000)}
    assert dead == model.dead, where


class Driver:
    """Applies one random operation to the queue and to the model, checking the results."""

    def __init__(self, db: redis.Redis, queue: WorkQueue, rng: random.Random) -> None:
        self.db = db
        self.queue = queue
        self.rng = rng
        self.model = Model(MAX_DELIVERIES)
        self.next_id = 0
        self.next_rank = 0
        self.held: dict[str, Item] = {}  # the latest Item leased per id
        self.stale: list[Item] = []  # items whose lease may have been lost since

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"id{self.next_id}"

    def some_id(self) -> str:
        """Mostly a new id; sometimes one in use, or one used before (completed or dead)."""
        roll = self.rng.random()
        if roll < 0.6 or self.next_id == 0:
            return self.fresh_id()
        return f"id{self.rng.randint(1, self.next_id)}"

    def _leased(self, ids: list[str], items: list[Item]) -> None:
        assert [i.id() for i in items] == ids
        for item in items:
            assert item.lease_token is not None
            assert item.deliveries == self.model.deliveries[item.id()]
            assert item.data() == self.model.data[item.id()]
            self.model.leases[item.id()] = item.lease_token
            if item.id() in self.held:
                self.stale.append(self.held[item.id()])
            self.held[item.id()] = item

    def _held_item(self) -> Item | None:
        """Mostly an item whose lease is still held; sometimes one whose lease was lost."""
        holding = sorted(
            i for i, item in self.held.items() if self.model.leases.get(i) == item.lease_token
        )
        if holding and self.rng.random() < 0.75:
            return self.held[self.rng.choice(holding)]
        if self.stale and self.rng.random() < 0.3:
            return self.rng.choice(self.stale)
        if not self.held:
            return None
        return self.held[self.rng.choice(sorted(self.held))]

    # operations -------------------------------------------------------------------------------

    def add_item(self) -> str:
        item_id = self.some_id()
        data = f"data-{self.rng.randint(0, 99)}".encode()
        got = self.queue.add_item(self.db, Item(data, id=item_id))
        assert got == self.model.add(item_id, data, False)
        return f"add_item {item_id} -> {got}"

    def add_items(self) -> str:
        ids = [self.some_id() for _ in range(self.rng.randint(1, 6))]
        if self.rng.random() < 0.3:
            ids.append(self.rng.choice(ids))  # a duplicate within the batch
        items = [Item(f"b-{i}".encode(), id=i) for i in ids]
        got = self.queue.add_items(self.db, items)
        assert got == [self.model.add(i, f"b-{i}".encode(), False) for i in ids]
        return f"add_items {ids} -> {got}"

    def add_delayed(self) -> str:
        ids = [self.some_id() for _ in range(self.rng.randint(1, 3))]
        items = [Item(f"later-{i}".encode(), id=i) for i in ids]
        got = self.queue.add_items(self.db, items, delay=FAR)
        assert got == [self.model.add(i, f"later-{i}".encode(), True) for i in ids]
        return f"add delayed {ids} -> {got}"

    def fall_due(self) -> str:
        waiting = [i for i, rank in self.model.delayed.items() if rank is None]
        if not waiting:
            return "fall_due: none"
        item_id = self.rng.choice(sorted(waiting))
        self.next_rank += 1
        # the due time passes: its score becomes a time long gone
        assert raw(self.db, "ZADD", self.queue.keys.delayed, "XX", "CH", self.next_rank, item_id)
        self.model.delayed[item_id] = self.next_rank
        return f"fall_due {item_id}"

    def lease(self) -> str:
        expected = self.model.lease(1)
        item = self.queue.lease(self.db, 60, block=False)
        self._leased(expected, [item] if item else [])
        return f"lease -> {expected}"

    def lease_many(self) -> str:
        count = self.rng.randint(1, 5)
        expected = self.model.lease(count)
        self._leased(expected, self.queue.lease_many(self.db, 60, count, block=False))
        return f"lease_many {count} -> {expected}"

    def complete(self) -> str:
        item = self._held_item()
        target = item if item is not None and self.rng.random() < 0.8 else None
        if target is None:
            target = Item(b"", id=self.some_id())
        got = self.queue.complete(self.db, target)
        assert got == self.model.complete(target.id())
        return f"complete {target.id()} -> {got}"

    def complete_many(self) -> str:
        targets = [self._held_item() or Item(b"", id=self.some_id()) for _ in range(3)]
        targets.append(Item(b"", id=self.some_id()))
        done = self.queue.complete_many(self.db, targets)
        expected = [t for t in targets if self.model.complete(t.id())]
        assert done == expected
        return f"complete_many {[t.id() for t in targets]} -> {[d.id() for d in done]}"

    def release(self) -> str:
        item = self._held_item()
        if item is None:
            return "release: nothing held"
        delayed = self.rng.random() < 0.3
        reason = self.rng.choice([None, "boom", "retry later"])
        got = self.queue.release(self.db, item, delay=FAR if delayed else 0, reason=reason)
        assert got == self.model.release(item.id(), item.lease_token, delayed, reason)
        return f"release {item.id()} delayed={delayed} reason={reason!r} -> {got}"

    def expire_lease(self) -> str:
        live = [i for i in self.model.processing if i in self.model.leases]
        if not live:
            return "expire: none leased"
        item_id = self.rng.choice(live)
        key = self.queue.keys.lease(item_id)
        if self.rng.random() < 0.5:
            assert raw(self.db, "DEL", key) == 1
        else:
            assert raw(self.db, "PEXPIRE", key, 1) == 1
            wait_for(lambda: not raw(self.db, "EXISTS", key), timeout=5, what="lease expiry")
        del self.model.leases[item_id]
        return f"expire lease of {item_id}"

    def light_clean(self) -> str:
        due = len(self.model.due())
        budget = max(len(self.model.processing), 1)
        report = self.queue.light_clean(self.db)
        # Due items are promoted first: at least as many as the clean's first step may examine
        # (all of them, at best); the soonest due first.
        promoted = len(self.model.delayed) - self.queue.stats(self.db).delayed
        assert min(due, budget) <= promoted <= due
        self.model.promote(promoted)
        expected = self.model.light_clean()
        assert (report.examined, report.requeued, report.dropped, report.dead) == expected
        return f"light_clean -> {report}"

    def step(self) -> str:
        operations = [
            (self.add_item, 12),
            (self.add_items, 6),
            (self.add_delayed, 4),
            (self.fall_due, 5),
            (self.lease, 14),
            (self.lease_many, 6),
            (self.complete, 8),
            (self.complete_many, 3),
            (self.release, 10),
            (self.expire_lease, 6),
            (self.light_clean, 5),
        ]
        chosen = self.rng.choices([op for op, _ in operations], [w for _, w in operations])[0]
        return chosen()


def run_model(db: redis.Redis, seed: int) -> None:
    queue = WorkQueue(QUEUE, max_deliveries=MAX_DELIVERIES)
    driver = Driver(db, queue, random.Random(seed))
    history: list[str] = []
    for step in range(300):
        history.append(driver.step())
        check(db, queue, driver.model, step, " / ".join(history[-3:]))
        # a page of peek, from either end
        length = len(driver.model.queue)
        start = driver.rng.randint(-length, length) if length else 0
        count = driver.rng.randint(1, 4)
        page = queue.peek(db, start, count)
        assert [(p.position, p.id) for p in page] == expected_page(
            driver.model.queue, start, count
        ), (step, start, count)
    # the run did go through every state
    kinds = {h.split(" ")[0] for h in history}
    assert {"add_item", "lease", "release", "light_clean", "expire"} <= kinds
    assert driver.model.dead, "no item was dead-lettered"


def test_random_operations_agree_with_the_model(db: redis.Redis) -> None:
    run_model(db, 2024)


@pytest.mark.parametrize("seed", [7, 99])
def test_random_operations_agree_with_the_model_more_seeds(
    bytes_db: redis.Redis, seed: int
) -> None:
    run_model(bytes_db, seed)
