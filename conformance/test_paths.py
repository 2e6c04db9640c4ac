"""Which redis-py this is, how a client's path is chosen, and writes that wait for a replica.

The release under test is the one asked for and lies in the range ``pyproject.toml`` allows;
``transport.use`` takes the paths it names and refuses the lean path for a client it does not
take (a single-connection client, on every release), whose calls then still work on the public
path; writes that wait for a replica (WAIT, on a connection borrowed from the pool) give the
same replies and keys on every path.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import pytest
import redis
import redis.asyncio

from conftest import VERSION_ENV
from helpers import dump_state
from lanes import (
    FLAVOURS,
    Check,
    Lane,
    Loop,
    Scenario,
    ScriptRoutes,
    aclose,
    closing,
    make_lanes,
    run_lanes,
    snapshot,
)
from redis_work_queue import (
    AsyncWorkQueue,
    InvalidArgumentError,
    Item,
    KeyPrefix,
    ReplicationError,
    WorkQueue,
    transport,
)
from servers import Proc, ReplicaPair

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"


def release(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def test_the_redis_py_imported_is_the_one_asked_for() -> None:
    wanted = os.environ.get(VERSION_ENV)
    if os.environ.get("CI", "").lower() == "true":
        assert wanted, f"CI runs the conformance tests through conformance/run.py ({VERSION_ENV})"
    if wanted is not None:
        assert redis.__version__ == wanted


def test_the_release_is_one_the_package_allows() -> None:
    (lowest,) = re.findall(r'"redis>=([0-9.]+)', PYPROJECT.read_text())
    assert release(redis.__version__) >= release(lowest)


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_use_refuses_a_path_it_does_not_know(api: str) -> None:
    client = redis.Redis() if api == "sync" else redis.asyncio.Redis()
    with pytest.raises(InvalidArgumentError, match="'auto', 'public' or 'lean'"):
        transport.use(client, "fast")  # type: ignore[arg-type]


def test_a_single_connection_client_takes_the_public_path(
    redis_server: Proc, routes: ScriptRoutes
) -> None:
    db = redis.Redis(
        host=redis_server.host, port=redis_server.port, db=9, single_connection_client=True
    )
    db.flushdb()
    assert not transport.lean_available(db)
    with pytest.raises(InvalidArgumentError, match="does not take this client"):
        transport.use(db, "lean")
    queue = WorkQueue(KeyPrefix("single"))
    assert queue.add_item(db, Item(b"s", id="s"))
    item = queue.lease(db, 30, block=False)
    assert item == Item(b"s", id="s")
    assert queue.complete(db, item)
    routes.expect("single-connection client", db, "auto")
    db.close()


def test_an_asyncio_single_connection_client_takes_the_public_path(
    redis_server: Proc, routes: ScriptRoutes
) -> None:
    async def main() -> None:
        db = redis.asyncio.Redis(
            host=redis_server.host, port=redis_server.port, db=9, single_connection_client=True
        )
        await db.flushdb()
        assert not transport.lean_available(db)
        with pytest.raises(InvalidArgumentError, match="does not take this client"):
            transport.use(db, "lean")
        queue = AsyncWorkQueue(KeyPrefix("single"))
        assert await queue.add_item(db, Item(b"s", id="s"))
        item = await queue.lease(db, 30, block=False)
        assert item == Item(b"s", id="s")
        assert await queue.complete(db, item)
        routes.expect("asyncio single-connection client", db, "auto")
        await aclose(db)

    asyncio.run(main())


def test_the_snapshot_reads_what_dump_state_reads(redis_server: Proc) -> None:
    """The lanes' pipelined snapshot reads every type as the suite's ``dump_state`` does."""
    admin = redis.Redis(host=redis_server.host, port=redis_server.port, db=10)
    admin.flushdb()
    admin.set("s", b"\xff\x00")
    admin.rpush("l", "b", "a")
    admin.hset("h", mapping={"k": "v", "a": "1"})
    admin.sadd("set", "y", "x")
    admin.zadd("z", {"m": 1.5, "n": 1795737217669})
    admin.set("t", "ttl", px=60_000)
    got, want = snapshot(admin), dump_state(admin, ttl_step_ms=1)
    assert abs(got[b"t"][2] - want[b"t"][2]) < 1000
    got[b"t"] = want[b"t"]
    assert got == want
    assert [kind for kind, _, _ in got.values()] == [
        "hash",
        "list",
        "string",
        "set",
        "string",
        "zset",
    ]
    admin.flushdb()
    admin.close()


def replicated(pair: ReplicaPair) -> Scenario:
    def scenario(lane: Lane, check: Check) -> None:
        index = lane.admin.connection_pool.connection_kwargs["db"]
        replica = redis.Redis(host=pair.replica.host, port=pair.replica.port, db=index)
        try:
            q = lane.queue("repl", replicas=1, replica_timeout=5)
            check(
                "add_item waits for the replica",
                lane.do(q.add_item, Item(b"r", id="r")),
                True,
                keys=lambda s: replica.get("repl:item:r") == b"r",
            )
            check(
                "add_items waits for the replica",
                lane.do(q.add_items, [Item(b"r2", id="r2"), Item(b"r", id="r")]),
                [True, False],
            )
            items = check(
                "lease_many", lane.do(q.lease_many, 30, 2, block=False), lambda r: len(r) == 2
            )
            check(
                "complete waits for the replica",
                lane.do(q.complete, items[0]),
                True,
                keys=lambda s: replica.exists("repl:item:r") == 0,
            )
            check(
                "complete_many waits for the replica",
                lane.do(q.complete_many, items[1:]),
                items[1:],
            )
            check(
                "add_item asking for the replica on the call",
                lane.do(lane.queue("call").add_item, Item(b"c", id="c"), replicas=1),
                True,
                keys=lambda s: replica.get("call:item:c") == b"c",
            )
            too_many = lane.queue("many", replicas=2, replica_timeout=0.1)
            check.raises(
                "add_item waiting for more replicas than there are",
                ReplicationError,
                lambda: lane.do(too_many.add_item, Item(b"m", id="m")),
            )
        finally:
            replica.close()

    return scenario


@pytest.mark.parametrize("flavour", ["resp2-bytes", "resp3-str"])
def test_writes_that_wait_for_a_replica_are_the_same_on_every_path(
    replica_pair: ReplicaPair, loop: Loop, flavour: str
) -> None:
    with closing(make_lanes(replica_pair.primary, FLAVOURS[flavour], loop)) as lanes:
        run_lanes(lanes, replicated(replica_pair))
