"""The least-privilege ACL of the docs is enough for the whole public API, and no more.

The ``ACL SETUSER`` line of ``docs/operations.md`` (section "Permissions") is read from that
page, a user is made with it on a server of the test's own, restricted to one prefix's keys, and
every public operation (sync and asyncio, the worker runners, cleans, flush, dead letters,
stats) runs as that user. The line must also name every command the scripts send, so a command
added to a script without adding it to the line fails here.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aredis
from redis.exceptions import NoPermissionError

from lifecycle_handlers import calls, handle, job
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    ReplicationError,
    ScriptError,
    Worker,
    WorkQueue,
    alease_from,
    lease_from,
    scripts,
    transport,
)
from redis_work_queue.ops import registry
from redis_work_queue.scripts import preload
from servers import Proc

ROOT = Path(__file__).resolve().parents[1]
USER, PASSWORD = "rwq-test", "rwq-test-secret"
#: The queues the user may touch: ``~acl:*`` covers prefixes ``acl:a`` and ``acl:b``.
PREFIXES = ("acl:a", "acl:b")
WAIT_SECS = 20


def readme_acl_line() -> str:
    """The ``ACL SETUSER`` line of the Permissions section of ``docs/operations.md``."""
    text = (ROOT / "docs" / "operations.md").read_text("utf-8")
    section = text.split("\n## Permissions\n", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("ACL SETUSER ")]
    assert len(lines) == 1, "the Permissions section holds one ACL SETUSER line"
    return lines[0]


def acl_args(pattern: str) -> list[str]:
    """The docs' line for this test's user, restricted to ``pattern``."""
    args = shlex.split(readme_acl_line())
    assert args[:3] == ["ACL", "SETUSER", "worker"]
    assert ">secret" in args and "~jobs:*" in args
    out = [USER if a == "worker" else a for a in args]
    out = [f">{PASSWORD}" if a == ">secret" else a for a in out]
    return [pattern if a == "~jobs:*" else a for a in out]


#: A second user: the docs' line without Redis Functions, so its calls take the scripts' path.
SCRIPTS_USER = "rwq-test-scripts"
FUNCTION_GRANTS = ("+fcall", "+function|load")


def scripts_acl_args(pattern: str) -> list[str]:
    """The docs' line without FCALL and FUNCTION LOAD, for :data:`SCRIPTS_USER`."""
    args = [a for a in acl_args(pattern) if a not in FUNCTION_GRANTS]
    return [SCRIPTS_USER if a == USER else a for a in args]


def granted() -> set[str]:
    return {a[1:].lower() for a in shlex.split(readme_acl_line()) if a.startswith("+")}


#: Upper-case words in the scripts that are options or messages, not commands.
NOT_COMMANDS = {
    "COUNT",
    "EX",
    "KEEPTTL",
    "LIMIT",
    "MATCH",
    "MAXLEN",
    "NX",
    "PX",
    "RANK",
    "WITHSCORES",
    "WRONGTYPE",
}


def test_the_line_names_every_command_of_the_scripts() -> None:
    """Every quoted upper-case word of the scripts is a command the line grants, or an option."""
    words: set[str] = set()
    for path in [*(ROOT / "lua").glob("*.lua"), *(ROOT / "lua" / "include").glob("*.lua")]:
        words |= set(re.findall(r"'([A-Z]{2,})'", path.read_text("utf-8")))
    called = {word.lower() for word in words - NOT_COMMANDS}
    assert {"time", "type", "strlen", "hincrby"} <= called  # the scan finds them
    missing = called - granted()
    assert not missing, f"commands the scripts call but the ACL line does not grant: {missing}"


def script_commands(name: str) -> set[str]:
    """The commands a script sends, as it is sent (its includes' definitions it uses only)."""
    text = scripts.load(name).script.decode()
    return {word.lower() for word in set(re.findall(r"'([A-Z]{2,})'", text)) - NOT_COMMANDS}


def test_the_line_grants_what_every_registered_operation_sends() -> None:
    """Each operation of the registry: its scripts' commands, running them (EVALSHA, or EVAL
    when the server has not loaded one) and its other commands, unless it copes with a refusal
    (the eviction policy's read)."""
    allowed = granted()
    operations = registry.operations()
    assert {"add_one", "lease_from", "heartbeat_steps"} <= set(operations)  # control
    for op in operations.values():
        needed = {command.lower() for command in op.commands}
        for name in op.scripts:
            needed |= {"fcall", "function|load", "evalsha", "eval"} | script_commands(name)
        missing = needed - allowed
        assert op.refusable or not missing, (
            f"{op.name} needs what the line does not grant: {missing}"
        )
    assert {"hincrby", "time", "strlen"} <= script_commands("add")  # the scan finds them


@pytest.fixture(scope="module")
def acl_server(module_redis: Proc) -> Proc:
    """This module's own server, with the docs' user on ``~acl:*``."""
    module_redis.client().execute_command(*acl_args("~acl:*"))
    module_redis.client().execute_command(*scripts_acl_args("~acl:*"))
    return module_redis


@pytest.fixture
def admin(acl_server: Proc) -> redis.Redis:
    db = acl_server.client()
    db.flushdb()
    db.script_flush()
    db.function_flush()
    return db


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def protocol(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(params=["functions", "scripts"])
def path(request: pytest.FixtureRequest) -> str:
    """Which user: the docs' line (functions), or the line without them (scripts)."""
    return str(request.param)


@pytest.fixture
def user_db(acl_server: Proc, admin: redis.Redis, protocol: int, path: str) -> redis.Redis:
    """A client that logs in as the restricted user."""
    user = USER if path == "functions" else SCRIPTS_USER
    return acl_server.client(username=user, password=PASSWORD, protocol=protocol, socket_timeout=10)


def user_url(server: Proc) -> str:
    return f"redis://{USER}:{PASSWORD}@{server.host}:{server.port}/0"


def wait_for(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECS
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


@pytest.mark.real_redis
def test_the_user_is_restricted(user_db: redis.Redis) -> None:
    """Control: the user cannot touch another prefix's keys, nor run other commands."""
    with pytest.raises(ScriptError, match=r"(?i)no permissions"):
        WorkQueue(KeyPrefix("elsewhere")).add_item(user_db, Item(b"x", id="x"))
    with pytest.raises(NoPermissionError):
        user_db.flushdb()
    with pytest.raises(NoPermissionError):
        user_db.keys("*")


@pytest.mark.real_redis
def test_the_whole_sync_api_runs_as_the_user(
    user_db: redis.Redis, admin: redis.Redis, acl_server: Proc, path: str
) -> None:
    db = user_db
    a, b = (WorkQueue(KeyPrefix(p), max_deliveries=2) for p in PREFIXES)
    preload(db)
    assert a.add_item(db, Item(b"1", id="i1"))
    assert not a.add_item(db, Item(b"1", id="i1"))
    a.add_unique_item(db, Item(b"2", id="i2"))
    assert a.add_items(db, [Item(b"3", id="i3"), Item(b"4", id="i4")]) == [True, True]
    assert a.add_item(db, Item(b"5", id="i5"), delay=0.05)
    assert a.add_item(db, Item(b"6", id="i6"), ttl=60)
    with db.pipeline(transaction=False) as pipe:
        a.add_item_to_pipeline(pipe, Item(b"7", id="i7"))
        a.add_unique_item_to_pipeline(pipe, Item(b"8", id="i8"))
        pipe.execute()
    assert len(a.peek(db, 0, 10)) == 7
    assert [p.data for p in a.peek(db, 0, 2, preview_bytes=0)] == [b"", b""]
    assert a.item_data(db, "i1") == b"1"
    assert a.stats(db).queued == 7 and a.queue_len(db) == 7

    first = a.lease(db, 30, block=False)
    assert first is not None and first.id() == "i1"
    assert a.renew(db, first, 30)
    assert a.release(db, first, reason="again")  # back of the queue
    assert a.processing(db) == 0
    many = a.lease_many(db, 30, 3, block=False)
    assert [item.id() for item in many] == ["i2", "i3", "i4"]
    assert a.complete_many(db, many) == many
    with a.leased(db, 30, block=False) as item:
        assert item is not None
    held = a.lease(db, 30, block=True, timeout=1)
    assert held is not None
    assert a.pending(db, 0, 10)[0].id == held.id()
    assert a.complete(db, held)
    once = a.lease(db, 30, block=False, at_most_once=True)
    assert once is not None
    # Blocking on an empty queue: the item arrives while the worker waits (BRPOPLPUSH + claim).
    wait_for(
        lambda: (
            a.lease(db, 30, block=False, at_most_once=True) is None and a.stats(db).delayed == 0
        ),
        "the queue to drain",
    )
    adder = threading.Timer(0.2, lambda: a.add_item(admin, Item(b"late", id="late")))
    adder.start()
    late = a.lease(db, 30, timeout=5)
    adder.join()
    assert late is not None and late.id() == "late"
    assert a.complete(db, late)
    # Several queues: blocking on their wake lists (BLPOP).
    adder = threading.Timer(0.2, lambda: b.add_item(admin, Item(b"b", id="b1")))
    adder.start()
    got = lease_from(db, [a, b], 30, timeout=5)
    adder.join()
    assert got is not None and got[1].id() == "b1"
    assert b.complete(db, got[1])

    # Dead letters: two deliveries, then buried.
    assert a.add_item(db, Item(b"d", id="dead"))
    for _ in range(2):
        item = a.lease(db, 30, block=False)
        assert item is not None and item.id() == "dead"
        a.release(db, item, reason="boom")
    assert a.dead_count(db) == 1 and a.dead_letters(db)[0].reason == "boom"
    assert a.dead_letters(db, 0, 1, preview_bytes=0)[0].size == 1
    assert a.item_data(db, "dead", dead=True) == b"d"
    assert a.requeue_dead(db) == 1
    item = a.lease(db, 30, block=False)
    assert item is not None
    a.release(db, item)
    item = a.lease(db, 30, block=False)
    assert item is not None
    a.release(db, item)
    assert a.purge_dead(db, ["dead"]) == 1

    # Cleans: an expired lease, a lost item, bookkeeping of a gone item.
    assert a.add_item(db, Item(b"x", id="expired"))
    expired = a.lease(db, 30, block=False)
    assert expired is not None
    admin.delete(a.keys.lease("expired"))
    assert a.light_clean(db).requeued == 1
    admin.set(a.keys.item("lost"), b"lost")
    assert a.deep_clean(db).requeued == 1

    # Synchronous replication: WAIT is allowed (there are no replicas to acknowledge).
    with pytest.raises(ReplicationError):
        a.add_item(db, Item(b"w", id="waited"), replicas=1)
    assert a.flush(db).keys > 0
    assert b.flush(db).keys >= 0
    assert admin.dbsize() == 0
    assert transport.uses_functions(db) is (path == "functions")
    assert path == "scripts" or admin.function_list()  # the user loaded the library


@pytest.mark.real_redis
@pytest.mark.parametrize("processes", [False, True], ids=["threads", "processes"])
def test_the_worker_runs_as_the_user(admin: redis.Redis, acl_server: Proc, processes: bool) -> None:
    """The runner leases, completes, and releases a failure for a retry, as the user."""
    queue = WorkQueue(KeyPrefix(PREFIXES[0]))
    # The handler records its calls through the admin's URL, outside the user's keys.
    assert queue.add_item(admin, Item(job(acl_server.url, "acl-log"), id="ok"))
    assert queue.add_item(admin, Item(job(acl_server.url, "acl-log", fail_until=1), id="flaky"))
    worker = Worker(
        user_url(acl_server), [queue], handle, backoff=0.05, poll_secs=0.2, processes=processes
    )
    out: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: out.update(stats=worker.run(signals=())))
    thread.start()
    try:
        wait_for(
            lambda: (
                calls(admin, "acl-log") == {"ok": 1, "flaky": 2}
                and queue.queue_len(admin) == 0
                and queue.processing(admin) == 0
            ),
            "the worker to finish both jobs",
        )
    finally:
        worker.stop()
        thread.join(timeout=WAIT_SECS)
    assert out["stats"].completed == 2 and out["stats"].failed == 1


@pytest.mark.real_redis
def test_the_whole_asyncio_api_runs_as_the_user(
    admin: redis.Redis, acl_server: Proc, protocol: int
) -> None:
    async def main() -> None:
        db = aredis.Redis(
            host=acl_server.host,
            port=acl_server.port,
            username=USER,
            password=PASSWORD,
            protocol=protocol,
        )
        async with db:
            await exercise_async(db, admin, acl_server)

    asyncio.run(main())


async def exercise_async(db: aredis.Redis, admin: redis.Redis, server: Proc) -> None:
    a, b = (AsyncWorkQueue(KeyPrefix(p), max_deliveries=2) for p in PREFIXES)
    assert await a.add_item(db, Item(b"1", id="i1"))
    await a.add_unique_item(db, Item(b"2", id="i2"))
    assert await a.add_items(db, [Item(b"3", id="i3")], delay=0.05) == [True]
    assert await a.add_item(db, Item(b"4", id="i4"), ttl=60)
    async with db.pipeline(transaction=False) as pipe:
        a.add_item_to_pipeline(pipe, Item(b"5", id="i5"))
        await pipe.execute()
    assert (await a.stats(db)).queued == 4
    assert len(await a.peek(db)) == 4
    assert [p.size for p in await a.peek(db, 0, 1, preview_bytes=0)] == [1]
    assert await a.item_data(db, "i1") == b"1"
    first = await a.lease(db, 30, block=False)
    assert first is not None
    assert await a.renew(db, first, 30)
    assert len(await a.pending(db)) == 1
    assert await a.release(db, first, delay=0.01, reason="again")
    many = await a.lease_many(db, 30, 10, block=True, timeout=1)
    assert many
    assert await a.complete_many(db, many) == many
    async with a.leased(db, 30, block=True, timeout=1) as item:
        assert item is not None
    deadline = time.monotonic() + WAIT_SECS
    while (await a.stats(db)).delayed or await a.queue_len(db):
        assert time.monotonic() < deadline, "the queue did not drain"
        await a.lease(db, 30, block=False, at_most_once=True)
        await asyncio.sleep(0.01)
    # Blocking: on one queue (BRPOPLPUSH + claim), then on several (BLPOP).
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, lambda: WorkQueue(a.name).add_item(admin, Item(b"l", id="late")))
    late = await a.lease(db, 30, timeout=5)
    assert late is not None and late.id() == "late"
    assert await a.complete(db, late)
    loop.call_later(0.2, lambda: WorkQueue(b.name).add_item(admin, Item(b"b", id="b1")))
    got = await alease_from(db, [a, b], 30, timeout=5)
    assert got is not None and got[1].id() == "b1"
    assert await b.complete(db, got[1])
    # Dead letters.
    assert await a.add_item(db, Item(b"d", id="dead"))
    for _ in range(2):
        item = await a.lease(db, 30, block=False)
        assert item is not None
        await a.release(db, item, reason="boom")
    assert await a.dead_count(db) == 1 and (await a.dead_letters(db))[0].id == "dead"
    assert (await a.dead_letters(db, 0, 1, preview_bytes=0))[0].size == 1
    assert await a.item_data(db, "dead", dead=True) == b"d"
    assert await a.requeue_dead(db, ["dead"]) == 1
    assert await a.processing(db) == 0
    for _ in range(2):
        item = await a.lease(db, 30, block=False)
        assert item is not None
        await a.release(db, item)
    assert await a.purge_dead(db) == 1
    # Cleans.
    assert await a.add_item(db, Item(b"x", id="expired"))
    assert await a.lease(db, 30, block=False) is not None
    admin.delete(a.keys.lease("expired"))
    assert (await a.light_clean(db)).requeued == 1
    admin.set(a.keys.item("lost"), b"lost")
    assert (await a.deep_clean(db)).requeued == 1
    with pytest.raises(ReplicationError):
        await a.add_item(db, Item(b"w", id="waited"), replicas=1)
    # The asyncio runner.
    queue = AsyncWorkQueue(KeyPrefix(PREFIXES[1]))
    assert await queue.add_item(db, Item(b"job", id="job"))
    ran: list[str] = []

    async def handle(item: Item) -> None:
        ran.append(item.id())

    worker = AsyncWorker(user_url(server), [queue], handle, poll_secs=0.2)

    async def stop_when_done() -> None:
        deadline = time.monotonic() + WAIT_SECS
        while not ran and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        worker.stop()

    stopper = asyncio.create_task(stop_when_done())
    await asyncio.wait_for(worker.run(signals=()), WAIT_SECS + 5)
    await stopper
    assert ran == ["job"]
    assert (await a.flush(db)).keys > 0
    await b.flush(db)
    await queue.flush(db)
    assert admin.dbsize() == 0
