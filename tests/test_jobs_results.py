"""Results and progress: ``WorkQueue(..., keep_results=s)`` keeps what ``complete(...,
result=...)`` (or a runner's handler) gives, in the completing script call, for ``state`` and
``result``, which waits with a blocking read (no polling); ``report_progress`` keeps a leased
item's progress while its lease lasts. On both APIs and every backend, a Redis Cluster with a
``{tag}`` prefix, and the thread, process and asyncio runners."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

import jobs_handlers
from checks import PREFIX, OomCheck, State, WriteCheck, oom_test, write_check_test
from helpers import dump_state, keys_of
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    ItemDeadError,
    KeyPrefix,
    ResultTimeoutError,
    Worker,
    WorkQueue,
)
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.ops import jobs
from redis_work_queue.runner import report_progress
from servers import Proc
from test_runner import KINDS, QUICK

QUEUE = KeyPrefix("jr")
QUEUE_SHARDS = (1, 4)
#: Tests that read this queue's keys or its order across all items: unsharded only.
SHARDS_SKIP = {
    "test_result_wakes_as_the_item_dies",
    "test_str_and_no_result",
}
QUEUE_OPTIONS = {"keep_results": 60, "max_deliveries": 1}
KEYS = QueueKeys(QUEUE)


def lease(db: redis.Redis, queue: WorkQueue, secs: float = 30) -> Item:
    item = queue.lease(db, secs, block=False)
    assert item is not None
    return item


# Results ----------------------------------------------------------------------------------------


def test_a_completed_item_keeps_its_result(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    item = lease(db, queue)
    assert queue.complete(db, item, result=b"\x00answer\xff") is True
    found = queue.state(db, "a")
    assert (found.state, found.result) == ("completed", b"\x00answer\xff")
    assert queue.result(db, "a", timeout=0) == b"\x00answer\xff"
    assert 59_000 < db.pttl(keys_of(queue, "a").result("a")) <= 60_000
    assert db.exists(keys_of(queue, "a").item("a"), keys_of(queue, "a").lease("a")) == 0
    assert queue.complete(db, item, result=b"again") is False  # nothing kept
    assert queue.result(db, "a", timeout=0) == b"\x00answer\xff"


def test_str_and_no_result(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_items(db, [Item(b"s", id="s"), Item(b"n", id="n")])
    assert queue.complete(db, lease(db, queue), result="é") is True
    assert queue.complete(db, lease(db, queue)) is True
    assert queue.result(db, "s", timeout=0) == "é".encode()
    assert queue.result(db, "n", timeout=0) == b""
    assert queue.state(db, "n").state == "completed"


def test_result_waits_for_the_completion(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"w", id="w"))
    item = lease(db, queue)
    got: list[Any] = []
    waiters = [threading.Thread(target=lambda: got.append(queue.result(db, "w", 10))) for _ in "ab"]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    assert got == []
    begun = time.monotonic()
    queue.complete(db, item, result=b"r")
    for waiter in waiters:
        waiter.join(timeout=10)
    assert got == [b"r", b"r"]
    assert time.monotonic() - begun < 1.0  # woken by the completion, not by a poll
    assert db.lrange(keys_of(queue, "w").result("w"), 0, -1) in (
        [b"cr"],
        ["cr"],
    )  # the wait kept the entry


def test_result_of_a_dead_item_raises(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"d", id="d"))
    queue.release(db, lease(db, queue), reason="broken")
    with pytest.raises(ItemDeadError, match="broken") as raised:
        queue.result(db, "d", timeout=5)
    assert (raised.value.item_id, raised.value.reason) == ("d", "broken")


def test_result_wakes_as_the_item_dies(
    db: redis.Redis, queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dead-lettering script writes a failure record to the key the waiters block on: they
    wake as the item dies (a release, or a light clean of a lease run out), not at the end of a
    slice; a retry drops the record, and the next wait gets the new try's result."""
    monkeypatch.setattr(jobs, "RESULT_SLICE_SECS", 60.0)
    queue.add_items(db, [Item(b"r", id="r"), Item(b"x", id="x")])
    outcomes: dict[str, list[Any]] = {"r": [], "x": []}

    def wait(item_id: str) -> None:
        try:
            outcomes[item_id].append(queue.result(db, item_id, 30))
        except ItemDeadError as err:
            outcomes[item_id].append(err)

    waiters = [threading.Thread(target=wait, args=(i,), daemon=True) for i in "rrx"]
    for waiter in waiters:
        waiter.start()
    time.sleep(0.3)
    r = lease(db, queue)
    lease(db, queue, secs=0.05)  # x
    begun = time.monotonic()
    assert queue.release(db, r, reason="broken") is True
    time.sleep(0.1)  # x's lease runs out: the light clean buries it
    queue.light_clean(db)
    for waiter in waiters:
        waiter.join(timeout=10)
    assert time.monotonic() - begun < 2  # woken by the deaths, not at the end of a slice
    assert [(e.item_id, e.reason) for e in outcomes["r"]] == [("r", "broken")] * 2
    assert [(e.item_id, e.reason) for e in outcomes["x"]] == [("x", "lease expired")]
    assert db.lrange(keys_of(queue, "r").result("r"), 0, -1) in ([b"dbroken"], ["dbroken"])
    assert 0 < db.pttl(keys_of(queue, "r").result("r")) <= 60_000
    assert queue.state(db, "r").state == "dead"
    # A retry drops the record: a wait waits for the new try.
    assert queue.retry(db, "r") is True
    assert db.exists(keys_of(queue, "r").result("r")) == 0
    with pytest.raises(ResultTimeoutError, match="queued"):
        queue.result(db, "r", timeout=0.2)
    assert queue.complete(db, lease(db, queue), result=b"fixed") is True
    assert queue.result(db, "r", timeout=5) == b"fixed"


def test_a_sharded_queue_s_waiter_wakes_as_the_item_dies(
    db: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(jobs, "RESULT_SLICE_SECS", 60.0)
    queue = WorkQueue(KeyPrefix("jrs"), shards=3, keep_results=60, max_deliveries=1)
    queue.add_item(db, Item(b"s", id="s"))
    got: list[Any] = []

    def wait() -> None:
        try:
            got.append(queue.result(db, "s", 30))
        except ItemDeadError as err:
            got.append(err)

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    time.sleep(0.3)
    begun = time.monotonic()
    assert queue.release(db, lease(db, queue), reason="shard broke") is True
    waiter.join(timeout=10)
    assert time.monotonic() - begun < 2
    assert [(e.item_id, e.reason) for e in got] == [("s", "shard broke")]


def test_an_id_added_again_after_its_death_is_waited_for(db: redis.Redis, queue: WorkQueue) -> None:
    """The failure record of an earlier death does not end a wait on the id added again (its
    dead letter still there): the wait reads the state until its timeout."""
    queue.add_item(db, Item(b"1", id="again"))
    queue.release(db, lease(db, queue), reason="first try")
    assert db.lindex(keys_of(queue, "again").result("again"), 0) in (b"dfirst try", "dfirst try")
    assert queue.add_item(db, Item(b"2", id="again"))
    assert queue.state(db, "again").state == "queued"
    begun = time.monotonic()
    with pytest.raises(ResultTimeoutError, match="queued"):
        queue.result(db, "again", timeout=1.2)
    assert time.monotonic() - begun >= 1.2


def test_a_queue_without_results_keeps_no_failure_record(db: redis.Redis) -> None:
    plain = WorkQueue(KeyPrefix("nr"), max_deliveries=1)
    plain.add_item(db, Item(b"d", id="d"))
    plain.release(db, lease(db, plain), reason="no")
    assert plain.state(db, "d").state == "dead"
    assert db.exists("nr:result:d") == 0


def test_result_times_out(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"q", id="q"))
    begun = time.monotonic()
    with pytest.raises(ResultTimeoutError, match="queued") as raised:
        queue.result(db, "q", timeout=0.3)
    assert 0.25 < time.monotonic() - begun < 3
    assert raised.value.state == "queued" and isinstance(raised.value, TimeoutError)
    with pytest.raises(ResultTimeoutError, match="keep_results"):
        queue.result(db, "never", timeout=0)


def test_a_queue_without_results_keeps_none(db: redis.Redis) -> None:
    plain = WorkQueue(QUEUE)
    plain.add_item(db, Item(b"p", id="p"))
    item = lease(db, plain)
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match="keep_results"):
        plain.complete(db, item, result=b"x")
    assert dump_state(db) == before
    assert plain.complete(db, item) is True
    assert db.keys(f"{QUEUE.prefix}:result:*") == []
    assert plain.state(db, "p").state == "gone"


@pytest.mark.parametrize("bad", [0, -1, "60", True, float("nan"), float("inf")])
def test_keep_results_must_be_positive_seconds(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="keep_results"):
        WorkQueue(QUEUE, keep_results=bad)  # type: ignore[arg-type]


def test_bad_results_and_timeouts_are_refused(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    item = lease(db, queue)
    before = dump_state(db)
    with pytest.raises(InvalidArgumentError, match="16 MiB"):
        queue.complete(db, item, result=b"x" * ((16 << 20) + 1))
    with pytest.raises(InvalidArgumentError, match="bytes or str"):
        queue.complete(db, item, result=5)  # type: ignore[arg-type]
    for timeout in (-1, float("nan"), "1"):
        with pytest.raises(InvalidArgumentError, match="timeout"):
            queue.result(db, "a", timeout=timeout)  # type: ignore[arg-type]
    assert dump_state(db) == before


# Progress ---------------------------------------------------------------------------------------


def test_progress_is_kept_while_the_lease_lasts(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    item = lease(db, queue, secs=0.5)
    assert queue.report_progress(db, item, {"done": 3, "of": 10}) is True
    assert queue.state(db, "a").progress == {"done": 3, "of": 10}
    pipe = db.pipeline(transaction=True)
    progress_left, lease_left = (
        pipe.pttl(keys_of(queue, "a").progress("a")).pttl(keys_of(queue, "a").lease("a")).execute()
    )
    assert 0 < progress_left <= lease_left + 5  # set to the lease's time left: they lapse together
    assert 0 < db.pttl(keys_of(queue, "a").lease("a")) <= 500  # reporting renews nothing
    assert queue.report_progress(db, item, 0.75) is True
    assert queue.state(db, "a").progress == 0.75
    time.sleep(0.6)
    assert db.exists(keys_of(queue, "a").progress("a")) == 0  # it lapsed with the lease
    assert queue.report_progress(db, item, 1) is False


def test_progress_of_an_item_not_held(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    item = lease(db, queue)
    assert queue.cancel(db, "a")
    before = dump_state(db)
    assert queue.report_progress(db, item, 1) is False
    assert dump_state(db) == before


def test_bad_progress_is_refused(db: redis.Redis, queue: WorkQueue) -> None:
    queue.add_item(db, Item(b"a", id="a"))
    item = lease(db, queue)
    with pytest.raises(InvalidArgumentError, match="JSON"):
        queue.report_progress(db, item, {1, 2})
    with pytest.raises(InvalidArgumentError, match="4096"):
        queue.report_progress(db, item, "x" * 5000)
    with pytest.raises(InvalidArgumentError, match="lease"):
        queue.report_progress(db, Item(b"a", id="a"), 1)
    with pytest.raises(InvalidArgumentError, match="handler"):
        report_progress(1)  # outside a handler


# A Redis Cluster --------------------------------------------------------------------------------


def test_results_and_progress_on_a_cluster(cluster_db: RedisCluster) -> None:
    queue = WorkQueue(KeyPrefix("app:{jobs}:jr"), keep_results=60)
    queue.add_item(cluster_db, Item(b"a", id="a"))
    item = queue.lease(cluster_db, 30, block=False)
    assert item is not None
    assert queue.report_progress(cluster_db, item, 5)
    assert queue.state(cluster_db, "a").progress == 5
    got: list[bytes] = []
    waiter = threading.Thread(target=lambda: got.append(queue.result(cluster_db, "a", 10)))
    waiter.start()
    time.sleep(0.3)
    assert queue.complete(cluster_db, item, result=b"ok")
    waiter.join(timeout=10)
    assert got == [b"ok"]


# The runners ------------------------------------------------------------------------------------


def make_worker(kind: str, url: str, queue_name: str) -> Any:
    options: dict[str, Any] = {"max_deliveries": 1, "keep_results": 60, "events": True}
    if kind == "asyncio":
        aqueue = AsyncWorkQueue(KeyPrefix(queue_name), **options)
        return AsyncWorker(url, [aqueue], jobs_handlers.acompute, **QUICK)
    squeue = WorkQueue(KeyPrefix(queue_name), **options)
    return Worker(url, [squeue], jobs_handlers.compute, processes=kind == "processes", **QUICK)


@pytest.mark.parametrize("kind", KINDS)
def test_the_runner_keeps_the_handler_s_result_and_progress(server: Proc, kind: str) -> None:
    """The runner keeps results and progress; its queue's events (events=True) are written by
    the runner's own calls too, its worker processes' included."""
    db = server.client()
    name = "jrr"
    queue = WorkQueue(KeyPrefix(name), keep_results=60)
    tag = f"jrr-{kind}"

    def spec(**options: Any) -> bytes:
        return json.dumps({"url": server.url, "tag": tag, **options}).encode()

    queue.add_items(
        db,
        [
            Item(spec(returns={"answer": 42}, progress={"step": 1}, wait=True), id="json"),
            Item(spec(returns="raw bytes", raw="bytes"), id="bytes"),
            Item(spec(returns="text é", raw="str"), id="str"),
            Item(spec(), id="none"),
            Item(spec(raw="set"), id="bad"),
        ],
    )
    worker = make_worker(kind, server.url, name)
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            run = worker.run(signals=())
            out["stats"] = asyncio.run(run) if kind == "asyncio" else run
        except BaseException as err:
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while queue.state(db, "json").progress != {"step": 1}:
            assert time.monotonic() < deadline and thread.is_alive(), out
            time.sleep(0.02)
        db.set(f"{tag}:go", 1)
        assert json.loads(queue.result(db, "json", timeout=30)) == {"answer": 42}
        assert queue.result(db, "bytes", timeout=30) == b"raw bytes"
        assert queue.result(db, "str", timeout=30) == "text é".encode()
        assert queue.result(db, "none", timeout=30) == b""
        with pytest.raises(ItemDeadError, match="cannot be kept"):
            queue.result(db, "bad", timeout=30)
    finally:
        db.set(f"{tag}:go", 1)
        worker.stop()
        thread.join(timeout=60)
    assert "error" not in out, out
    assert out["stats"].completed == 4 and out["stats"].failed == 1
    ends = {(e.kind, e.id, e.delivery) for e in queue.events(db) if e.kind != "added"}
    done = {"json", "bytes", "str", "none"}
    assert ends == {(k, i, 1) for i in done | {"bad"} for k in ("leased", "completed")} - {
        ("completed", "bad", 1)
    } | {("failed", "bad", 1), ("dead", "bad", 1)}


# The shared tables ------------------------------------------------------------------------------


def q() -> WorkQueue:
    return WorkQueue(PREFIX, keep_results=300)


def _complete_kept(s: State) -> Any:
    return q().complete(s.db, s.held, result=b"kept")


def _bury_kept(s: State) -> Any:
    return WorkQueue(PREFIX, max_deliveries=1, keep_results=300).release(s.db, s.held, reason="x")


WRITE_CHECKS = [
    WriteCheck("complete-result", "held", _complete_kept, covers="complete"),
    WriteCheck("release-result", "held", _bury_kept),
    WriteCheck("retry-result", "dead1", lambda s: q().retry(s.db, "dead1")),
    WriteCheck("report_progress", "held", lambda s: q().report_progress(s.db, s.held, {"done": 1})),
]
OOM_CHECKS = [
    OomCheck(
        "complete-result",
        lambda queue, db, held: WorkQueue(PREFIX, keep_results=300).complete(db, held, result=b"r"),
        covers="complete",
    ),
    OomCheck("report_progress", lambda queue, db, held: queue.report_progress(db, held, 1)),
    OomCheck(
        "release-result",
        lambda queue, db, held: type(queue)(PREFIX, max_deliveries=1, keep_results=300).release(
            db, held, reason="r"
        ),
    ),
]
test_results_check_types_before_writing = write_check_test(WRITE_CHECKS)
test_results_out_of_memory = oom_test(OOM_CHECKS)


def test_rwq_item_shows_the_result(real_db: redis.Redis, redis_url: str) -> None:
    from test_cli_ops import rwq  # noqa: PLC0415 (the command line's helpers)

    queue = WorkQueue(QUEUE, keep_results=60)
    queue.add_items(real_db, [Item(b"t", id="t"), Item(b"b", id="b")])
    queue.complete(real_db, lease(real_db, queue), result="done é")
    queue.complete(real_db, lease(real_db, queue), result=b"\xff\x00")
    result = rwq("--url", redis_url, "item", "jr", "t", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["result"] == "done é"
    row = json.loads(rwq("--url", redis_url, "item", "jr", "b", "--json").stdout)
    assert (row["state"], row["result"], row["result_base64"]) == ("completed", None, "/wA=")
