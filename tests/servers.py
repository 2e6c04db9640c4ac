"""Throw-away Redis servers for the tests and the benchmarks: one launcher for all of them.

What it starts, each on free ports (never 6379, nor 7000-7199 and their bus ports, where a
cluster for manual experiments may run) and with persistence off (``--save ""
--appendonly no``) unless asked for:

* :func:`start_server`: one redis-server (:class:`Proc`), which a test may pause, SIGKILL and
  start again on its port (:meth:`Proc.restart`); with ``aof=True`` it keeps an append-only
  file (``appendfsync always``) so that every acknowledged write survives the SIGKILL;
* :func:`start_pair`: a primary and one replica (:class:`ReplicaPair`), in sync;
* :func:`start_sentinel`: a Sentinel watching a pair as ``mymaster`` (:class:`SentinelSetup`);
* :func:`create_cluster`: a Redis Cluster of N primaries with R replicas each (:class:`Cluster`);
* :func:`start_tls_server`: a redis-server with a TLS port beside its plain one, its certificate
  signed by a throw-away CA (:class:`TlsServer`; needs ``openssl``);
* :class:`Proxy`: a TCP proxy in front of a server that cuts connections on demand or at
  random, and can stop forwarding (a server that never answers).

Every process is stopped by its PID when it is stopped, when the interpreter exits (``atexit``)
and, with :class:`Spawn` ``die_with_parent``, when its parent dies however it dies (the kernel
sends it SIGTERM). :class:`Spawn` also pins a process to CPUs (the benchmarks' ``--pin``).
A SIGTERM ends a benchmark through ``sys.exit`` (:func:`exit_on_sigterm`), so the same clean-up
runs. Every wait is a poll with a deadline.

This module needs only ``redis`` (no pytest): the tests' fixtures (``tests/plugins/``) and the
benchmarks (``bench/``, which put ``tests/`` on ``sys.path``) both use it. A missing program
(``redis-server``, ``redis-cli``, ``openssl``) raises :class:`MissingTool`; the fixtures turn it
into a skip, or a failure under ``CI=true``. ``RWQ_REDIS_SERVER`` names another ``redis-server``
binary (its ``redis-cli`` is taken from beside it).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

T = TypeVar("T")

#: The Redis every developer runs: never started, used or flushed here.
FORBIDDEN_PORT = 6379
START_SECS = 10.0
CLUSTER_SECS = 30.0
#: Names another redis-server binary.
BINARY_ENV = "RWQ_REDIS_SERVER"
#: Ports handed out in this process (a port is reserved before its server binds it).
_RESERVED: set[int] = set()
#: A cluster for manual experiments may be running on these: never use them.
_AVOID = {FORBIDDEN_PORT, *range(7000, 7200), *range(17000, 17200)}


class MissingTool(RuntimeError):
    """A program the caller needs is not installed (the fixtures skip, or fail in CI)."""


def tool(name: str) -> str:
    """The path of ``redis-server`` or ``redis-cli`` (beside ``RWQ_REDIS_SERVER`` if set).

    Raises:
        MissingTool: There is none.
    """
    configured = os.environ.get(BINARY_ENV)
    if configured:
        server = shutil.which(configured)
        if server is None:
            raise MissingTool(f"{BINARY_ENV}={configured!r} is not an executable")
        if name == "redis-server":
            return server
        sibling = Path(server).with_name(name)
        if sibling.is_file():
            return str(sibling)
    found = shutil.which(name)
    if found is None:
        raise MissingTool(f"{name} not found on PATH")
    return found


def redis_server_binary() -> str:
    """The path of ``redis-server`` (see :func:`tool`)."""
    return tool("redis-server")


def poll(
    predicate: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.02,
    not_yet: tuple[type[Exception], ...] = (redis.RedisError, OSError),
) -> T:
    """Call ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    The errors in ``not_yet`` (Redis and socket errors unless told) raised by the predicate
    count as "not yet". ``what`` may be a function, called for the failure message only.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except not_yet as err:
            last = err
        if time.monotonic() >= deadline:
            told = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout} s waiting for {told} (last: {last!r})")
        time.sleep(interval)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    """The first port the kernel hands out to outgoing connections (32768 unless set)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(bus: bool = False) -> int:
    """A port (below 55535, never 6379) that was free a moment ago; with ``bus``, port + 10000
    (a cluster node's bus port) was free too.

    Ports are taken below the kernel's ephemeral range where there is room, so that a killed
    node started again on its port does not find it taken by some client's outgoing socket.
    """
    rng = random.Random()
    low, high = 20000, min(_ephemeral_low(), 55535)
    if bus:
        high -= 10000
    if high - low < 1000:
        low, high = 20000, 45535 if bus else 55535
    for _ in range(2000):
        port = rng.randrange(low, high)
        wanted = (port, port + 10000) if bus else (port,)
        if any(p in _AVOID or p in _RESERVED for p in wanted):
            continue
        if all(_bindable(p) for p in wanted):
            _RESERVED.update(wanted)
            return port
    raise AssertionError("no free port found")


def parse_info(text: str) -> dict[str, str]:
    """``key:value`` lines (INFO, CLUSTER INFO) as a dict."""
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {k: v.strip() for k, v in pairs}


def info(proc: Proc, section: str) -> dict[str, str]:
    """An INFO section of ``proc`` as a dict of strings."""
    reply = proc.admin().execute_command("INFO", section)
    if isinstance(reply, dict):
        return {str(k): str(v) for k, v in reply.items()}
    return parse_info(reply.decode() if isinstance(reply, bytes) else str(reply))


# Starting processes ------------------------------------------------------------------------------


def _load_prctl() -> Callable[..., int] | None:
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL("libc.so.6", use_errno=True).prctl  # type: ignore[no-any-return]
    return None


#: Loaded in the parent: a child between fork and exec must not load a library.
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Spawn:
    """How a child process is started.

    Attributes:
        cpus: Pin it to these CPUs (``sched_setaffinity``), or leave it where the OS puts it.
        die_with_parent: The kernel sends it SIGTERM when the process (thread) that started it
            dies, even by SIGKILL. For the benchmarks, which start everything from their main
            thread; the tests stop their processes in fixtures (and at exit).
    """

    cpus: frozenset[int] | None = None
    die_with_parent: bool = False

    def _setup(self) -> None:  # runs in the child, between fork and exec
        if self.cpus is not None:
            os.sched_setaffinity(0, self.cpus)
        if self.die_with_parent and _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)

    def popen_kwargs(self) -> dict[str, Any]:
        """The ``subprocess.Popen`` arguments that apply this spawn (none when it is plain)."""
        if self.cpus is None and not self.die_with_parent:
            return {}
        return {"preexec_fn": self._setup}


PLAIN = Spawn()

#: Every process started here and not yet stopped, by PID: stopped at exit.
_LIVE: dict[int, subprocess.Popen[bytes]] = {}
_LIVE_LOCK = threading.Lock()


def _reap(process: subprocess.Popen[bytes]) -> None:
    """Stop ``process`` (SIGCONT, SIGTERM, then SIGKILL) and forget it."""
    with _LIVE_LOCK:
        _LIVE.pop(process.pid, None)
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(process.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


@atexit.register
def stop_everything() -> None:
    """Stop every process this module started and that is still running."""
    with _LIVE_LOCK:
        left = list(_LIVE.values())
    for process in left:
        with contextlib.suppress(Exception):  # stop the others whatever happens
            _reap(process)


def exit_on_sigterm() -> None:
    """Make SIGTERM end this process like Ctrl-C (``sys.exit(143)``): ``finally`` blocks and
    :func:`stop_everything` run, so no server outlives it."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


@dataclass
class Proc:
    """One redis-server (or sentinel) process, started and stopped here."""

    port: int
    argv: list[str]
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    clients: list[Any] = field(default_factory=list)
    host: str = "127.0.0.1"
    spawn: Spawn = PLAIN
    #: The default ``socket_timeout`` of :meth:`client` (None: block as long as a command does).
    client_timeout: float | None = 5.0
    #: Times :meth:`restart` ran.
    restarts: int = 0
    _admin: redis.Redis | None = None

    @property
    def log(self) -> Path:
        return self.workdir / "redis.log"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def launch(self) -> None:
        """Start the process (again) with its arguments and wait until it answers PING."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            self.argv,
            cwd=self.workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            **self.spawn.popen_kwargs(),
        )
        with _LIVE_LOCK:
            _LIVE[self.process.pid] = self.process
        probe = redis.Redis(host=self.host, port=self.port, socket_timeout=1)
        try:

            def answers() -> bool:
                if not self.alive():
                    raise AssertionError(f"redis-server on {self.port} exited: {self.tail()}")
                return bool(probe.ping())

            poll(answers, START_SECS, f"PING on port {self.port}")
        finally:
            probe.close()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def admin(self) -> redis.Redis:
        """This process's one admin client (short timeouts; decoded replies)."""
        if self._admin is None:
            self._admin = self.client(
                socket_timeout=2, socket_connect_timeout=1, decode_responses=True
            )
        return self._admin

    def text(self, *args: Any) -> str:
        """The reply of a command whose reply is text (such as CLUSTER NODES), unparsed."""
        reply = self.admin().execute_command(*args)
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new client of this process; closed when it is stopped."""
        kwargs.setdefault("socket_timeout", self.client_timeout)
        client = redis.Redis(host=self.host, port=self.port, **kwargs)
        self.clients.append(client)
        return client

    def close_clients_since(self, mark: int) -> None:
        """Close the clients made since ``len(self.clients)`` was ``mark`` (one test's, on a
        server that outlives it), so that their sockets do not pile up over a session."""
        made = self.clients[mark:]
        del self.clients[mark:]
        for client in made:
            with contextlib.suppress(Exception):  # best effort at teardown
                client.close()
        if self._admin is not None and any(client is self._admin for client in made):
            self._admin = None

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, without a word to its replicas (and without a
        last write: with ``aof``, only what was fsynced survives)."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=5)

    def restart(self) -> None:
        """SIGKILL it if it runs, start it again on the same port (from its append-only file,
        with ``aof``) and wait until it answers."""
        self.kill()
        self.launch()
        self.restarts += 1

    def stop(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):  # best effort at teardown
                client.close()
        self.clients.clear()
        self._admin = None
        if self.process is not None:
            _reap(self.process)


def server_argv(port: int, workdir: Path, *extra: str, aof: bool = False) -> list[str]:
    """A redis-server's command line: persistence off (or, with ``aof``, an append-only file
    fsynced at every write), its files in ``workdir``."""
    persistence = (
        ("--appendonly", "yes", "--appendfsync", "always") if aof else ("--appendonly", "no")
    )
    return [
        redis_server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        *persistence,
        "--dir", str(workdir),
        "--logfile", str(workdir / "redis.log"),
        # replicas sync at once (the default waits 5 s for more replicas to join a transfer)
        "--repl-diskless-sync-delay", "0",
        *extra,
    ]  # fmt: skip


def start_server(
    base: Path,
    *extra: str,
    bus: bool = False,
    aof: bool = False,
    spawn: Spawn = PLAIN,
    client_timeout: float | None = 5.0,
) -> Proc:
    """Start a redis-server on a free port (trying other ports on a start-up race).

    Args:
        base: The directory under which the server gets a directory of its own.
        extra: More command-line options (a replica's, a cluster node's).
        bus: Its port + 10000 (a cluster node's bus port) must be free too.
        aof: Keep an append-only file (``appendfsync always``): :meth:`Proc.restart` after
            :meth:`Proc.kill` finds every acknowledged write.
        spawn: CPU pinning and parent-death signal.
        client_timeout: The default ``socket_timeout`` of its clients.
    """

    def make(port: int) -> Proc:
        workdir = base / f"node-{port}"
        argv = server_argv(port, workdir, *extra, aof=aof)
        return Proc(port, argv, workdir, spawn=spawn, client_timeout=client_timeout)

    return _launch_on_a_free_port(make, "redis-server", bus)


def _launch_on_a_free_port(make: Callable[[int], Proc], what: str, bus: bool = False) -> Proc:
    """Launch ``make(port)`` on a free port, on another one after a start-up race (5 tries)."""
    last: AssertionError | None = None
    for _ in range(5):
        proc = make(free_port(bus=bus))
        try:
            proc.launch()
            return proc
        except AssertionError as err:
            last = err
            proc.stop()
    raise AssertionError(f"could not start a {what}: {last}")


def stop_all(procs: list[Proc]) -> None:
    errors = []
    for proc in procs:
        try:
            proc.stop()
        except Exception as err:  # stop every one, then report
            errors.append(err)
    if errors:
        raise errors[0]


def in_sync(primary: Proc, replica: Proc) -> bool:
    """The replica's link is up and it has every byte of the primary's replication stream."""
    rinfo = info(replica, "replication")
    pinfo = info(primary, "replication")
    return rinfo.get("master_link_status") == "up" and rinfo.get("slave_repl_offset") == pinfo.get(
        "master_repl_offset"
    )


def wait_in_sync(primary: Proc, replica: Proc, timeout: float = 10.0) -> None:
    poll(lambda: in_sync(primary, replica), timeout, f"replica {replica.port} in sync")


# Replica pairs -----------------------------------------------------------------------------------


@dataclass
class ReplicaPair:
    """A primary and one replica of it."""

    primary: Proc
    replica: Proc

    def procs(self) -> list[Proc]:
        return [self.primary, self.replica]

    def reset(self) -> None:
        """Empty the primary and wait until the replica has caught up."""
        self.replica.resume()
        self.primary.admin().flushall()
        wait_in_sync(self.primary, self.replica)


def start_pair(base: Path, spawn: Spawn = PLAIN) -> ReplicaPair:
    """A primary and its replica (``--replicaof``), linked and in sync."""
    primary = start_server(base, spawn=spawn)
    try:
        replica = start_server(base, "--replicaof", "127.0.0.1", str(primary.port), spawn=spawn)
    except BaseException:
        primary.stop()
        raise
    pair = ReplicaPair(primary, replica)
    try:
        wait_in_sync(primary, replica)
    except BaseException:
        stop_all(pair.procs())
        raise
    return pair


# Sentinel ----------------------------------------------------------------------------------------

MASTER_NAME = "mymaster"


@dataclass
class SentinelSetup:
    """A primary, a replica and one sentinel watching them as ``mymaster``."""

    pair: ReplicaPair
    sentinel: Proc

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.sentinel.port)

    def procs(self) -> list[Proc]:
        return [self.sentinel, *self.pair.procs()]

    def master_port(self) -> int:
        _, port = self.sentinel.admin().sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(port)

    def by_port(self, port: int) -> Proc:
        (found,) = [p for p in self.pair.procs() if p.port == port]
        return found


def start_sentinel(base: Path, master_port: int) -> Proc:
    """A sentinel that watches the primary on ``master_port`` as ``mymaster``."""

    def make(port: int) -> Proc:
        workdir = base / f"sentinel-{port}"
        workdir.mkdir(parents=True, exist_ok=True)
        conf = workdir / "sentinel.conf"
        conf.write_text(
            f"port {port}\n"
            "bind 127.0.0.1\n"
            f"dir {workdir}\n"
            f"logfile {workdir / 'redis.log'}\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
            f"sentinel failover-timeout {MASTER_NAME} 5000\n"
        )
        return Proc(port, [redis_server_binary(), str(conf), "--sentinel"], workdir)

    return _launch_on_a_free_port(make, "sentinel")


def start_sentinel_setup(base: Path) -> SentinelSetup:
    """A primary with a replica and a sentinel that watches them and knows both."""
    pair = start_pair(base)
    procs = pair.procs()
    try:
        sentinel = start_sentinel(base, pair.primary.port)
        procs.insert(0, sentinel)
        poll(
            lambda: sentinel_knows_replica(sentinel, pair.replica.port),
            15,
            "the sentinel to find the replica",
            interval=0.1,
        )
    except BaseException:
        stop_all(procs)
        raise
    return SentinelSetup(pair, sentinel)


@dataclass
class TlsServer:
    """A redis-server with a TLS port beside its plain one (no client certificates asked)."""

    proc: Proc
    tls_port: int
    #: The throw-away CA that signed the server's certificate (for 127.0.0.1 and localhost).
    ca: Path

    @property
    def url(self) -> str:
        """The ``rediss://`` URL of the TLS port."""
        return f"rediss://127.0.0.1:{self.tls_port}/0"


def make_certificates(where: Path) -> tuple[Path, Path, Path]:
    """A throw-away CA, and a certificate it signed for 127.0.0.1: (CA, certificate, key).

    Raises:
        MissingTool: ``openssl`` is not installed.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        raise MissingTool("openssl not found on PATH (needed for a TLS server)")
    ca, ca_key = where / "ca.pem", where / "ca.key"
    cert, key, request = where / "server.pem", where / "server.key", where / "server.csr"
    extensions = where / "san.cnf"
    extensions.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test CA",
         "-keyout", str(ca_key), "-out", str(ca)],
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(request)],
        ["x509", "-req", "-in", str(request), "-CA", str(ca), "-CAkey", str(ca_key),
         "-CAcreateserial", "-days", "1", "-out", str(cert), "-extfile", str(extensions)],
    ):  # fmt: skip
        subprocess.run([openssl, *argv], check=True, capture_output=True, timeout=60)
    return ca, cert, key


def start_tls_server(base: Path) -> TlsServer:
    """A redis-server with a TLS port (its certificate from :func:`make_certificates`).

    Raises:
        MissingTool: ``openssl`` is missing, or this redis-server does not start with TLS
            (built without it).
    """
    base.mkdir(parents=True, exist_ok=True)
    ca, cert, key = make_certificates(base)
    tls_port = free_port()
    try:
        proc = start_server(
            base,
            *("--tls-port", str(tls_port), "--tls-cert-file", str(cert)),
            *("--tls-key-file", str(key), "--tls-ca-cert-file", str(ca)),
            *("--tls-auth-clients", "no"),
        )
    except AssertionError as err:
        raise MissingTool(
            f"this redis-server does not start with TLS (built without it?): {err}"
        ) from err
    return TlsServer(proc, tls_port, ca)


def pairs(flat: list[Any]) -> list[tuple[Any, Any]]:
    return list(zip(flat[::2], flat[1::2], strict=True))


def sentinel_knows_replica(sentinel: Proc, replica_port: int) -> bool:
    """The sentinel has found the replica (through the primary's INFO) and it is healthy."""
    for replica in sentinel.admin().execute_command("SENTINEL", "REPLICAS", MASTER_NAME):
        fields = replica if isinstance(replica, dict) else dict(pairs(replica))
        flags = str(fields.get("flags", ""))
        if (
            int(fields.get("port", 0)) == replica_port
            and "s_down" not in flags
            and "disconnected" not in flags
            and fields.get("master-link-status") == "ok"
        ):
            return True
    return False


# Redis Cluster -----------------------------------------------------------------------------------


@dataclass
class ClusterNodeInfo:
    """One row of CLUSTER NODES."""

    port: int
    node_id: str
    primary: bool
    failed: bool
    primary_id: str
    slots: list[tuple[int, int]]


@dataclass
class Cluster:
    """A Redis Cluster: ``primaries`` primaries, each with ``replicas`` replicas."""

    nodes: list[Proc]
    primaries_wanted: int = 3
    replicas: int = 1
    clients: list[Any] = field(default_factory=list)

    def alive(self) -> list[Proc]:
        return [n for n in self.nodes if n.alive()]

    def client(self, **kwargs: Any) -> RedisCluster:
        """A new cluster client (closed by ``close_clients``)."""
        from redis.cluster import ClusterNode  # noqa: PLC0415

        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 1)
        nodes = [ClusterNode(n.host, n.port) for n in self.alive()]
        client = RedisCluster(startup_nodes=nodes, **kwargs)
        self.clients.append(client)
        return client

    def async_client(self, **kwargs: Any) -> Any:
        """A new asyncio cluster client: create it inside the event loop and close it there."""
        from redis.asyncio.cluster import ClusterNode  # noqa: PLC0415
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster  # noqa: PLC0415

        kwargs.setdefault("socket_timeout", 5)
        kwargs.setdefault("socket_connect_timeout", 1)
        nodes = [ClusterNode(n.host, n.port) for n in self.alive()]
        return AsyncRedisCluster(startup_nodes=nodes, **kwargs)

    def by_port(self, port: int) -> Proc:
        (found,) = [n for n in self.nodes if n.port == port]
        return found

    def rows(self, seen_by: Proc | None = None) -> list[ClusterNodeInfo]:
        """CLUSTER NODES, as seen by ``seen_by`` (or the first live node that answers)."""
        last: Exception | None = None
        for node in [seen_by] if seen_by else self.alive():
            try:
                text = node.text("CLUSTER", "NODES")
                break
            except redis.RedisError as err:
                last = err
        else:
            raise AssertionError(f"no cluster node answers CLUSTER NODES: {last!r}")
        rows = []
        for line in text.splitlines():
            fields = line.split()
            if len(fields) < 8:
                continue
            flags = fields[2].split(",")
            slots = []
            for spec in fields[8:]:
                if spec.startswith("["):
                    continue  # a slot being migrated
                first, _, last_slot = spec.partition("-")
                slots.append((int(first), int(last_slot or first)))
            rows.append(
                ClusterNodeInfo(
                    port=int(fields[1].split("@")[0].rsplit(":", 1)[1]),
                    node_id=fields[0],
                    primary="master" in flags,
                    failed="fail" in flags or "fail?" in flags,
                    primary_id=fields[3],
                    slots=slots,
                )
            )
        return rows

    def topology(self) -> dict[int, list[int]]:
        """Live primary port -> its live replicas' ports."""
        rows = self.rows()
        ports = {r.node_id: r.port for r in rows}
        out: dict[int, list[int]] = {r.port: [] for r in rows if r.primary and not r.failed}
        for r in rows:
            if not r.primary and not r.failed and ports.get(r.primary_id) in out:
                out[ports[r.primary_id]].append(r.port)
        return out

    def primary_for(self, key: str) -> Proc:
        """The live primary that owns ``key``'s slot."""
        slot = key_slot(key.encode("utf-8"))
        for r in self.rows():
            if r.primary and not r.failed and any(a <= slot <= b for a, b in r.slots):
                return self.by_port(r.port)
        raise AssertionError(f"no live primary owns slot {slot}")

    def replica_of(self, primary: Proc) -> Proc:
        (port,) = self.topology()[primary.port]
        return self.by_port(port)

    def tag_on(self, primary: Proc, avoid: tuple[str, ...] = ()) -> str:
        """A hash tag whose slot ``primary`` owns."""
        rows = self.rows()
        ranges = [rng for r in rows if r.port == primary.port for rng in r.slots]
        for i in range(100000):
            tag = f"t{i}"
            slot = key_slot(tag.encode())
            if tag not in avoid and any(a <= slot <= b for a, b in ranges):
                return tag
        raise AssertionError(f"no tag found on {primary.port}")

    def healthy(self) -> bool:
        """Every live node says cluster_state:ok and knows its live primaries, each with a
        linked replica (if it should have one), and a fresh client sees all 16384 slots."""
        for node in self.alive():
            if parse_info(node.text("CLUSTER", "INFO")).get("cluster_state") != "ok":
                return False
            rinfo = info(node, "replication")
            if rinfo.get("role") == "slave" and rinfo.get("master_link_status") != "up":
                return False
        topology = self.topology()
        if len(topology) != self.primaries_wanted or (self.replicas and not all(topology.values())):
            return False
        probe = RedisCluster(host="127.0.0.1", port=self.alive()[0].port, socket_timeout=2)
        try:
            slots = probe.nodes_manager.slots_cache
            return len(slots) == 16384 and all(slots.values())
        finally:
            probe.close()

    def wait_healthy(self, timeout: float = CLUSTER_SECS) -> None:
        poll(self.healthy, timeout, "the cluster to be healthy", interval=0.1)

    def primaries(self) -> list[Proc]:
        return [self.by_port(port) for port in self.topology()]

    def flushall(self) -> None:
        """Empty every primary and wait until the replicas have followed."""
        for primary in self.primaries():
            primary.admin().flushall()
        for primary in self.primaries():
            for port in self.topology()[primary.port]:
                wait_in_sync(primary, self.by_port(port))

    def key_count(self) -> int:
        """Keys on all the primaries."""
        return sum(int(p.admin().dbsize()) for p in self.primaries())

    def close_clients(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):  # best effort
                client.close()
        self.clients.clear()


def create_cluster(
    base: Path,
    primaries: int = 3,
    replicas: int = 1,
    spawn: Spawn = PLAIN,
    node_timeout_ms: int = 1000,
) -> Cluster:
    """Start ``primaries * (1 + replicas)`` nodes, join them with ``redis-cli --cluster
    create`` and wait until the cluster is healthy.

    Raises:
        MissingTool: No ``redis-cli`` (nothing is left running).
    """
    cluster_args = (
        "--cluster-enabled", "yes",
        "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout", str(node_timeout_ms),
    )  # fmt: skip
    nodes: list[Proc] = []
    try:
        cli = tool("redis-cli")
        for _ in range(primaries * (1 + replicas)):
            nodes.append(start_server(base, *cluster_args, bus=True, spawn=spawn))
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        create = ["--cluster", "create", *addresses, "--cluster-replicas", str(replicas)]
        done = subprocess.run(
            [cli, *create, "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CLUSTER_SECS,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"redis-cli --cluster create failed: {done.stdout[-2000:]!r}")
        made = Cluster(nodes, primaries, replicas)
        made.wait_healthy()
        return made
    except BaseException:
        stop_all(nodes)
        raise


# Connection-cutting proxy -----------------------------------------------------------------------

#: How long a connection to the server behind a proxy may take.
CONNECT_SECS = 2.0
#: How often blocked proxy threads look at their stop flags.
TICK_SECS = 0.05


class _Link:
    """One client connection through the proxy and its upstream connection."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()
        self.threads: list[threading.Thread] = []

    def cut(self) -> None:
        """Close both ends at once; the client sees its connection reset."""
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                # linger 0: close() sends RST and drops what is unsent
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv()
            with contextlib.suppress(OSError):
                sock.close()


class Proxy:
    """A TCP proxy on 127.0.0.1 in front of ``target_port``, driven by threads.

    Args:
        target_port: The port of the server behind the proxy (on 127.0.0.1).
        port: The port to listen on; a free one when 0.
    """

    def __init__(self, target_port: int, port: int = 0) -> None:
        self.target = ("127.0.0.1", target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port or free_port()))
        self._listener.listen(128)
        self._listener.settimeout(TICK_SECS * 4)
        self.port: int = self._listener.getsockname()[1]
        self._links: set[_Link] = set()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stopped = threading.Event()
        self._cutter: threading.Thread | None = None
        self._cutter_stop = threading.Event()
        #: Connections cut so far (each client connection counts once).
        self.cuts = 0
        #: Times :meth:`cut` (or the random cutter) ran.
        self.cut_rounds = 0
        #: Client connections accepted so far.
        self.accepted = 0
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        """A Redis URL of the proxy."""
        return f"redis://127.0.0.1:{self.port}/0"

    def open_links(self) -> int:
        """Client connections open now."""
        with self._lock:
            return sum(1 for link in self._links if not link.closed.is_set())

    # Faults -------------------------------------------------------------------------------------

    def cut(self) -> int:
        """Cut every open connection now; return how many were cut."""
        with self._lock:
            links = [link for link in self._links if not link.closed.is_set()]
            self._links.difference_update(links)
            self.cut_rounds += 1
        for link in links:
            link.cut()
        with self._lock:
            self.cuts += len(links)
        return len(links)

    def cut_randomly(
        self, seed: int, min_gap: float, max_gap: float, limit: int | None = None
    ) -> None:
        """Cut every open connection after random gaps of ``min_gap`` to ``max_gap`` seconds
        (drawn from ``random.Random(seed)``), at most ``limit`` times, until
        :meth:`stop_cutting`."""
        if not 0 < min_gap <= max_gap:
            raise ValueError("need 0 < min_gap <= max_gap")
        self.stop_cutting()
        rng = random.Random(seed)
        self._cutter_stop = stop = threading.Event()

        def cutter() -> None:
            rounds = 0
            while limit is None or rounds < limit:
                if stop.wait(rng.uniform(min_gap, max_gap)):
                    return
                self.cut()
                rounds += 1

        self._cutter = threading.Thread(target=cutter, name="proxy-cutter", daemon=True)
        self._cutter.start()

    def cutting(self) -> bool:
        """The random cutter is running."""
        return self._cutter is not None and self._cutter.is_alive()

    def stop_cutting(self) -> None:
        """Stop the random cuts (what was cut stays cut)."""
        self._cutter_stop.set()
        if self._cutter is not None:
            self._cutter.join(timeout=5)
            self._cutter = None

    def pause(self) -> None:
        """Stop forwarding: connections are still accepted, but nothing goes either way."""
        self._forwarding.clear()

    def resume(self) -> None:
        """Forward again, held bytes first."""
        self._forwarding.set()

    def stop(self) -> None:
        """Stop listening and cut everything (idempotent)."""
        self._stopped.set()
        self.stop_cutting()
        self._forwarding.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._acceptor.join(timeout=5)
        self.cut()
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5)

    # Forwarding ---------------------------------------------------------------------------------

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            client.settimeout(None)
            try:
                upstream = socket.create_connection(self.target, timeout=CONNECT_SECS)
            except OSError:
                # The server is down: the client sees its connection reset, as it would.
                _Link(client, socket.socket()).cut()
                continue
            upstream.settimeout(None)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            link = _Link(client, upstream)
            link.threads = [
                threading.Thread(target=self._pump, args=(link, a, b), daemon=True)
                for a, b in ((client, upstream), (upstream, client))
            ]
            with self._lock:
                self._links.add(link)
                self.accepted += 1
                self._threads = [t for t in self._threads if t.is_alive()] + link.threads
            for thread in link.threads:
                thread.start()

    def _hold(self, link: _Link) -> bool:
        """Wait while paused; False when the link was cut meanwhile."""
        while not self._forwarding.wait(TICK_SECS):
            if link.closed.is_set():
                return False
        return not link.closed.is_set()

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        try:
            while self._hold(link):
                data = src.recv(65536)
                if not data or not self._hold(link):
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            # One side closed: close the other, as a real connection would end.
            with self._lock:
                self._links.discard(link)
            link.cut()
