"""Interop with the reference Node.js client, built from its source and driven as processes.

Marked ``node``: ``-m "not node"`` deselects the module where there is no Node.js; without
node/npm the tests skip, and under CI=true they fail. The client is built once (``npm ci`` and
``npx tsc`` on a copy of its source) and cached under the pytest cache dir, keyed by the
source's hash. The module has its own redis-server; ``tests/node/reference.js`` runs the Node
client's own methods, ``interop_worker.py`` runs workers of this library.
"""

from __future__ import annotations

import json
import os
import queue as stdlib_queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import servers
from helpers import lrange, wait_for
from redis_work_queue import CleanReport, Item, KeyPrefix, WorkQueue

pytestmark = [pytest.mark.node, pytest.mark.real_redis]

TESTS = Path(__file__).resolve().parent
DRIVER = TESTS / "node" / "reference.js"
PY_WORKER = TESTS / "interop_worker.py"
COMMAND_TIMEOUT = 60.0


#: What json_line returns for a line that is not JSON.
NOT_JSON = object()


def json_line(line: str) -> Any:
    """A JSON line of the driver, or NOT_JSON for what the client itself logs (its cleans
    print)."""
    try:
        return json.loads(line)
    except ValueError:
        return NOT_JSON


class Proc:
    """A long-running worker process whose JSON lines are read by a thread."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines: stdlib_queue.Queue[Any] = stdlib_queue.Queue()
        self.seen: list[Any] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            parsed = json_line(line)
            if parsed is not NOT_JSON:
                self.lines.put(parsed)

    def drain(self) -> list[Any]:
        """Every line read so far (kept in ``seen``)."""
        while True:
            try:
                self.seen.append(self.lines.get_nowait())
            except stdlib_queue.Empty:
                return self.seen

    def expect(self, predicate: Callable[[Any], bool], timeout: float = 30.0) -> Any:
        """The first line (new or seen) that matches; fail after ``timeout`` seconds."""
        for line in self.drain():
            if predicate(line):
                return line
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no expected line; seen {self.seen}; {self.stderr()}")
            try:
                line = self.lines.get(timeout=min(left, 0.2))
            except stdlib_queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    exited = f"exited {self.process.returncode}: {self.stderr()}"
                    raise AssertionError(exited) from None
                continue
            self.seen.append(line)
            if predicate(line):
                return line

    def stderr(self) -> str:
        if self.process.poll() is None or self.process.stderr is None:
            return ""
        return self.process.stderr.read()[-2000:]

    def send(self, line: str = "go") -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self, timeout: float = 20.0) -> None:
        """Ask it to stop (a stdin line) and wait for it to exit."""
        if self.process.poll() is None:
            self.send("stop")
            self.process.wait(timeout=timeout)
        self.drain()

    def kill(self) -> None:
        """SIGKILL it, wherever it is."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.drain()


class NodeClient:
    """The reference Node.js client on one queue."""

    def __init__(self, build: Path, url: str, prefix: str) -> None:
        self.build = build
        self.url = url
        self.prefix = prefix
        self.procs: list[Proc] = []

    def _argv(self, command: str, args: dict[str, Any]) -> list[str]:
        node = shutil.which("node")
        assert node is not None
        payload = json.dumps({"url": self.url, "prefix": self.prefix, **args})
        return [node, str(DRIVER), str(self.build), command, payload]

    def run(self, command: str, **args: Any) -> list[Any]:
        """Run one command to its end; its JSON lines. The arguments go through a file (item
        data can be longer than one command-line argument may be)."""
        with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
            json.dump({"url": self.url, "prefix": self.prefix, **args}, file)
            file.flush()
            argv = self._argv(command, {})
            argv[-1] = "@" + file.name
            done = subprocess.run(
                argv,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT,
                check=False,
            )
        assert done.returncode == 0, done.stderr
        return [v for v in map(json_line, done.stdout.splitlines()) if v is not NOT_JSON]

    def add(self, items: list[tuple[str, bytes]], unique: bool = False) -> list[bool]:
        wire = [{"id": item_id, "data": data.hex()} for item_id, data in items]
        return self.run("add", items=wire, unique=unique)

    def lease(self, lease_secs: int = 30, block: bool = False, timeout: int = 0) -> Any:
        found = self.run("lease", lease_secs=lease_secs, block=block, timeout=timeout)[0]
        return None if found is None else (found["id"], bytes.fromhex(found["data"]))

    def complete(self, item_id: str) -> bool:
        return bool(self.run("complete", id=item_id)[0])

    def light_clean(self) -> None:
        assert self.run("light-clean") == ["cleaned"]

    def deep_clean(self) -> None:
        assert self.run("deep-clean") == ["cleaned"]

    def spawn(self, command: str, **args: Any) -> Proc:
        proc = Proc(self._argv(command, args))
        self.procs.append(proc)
        return proc


@pytest.fixture
def server(module_redis: servers.Proc) -> servers.Proc:
    admin = module_redis.client()
    admin.flushall()
    admin.script_flush()
    return module_redis


@pytest.fixture
def db(server: servers.Proc) -> redis.Redis:
    return server.client()


@pytest.fixture
def prefix() -> str:
    return f"interop:{secrets.token_hex(3)}"


@pytest.fixture
def ours(prefix: str) -> WorkQueue:
    return WorkQueue(KeyPrefix(prefix))


@pytest.fixture
def node(reference_node: Path, server: servers.Proc, prefix: str) -> Iterator[NodeClient]:
    client = NodeClient(reference_node, server.url, prefix)
    try:
        yield client
    finally:
        for proc in client.procs:
            proc.kill()


@pytest.fixture
def py_workers(server: servers.Proc, prefix: str) -> Iterator[Callable[..., Proc]]:
    started: list[Proc] = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}

    def spawn(lease_secs: float = 5, work_ms: int = 0, mode: str = "single") -> Proc:
        argv = [sys.executable, str(PY_WORKER), server.url, prefix, str(lease_secs)]
        proc = Proc([*argv, str(work_ms), mode], env=env)
        started.append(proc)
        return proc

    try:
        yield spawn
    finally:
        for proc in started:
            proc.kill()


def queue_keys(db: redis.Redis, prefix: str) -> set[str]:
    """The queue's keys but its counters (``<prefix>:counts``), which outlive its items."""
    found = {k.decode() for k in db.scan_iter(match=prefix.replace("*", r"\*") + "*", count=1000)}
    return {key for key in found if key != f"{prefix}:counts"}


def blocked_clients(db: redis.Redis, name: str, command: str) -> int:
    return sum(
        1 for c in db.client_list() if c.get("name") == name and c.get("cmd") == command.lower()
    )


PAYLOADS = {
    "empty": b"",
    "nul-bytes": b"\x00a\x00\x00b",
    "all-256-bytes": bytes(range(256)) * 3,
    "invalid-utf8": b"\xff\xfe\xc3\x28\x80",
    "random-64k": os.urandom(64 * 1024),
}
IDS = ["plain", "with:colons:", "spaces and {braces}", "ünïcødé-☃", "glob*?[x]"]


# Data both ways ---------------------------------------------------------------------------------


def test_node_adds_we_lease_byte_exact(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str
) -> None:
    items = list(zip(IDS, PAYLOADS.values(), strict=True))
    assert node.add(items[:3]) == [True, True, True]
    assert node.add(items[3:], unique=True) == [True, True]
    assert node.add(items[:1]) == [False]  # its add_item sees the item exists
    for item_id, data in items:  # FIFO across clients
        leased = ours.lease(db, 30, block=False)
        assert leased is not None
        assert (leased.id(), leased.data()) == (item_id, data)
        assert (leased["id"], leased["data"]) == (item_id, data)
    assert ours.processing(db) == len(items)
    assert node.complete(IDS[0]) is True  # the reference client completes our lease
    assert ours.complete(db, Item(b"", id=IDS[0])) is False
    for item_id in IDS[1:]:
        assert ours.complete(db, Item(b"", id=item_id)) is True
        assert node.complete(item_id) is False
    # Only the delivery count of the item the Node client completed may be left: a deep clean
    # forgets it.
    assert queue_keys(db, prefix) <= {f"{prefix}:deliveries"}


def test_we_add_node_leases_byte_exact(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str
) -> None:
    items = [Item(data, id=item_id) for item_id, data in zip(IDS, PAYLOADS.values(), strict=True)]
    assert ours.add_item(db, items[0]) is True
    ours.add_unique_item(db, items[1])
    assert ours.add_items(db, items[2:4]) == [True, True]
    pipe = db.pipeline()
    ours.add_unique_item_to_pipeline(pipe, items[4])
    assert pipe.execute() == [True, 5]  # the reference client's SET and LPUSH replies
    for item in items:
        assert node.lease(30) == (item.id(), item.data())
    assert node.lease(30) is None
    assert ours.processing(db) == len(items)
    assert ours.light_clean(db).requeued == 0  # its leases are live
    for item in items:
        assert node.complete(item.id()) is True
        assert ours.complete(db, item) is False
    assert not queue_keys(db, prefix)


# Mixed fleets -----------------------------------------------------------------------------------


def test_mixed_fleet_with_killed_workers_drains_with_nothing_lost(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str, py_workers: Any
) -> None:
    total = 120
    node.add([(f"n{i}", f"node-{i}".encode() + bytes([i % 256])) for i in range(total // 2)])
    ours.add_items(
        db, [Item(f"ours-{i}".encode() + b"\xff", id=f"o{i}") for i in range(total // 2)]
    )
    expected = {f"n{i}": f"node-{i}".encode() + bytes([i % 256]) for i in range(total // 2)}
    expected |= {f"o{i}": f"ours-{i}".encode() + b"\xff" for i in range(total // 2)}
    fleet = [
        node.spawn("worker", lease_secs=2, timeout=1, work_ms=20),
        node.spawn("worker", lease_secs=2, timeout=1, work_ms=20),
        py_workers(lease_secs=2, work_ms=20),
        py_workers(lease_secs=2, work_ms=20),
        py_workers(lease_secs=2, work_ms=20, mode="multi"),
    ]
    stop_cleaning = threading.Event()

    def clean() -> None:
        """Both sides' cleans, all the time: ours every 0.3 s (a deep one every tenth time),
        the Node client's light and deep clean every fifth time."""
        cleaner_db = redis.Redis.from_url(node.url)
        rounds = 0
        while not stop_cleaning.wait(0.3):
            rounds += 1
            ours.light_clean(cleaner_db)
            if rounds % 10 == 0:
                ours.deep_clean(cleaner_db)
            if rounds % 5 == 0:
                node.light_clean()
                node.deep_clean()
        cleaner_db.close()

    cleaner = threading.Thread(target=clean, daemon=True)
    cleaner.start()
    try:
        # Kill one worker of each kind while it holds a lease.
        for victim in (fleet[0], fleet[2]):
            victim.expect(lambda line: isinstance(line, dict) and "leased" in line)
            victim.kill()
        wait_for(
            lambda: not any(db.scan_iter(match=f"{prefix}:item:*", count=1000)),
            timeout=90,
            interval=0.1,
            what="every item to be completed",
        )
    finally:
        stop_cleaning.set()
        cleaner.join(30)
    # A Node deep clean may have pushed an id completed meanwhile: the workers drop it.
    wait_for(lambda: ours.queue_len(db) == 0, timeout=10, what="stale ids to be dropped")
    for proc in fleet:
        proc.stop() if proc.process.poll() is None else proc.drain()
    ours.light_clean(db)  # a Node lease with a timeout leaves such an id on the processing list
    lines = [line for proc in fleet for line in proc.seen if isinstance(line, dict)]
    done = [line for line in lines if "done" in line]
    won = [line["done"] for line in done if line["won"]]
    assert len(won) == len(set(won))  # one completion per item
    for line in done:
        assert bytes.fromhex(line["data"]) == expected[line["done"]]
    # The killed workers may have completed an item without reporting it; nothing else is lost.
    leased_by_victims = {
        line["leased"] for proc in (fleet[0], fleet[2]) for line in proc.seen if "leased" in line
    }
    assert set(expected) - set(won) <= leased_by_victims
    assert ours.queue_len(db) == 0
    assert ours.processing(db) == 0


# Each side's cleaners on the other's items ------------------------------------------------------


def test_our_expired_lease_under_the_node_cleaners(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str
) -> None:
    ours.add_item(db, Item(b"work", id="x"))
    leased = ours.lease(db, 2, block=False)
    assert leased is not None
    node.light_clean()
    node.deep_clean()
    assert lrange(db, f"{prefix}:processing") == [b"x"]  # our live lease is respected
    wait_for(lambda: not db.exists(f"{prefix}:lease:x"), timeout=5, what="the lease to expire")
    node.light_clean()
    # The reference Node client's light clean checks the lease key where it means the data key
    # (itemExists), so it takes the id off the processing list without requeueing it ...
    assert lrange(db, f"{prefix}:processing") == []
    assert lrange(db, f"{prefix}:queue") == []
    node.deep_clean()  # ... and its deep clean finds the item and requeues it.
    assert lrange(db, f"{prefix}:queue") == [b"x"]
    again = ours.lease(db, 30, block=False)
    assert again is not None
    assert (again.id(), again.data(), again.deliveries) == ("x", b"work", 2)
    assert ours.complete(db, again) is True


def test_node_expired_lease_under_our_cleaners(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str
) -> None:
    node.add([("y", b"\x00data")])
    assert node.lease(1) == ("y", b"\x00data")
    assert ours.light_clean(db) == CleanReport(examined=1)  # live: left alone
    assert ours.deep_clean(db).requeued == 0
    wait_for(lambda: not db.exists(f"{prefix}:lease:y"), timeout=5, what="the lease to expire")
    assert ours.light_clean(db).requeued == 1
    assert node.lease(30) == ("y", b"\x00data")
    assert node.complete("y") is True
    node.add([("z", b"z")])
    db.delete(f"{prefix}:queue")  # a lost list: only a deep clean can find the item
    assert ours.deep_clean(db).requeued == 1
    assert node.lease(30) == ("z", b"z")


def test_our_delays_dead_letters_and_tokens_under_the_node_cleaners(
    db: redis.Redis, node: NodeClient, prefix: str
) -> None:
    ours = WorkQueue(KeyPrefix(prefix), max_deliveries=1)
    ours.add_item(db, Item(b"later", id="delayed"), delay=2.5)
    ours.add_item(db, Item(b"dead", id="dead"))
    ours.add_item(db, Item(b"held", id="held"))
    first = ours.lease(db, 30, block=False)
    assert first is not None and first.id() == "dead"
    assert ours.release(db, first, reason="boom") is True  # its last delivery: buried
    held = ours.lease(db, 30, block=False)
    assert held is not None and held.id() == "held"
    node.light_clean()
    node.deep_clean()
    assert lrange(db, f"{prefix}:queue") == []  # nothing requeued early or brought back
    assert node.lease(30) is None
    assert ours.dead_count(db) == 1
    assert ours.complete(db, held) is True  # the lease token survived both cleaners
    late = ours.lease(db, 30, timeout=10)
    assert late is not None and late.id() == "delayed"
    assert ours.complete(db, late) is True
    assert ours.requeue_dead(db) == 1
    assert node.lease(30) == ("dead", b"dead")


# The races --------------------------------------------------------------------------------------


def test_an_item_stranded_by_a_clean_between_the_node_moves_is_not_lost(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str
) -> None:
    """The Node client leases in separate commands; a clean between them used to strand the
    item: queued and leased, then dropped by our lease, and found only by a deep clean."""
    node.add([("s", b"stranded")])
    paused = node.spawn("paused-lease", lease_secs=1)
    assert paused.expect(lambda line: isinstance(line, dict) and "moved" in line) == {"moved": "s"}
    assert ours.light_clean(db).requeued == 1  # no lease yet: the id goes back to the queue
    paused.send()
    assert paused.expect(lambda line: "leased" in line)["leased"]["id"] == "s"
    assert lrange(db, f"{prefix}:queue") == [b"s"]
    assert lrange(db, f"{prefix}:processing") == []
    assert ours.lease(db, 30, block=False) is None  # leased by the Node worker ...
    assert lrange(db, f"{prefix}:processing") == [b"s"]  # ... so it goes where cleaners look
    paused.kill()  # the Node worker dies
    wait_for(lambda: not db.exists(f"{prefix}:lease:s"), timeout=5, what="the lease to expire")
    assert ours.light_clean(db).requeued == 1
    item = ours.lease(db, 30, block=False)
    assert item is not None and (item.id(), item.data()) == ("s", b"stranded")
    assert ours.complete(db, item) is True


#: How late our blocked worker may get a delayed item when a worker of another implementation,
#: blocked on the same queue, takes the wake-up: one blocking slice (WAIT_SLICE) and a tick.
STOLEN_WAKE_BOUND = 1.5


def test_a_stolen_wake_up_costs_at_most_one_slice_and_leaves_no_marker(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str, server: servers.Proc
) -> None:
    # Something delayed already: ours registers as it waits (on a queue with nothing delayed
    # it writes nothing, and no wake-up is pushed for it).
    ours.add_item(db, Item(b"late", id="late"), delay=120)
    blocked = node.spawn("blocked-lease", lease_secs=30, timeout=0)
    blocked.expect(lambda line: line == "blocking")
    wait_for(lambda: blocked_clients(db, "reference-node", "brpoplpush") == 1, timeout=10)
    got: list[tuple[Item | None, float]] = []

    def wait() -> None:
        worker_db = server.client()
        worker_db.client_setname("ours")
        got.append((ours.lease(worker_db, 30, timeout=15), time.monotonic()))

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_for(lambda: blocked_clients(db, "ours", "brpoplpush") == 1, timeout=10)
    due = time.monotonic() + 0.3
    ours.add_item(db, Item(b"soon", id="soon"), delay=0.3)
    waiter.join(STOLEN_WAKE_BOUND + 5)
    assert got and got[0][0] is not None and got[0][0].id() == "soon"
    assert got[0][1] - due < STOLEN_WAKE_BOUND
    assert blocked.drain() == ["blocking"]  # the Node worker got no item, only the wake-up
    wait_for(
        lambda: b"" not in lrange(db, f"{prefix}:queue") + lrange(db, f"{prefix}:processing"),
        timeout=STOLEN_WAKE_BOUND + 2,
        what="the wake-up marker to be gone",
    )
    assert ours.complete(db, got[0][0]) is True


def test_without_a_foreign_worker_a_delayed_item_comes_within_a_few_ms(
    db: redis.Redis, ours: WorkQueue, prefix: str, server: servers.Proc
) -> None:
    got: list[float] = []
    # Something delayed already: ours registers as it waits, and is woken for the sooner item
    # (on a queue with nothing delayed it writes nothing and finds it at its next look).
    ours.add_item(db, Item(b"late", id="late"), delay=120)

    def wait() -> None:
        worker_db = server.client()
        worker_db.client_setname("ours")
        item = ours.lease(worker_db, 30, timeout=15)
        assert item is not None
        got.append(time.monotonic())

    waiter = threading.Thread(target=wait, daemon=True)
    waiter.start()
    wait_for(lambda: blocked_clients(db, "ours", "brpoplpush") == 1, timeout=10)
    due = time.monotonic() + 0.3
    ours.add_item(db, Item(b"soon", id="soon"), delay=0.3)
    waiter.join(10)
    assert got and -0.01 < got[0] - due < 0.1
    assert b"" not in lrange(db, f"{prefix}:queue") + lrange(db, f"{prefix}:processing")


# A queue at rest --------------------------------------------------------------------------------


def test_a_drained_queue_keeps_only_its_items_keys_within_one_lease_time(
    db: redis.Redis, node: NodeClient, ours: WorkQueue, prefix: str, py_workers: Any
) -> None:
    lease_secs = 3
    node.add([(f"n{i}", b"n") for i in range(20)])
    ours.add_items(db, [Item(b"o", id=f"o{i}") for i in range(20)])
    fleet = [
        node.spawn("worker", lease_secs=lease_secs, timeout=0),  # killed: it never returns
        node.spawn("worker", lease_secs=lease_secs, timeout=1),
        py_workers(lease_secs=lease_secs),
        py_workers(lease_secs=lease_secs),
        py_workers(lease_secs=lease_secs, mode="multi"),
        py_workers(lease_secs=lease_secs, mode="multi"),
    ]
    wait_for(
        lambda: ours.queue_len(db) == 0 and ours.processing(db) == 0,
        timeout=60,
        interval=0.05,
        what="the queue to drain",
    )
    # Let every worker block again, then stop half of them and kill the others while waiting.
    wait_for(lambda: db.exists(f"{prefix}:waiting"), timeout=10, what="a worker to wait")
    time.sleep(0.5)
    for proc in fleet[::2]:
        proc.kill()
    for proc in fleet[1::2]:
        proc.stop()
    ours.add_item(db, Item(b"left", id="left"))  # one item stays queued
    layout = {f"{prefix}:queue", f"{prefix}:item:left"}
    wait_for(
        lambda: queue_keys(db, prefix) == layout,
        timeout=lease_secs,
        interval=0.05,
        what="only the layout's keys",
    )
