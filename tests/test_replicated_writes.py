"""A write that waits for replicas is sent once: a lost reply raises, it never re-runs.

The replica is stopped (SIGSTOP) so that WAIT blocks; the writer's connection is then killed
from an admin connection (CLIENT KILL) while it waits. The script ran once on the primary
(``INFO commandstats``), and the call raises OutcomeUnknownError, whatever the client's retry
settings. Sync, asyncio and Sentinel-managed clients alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.backoff import ConstantBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

import helpers
from helpers import in_thread
from redis_work_queue import (
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    OutcomeUnknownError,
    ReplicationError,
    WorkQueue,
    WorkQueueError,
    transport,
)
from servers import MASTER_NAME, Proc, ReplicaPair, SentinelSetup, in_sync, poll

pytestmark = pytest.mark.real_redis

P = KeyPrefix("once")
#: Long enough that WAIT is still blocked when the test kills the connection.
PATIENT = 20.0


@pytest.fixture
def pair(replica_pair: ReplicaPair) -> Iterator[ReplicaPair]:
    """The pair, emptied and in sync, with the replica stopped for the test."""
    replica_pair.reset()
    replica_pair.primary.admin().config_resetstat()
    replica_pair.replica.pause()
    try:
        yield replica_pair
    finally:
        replica_pair.replica.resume()


def script_calls(primary: Proc) -> int:
    return helpers.script_calls(primary.admin())


def kill_the_waiting_client(primary: Proc) -> None:
    helpers.kill_clients_in(primary.admin(), "wait")


CLIENTS: dict[str, dict[str, Any]] = {
    "default retry": {},
    "resp3, decoded replies": {"protocol": 3, "decode_responses": True},
    "retry on timeout, 5 retries": {
        "retry_on_timeout": True,
        "retry": Retry(ConstantBackoff(0.05), 5),
    },
}


@pytest.mark.parametrize("options", CLIENTS.values(), ids=CLIENTS.keys())
@pytest.mark.parametrize("operation", ["add_item", "complete"])
def test_sync_lost_reply_raises_and_the_script_ran_once(
    pair: ReplicaPair, options: dict[str, Any], operation: str
) -> None:
    primary = pair.primary
    db = redis.Redis(host=primary.host, port=primary.port, socket_timeout=30, **options)
    q = WorkQueue(P, replica_timeout=PATIENT)
    try:
        q.add_item(db, Item(b"data", id="one"))
        leased = q.lease(db, 60, block=False)
        assert leased is not None
        primary.admin().config_resetstat()
        if operation == "add_item":
            thread, outcome = in_thread(lambda: q.add_item(db, Item(b"two", id="two"), replicas=1))
        else:
            thread, outcome = in_thread(lambda: q.complete(db, leased, replicas=1))
        kill_the_waiting_client(primary)
        thread.join(10)
        assert not thread.is_alive()
        (err,) = outcome
        assert isinstance(err, OutcomeUnknownError), err
        assert isinstance(err, WorkQueueError)
        assert isinstance(err, redis.ConnectionError)
        assert "may or may not have happened" in str(err)
        assert err.operation == ("add" if operation == "add_item" else "complete")
        assert script_calls(primary) == 1
        # The write did happen, once: the next call says so rather than doing it again.
        if operation == "add_item":
            assert q.add_item(db, Item(b"two", id="two")) is False
            assert q.queue_len(db) == 1
        else:
            assert q.complete(db, leased) is False
    finally:
        db.close()


def test_sync_short_socket_timeout_still_gets_the_wait_answer(pair: ReplicaPair) -> None:
    """A socket timeout shorter than the replica timeout: WAIT's answer, not a lost reply."""
    primary = pair.primary
    db = redis.Redis(
        host=primary.host, port=primary.port, socket_timeout=0.5, retry_on_timeout=True
    )
    q = WorkQueue(P, replicas=1, replica_timeout=1.0)
    try:
        started = time.monotonic()
        with pytest.raises(ReplicationError) as raised:
            q.add_item(db, Item(b"x", id="x"))
        assert 0.9 <= time.monotonic() - started < 5
        assert (raised.value.acked, raised.value.result) == (0, True)
        assert script_calls(primary) == 1
    finally:
        db.close()


def test_sync_server_without_the_script_loads_it_first(pair: ReplicaPair) -> None:
    """SCRIPT FLUSH under a client that had loaded the script: NOSCRIPT, then sent again."""
    primary = pair.primary
    pair.replica.resume()
    db = primary.client()
    transport.use_functions(db, "never")
    q = WorkQueue(P, replicas=1, replica_timeout=5)
    assert q.add_item(db, Item(b"", id="a")) is True
    primary.admin().script_flush()
    primary.admin().config_resetstat()
    assert q.add_item(db, Item(b"", id="b")) is True
    stats = primary.admin().info("commandstats")
    assert stats["cmdstat_evalsha"]["failed_calls"] == 1  # NOSCRIPT: the script did not run
    assert stats["cmdstat_eval"]["calls"] == 1
    assert q.queue_len(db) == 2


def test_asyncio_lost_reply_raises_and_the_script_ran_once(pair: ReplicaPair) -> None:
    primary = pair.primary

    async def scenario() -> None:
        db = redis.asyncio.Redis(
            host=primary.host, port=primary.port, socket_timeout=30, retry_on_timeout=True
        )
        q = AsyncWorkQueue(P, replicas=1, replica_timeout=PATIENT)
        try:
            await q.add_item(db, Item(b"", id="warm"), replicas=0)
            primary.admin().config_resetstat()
            task = asyncio.ensure_future(q.add_item(db, Item(b"two", id="two")))
            await asyncio.to_thread(kill_the_waiting_client, primary)
            with pytest.raises(OutcomeUnknownError) as raised:
                await asyncio.wait_for(task, 10)
            assert isinstance(raised.value, redis.ConnectionError)
            assert script_calls(primary) == 1
            assert await q.add_item(db, Item(b"two", id="two"), replicas=0) is False
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))


def test_sentinel_managed_client_never_reruns(sentinel_setup: SentinelSetup) -> None:
    primary = sentinel_setup.by_port(sentinel_setup.master_port())
    replica = next(p for p in sentinel_setup.pair.procs() if p is not primary)
    primary.admin().flushall()
    poll(lambda: in_sync(primary, replica), 10, "the replica to be in sync")
    sentinel = Sentinel([sentinel_setup.address], socket_timeout=2, socket_connect_timeout=1)
    db = sentinel.master_for(MASTER_NAME, socket_timeout=30, retry_on_timeout=True)
    q = WorkQueue(P, replicas=1, replica_timeout=PATIENT)
    q.add_item(db, Item(b"", id="warm"), replicas=0)
    primary.admin().config_resetstat()
    replica.pause()
    try:
        thread, outcome = in_thread(lambda: q.add_item(db, Item(b"two", id="two")))
        kill_the_waiting_client(primary)
        thread.join(10)
        assert not thread.is_alive()
        (err,) = outcome
        assert isinstance(err, OutcomeUnknownError), err
        assert script_calls(primary) == 1
    finally:
        replica.resume()
    assert q.add_item(db, Item(b"two", id="two"), replicas=0) is False
    db.close()


def test_a_batch_reports_the_chunks_written_before_the_lost_reply() -> None:
    """The error carries what is known: the chunks acknowledged before the one that was lost."""
    q = WorkQueue(P, replicas=1)
    lost = OutcomeUnknownError("add", redis.ConnectionError("reset"))
    steps = q.ops.add([Item(b"", id=f"i{n}") for n in range(700)], False)
    first = next(steps)
    assert len(first.args) > 500  # the first chunk: 500 items
    steps.send(([1] * 500, 1))  # its reply, acknowledged by one replica
    with pytest.raises(OutcomeUnknownError) as raised:
        steps.throw(lost)
    assert raised.value.result == [True] * 500
    # One item: nothing is known.
    one = q.ops.add_one(Item(b"", id="x"), False)
    next(one)
    with pytest.raises(OutcomeUnknownError) as single:
        one.throw(OutcomeUnknownError("add", redis.ConnectionError("reset")))
    assert single.value.result is None


def test_single_connection_clients(pair: ReplicaPair) -> None:
    """A client with one connection of its own sends the pair on that connection."""
    pair.replica.resume()
    primary = pair.primary
    db = redis.Redis(host=primary.host, port=primary.port, single_connection_client=True)
    q = WorkQueue(P, replicas=1, replica_timeout=5)
    try:
        assert q.add_item(db, Item(b"", id="a")) is True
        assert q.add_item(db, Item(b"", id="a")) is False
        assert q.queue_len(db) == 1
    finally:
        db.close()

    async def scenario() -> None:
        adb = redis.asyncio.Redis(
            host=primary.host, port=primary.port, single_connection_client=True
        )
        aq = AsyncWorkQueue(P, replicas=1, replica_timeout=5)
        try:
            results = await asyncio.gather(
                *(aq.add_item(adb, Item(b"", id=f"c{n}")) for n in range(5))
            )
            assert results == [True] * 5  # concurrent tasks share the one connection in turn
            assert await aq.queue_len(adb) == 6
        finally:
            await adb.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))
    assert helpers.script_calls(primary.admin()) == 7


def test_asyncio_sentinel_managed_client_never_reruns(sentinel_setup: SentinelSetup) -> None:
    from redis.asyncio.sentinel import Sentinel as AsyncSentinel  # noqa: PLC0415

    primary = sentinel_setup.by_port(sentinel_setup.master_port())
    replica = next(p for p in sentinel_setup.pair.procs() if p is not primary)
    primary.admin().flushall()
    poll(lambda: in_sync(primary, replica), 10, "the replica to be in sync")

    async def scenario() -> None:
        sentinel = AsyncSentinel([sentinel_setup.address], socket_timeout=2)
        db = sentinel.master_for(MASTER_NAME, socket_timeout=30)
        q = AsyncWorkQueue(P, replicas=1, replica_timeout=PATIENT)
        try:
            await q.add_item(db, Item(b"", id="warm"), replicas=0)
            primary.admin().config_resetstat()
            replica.pause()
            try:
                task = asyncio.ensure_future(q.add_item(db, Item(b"two", id="two")))
                await asyncio.to_thread(kill_the_waiting_client, primary)
                with pytest.raises(OutcomeUnknownError):
                    await asyncio.wait_for(task, 10)
            finally:
                replica.resume()
            assert script_calls(primary) == 1
            assert await q.add_item(db, Item(b"two", id="two"), replicas=0) is False
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 60))
