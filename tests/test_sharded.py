"""A queue spread over shards, on one server: naming, dedup, the whole API on the logical queue,
changing the shard count, leasing without hot spots, and blocking wake-ups.

The queue suites of ``test_add``, ``test_lease``, ``test_complete``, ``test_delayed``,
``test_expiry``, ``test_counts`` and ``test_inspection`` also run on a sharded queue
(``QUEUE_SHARDS``); this module covers what is particular to shards.
"""

from __future__ import annotations

import bisect
import contextvars
import itertools
import json
import statistics
import threading
import time
from collections import Counter
from typing import Any

import pytest
import redis

from helpers import script_calls
from plugins.backends import Backend
from redis_work_queue import (
    InvalidArgumentError,
    Item,
    KeyPrefix,
    ShardStats,
    WorkQueue,
    complete_and_lease_from,
    lease_from,
    metrics,
    transport,
)
from redis_work_queue.calls import Pipelined
from redis_work_queue.ops.sharded import (
    SLOTS,
    STICK,
    key_slot,
    shard_index,
    shard_prefix,
    shard_tags,
    slot_range_start,
)
from test_cli_ops import rwq

QUEUE = KeyPrefix("jobs")
QUEUE_OPTIONS = {"shards": 4, "max_deliveries": 1}


def keys_of(db: redis.Redis) -> set[str]:
    return {k.decode() if isinstance(k, bytes) else k for k in db.keys("*")}


def items(n: int, start: str = "i") -> list[Item]:
    return [Item(f"d{i}".encode(), id=f"{start}{i}") for i in range(n)]


def prefix(index: int, shards: int) -> str:
    """The key prefix of shard ``index`` of ``jobs`` on ``shards`` shards."""
    return shard_prefix("jobs", index, shards)


def test_shard_naming_and_stable_hash(db: redis.Redis, queue: WorkQueue) -> None:
    """Shard i of ``jobs`` is ``{jobs:i}`` or ``{jobs:i.k}`` (the tag's slot in the i-th of N
    ranges); an id lives on crc32(id) mod N, whoever adds it."""
    assert shard_prefix("jobs", 3, 4) == "{jobs:3}"
    assert shard_prefix("jobs", 3, 12) == "{jobs:3.41}"
    assert shard_prefix("jobs", 0, 1) == "jobs"
    queue.add_items(db, items(40))
    for item in items(40):
        assert db.exists(f"{prefix(shard_index(item.id(), 4), 4)}:item:{item.id()}")
    assert {k.split("}", 1)[0] + "}" for k in keys_of(db)} <= {prefix(i, 4) for i in range(4)}
    assert all(k.startswith("{jobs:") for k in keys_of(db))
    other = WorkQueue(QUEUE, shards=4)
    assert other.add_item(db, Item(b"again", id="i7")) is False  # dedup holds across clients


def primaries_of(tags: tuple[str, ...], primaries: int) -> Counter[int]:
    """How many of ``tags`` fall on each of ``primaries`` owning equal ranges of the slots, as
    ``redis-cli --cluster create`` splits them."""
    starts = [slot_range_start(p, primaries) for p in range(primaries)]
    return Counter(bisect.bisect_right(starts, key_slot(tag)) - 1 for tag in tags)


@pytest.mark.parametrize("name", ["jobs", "emails", "q", "rsh", "a:b"])
def test_shard_tags_spread_evenly_over_the_slots(name: str) -> None:
    """Shard i's tag lies in the i-th of N equal ranges of the slots, so primaries that own
    equal ranges hold N/P shards each (one more or less where P does not divide N). The plain
    names ``name:i`` would not: ``jobs:0`` to ``jobs:11`` fall 0, 4, 4, 0, 2, 2 on six."""
    assert key_slot("123456789") == 0x31C3 % SLOTS  # CRC-16/XMODEM's check value
    plain = tuple(f"jobs:{i}" for i in range(12))
    assert sorted(primaries_of(plain, 6).values()) == [2, 2, 4, 4]
    for shards in (2, 3, 5, 8, 12, 16, 24, 100, 400, 1024):
        tags = shard_tags(name, shards)
        assert len(set(tags)) == shards
        for index, tag in enumerate(tags):
            assert tag == f"{name}:{index}" or tag.startswith(f"{name}:{index}.")
            low, high = slot_range_start(index, shards), slot_range_start(index + 1, shards)
            assert low <= key_slot(tag) < high
        for primaries in (1, 2, 3, 4, 6, 10, 100):
            if primaries > shards:
                continue
            per = primaries_of(tags, primaries)
            if shards % primaries == 0:
                assert set(per.values()) == {shards // primaries}, (shards, primaries, per)
            else:
                assert max(per.values()) <= shards // primaries + 2, (shards, primaries, per)


def test_one_shard_writes_todays_keys(db: redis.Redis) -> None:
    """``shards=1`` (the default) is today's queue, key for key."""
    plain, one = WorkQueue(KeyPrefix("a")), WorkQueue(KeyPrefix("b"), shards=1)
    for q in (plain, one):
        q.add_item(db, Item(b"x", id="x"))
    assert {k.replace("b:", "a:", 1) for k in keys_of(db) if k.startswith("b:")} == {
        k for k in keys_of(db) if k.startswith("a:")
    }
    assert one.shards == 1 and type(one.ops) is type(plain.ops)


def test_every_shard_is_a_reference_layout_queue(db: redis.Redis, queue: WorkQueue) -> None:
    """A queue of one shard's prefix works that shard: it is an ordinary queue."""
    queue.add_items(db, items(20))
    shard = shard_index("i5", 4)
    alone = WorkQueue(KeyPrefix(prefix(shard, 4)))
    on_shard = {i.id() for i in items(20) if shard_index(i.id(), 4) == shard}
    leased = alone.lease_many(db, 30, 50, block=False)
    assert {i.id() for i in leased} == on_shard
    assert all(alone.complete(db, i) for i in leased)
    assert queue.stats(db).queued == 20 - len(on_shard)


def test_bad_shard_options_are_refused() -> None:
    for bad in (0, -1, 1.5, "4", 5000):
        with pytest.raises(InvalidArgumentError, match="shards"):
            WorkQueue(QUEUE, shards=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="brace"):
        WorkQueue(KeyPrefix("{jobs}"), shards=4)
    with pytest.raises(InvalidArgumentError, match="shards_before"):
        WorkQueue(QUEUE, shards=4, shards_before=(0,))


def test_add_items_sends_one_call_per_shard_together(bytes_db: redis.Redis) -> None:
    """A batch is grouped by shard: one add call per shard, all in one round trip (which a
    cluster client sends as one pipeline per node)."""
    queue = WorkQueue(QUEUE, shards=8)
    steps = queue.ops.add(items(100), skip_check=False)
    sent = next(steps)
    assert isinstance(sent, Pipelined) and len(sent.calls) == 8
    assert {c.keys[0] for c in sent.calls} == {f"{prefix(i, 8)}:queue" for i in range(8)}
    steps.close()
    assert queue.add_items(bytes_db, items(100)) == [True] * 100
    assert queue.add_items(bytes_db, [*items(5), Item(b"n", id="new")]) == [False] * 5 + [True]


def test_whole_api_on_the_logical_queue(db: redis.Redis, queue: WorkQueue) -> None:
    """Stats and counts summed; peek, pending, dead letters merged; cleans over every shard."""
    queue.add_items(db, items(12))
    assert queue.queue_len(db) == 12
    assert sorted(q.id for q in queue.peek(db, 0, 100)) == sorted(i.id() for i in items(12))
    assert [q.position for q in queue.peek(db, 2, 3)] == [2, 3, 4]
    assert len(queue.peek(db, -3, 3)) == 3
    leased = queue.lease_many(db, 30, 5, block=False)
    assert len(leased) == 5 and queue.processing(db) == 5
    assert sorted(p.id for p in queue.pending(db, 0, 100)) == sorted(i.id() for i in leased)
    assert queue.renew_many(db, leased, 60) == [True] * 5
    assert queue.release(db, leased[0], reason="boom")  # its last delivery: buried
    assert queue.give_back(db, leased[1:2]) == [True]
    assert queue.complete_many(db, leased[2:]) == leased[2:]
    stats = queue.stats(db)
    assert (stats.queued, stats.leased, stats.dead) == (8, 0, 1)
    assert queue.dead_count(db) == 1
    dead = queue.dead_letters(db)
    assert [(d.id, d.reason) for d in dead] == [(leased[0].id(), "boom")]
    assert queue.item_data(db, leased[0].id(), dead=True) == leased[0].data()
    assert queue.requeue_dead(db) == 1 and queue.stats(db).queued == 9
    counts = queue.counts(db)
    assert (counts.added, counts.completed, counts.dead, counts.requeued) == (12, 3, 1, 1)
    rows = queue.shard_stats(db)
    assert [r.prefix for r in rows] == [prefix(i, 4) for i in range(4)]
    assert all(isinstance(r, ShardStats) for r in rows)
    assert sum(r.stats.queued for r in rows) == 9 and sum(r.counts.added for r in rows) == 12
    assert queue.light_clean(db).examined >= 0
    assert queue.deep_clean(db).examined == 9
    taken = queue.lease_many(db, 0.05, 9, block=False)
    assert len(taken) == 9
    time.sleep(0.1)
    assert queue.light_clean(db).dead == 9  # expired on their last delivery
    assert queue.purge_dead(db, [taken[0].id()]) == 1 and queue.dead_count(db) == 8
    assert queue.purge_dead(db) == 8
    report = queue.flush(db)
    assert report.keys > 0 and keys_of(db) == set()


def test_metrics_are_merged(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, items(10))
    queue.lease_many(db, 30, 3, block=False)
    (found,) = metrics.read(db, [queue])
    assert found.queue == "jobs"
    assert (found.stats.queued, found.stats.leased, found.counts.added) == (7, 3, 10)


def test_metrics_export_a_per_shard_view(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, items(10))
    text = metrics.render(db, [queue])
    found = {
        line[len("rwq_shard_items{") : line.rindex("}")]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("rwq_shard_items{")
    }
    queued = {k: v for k, v in found.items() if 'state="queued"' in k}
    assert len(queued) == 4 and sum(queued.values()) == 10
    assert 'queue="jobs",shard="{jobs:0}",state="queued"' in queued
    assert 'rwq_queued{queue="jobs"} 10' in text
    plain = WorkQueue(KeyPrefix("plain"))
    plain.add_item(db, Item(b"x"))
    assert "rwq_shard_items" not in metrics.render(db, [plain])


def test_unsharded_queue_has_one_shard_row(db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("plain"))
    queue.add_item(db, Item(b"x"))
    (row,) = queue.shard_stats(db)
    assert (row.index, row.prefix, row.stats.queued, row.counts.added) == (0, "plain", 1, 1)


def test_workers_start_on_shards_of_their_own(bytes_db: redis.Redis) -> None:
    """Each worker (thread) starts at its own shard: they spread over the shards."""
    queue = WorkQueue(QUEUE, shards=8)
    queue.add_items(bytes_db, items(400))
    firsts: list[str] = []

    def worker() -> None:
        item = queue.lease(bytes_db, 30, block=False)
        assert item is not None
        firsts.append(prefix(shard_index(item.id(), 8), 8))

    threads = [threading.Thread(target=worker) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(firsts)) >= 4


def test_a_worker_moves_on_after_a_run_on_one_shard(bytes_db: redis.Redis) -> None:
    """A lone worker takes at most STICK items in a row from one shard: no shard starves."""
    queue = WorkQueue(QUEUE, shards=4)
    queue.add_items(bytes_db, items(400))
    shards = []
    for _ in range(4 * STICK):
        item = queue.lease(bytes_db, 30, block=False)
        assert item is not None
        shards.append(shard_index(item.id(), 4))
    assert Counter(shards) == {0: STICK, 1: STICK, 2: STICK, 3: STICK}


def test_lease_from_priority_with_sharded_queues(db: redis.Redis) -> None:
    high, low = WorkQueue(KeyPrefix("high"), shards=3), WorkQueue(KeyPrefix("low"))
    low.add_item(db, Item(b"l", id="l"))
    high.add_items(db, items(2, "h"))
    got = [lease_from(db, [high, low], 30, block=False) for _ in range(3)]
    assert [(q.name.prefix, i.id()[0]) for q, i in got if i] == [
        ("high", "h"),
        ("high", "h"),
        ("low", "l"),
    ]
    assert lease_from(db, [high, low], 30, block=False) is None
    _, item = got[0]
    high.add_items(db, items(3, "n"))
    done, nxt = complete_and_lease_from(db, high, item, [high, low], 30)
    assert done is True and nxt is not None and nxt[0] is high
    assert high.complete(db, item) is False


def test_complete_and_lease_is_one_call_per_job_on_one_server(
    real_db: redis.Redis, redis_url: str
) -> None:
    """The runner's complete-and-lease stays one script call per job on one server, also when
    the worker moves on to the next shard (every STICK jobs): it completes on the item's shard
    and leases from the next in the same call. Every item is leased once, each shard's run in
    order."""
    queue = WorkQueue(QUEUE, shards=4)
    queue.add_items(real_db, items(400))
    stats = redis.Redis.from_url(redis_url, decode_responses=True)
    item = queue.lease(real_db, 30, block=False)
    assert item is not None
    stats.config_resetstat()
    seen = [item.id()]
    for _ in range(150):
        done, found = complete_and_lease_from(real_db, queue, item, [queue], 30)
        assert done is True and found is not None
        item = found[1]
        seen.append(item.id())
    assert script_calls(stats) == 150
    assert len(set(seen)) == 151
    shards = [shard_index(i, 4) for i in seen]
    runs = [len(list(group)) for _, group in itertools.groupby(shards)]
    assert max(runs) <= STICK and len(runs) >= 151 // STICK, runs


def test_changing_the_shard_count(db: redis.Redis) -> None:
    """Adds follow the new count; old shards are leased and counted until empty; dedup holds
    for ids that exist on their shard under the earlier count."""
    old = WorkQueue(QUEUE, shards=2)
    old.add_items(db, items(30))
    new = WorkQueue(QUEUE, shards=5, shards_before=2)
    assert new.stats(db).queued == 30
    assert new.add_items(db, items(30)) == [False] * 30
    assert new.add_item(db, Item(b"x", id="i3")) is False
    assert new.add_items(db, items(10, "n")) == [True] * 10
    for item in items(10, "n"):
        assert db.exists(f"{prefix(shard_index(item.id(), 5), 5)}:item:{item.id()}")
    leased = new.lease_many(db, 30, 100, block=False)
    assert len(leased) == 40
    assert new.complete_many(db, leased) == leased
    assert new.stats(db) == new.stats(db).__class__(0, 0, 0, 0, 0)
    assert new.counts(db).completed == 40


def test_growing_from_an_unsharded_queue(db: redis.Redis) -> None:
    """From one queue to shards: the unsharded queue's items are still leased."""
    WorkQueue(QUEUE).add_items(db, items(5))
    grown = WorkQueue(QUEUE, shards=3, shards_before=1)
    assert grown.add_item(db, Item(b"", id="i2")) is False
    assert grown.queue_len(db) == 5
    got = grown.lease_many(db, 30, 10, block=False)
    assert sorted(i.id() for i in got) == sorted(i.id() for i in items(5))
    assert all(grown.complete(db, i) for i in got)


def test_blocking_lease_wakes_for_any_shard(real_backend: Backend) -> None:
    """On one server a blocked worker waits on every shard at once: an item added to any shard
    wakes it within milliseconds (median and p99 measured)."""
    queue = WorkQueue(QUEUE, shards=8)
    producer = real_backend.client()
    latencies: list[float] = []
    for n in range(30):
        got: dict[str, Any] = {}

        def worker(got: dict[str, Any] = got) -> None:
            item = queue.lease(real_backend.client(), 30, timeout=5)
            got["at"] = time.monotonic()
            got["item"] = item

        thread = threading.Thread(target=worker)
        thread.start()
        time.sleep(0.03)
        added = time.monotonic()
        queue.add_item(producer, Item(b"w", id=f"w{n}"))
        thread.join(6)
        assert got["item"] is not None and got["item"].id() == f"w{n}"
        latencies.append(got["at"] - added)
    p99 = sorted(latencies)[int(len(latencies) * 0.99) - 1]
    assert statistics.median(latencies) < 0.05 and p99 < 0.2, latencies


def test_order_across_shards_is_fifo_within_a_bound(bytes_db: redis.Redis) -> None:
    """How far out of order items are leased: for each lease, how many items added before it
    are still waiting. FIFO within each shard; across shards, runs of at most STICK per worker
    keep it within shards x STICK for one worker and a small multiple of it for several,
    depending on where their runs start (measured: 1 and 4 workers taking turns on 1600 items
    over 8 shards)."""
    shards, total = 8, 1600
    for workers in (1, 4):
        bytes_db.flushall()
        queue = WorkQueue(QUEUE, shards=shards)
        queue.add_items(bytes_db, [Item(b"", id=f"{n:06d}") for n in range(total)])
        contexts = [contextvars.copy_context() for _ in range(workers)]
        waiting = set(range(total))
        skews = []
        per_shard: dict[int, list[int]] = {}
        for turn in range(total):
            item = contexts[turn % workers].run(queue.lease, bytes_db, 30, False)
            assert item is not None
            n = int(item.id())
            skews.append(sum(1 for w in waiting if w < n))
            waiting.discard(n)
            per_shard.setdefault(shard_index(item.id(), shards), []).append(n)
        assert all(seq == sorted(seq) for seq in per_shard.values())  # FIFO per shard
        skews.sort()
        worst, p99 = skews[-1], skews[int(len(skews) * 0.99)]
        print(f"\n{workers} worker(s), {shards} shards: items added before a leased one and "
              f"still waiting: max {worst}, p99 {p99}")  # fmt: skip
        assert worst <= shards * STICK * (1 if workers == 1 else 3), worst


def test_rwq_works_on_a_sharded_queue(real_db: redis.Redis, redis_url: str) -> None:
    """``rwq --shards N`` sees the logical queue: info sums the shards, cleans reach each."""
    queue = WorkQueue(QUEUE, shards=4)
    queue.add_items(real_db, items(10))
    queue.lease_many(real_db, 0.01, 3, block=False)
    time.sleep(0.05)
    out = rwq("--url", redis_url, "--shards", "4", "--json", "info", "jobs")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["jobs"]["queued"] == 7
    assert "no keys" not in out.stderr  # the home shard's keys are found
    out = rwq("--url", redis_url, "--shards", "4", "--json", "light-clean", "jobs")
    assert out.returncode == 0, out.stderr
    assert queue.stats(real_db).queued == 10
    missing = rwq("--url", redis_url, "info", "jobs")  # the unsharded queue: no keys
    assert "check its name, and --shards for a sharded queue" in missing.stderr


def test_light_clean_steps_of_every_shard_go_together(
    bytes_db: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A light clean runs the shards side by side: each round's script calls are sent as one
    pipeline (one round trip; one per node on a cluster)."""
    queue = WorkQueue(QUEUE, shards=4)
    queue.add_items(bytes_db, items(40))
    queue.lease_many(bytes_db, 0.01, 40, block=False)
    time.sleep(0.05)
    sent: list[Any] = []
    real = transport.execute

    def recording(db: Any, call: Any) -> Any:
        sent.append(call)
        return real(db, call)

    monkeypatch.setattr(transport, "execute", recording)
    report = queue.light_clean(bytes_db)
    assert report.requeued == 40 and queue.stats(bytes_db).queued == 40
    batches = [c for c in sent if isinstance(c, Pipelined)]
    assert batches and all(len(b.calls) == 4 for b in batches)
    assert {c.script.name for c in batches[0].calls} == {"light_clean"}


def test_deep_clean_finds_lost_items_on_every_shard(db: redis.Redis) -> None:
    """Items lost from both lists on several shards are found by one deep clean."""
    queue = WorkQueue(QUEUE, shards=4)
    lost = items(12, "lost")
    for item in lost:
        db.set(f"{prefix(shard_index(item.id(), 4), 4)}:item:{item.id()}", item.data())
    queue.add_items(db, items(8))
    seen: list[Any] = []
    report = queue.deep_clean(db, seen.append)
    assert (report.examined, report.requeued) == (20, 12)
    assert queue.stats(db).queued == 20
    assert seen and seen[-1].phase == "done"
    assert queue.deep_clean(db).requeued == 0


def test_job_control_finds_each_id_on_its_shard(db: redis.Redis, queue: WorkQueue) -> None:
    """state, states, cancel, promote, retry and reschedule act on the id's own shard."""
    batch = items(12)
    queue.add_items(db, batch)
    queue.add_item(db, Item(b"later", id="later"), delay=60)
    ids = [i.id() for i in batch]
    assert {queue.state(db, i).state for i in ids} == {"queued"}
    assert [s.state for s in queue.states(db, [*ids[:3], "later", "nothing"])] == [
        *["queued"] * 3,
        "delayed",
        "gone",
    ]
    assert queue.cancel(db, ids[0]) and queue.state(db, ids[0]).state == "gone"
    assert queue.reschedule(db, "later", 120)
    assert queue.promote(db, "later") and queue.state(db, "later").state == "queued"
    leased = queue.lease(db, 30, block=False)
    assert leased is not None and queue.state(db, leased.id()).state == "leased"
    assert queue.release(db, leased, reason="boom")  # max_deliveries=1: buried
    assert queue.state(db, leased.id()).state == "dead"
    assert queue.retry(db, leased.id()) and queue.state(db, leased.id()).state == "queued"
    shards = {shard_index(i, 4) for i in ids}
    assert len(shards) > 1  # the ids are spread, so the calls above met several shards


def test_a_rate_limit_is_refused_on_a_sharded_queue() -> None:
    """Each shard would keep its own bucket: refused before anything is written."""
    from redis_work_queue import RateLimit  # noqa: PLC0415

    with pytest.raises(InvalidArgumentError, match="sharded"):
        WorkQueue(KeyPrefix("limited"), shards=2, rate_limit=RateLimit(10, 1))


def test_a_completion_keeps_its_result_on_its_shard(db: redis.Redis) -> None:
    """``keep_results`` on a sharded queue: the result is kept on the item's shard."""
    queue = WorkQueue(QUEUE, shards=4, keep_results=60)
    queue.add_items(db, items(8))
    leased = queue.lease_many(db, 30, 8, block=False)
    assert len(leased) == 8
    for item in leased:
        assert queue.complete(db, item, result=f"r-{item.id()}".encode())
    assert {queue.result(db, i.id(), timeout=0) for i in leased} == {
        f"r-{i.id()}".encode() for i in leased
    }
