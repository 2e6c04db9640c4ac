"""Fixtures: private redis-server processes, client flavours, and fakeredis.

The suite never talks to port 6379: every real server is started here, on a free port, with
persistence switched off, and stopped at teardown.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis

from redis_work_queue import WorkQueue

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    # Spawned worker processes import ``workers`` by name; the parent needs it too.
    sys.path.insert(0, str(TESTS_DIR))

FORBIDDEN_PORT = 6379
START_DEADLINE_SECS = 10.0


def redis_server_binary() -> str:
    """The path of ``redis-server``; skip (or, in CI, fail) the test when there is none."""
    found = shutil.which("redis-server")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("redis-server not found; CI requires a real Redis", pytrace=False)
        pytest.skip("redis-server not found on PATH")
    return found


def free_port() -> int:
    """A TCP port that was free a moment ago (never 6379)."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port != FORBIDDEN_PORT:
            return port


@dataclass
class RedisServer:
    """One redis-server process owned by the test suite."""

    port: int
    process: subprocess.Popen[bytes]
    workdir: Path
    clients: list[redis.Redis] = field(default_factory=list)

    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this server; closed when the server is stopped."""
        client = redis.Redis(host=self.host, port=self.port, **kwargs)
        self.clients.append(client)
        return client

    def stop(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):  # best effort at teardown
                client.close()
        self.clients.clear()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def start_redis_server(workdir: Path) -> RedisServer:
    """Start a redis-server on a free port and wait (with a deadline) until it answers PING."""
    binary = redis_server_binary()
    last_error = "never started"
    for _attempt in range(5):
        port = free_port()
        assert port != FORBIDDEN_PORT
        server_dir = workdir / f"redis-{port}"
        server_dir.mkdir(parents=True, exist_ok=True)
        log = server_dir / "redis.log"
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(server_dir),
                "--logfile",
                str(log),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        server = RedisServer(port=port, process=process, workdir=server_dir)
        deadline = time.monotonic() + START_DEADLINE_SECS
        probe = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1)
        try:
            while time.monotonic() < deadline:
                if process.poll() is not None:
                    last_error = f"exited with {process.returncode}: " + (
                        log.read_text(errors="replace")[-2000:] if log.exists() else ""
                    )
                    break
                try:
                    if probe.ping():
                        return server
                except redis.ConnectionError as err:
                    last_error = str(err)
                time.sleep(0.02)
            else:
                last_error = f"no PING reply within {START_DEADLINE_SECS} s"
        finally:
            probe.close()
        server.stop()  # a port race or a slow start: try again on another port
    pytest.fail(f"could not start redis-server: {last_error}", pytrace=False)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The session's own redis-server (started lazily, by the first test that needs it)."""
    server = start_redis_server(tmp_path_factory.mktemp("redis-session"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_server_factory(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[[], RedisServer]]:
    """Start extra servers for a test that needs its own; all are stopped at teardown."""
    started: list[RedisServer] = []

    def start() -> RedisServer:
        server = start_redis_server(tmp_path_factory.mktemp("redis-extra"))
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()


@dataclass
class Backend:
    """Where a test's data lives: the session's real server, or a private fakeredis server."""

    name: str
    real: bool
    options: dict[str, Any]
    server: RedisServer | None = None
    fake_server: fakeredis.FakeServer | None = None

    def client(self, **overrides: Any) -> redis.Redis:
        """Another client of the same data, of the same flavour unless overridden."""
        options = {**self.options, **overrides}
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


def _real_backend(server: RedisServer, name: str, options: dict[str, Any]) -> Backend:
    backend = Backend(name=name, real=True, options=options, server=server)
    admin = server.client()
    admin.flushall()
    admin.script_flush()
    return backend


def _make_backend(request: pytest.FixtureRequest, name: str) -> Backend:
    if name in REAL_FLAVOURS:
        server = request.getfixturevalue("redis_server")
        return _real_backend(server, name, dict(REAL_FLAVOURS[name]))
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
def real_backend(redis_server: RedisServer) -> Backend:
    """The session's real server, emptied for this test, with a bytes RESP2 client flavour."""
    return _real_backend(
        redis_server, "redis-resp2-bytes", dict(REAL_FLAVOURS["redis-resp2-bytes"])
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
    real_fixtures |= {"redis_url", "redis_port", "module_redis"}
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        flavours = {params.get("backend"), params.get("bytes_backend")}
        if names & real_fixtures or flavours & set(REAL_FLAVOURS):
            item.add_marker(pytest.mark.real_redis)


@pytest.fixture(params=["sync", "asyncio"])
def queue_kind(request: pytest.FixtureRequest) -> Callable[..., WorkQueue]:
    """Make queues of either API: WorkQueue, or AsyncWorkQueue behind a blocking bridge.

    Test files whose ``queue`` fixture uses it run every case on both APIs.
    """
    if request.param == "sync":
        return WorkQueue
    from async_bridge import BlockingAsyncQueue  # noqa: PLC0415 (only when needed)

    return BlockingAsyncQueue


# The reference Node.js client, built from source for the interop suite (test_interop_node.py).

#: Where the reference clients' source lives: beside the repository (``../shared``), or where
#: RWQ_REFERENCE_NODE points.
REFERENCE_NODE_CANDIDATES = (
    TESTS_DIR.parent.parent / "shared" / "peers" / "mevitae" / "node",
    Path("/work/shared/peers/mevitae/node"),
)
NODE_BUILD_DEADLINE_SECS = 600


def _skip_or_fail(reason: str) -> None:
    """Skip a ``node`` test, or fail it under CI=true (CI must run the interop suite)."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI requires the Node.js interop suite", pytrace=False)
    pytest.skip(f"{reason} (deselect with -m 'not node')")


def _reference_node_source() -> Path | None:
    configured = os.environ.get("RWQ_REFERENCE_NODE")
    candidates = (Path(configured),) if configured else REFERENCE_NODE_CANDIDATES
    for candidate in candidates:
        if (candidate / "package.json").is_file() and (candidate / "src").is_dir():
            return candidate
    return None


def _source_digest(source: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(source.rglob("*")):
        if path.is_file() and "node_modules" not in path.parts and "dist" not in path.parts:
            digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    digest.update(shutil.which("node").encode() if shutil.which("node") else b"")
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def reference_node(request: pytest.FixtureRequest) -> Path:
    """A build of the reference Node.js client: a directory with ``dist/`` and ``node_modules/``.

    The source is copied out (never built in place), installed with ``npm ci`` (its lock file)
    and compiled with ``npx tsc``, under the pytest cache (or the temp dir, without one) keyed
    by the source's hash, so later runs reuse it.
    """
    node, npm, npx = (shutil.which(name) for name in ("node", "npm", "npx"))
    if node is None or npm is None or npx is None:
        _skip_or_fail("node, npm or npx not found on PATH")
    source = _reference_node_source()
    if source is None:
        _skip_or_fail("the reference Node.js client's source was not found")
    assert source is not None and npm is not None and npx is not None
    cache = getattr(request.config, "cache", None)  # None with -p no:cacheprovider
    if cache is not None:
        cache_root = Path(cache.mkdir("reference-node"))
    else:
        cache_root = Path(tempfile.gettempdir()) / "rwq-reference-node"
        cache_root.mkdir(exist_ok=True)
    build = cache_root / _source_digest(source)
    if (build / "dist" / "WorkQueue.js").is_file():
        return build
    staging = Path(tempfile.mkdtemp(prefix="build-", dir=cache_root))
    try:
        shutil.copytree(
            source,
            staging,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns("dist", "node_modules"),
        )
        env = {**os.environ, "npm_config_audit": "false", "npm_config_fund": "false"}
        for command in (
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            [npx, "--no-install", "tsc"],
        ):
            done = subprocess.run(
                command,
                cwd=staging,
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=NODE_BUILD_DEADLINE_SECS,
                check=False,
            )
            if done.returncode != 0:
                pytest.fail(
                    f"building the reference Node.js client failed: {' '.join(command)}:\n"
                    f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
                    pytrace=False,
                )
        with contextlib.suppress(OSError):  # another run finished the same build first
            staging.rename(build)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    assert (build / "dist" / "WorkQueue.js").is_file()
    return build


@pytest.fixture(scope="module")
def module_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server of the test module's own (for suites that run other programs on it)."""
    server = start_redis_server(tmp_path_factory.mktemp("redis-module"))
    try:
        yield server
    finally:
        server.stop()
