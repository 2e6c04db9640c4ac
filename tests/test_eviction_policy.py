"""An eviction policy that may drop queue keys is loud: one WARNING per client, and ``rwq info``.

A real redis-server of the test's own, set to each ``maxmemory-policy`` in turn; users whose ACL
refuses CONFIG (the check falls back to INFO) or both (it says nothing).
"""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

import pytest
import redis
import redis.asyncio

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.server import (
    acheck_eviction,
    aeviction_policy,
    check_eviction,
    eviction_policy,
    may_evict,
)
from servers import Proc

pytestmark = pytest.mark.real_redis

POLICIES = [
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
]


def warnings_logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "redis_work_queue.server" and r.levelno == logging.WARNING
    ]


def test_each_policy_sync(server: Proc, caplog: pytest.LogCaptureFixture) -> None:
    admin = server.client()
    for policy in POLICIES:
        admin.config_set("maxmemory-policy", policy)
        caplog.clear()
        db = server.client()  # a new client: its first check may log
        assert eviction_policy(db) == policy
        first = check_eviction(db)
        again = check_eviction(db)
        if policy == "noeviction":
            assert first is None
            assert again is None
            assert warnings_logged(caplog) == []
            continue
        assert first is not None
        assert again == first
        assert policy in first
        assert "noeviction" in first
        assert warnings_logged(caplog) == [first]  # once per client, however often it is asked


def test_each_policy_asyncio(server: Proc, caplog: pytest.LogCaptureFixture) -> None:
    admin = server.client()

    async def scenario(policy: str) -> None:
        db = redis.asyncio.Redis(host=server.host, port=server.port, decode_responses=True)
        try:
            assert await aeviction_policy(db) == policy
            first = await acheck_eviction(db)
            again = await acheck_eviction(db)
            assert (first is None) == (policy == "noeviction")
            assert again == first
        finally:
            await db.aclose()

    for policy in POLICIES:
        admin.config_set("maxmemory-policy", policy)
        caplog.clear()
        asyncio.run(asyncio.wait_for(scenario(policy), 30))
        expected = 0 if policy == "noeviction" else 1
        assert len(warnings_logged(caplog)) == expected


def test_policy_read_from_info_when_config_is_refused(
    server: Proc, caplog: pytest.LogCaptureFixture
) -> None:
    admin = server.client()
    admin.config_set("maxmemory-policy", "volatile-lru")
    admin.acl_setuser(
        "noconfig", enabled=True, passwords=["+pw"], commands=["+@all", "-config"], keys=["~*"]
    )
    admin.acl_setuser(
        "blind",
        enabled=True,
        passwords=["+pw"],
        commands=["+@all", "-config", "-info"],
        keys=["~*"],
    )
    limited = server.client(username="noconfig", password="pw")
    with pytest.raises(redis.ResponseError):
        limited.config_get("maxmemory-policy")
    assert eviction_policy(limited) == "volatile-lru"
    assert check_eviction(limited) is not None
    caplog.clear()
    blind = server.client(username="blind", password="pw")
    assert eviction_policy(blind) is None
    assert check_eviction(blind) is None  # nothing known, nothing said
    assert warnings_logged(caplog) == []
    # The queue itself works for both.
    assert WorkQueue(KeyPrefix("acl")).add_item(blind, Item(b"", id="a")) is True


def test_volatile_policies_count_because_every_lease_has_an_expiry() -> None:
    assert not may_evict("noeviction")
    assert not may_evict("NoEviction")
    assert all(may_evict(p) for p in POLICIES if p != "noeviction")


def rwq(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", "--url", url, *args],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_rwq_info_reports_the_policy(server: Proc) -> None:
    admin = server.client()
    WorkQueue(KeyPrefix("jobs")).add_item(admin, Item(b"", id="a"))
    done = rwq(server.url, "info", "jobs")
    assert done.returncode == 0, done.stderr
    assert "maxmemory-policy" not in done.stderr
    done = rwq(server.url, "info", "jobs", "--json")
    row = json.loads(done.stdout)["jobs"]
    assert (row["queued"], row["maxmemory_policy"], row["eviction_warning"]) == (
        1,
        "noeviction",
        None,
    )

    admin.config_set("maxmemory-policy", "allkeys-lru")
    done = rwq(server.url, "info", "jobs")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1].split()[:2] == ["jobs", "1"]
    (line,) = [line for line in done.stderr.splitlines() if "maxmemory-policy" in line]
    assert line.startswith("rwq: warning: Redis maxmemory-policy is allkeys-lru")
    done = rwq(server.url, "info", "jobs", "--json")
    row = json.loads(done.stdout)["jobs"]
    assert row["maxmemory_policy"] == "allkeys-lru"
    assert "set maxmemory-policy noeviction" in row["eviction_warning"].lower()


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_worker_warns_at_start_on_an_evicting_server(
    server: Proc, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """The worker runtime checks the policy when it starts: one warning naming it."""
    from redis_work_queue import AsyncWorker, AsyncWorkQueue, Worker  # noqa: PLC0415

    server.client().config_set("maxmemory-policy", "allkeys-lru")
    caplog.set_level(logging.WARNING, logger="redis_work_queue.server")
    if kind == "threads":
        worker = Worker(server.url, [WorkQueue(KeyPrefix("ev"))], lambda item: None, poll_secs=0.1)
        worker.stop()
        worker.run(signals=())
    else:

        async def main() -> None:
            queues = [AsyncWorkQueue(KeyPrefix("ev"))]

            async def handler(item: Item) -> None:
                return None

            worker = AsyncWorker(server.url, queues, handler, poll_secs=0.1)
            worker.stop()
            await worker.run(signals=())

        asyncio.run(main())
    logged = warnings_logged(caplog)
    assert len(logged) == 1
    assert "allkeys-lru" in logged[0]
    assert "noeviction" in logged[0]


@pytest.mark.parametrize("policy", ["allkeys-lru", "noeviction"])
def test_a_producer_hears_of_it_on_its_first_write(
    server: Proc, caplog: pytest.LogCaptureFixture, policy: str
) -> None:
    """A queue used only to add (a web app) warns once per client, on its first call."""
    server.client().config_set("maxmemory-policy", policy)
    caplog.set_level(logging.WARNING, logger="redis_work_queue.server")
    db = server.client()
    queue = WorkQueue(KeyPrefix("producer"))
    for n in range(5):
        assert queue.add_item(db, Item(b"", id=f"p{n}")) is True
    other = server.client()
    assert queue.add_item(other, Item(b"", id="other")) is True
    logged = warnings_logged(caplog)
    if policy == "noeviction":
        assert logged == []
        return
    assert len(logged) == 2  # one per client, not one per write
    assert all("allkeys-lru" in line and "noeviction" in line for line in logged)
    assert check_eviction(db) is not None
    assert len(warnings_logged(caplog)) == 2  # the client was told already


def test_an_asyncio_producer_hears_of_it_on_its_first_write(
    server: Proc, caplog: pytest.LogCaptureFixture
) -> None:
    from redis_work_queue import AsyncWorkQueue  # noqa: PLC0415

    server.client().config_set("maxmemory-policy", "volatile-ttl")
    caplog.set_level(logging.WARNING, logger="redis_work_queue.server")

    async def main() -> None:
        db = redis.asyncio.Redis(host=server.host, port=server.port)
        queue = AsyncWorkQueue(KeyPrefix("aproducer"))
        for n in range(3):
            assert await queue.add_item(db, Item(b"", id=f"p{n}")) is True
        await db.aclose()

    asyncio.run(main())
    logged = warnings_logged(caplog)
    assert len(logged) == 1 and "volatile-ttl" in logged[0]


def test_a_producer_that_may_not_read_the_policy_is_told_nothing(
    server: Proc, caplog: pytest.LogCaptureFixture
) -> None:
    admin = server.client()
    admin.config_set("maxmemory-policy", "allkeys-lru")
    admin.acl_setuser(
        "quiet",
        enabled=True,
        passwords=["+pw"],
        commands=["+@all", "-config", "-info"],
        keys=["~*"],
    )
    caplog.set_level(logging.DEBUG, logger="redis_work_queue.server")
    db = server.client(username="quiet", password="pw")
    assert WorkQueue(KeyPrefix("quiet")).add_item(db, Item(b"", id="a")) is True
    assert warnings_logged(caplog) == []
