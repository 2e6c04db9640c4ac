"""Fixtures of the fault suite: the connection-cutting proxy, the server to SIGKILL and start
again with its data, the server out of memory, and the results server."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from faults import OomServer
from plugins.servers import tools
from servers import Proc, Proxy, start_server


@pytest.fixture
def proxy_factory() -> Iterator[Callable[[int], Proxy]]:
    """Make proxies in front of a port; every one is stopped at teardown."""
    made: list[Proxy] = []

    def make(target_port: int) -> Proxy:
        proxy = Proxy(target_port)
        made.append(proxy)
        return proxy

    try:
        yield make
    finally:
        for proxy in made:
            proxy.stop()


@pytest.fixture
def aof_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A fresh redis-server with an append-only file (``appendfsync always``): after
    ``kill()``, ``restart()`` finds every acknowledged write, on the same port."""
    with tools():
        proc = start_server(tmp_path_factory.mktemp("aof"), aof=True)
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def oom_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OomServer]:
    """A fresh redis-server that :meth:`OomServer.exhaust` runs out of memory."""
    with tools():
        server = OomServer(start_server(tmp_path_factory.mktemp("oom")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def results_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A redis-server apart from the one under fault, where handlers record what they saw."""
    with tools():
        proc = start_server(tmp_path_factory.mktemp("results"))
    try:
        yield proc
    finally:
        proc.stop()
