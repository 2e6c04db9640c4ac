"""Flush: every key of one queue goes, in every state its items can be in, and no key of any
other queue (whatever glob characters the names hold) or unrelated key is touched; never KEYS.
And ``rwq flush``: asks first, does nothing without a yes."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from typing import Any

import pytest
import redis

from helpers import dump_state, raw
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.cli import main as rwq_main
from redis_work_queue.results import FlushReport

NAMES = ["a*", "ab", "a?", "a[b]", "a", "a*b", "a\\", "a*:x"]
UNRELATED = {
    "a*": "plain",
    "a*:": "colon",
    "a*:other": "other",
    "a*:itemx": "no colon after item",
    "a*x:item:1": "another prefix",
    "A*:item:1": "upper case",
    "a*:deadline": "not a dead letter",
    "b:item:1": "b",
    "zzz": "z",
}


def populate(db: redis.Redis, name: str) -> None:
    """Items of queue ``name`` in every state, with ids full of special characters."""
    queue = WorkQueue(KeyPrefix(name), max_deliveries=2)
    # a dead letter, with its delivery count and reason
    queue.add_item(db, Item(f"{name}/dead", id="dead"))
    for reason in ("first", "second"):
        item = queue.lease(db, 60, block=False)
        assert item is not None
        assert queue.release(db, item, reason=reason)
    assert queue.dead_count(db) == 1
    # leased (live, expired, released with a reason, completed), queued, delayed, with a ttl
    queue.add_items(db, [Item(f"{name}/{i}", id=i) for i in ("*", "expired", "retried", "gone")])
    held = {item.id(): item for item in queue.lease_many(db, 60, 4, block=False)}
    assert set(held) == {"*", "expired", "retried", "gone"}
    queue.add_items(db, [Item(f"{name}/{i}", id=i) for i in ("q1", "x*:item:y", "[ab]", "?")])
    queue.add_item(db, Item(b"later", id="delayed"), delay=3600)
    queue.add_item(db, Item(b"short", id="ttl"), ttl=3600)
    db.delete(queue.keys.lease("expired"))
    assert queue.release(db, held["retried"], reason="retry")
    assert queue.complete(db, held["gone"])
    assert queue.complete(db, Item(b"", id="?"))  # completed while queued: its id stays
    # a worker of several queues that died while waiting on this one
    raw(db, "ZADD", queue.keys.waiting, int(time.time() * 1000) + 60_000, "dead-waiter")
    queue.add_item(db, Item(b"wakes", id="wake-up"))
    stats = queue.stats(db)
    assert (stats.queued, stats.leased, stats.expired, stats.delayed, stats.dead) == (
        7,
        1,
        1,
        1,
        1,
    )
    # a kept result, and a leased item's progress
    kept = WorkQueue(KeyPrefix(name), keep_results=3600)
    kept.add_item(db, Item(b"r", id="kept"))
    done = kept.lease(db, 60, block=False)
    assert done is not None and kept.complete(db, done, result=b"out")
    assert kept.report_progress(db, held["*"], {"done": 1})


def key_names(queue: WorkQueue, state: dict[bytes, Any]) -> set[bytes]:
    prefix = queue.name.prefix.encode() + b":"
    return {k for k in state if k.startswith(prefix)}


class CommandLog:
    """Record the commands a client sends (execute_command wrapped on the instance)."""

    def __init__(self, db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
        self.commands: list[tuple[Any, ...]] = []
        original = db.execute_command

        def recording(*args: Any, **options: Any) -> Any:
            self.commands.append(args)
            return original(*args, **options)

        monkeypatch.setattr(db, "execute_command", recording)

    def names(self) -> list[str]:
        return [str(c[0]).upper() for c in self.commands]


def test_flush_removes_exactly_one_queue(db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in UNRELATED.items():
        db.set(key, value)
    for name in NAMES:
        if name != "a*":
            populate(db, name)
    before = dump_state(db)
    target = WorkQueue(KeyPrefix("a*"))
    populate(db, "a*")
    with_target = dump_state(db)
    added = set(with_target) - set(before)
    assert {k: with_target[k] for k in before} == before  # populating a* touched nothing else
    items = {k for k in added if k.startswith(b"a*:item:")}
    assert len(items) >= 8
    assert b"a*:item:*" in items
    assert b"a*:item:x*:item:y" in items
    assert {b"a*:queue", b"a*:processing", b"a*:delayed", b"a*:dead", b"a*:deliveries"} <= added
    assert {b"a*:reasons", b"a*:waiting", b"a*:wake", b"a*:dead:dead", b"a*:lease:*"} <= added

    log = CommandLog(db, monkeypatch)
    report = target.flush(db)
    assert "KEYS" not in log.names()
    assert "SCAN" in log.names()
    patterns = {c[c.index("MATCH") + 1] for c in log.commands if "MATCH" in c}
    assert patterns == {
        "a\\*:item:*",
        "a\\*:lease:*",
        "a\\*:dead:*",
        "a\\*:spark:batch:*",
        "a\\*:worker:*",
        "a\\*:result:*",
        "a\\*:progress:*",
        "a\\*:group:*",
    }
    monkeypatch.undo()

    assert dump_state(db) == before
    assert report == FlushReport(keys=len(added), items=len(items))
    # flushing again finds nothing; the queue works from scratch
    assert target.flush(db) == FlushReport(0, 0)
    assert target.add_item(db, Item(b"new", id="*"))
    item = target.lease(db, 30, block=False)
    assert item is not None
    assert (item.id(), item.data(), item.deliveries) == ("*", b"new", 1)


@pytest.mark.parametrize("name", ["a", "a?", "a[b]", "a\\"])
def test_flush_of_each_name_spares_the_others(bytes_db: redis.Redis, name: str) -> None:
    db = bytes_db
    for other in NAMES:
        if other != name:
            populate(db, other)
    before = dump_state(db)
    populate(db, name)
    queue = WorkQueue(KeyPrefix(name))
    report = queue.flush(db)
    assert dump_state(db) == before
    assert report.items > 0
    assert key_names(queue, dump_state(db)) <= key_names(queue, before)


def test_flush_of_a_large_queue(bytes_db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    db = bytes_db
    big, small = WorkQueue(KeyPrefix("a*")), WorkQueue(KeyPrefix("a"))
    big.add_items(db, [Item(b"", id=f"i{n}") for n in range(2500)])
    leased: list[Item] = []
    while len(leased) < 1200:
        leased += big.lease_many(db, 60, 100, block=False)
    small.add_items(db, [Item(b"", id=f"i{n}") for n in range(100)])
    before = {k: v for k, v in dump_state(db).items() if not k.startswith(b"a*:")}
    log = CommandLog(db, monkeypatch)
    report = big.flush(db)
    assert "KEYS" not in log.names()
    monkeypatch.undo()
    # 2500 data keys, 1200 leases, queue, processing, deliveries and counts
    assert report == FlushReport(keys=2500 + 1200 + 4, items=2500)
    assert dump_state(db) == before
    assert small.queue_len(db) == 100


def test_flush_of_an_empty_queue(db: redis.Redis) -> None:
    db.set("a*", "x")
    assert WorkQueue(KeyPrefix("a*")).flush(db) == FlushReport(0, 0)
    assert raw(db, "GET", "a*") == b"x"


# rwq flush --------------------------------------------------------------------------------------


def _rwq(url: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        check=False,
    )


class Terminal(io.StringIO):
    """A stdin that claims to be a terminal, with the user's answer in it."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def two_queues(real_backend: Backend) -> dict[bytes, Any]:
    db = real_backend.client()
    populate(db, "a*")
    populate(db, "ab")
    db.set("a*:other", "x")
    return dump_state(db)


def test_rwq_flush_without_a_terminal_or_yes_does_nothing(
    real_backend: Backend, two_queues: dict[bytes, Any]
) -> None:
    db = real_backend.client()
    done = _rwq(real_backend.url, "flush", "a*")
    assert done.returncode != 0
    assert "--yes" in done.stderr
    done = _rwq(real_backend.url, "flush", "a*", stdin="y\n")  # a pipe is no terminal
    assert done.returncode != 0
    assert dump_state(db) == two_queues


@pytest.mark.parametrize("answer", ["n\n", "\n", "no\n", "whatever\n", ""])
def test_rwq_flush_asks_and_a_no_does_nothing(
    real_backend: Backend,
    two_queues: dict[bytes, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    answer: str,
) -> None:
    db = real_backend.client()
    monkeypatch.setattr(sys, "stdin", Terminal(answer))
    # no answer at all (end of input, as Ctrl-D gives) is a no as well, not a crash
    code = rwq_main(["--url", real_backend.url, "flush", "a*"])
    assert code != 0
    assert "a*" in capsys.readouterr().out  # the question names the queue
    assert dump_state(db) == two_queues


def test_rwq_flush_asks_and_a_yes_flushes(
    real_backend: Backend,
    two_queues: dict[bytes, Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    db = real_backend.client()
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert rwq_main(["--url", real_backend.url, "flush", "a*"]) == 0
    capsys.readouterr()
    expected = {k: v for k, v in two_queues.items() if not k.startswith(b"a*:") or k == b"a*:other"}
    assert dump_state(db) == expected


def test_rwq_flush_yes(real_backend: Backend, two_queues: dict[bytes, Any]) -> None:
    db = real_backend.client()
    items = len([k for k in two_queues if k.startswith(b"a*:item:")])
    done = _rwq(real_backend.url, "flush", "a*", "--yes")
    assert done.returncode == 0, done.stderr
    assert f"({items} items)" in done.stdout
    expected = {k: v for k, v in two_queues.items() if not k.startswith(b"a*:") or k == b"a*:other"}
    assert dump_state(db) == expected
