"""Fixtures of throw-away servers, all started by the one launcher (``servers.py``).

A missing ``redis-server``, ``redis-cli`` or ``openssl`` skips the test that needs it, or fails
it under ``CI=true`` (CI must run every test).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Generator, Iterator

import pytest
from redis.cluster import RedisCluster

from servers import (
    Cluster,
    MissingTool,
    Proc,
    ReplicaPair,
    SentinelSetup,
    TlsServer,
    create_cluster,
    start_pair,
    start_sentinel_setup,
    start_server,
    start_tls_server,
    stop_all,
)


@contextlib.contextmanager
def tools() -> Iterator[None]:
    """Skip the test (or, under CI=true, fail it) when a program it needs is not installed.

    Fixtures start their servers inside it (a fixture's error is cached and raised again for
    every test that shares the fixture, past any hook); a test's own body is covered by
    ``pytest_runtest_call`` below.
    """
    try:
        yield
    except MissingTool as err:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{err}; CI requires a real Redis", pytrace=False)
        pytest.skip(str(err))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None]:
    with tools():
        return (yield)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """The session's own redis-server (started lazily, by the first test that needs it)."""
    with tools():
        server = start_server(tmp_path_factory.mktemp("redis-session"), client_timeout=None)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A redis-server of the test module's own (for suites that run other programs on it, or
    change its configuration)."""
    with tools():
        server = start_server(tmp_path_factory.mktemp("redis-module"), client_timeout=None)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A redis-server of the test's own, which the test may pause, kill, restart or stop."""
    with tools():
        proc = start_server(tmp_path_factory.mktemp("redis-own"))
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def redis_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], Proc]]:
    """Start extra servers for a test that needs its own; all are stopped at teardown."""
    started: list[Proc] = []

    def start() -> Proc:
        with tools():
            proc = start_server(tmp_path_factory.mktemp("redis-extra"), client_timeout=None)
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        stop_all(started)


@pytest.fixture(scope="module")
def replica_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPair]:
    """A primary and its replica (``--replicaof``), linked and in sync; stopped at teardown."""
    with tools():
        pair = start_pair(tmp_path_factory.mktemp("pair"))
    try:
        yield pair
    finally:
        stop_all(pair.procs())


@pytest.fixture(scope="module")
def sentinel_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary with a replica and a sentinel that watches them and knows both."""
    with tools():
        setup = start_sentinel_setup(tmp_path_factory.mktemp("sentinel"))
    try:
        yield setup
    finally:
        stop_all(setup.procs())


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    """A redis-server with a TLS port beside its plain one, and the CA that signed its
    certificate."""
    with tools():
        made = start_tls_server(tmp_path_factory.mktemp("tls"))
    try:
        yield made
    finally:
        made.proc.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local Redis Cluster of three primaries with one replica each, for the session."""
    with tools():
        made = create_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield made
    finally:
        made.close_clients()
        stop_all(made.nodes)


@pytest.fixture
def cluster_db(cluster: Cluster) -> Iterator[RedisCluster]:
    """A client of the session cluster, healthy and emptied for this test."""
    cluster.wait_healthy()
    cluster.flushall()
    client = cluster.client()
    try:
        yield client
    finally:
        cluster.close_clients()
