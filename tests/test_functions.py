"""Redis Functions: the package's scripts as one versioned library, loaded once, called by FCALL.

The conformance scenarios (``conformance/test_scenario.py``) run every public operation with
functions and with scripts and compare every reply and key; here: the library as built, how a
client chooses and loads it, the modes that force either path, a server that loses its
functions under load, two releases' libraries on one server, and ``rwq functions``.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from redis_work_queue import (
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    ScriptError,
    Worker,
    WorkQueue,
    functions,
    lean,
    loader,
    transport,
)
from redis_work_queue.cli import main as rwq
from redis_work_queue.errors import InvalidArgumentError, WrongKeyTypeError
from servers import Proc


def calls_of(admin: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (``fcall``, ``function|load``...)."""
    stats = admin.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_every_script_is_a_function_of_one_versioned_library() -> None:
    built = functions.library()
    assert set(built.functions) == set(loader.script_names())
    assert built.text.startswith(f"#!lua name={built.name}\n")
    assert built.name == f"rwq_{built.version}" and len(built.version) == 12
    for script, name in built.functions.items():
        assert name == f"{built.name}_{script}"
        assert f"function_name = '{name}'" in built.text
    # The includes' helpers are defined once for the library, not once per function.
    for helper in ("take", "check_types", "finish", "wake", "queue_at"):
        assert built.text.count(f"local function {helper}(") == 1, helper
    # Values a call sets are set again at the start of each call that uses them.
    assert "\nlocal NQ, " in built.text or "\nlocal NQ\n" in built.text
    assert built.text.count("\nNQ = #KEYS\n") >= 10 and "local NQ = #KEYS" not in built.text
    # The scripts that no writing operation runs may run on replicas and out of memory.
    assert {"stats", "peek", "pending"} <= built.read_only
    assert "add" not in built.read_only and "lease" not in built.read_only
    assert functions.build().text == built.text  # the same files give the same library


def test_a_changed_script_makes_another_version(tmp_path: Path) -> None:
    copy = tmp_path / "lua"
    shutil.copytree(loader.lua_dir(), copy)  # type: ignore[arg-type]
    first = functions.build(copy, read_only=())
    stats = copy / "stats.lua"
    stats.write_text(stats.read_text("utf-8") + "-- one more line\n", "utf-8")
    second = functions.build(copy, read_only=())
    assert first.name != second.name
    assert set(first.functions.values()).isdisjoint(second.functions.values())


def test_an_include_with_code_outside_definitions_runs_in_each_call(tmp_path: Path) -> None:
    """Top-level code other than definitions is kept per call, with what depends on it."""
    lua = tmp_path / "lua"
    (lua / "include").mkdir(parents=True)
    (lua / "include" / "odd.lua").write_text(
        "local seen = {}\nseen[1] = #KEYS\nlocal function first()\n  return seen[1]\nend\n",
        "utf-8",
    )
    (lua / "one.lua").write_text("--#include odd.lua\nreturn first()\n", "utf-8")
    built = functions.build(lua, read_only=())
    body = built.text.split("callback = ", 1)[1]
    assert "seen[1] = #KEYS" in body and "local function first()" in body


def test_a_kept_table_is_made_once_and_kept_from_call_to_call(
    tmp_path: Path, real_db: redis.Redis
) -> None:
    """``local NAME = {} --#kept`` is made when the library loads; a script has ``false``."""
    lua = tmp_path / "lua"
    (lua / "include").mkdir(parents=True)
    (lua / "include" / "memo.lua").write_text(
        "local MEMO = {} --#kept\nlocal function bump()\n  if not MEMO then\n    return 0\n"
        "  end\n  MEMO[1] = (MEMO[1] or 0) + 1\n  return MEMO[1]\nend\n",
        "utf-8",
    )
    (lua / "one.lua").write_text("--#include memo.lua\nreturn bump()\n", "utf-8")
    built = functions.build(lua, read_only=())
    head = built.text.split("callback = ", 1)[0]
    assert "local MEMO = {} --#kept" in head
    real_db.function_load(built.text, replace=True)
    name = built.functions["one"]
    assert [real_db.fcall(name, 0) for _ in range(3)] == [1, 2, 3]
    script = loader.assemble("one", lua).text
    assert "local MEMO = false --#kept" in script
    assert [real_db.eval(script, 0) for _ in range(2)] == [0, 0]


@pytest.mark.real_redis
def test_a_client_loads_the_library_once_and_calls_functions(real_db: redis.Redis) -> None:
    real_db.function_flush()
    real_db.config_resetstat()
    q = WorkQueue(KeyPrefix("fn"))
    for n in range(5):
        assert q.add_item(real_db, Item(b"x", id=f"i{n}"))
    leased = q.lease_many(real_db, 30, 5, block=False)
    assert q.complete_many(real_db, leased) == leased
    assert transport.uses_functions(real_db) is True
    assert calls_of(real_db, "function|load") == 1
    assert calls_of(real_db, "fcall") >= 7
    assert calls_of(real_db, "evalsha") == calls_of(real_db, "eval") == 0
    names = [entry[1] for entry in real_db.function_list()]
    assert functions.library().name.encode() in names


def test_fakeredis_calls_scripts_unless_told(db: redis.Redis, backend: Any) -> None:
    """``auto``: functions on Redis 7, scripts on fakeredis; ``always`` runs them on both."""
    q = WorkQueue(KeyPrefix("fn"))
    assert q.add_item(db, Item(b"x", id="a"))
    fake = not backend.real
    assert transport.uses_functions(db) is (not fake)
    transport.use_functions(db, "always")
    item = q.lease(db, 30, block=False)
    assert item is not None and q.complete(db, item)
    assert transport.uses_functions(db) is True


@pytest.mark.real_redis
def test_never_calls_scripts_only(real_db: redis.Redis) -> None:
    real_db.function_flush()
    real_db.config_resetstat()
    transport.use_functions(real_db, "never")
    q = WorkQueue(KeyPrefix("fn"))
    assert q.add_item(real_db, Item(b"x", id="a"))
    assert q.lease(real_db, 30, block=False) is not None
    assert calls_of(real_db, "fcall") == 0 and real_db.function_list() == []
    assert transport.uses_functions(real_db) is False
    transport.use(real_db, "public")  # choosing the path again keeps the mode
    assert q.stats(real_db).leased == 1 and calls_of(real_db, "fcall") == 0


def test_the_mode_is_checked(db: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(InvalidArgumentError, match="'auto', 'always' or 'never'"):
        transport.use_functions(db, "sometimes")  # type: ignore[arg-type]
    monkeypatch.setenv("RWQ_FUNCTIONS", "maybe")
    with pytest.raises(InvalidArgumentError, match="RWQ_FUNCTIONS"):
        WorkQueue(KeyPrefix("fn")).add_item(redis.Redis(), Item(b"x"))


@pytest.mark.real_redis
def test_the_environment_sets_the_mode(
    redis_server: Proc, real_db: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RWQ_FUNCTIONS", "never")
    db = redis.Redis(host=redis_server.host, port=redis_server.port)
    assert WorkQueue(KeyPrefix("fn")).add_item(db, Item(b"x"))
    assert transport.uses_functions(db) is False
    db.close()


@pytest.mark.real_redis
def test_always_raises_where_functions_are_refused(
    redis_server: Proc, real_db: redis.Redis
) -> None:
    """A user without FCALL: ``auto`` calls scripts, ``always`` names the fix."""
    real_db.execute_command(
        "ACL", "SETUSER", "nofn", "on", ">pw", "~*", "+@all", "-fcall", "-function"
    )
    try:
        user = redis.Redis(
            host=redis_server.host, port=redis_server.port, username="nofn", password="pw"
        )
        q = WorkQueue(KeyPrefix("fn"))
        assert q.add_item(user, Item(b"x", id="a"))
        assert transport.uses_functions(user) is False
        strict = redis.Redis(
            host=redis_server.host, port=redis_server.port, username="nofn", password="pw"
        )
        transport.use_functions(strict, "always")
        with pytest.raises(ScriptError, match="rwq functions install"):
            q.add_item(strict, Item(b"x", id="b"))
        assert q.queue_len(real_db) == 1  # nothing was written by the refused call
    finally:
        real_db.execute_command("ACL", "DELUSER", "nofn")


@pytest.mark.real_redis
def test_an_error_names_the_file_and_line_of_lua(real_db: redis.Redis) -> None:
    real_db.set("fn:queue", "not a list")
    with pytest.raises(WrongKeyTypeError, match=r"lua/include/queue\.lua:\d+: WRONGTYPE"):
        WorkQueue(KeyPrefix("fn")).add_item(real_db, Item(b"x"))
    assert transport.uses_functions(real_db) is None  # the call was refused before FCALL
    real_db.delete("fn:queue")


@pytest.mark.real_redis
@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_a_queue_keeps_working_when_its_functions_are_flushed_under_load(
    real_db: redis.Redis, redis_server: Proc, api: str
) -> None:
    """FUNCTION FLUSH (and SCRIPT FLUSH) again and again while a producer adds and a worker
    leases and completes: every item is completed exactly once, no call fails."""
    total = 400
    admin = redis.Redis(host=redis_server.host, port=redis_server.port)
    done = threading.Event()

    def flusher() -> None:
        while not done.is_set():
            admin.function_flush()
            admin.script_flush()
            time.sleep(0.002)

    flushing = threading.Thread(target=flusher, daemon=True)
    flushing.start()
    try:
        if api == "sync":
            completed = _sync_load(redis_server, total)
        else:
            completed = asyncio.run(_async_load(redis_server, total))
    finally:
        done.set()
        flushing.join()
    assert completed == [f"i{n}" for n in range(total)]
    q = WorkQueue(KeyPrefix("flushed"))
    assert q.queue_len(admin) == 0 and q.processing(admin) == 0


def _sync_load(server: Proc, total: int) -> list[str]:
    producer = redis.Redis(host=server.host, port=server.port)
    worker = redis.Redis(host=server.host, port=server.port)
    q = WorkQueue(KeyPrefix("flushed"))
    completed: list[str] = []

    def produce() -> None:
        for n in range(total):
            assert q.add_item(producer, Item(b"x", id=f"i{n}"))

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 60
    while len(completed) < total:
        assert time.monotonic() < deadline
        for item in q.lease_many(worker, 30, 10, block=False):
            assert q.complete(worker, item) is True
            completed.append(item.id())
    thread.join()
    assert transport.uses_functions(worker) is True
    return sorted(completed, key=lambda i: int(i[1:]))


async def _async_load(server: Proc, total: int) -> list[str]:
    db = redis.asyncio.Redis(host=server.host, port=server.port)
    q = AsyncWorkQueue(KeyPrefix("flushed"))
    completed: list[str] = []

    async def produce() -> None:
        for n in range(total):
            assert await q.add_item(db, Item(b"x", id=f"i{n}"))

    task = asyncio.create_task(produce())
    deadline = time.monotonic() + 60
    while len(completed) < total:
        assert time.monotonic() < deadline
        for item in await q.lease_many(db, 30, 10, block=False):
            assert await q.complete(db, item) is True
            completed.append(item.id())
        await asyncio.sleep(0)
    await task
    assert transport.uses_functions(db) is True
    await db.aclose()
    return sorted(completed, key=lambda i: int(i[1:]))


@pytest.mark.real_redis
def test_two_releases_share_a_queue(
    real_db: redis.Redis, redis_server: Proc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rolling upgrade: clients of two library versions work one queue on one server."""
    real_db.function_flush()
    old_db = redis.Redis(host=redis_server.host, port=redis_server.port)
    new_db = redis.Redis(host=redis_server.host, port=redis_server.port)
    q = WorkQueue(KeyPrefix("fleet"))
    current = functions.library()
    assert q.add_item(old_db, Item(b"1", id="a")) and q.add_item(old_db, Item(b"2", id="b"))
    copy = tmp_path / "lua"
    shutil.copytree(loader.lua_dir(), copy)  # type: ignore[arg-type]
    lease = copy / "lease.lua"
    lease.write_text(lease.read_text("utf-8") + "-- the next release\n", "utf-8")
    upgraded = functions.build(copy)
    assert upgraded.name != current.name
    monkeypatch.setattr(functions, "library", lambda: upgraded)
    monkeypatch.setattr(lean, "_HEADS", {})
    item = q.lease(new_db, 30, block=False)
    assert item is not None and item.id() == "a"
    libraries = {entry[1].decode() for entry in real_db.function_list()}
    assert libraries == {current.name, upgraded.name}
    monkeypatch.undo()
    assert q.complete(old_db, item) is True  # the old release completes the new one's lease
    other = q.lease(old_db, 30, block=False)
    assert other is not None and other.id() == "b" and q.complete(old_db, other)
    assert q.queue_len(real_db) == 0 and q.processing(real_db) == 0


@pytest.mark.real_redis
def test_rwq_functions_install_and_status(
    real_db: redis.Redis, redis_server: Proc, capsys: pytest.CaptureFixture[str]
) -> None:
    real_db.function_flush()
    url = redis_server.url
    name = functions.library().name
    assert rwq(["--url", url, "functions", "status"]) == 1
    assert f"{name} not loaded" in capsys.readouterr().out
    assert rwq(["--url", url, "functions", "install"]) == 0
    assert f"{name} loaded" in capsys.readouterr().out
    assert rwq(["--url", url, "functions", "install"]) == 0  # once there, left as it is
    capsys.readouterr()
    assert rwq(["--url", url, "--json", "functions", "status"]) == 0
    assert f'"library": "{name}"' in capsys.readouterr().out
    # A user who may call functions but not load them works once they are installed.
    real_db.execute_command("ACL", "SETUSER", "caller", "on", ">pw", "~*", "+@all", "-function")
    try:
        user = redis.Redis(
            host=redis_server.host, port=redis_server.port, username="caller", password="pw"
        )
        real_db.config_resetstat()
        assert WorkQueue(KeyPrefix("fn")).add_item(user, Item(b"x"))
        assert transport.uses_functions(user) is True and calls_of(real_db, "fcall") == 1
    finally:
        real_db.execute_command("ACL", "DELUSER", "caller")


@pytest.mark.real_redis
def test_install_loads_every_primary_of_a_cluster(cluster_db: Any) -> None:
    """``rwq functions install`` on a cluster: every primary gets the library, and a cluster
    client calls it without loading it again."""
    for node in cluster_db.get_primaries():
        cluster_db.execute_command("FUNCTION", "FLUSH", target_nodes=node)
    before = functions.status(cluster_db)
    assert len(before) == 3 and not any(n.loaded for n in before)
    after = functions.install(cluster_db)
    assert len(after) == 3 and all(n.loaded for n in after)
    assert functions.install(cluster_db) == after  # loaded already: left as it is
    admins = _primaries(cluster_db)
    for admin in admins:
        admin.config_resetstat()
    q = WorkQueue(KeyPrefix("{fn}"))
    assert q.add_item(cluster_db, Item(b"x", id="a"))
    assert transport.uses_functions(cluster_db) is True
    assert sum(calls_of(a, "function|load") for a in admins) == 0
    assert sum(calls_of(a, "fcall") for a in admins) == 1


def _primaries(cluster_db: Any) -> list[redis.Redis]:
    return [redis.Redis(host=n.host, port=n.port) for n in cluster_db.get_primaries()]


def _owner(cluster_db: Any, key: str) -> redis.Redis:
    node = cluster_db.get_node_from_key(key)
    return redis.Redis(host=node.host, port=node.port)


@pytest.mark.real_redis
@pytest.mark.parametrize("api", ["sync", "async"])
def test_a_cluster_client_calls_functions_on_the_slots_primary(cluster_db: Any, api: str) -> None:
    """FCALL goes straight to the primary of the keys' slot (no key look-up, no EVALSHA); the
    library is loaded on every primary the first time; replies are those of the scripts;
    ``always`` and ``never`` are taken as on one server."""
    for node in cluster_db.get_primaries():
        cluster_db.execute_command("FUNCTION", "FLUSH", target_nodes=node)
    admins = _primaries(cluster_db)
    for admin in admins:
        admin.config_resetstat()
    prefixes = ["{fa}", "{fb}", "{fc}", "{fd}"]

    def run_sync() -> list[Any]:
        out: list[Any] = []
        for prefix in prefixes:
            q = WorkQueue(KeyPrefix(prefix))
            out += [q.add_item(cluster_db, Item(b"x", id="a"))]
            out += [q.add_item(cluster_db, Item(b"x", id="a"))]
            item = q.lease(cluster_db, 30, block=False)
            assert item is not None
            out += [
                item.id(),
                item.data(),
                q.complete(cluster_db, item),
                q.complete(cluster_db, item),
            ]
        assert transport.uses_functions(cluster_db) is True
        return out

    async def run_async() -> list[Any]:
        db = _cluster_of(cluster_db)
        out: list[Any] = []
        try:
            for prefix in prefixes:
                q = AsyncWorkQueue(KeyPrefix(prefix))
                out += [await q.add_item(db, Item(b"x", id="a"))]
                out += [await q.add_item(db, Item(b"x", id="a"))]
                item = await q.lease(db, 30, block=False)
                assert item is not None
                out += [item.id(), item.data(), await q.complete(db, item)]
                out += [await q.complete(db, item)]
            assert transport.uses_functions(db) is True
        finally:
            await db.aclose()
        return out

    got = run_sync() if api == "sync" else asyncio.run(run_async())
    assert got == [True, False, "a", b"x", True, False] * len(prefixes)
    assert all(functions.status(cluster_db)[i].loaded for i in range(3))
    assert sum(calls_of(a, "function|load") for a in admins) == 3
    assert sum(calls_of(a, "evalsha") + calls_of(a, "eval") for a in admins) == 0
    assert sum(calls_of(a, "command|getkeys") for a in admins) == 0
    for prefix in prefixes:  # each call ran on the primary of its slot
        owner = _owner(cluster_db, f"{prefix}:x")
        assert calls_of(owner, "fcall") >= 5
    transport.use_functions(cluster_db, "never")
    fcalls = sum(calls_of(a, "fcall") for a in admins)
    q = WorkQueue(KeyPrefix("{fa}"))
    assert q.add_item(cluster_db, Item(b"y"))
    assert sum(calls_of(a, "fcall") for a in admins) == fcalls
    assert sum(calls_of(a, "evalsha") for a in admins) == 1  # then EVAL: NOSCRIPT
    transport.use_functions(cluster_db, "always")
    assert q.add_item(cluster_db, Item(b"z"))
    assert transport.uses_functions(cluster_db) is True


def _cluster_of(cluster_db: Any) -> Any:
    from redis.asyncio.cluster import ClusterNode, RedisCluster  # noqa: PLC0415

    nodes = [ClusterNode(n.host, n.port) for n in cluster_db.get_primaries()]
    return RedisCluster(startup_nodes=nodes, socket_timeout=5, socket_connect_timeout=1)


@pytest.mark.real_redis
def test_a_cluster_queue_keeps_working_when_one_primary_loses_its_functions(
    cluster_db: Any,
) -> None:
    """FUNCTION FLUSH again and again on the primary of a queue's slot while a ``Worker``
    (8 threads, batching) works that queue and another primary's: every item is completed
    exactly once, no call fails, and the flushed primary is given the library again."""
    total = 300
    flushed_prefix, other_prefix = "{fa}", _on_another_primary(cluster_db, "{fa}")
    flushed = _owner(cluster_db, f"{flushed_prefix}:x")
    queues = [WorkQueue(KeyPrefix(flushed_prefix)), WorkQueue(KeyPrefix(other_prefix))]
    seen: list[str] = []
    lock = threading.Lock()

    def handler(item: Item) -> None:
        with lock:
            seen.append(item.id())

    worker = Worker(
        cluster_db, queues, handler, concurrency=8, poll_secs=0.05, heartbeat_secs=None,
        clean_secs=None,
    )  # fmt: skip
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(worker.run(signals=())))
    stop = threading.Event()
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        while not stop.is_set():
            flushed.function_flush()
            flushes += 1
            time.sleep(0.003)

    flushing = threading.Thread(target=flusher, daemon=True)
    producer = cluster_db
    thread.start()
    flushing.start()
    try:
        for n in range(total):
            q = queues[n % 2]
            assert q.add_item(producer, Item(b"x", id=f"i{n}"))
        deadline = time.monotonic() + 60
        while len(seen) < total or any(q.processing(producer) for q in queues):
            assert time.monotonic() < deadline, (len(seen), total)
            time.sleep(0.01)
    finally:
        stop.set()
        flushing.join()
        worker.stop()
        thread.join(30)
    assert sorted(seen, key=lambda i: int(i[1:])) == [f"i{n}" for n in range(total)]
    assert out and (out[0].completed, out[0].failed, out[0].lost) == (total, 0, 0)
    assert flushes > 3
    assert calls_of(flushed, "function|load") > 0  # loaded again after the flushes
    assert all(q.queue_len(producer) == 0 for q in queues)


def _on_another_primary(cluster_db: Any, prefix: str) -> str:
    """A hash-tagged prefix whose slot another primary owns than ``prefix``'s."""
    taken = cluster_db.get_node_from_key(f"{prefix}:x").name
    for n in range(1000):
        candidate = f"{{o{n}}}"
        if cluster_db.get_node_from_key(f"{candidate}:x").name != taken:
            return candidate
    raise AssertionError("no other primary")
