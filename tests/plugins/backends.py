"""Where a test's data lives: the session's real redis-server under each client flavour
(RESP2/RESP3, bytes/str replies), or a private fakeredis server; ``db`` and its kin.

A module of sharded queue tests (``QUEUE_SHARDS``, see ``plugins/queues.py``) also runs on the
session's Redis Cluster: its ``backend``, ``bytes_backend`` or ``real_backend`` is then
:data:`SHARDED_CLUSTER`, whose clients are cluster clients.

Every test that needs a real server is marked ``real_redis`` (``-m "not real_redis"`` runs the
fakeredis half of the suite only).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster

from servers import Cluster, Proc

#: The backend of a sharded queue over the session's Redis Cluster (``plugins/queues.py``).
SHARDED_CLUSTER = "sharded-cluster"


@dataclass
class Backend:
    """Where a test's data lives: the session's real server, or a private fakeredis server."""

    name: str
    real: bool
    options: dict[str, Any]
    server: Proc | None = None
    fake_server: fakeredis.FakeServer | None = None
    cluster: Cluster | None = None
    #: The module's cluster clients, by their options (see ``cluster_clients``).
    cluster_clients: dict[tuple[tuple[str, Any], ...], RedisCluster] | None = None

    def client(self, **overrides: Any) -> redis.Redis:
        """Another client of the same data, of the same flavour unless overridden (on a
        cluster, the module's client of those options: a cluster client is thread-safe, and
        slow to make)."""
        options = {**self.options, **overrides}
        if self.cluster is not None and self.cluster_clients is not None:
            key = tuple(sorted(options.items()))
            if key not in self.cluster_clients:
                made = self.cluster.client(**options)
                self.cluster.clients.remove(made)  # closed with the module, not the test
                self.cluster_clients[key] = made
            client: redis.Redis = self.cluster_clients[key]  # type: ignore[assignment]
            return client
        if self.server is not None:
            return self.server.client(**options)
        return fakeredis.FakeRedis(server=self.fake_server, **options)

    @property
    def url(self) -> str:
        assert self.server is not None, "only a real server has a URL"
        return self.server.url


REAL_FLAVOURS = {
    "redis-resp2-bytes": {"decode_responses": False, "protocol": 2},
    "redis-resp3-str": {"decode_responses": True, "protocol": 3},
    "redis-resp2-str": {"decode_responses": True, "protocol": 2},
}
FAKE_FLAVOURS = {
    "fakeredis-bytes": {"decode_responses": False},
    "fakeredis-str": {"decode_responses": True},
}


def _real_backend(
    request: pytest.FixtureRequest, server: Proc, name: str, options: dict[str, Any]
) -> Backend:
    """The session's server, emptied; the clients the test makes of it are closed after it."""
    request.addfinalizer(functools.partial(server.close_clients_since, len(server.clients)))
    backend = Backend(name=name, real=True, options=options, server=server)
    admin = server.client()
    admin.flushall()
    admin.script_flush()
    return backend


@pytest.fixture(scope="module")
def cluster_clients(
    cluster: Cluster,
) -> Iterator[dict[tuple[tuple[str, Any], ...], RedisCluster]]:
    """The session's cluster, checked healthy for this module, and the module's clients of it
    (and their asyncio twins), closed at its end."""
    cluster.wait_healthy()
    made: dict[tuple[tuple[str, Any], ...], RedisCluster] = {}
    try:
        yield made
    finally:
        from async_bridge import close_twins  # noqa: PLC0415 (only when needed)

        close_twins()
        for client in made.values():
            client.close()


def _cluster_backend(request: pytest.FixtureRequest) -> Backend:
    """The session's cluster, emptied (every primary, the replicas caught up)."""
    cluster: Cluster = request.getfixturevalue("cluster")
    clients = request.getfixturevalue("cluster_clients")
    cluster.flushall()
    request.addfinalizer(cluster.close_clients)
    return Backend(
        name=SHARDED_CLUSTER,
        real=True,
        options={"decode_responses": False},
        cluster=cluster,
        cluster_clients=clients,
    )


def _make_backend(request: pytest.FixtureRequest, name: str) -> Backend:
    if name == SHARDED_CLUSTER:
        return _cluster_backend(request)
    if name in REAL_FLAVOURS:
        server = request.getfixturevalue("redis_server")
        return _real_backend(request, server, name, dict(REAL_FLAVOURS[name]))
    return Backend(
        name=name, real=False, options=dict(FAKE_FLAVOURS[name]), fake_server=fakeredis.FakeServer()
    )


@pytest.fixture(params=[*REAL_FLAVOURS, *FAKE_FLAVOURS])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Every client flavour: real Redis (RESP2/RESP3, bytes/str replies) and fakeredis."""
    return _make_backend(request, request.param)


@pytest.fixture(params=["redis-resp2-bytes", "fakeredis-bytes"])
def bytes_backend(request: pytest.FixtureRequest) -> Backend:
    """Real Redis and fakeredis, one plain bytes client flavour each: for tests whose subject
    (server-side effects) does not depend on how replies are decoded."""
    return _make_backend(request, request.param)


@pytest.fixture
def bytes_db(bytes_backend: Backend) -> redis.Redis:
    """A client of a freshly emptied database: real Redis and fakeredis, bytes replies."""
    return bytes_backend.client()


@pytest.fixture
def db(backend: Backend) -> redis.Redis:
    """A client of a freshly emptied database, parametrized over real Redis and fakeredis."""
    return backend.client()


@pytest.fixture
def real_backend(request: pytest.FixtureRequest) -> Backend:
    """The session's real server, emptied for this test, with a bytes RESP2 client flavour
    (or, for a sharded queue module's cluster run, the session's cluster)."""
    if getattr(request, "param", None) == SHARDED_CLUSTER:
        return _cluster_backend(request)
    return _real_backend(
        request,
        request.getfixturevalue("redis_server"),
        "redis-resp2-bytes",
        dict(REAL_FLAVOURS["redis-resp2-bytes"]),
    )


@pytest.fixture
def real_db(real_backend: Backend) -> redis.Redis:
    """A client of the (emptied) real server, for blocking, timing, process and SLOWLOG tests."""
    return real_backend.client()


@pytest.fixture
def redis_url(real_backend: Backend) -> str:
    """The URL of the (emptied) real server, for subprocesses."""
    return real_backend.url


@pytest.fixture
def redis_port(real_backend: Backend) -> int:
    """The port of the (emptied) real server."""
    assert real_backend.server is not None
    return real_backend.server.port


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test that needs a real redis-server ``real_redis`` (``-m "not real_redis"``
    runs the fakeredis half of the suite only)."""
    real_fixtures = {"redis_server", "redis_server_factory", "real_backend", "real_db"}
    real_fixtures |= {"redis_url", "redis_port", "module_redis", "cluster", "cluster_db"}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        flavours = {params.get("backend"), params.get("bytes_backend")}
        if names & real_fixtures or flavours & {*REAL_FLAVOURS, SHARDED_CLUSTER}:
            item.add_marker(pytest.mark.real_redis)
