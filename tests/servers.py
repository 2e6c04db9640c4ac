"""Fixtures and helpers that start the servers of the scale-out tests: a Redis Cluster of three
primaries with a replica each, a primary with a replica, and a Sentinel watching a pair.

Every process is started on free ports (never 6379; a cluster node's bus port, port + 10000,
is checked too) with persistence off, every wait is a poll with a deadline, and every process is
stopped at teardown (SIGCONT, terminate, then kill), on failure too.

Test modules import the fixtures into their namespace (each is registered under the name
without ``_fixture``)::

    from servers import cluster_fixture, cluster_db_fixture  # noqa: F401
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from conftest import FORBIDDEN_PORT, redis_server_binary

T = TypeVar("T")

START_SECS = 10.0
CLUSTER_SECS = 30.0
#: Ports handed out in this session (a port is reserved before its server binds it).
_RESERVED: set[int] = set()
#: A cluster for manual experiments may be running on these: never use them.
_AVOID = {FORBIDDEN_PORT, *range(7000, 7200), *range(17000, 17200)}


def poll(
    predicate: Callable[[], T],
    timeout: float,
    what: str | Callable[[], str],
    interval: float = 0.02,
) -> T:
    """Call ``predicate`` until it returns something truthy; fail after ``timeout`` seconds.

    Redis errors raised by the predicate count as "not yet". ``what`` may be a function, called
    for the failure message only.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = predicate()
            if value:
                return value
            last = value
        except (redis.RedisError, OSError) as err:
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


@dataclass
class Proc:
    """One redis-server (or sentinel) process owned by the tests."""

    port: int
    argv: list[str]
    workdir: Path
    process: subprocess.Popen[bytes] | None = None
    clients: list[Any] = field(default_factory=list)
    host: str = "127.0.0.1"
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
        )
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
        kwargs.setdefault("socket_timeout", 5)
        client = redis.Redis(host=self.host, port=self.port, **kwargs)
        self.clients.append(client)
        return client

    def pause(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.alive():
            os.kill(self.pid, signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, without a word to its replicas."""
        if self.alive():
            assert self.process is not None
            self.process.kill()
            self.process.wait(timeout=5)

    def stop(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):  # best effort at teardown
                client.close()
        self.clients.clear()
        self._admin = None
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.process.pid, signal.SIGCONT)  # a stopped process ignores SIGTERM
        self.process.terminate()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)


def server_argv(port: int, workdir: Path, *extra: str) -> list[str]:
    return [
        redis_server_binary(),
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
        "--logfile",
        str(workdir / "redis.log"),
        # replicas sync at once (the default waits 5 s for more replicas to join a transfer)
        "--repl-diskless-sync-delay",
        "0",
        *extra,
    ]


def start_server(base: Path, *extra: str, bus: bool = False) -> Proc:
    """Start a redis-server on a free port (trying other ports on a start-up race)."""
    last: AssertionError | None = None
    for _ in range(5):
        port = free_port(bus=bus)
        workdir = base / f"node-{port}"
        proc = Proc(port, server_argv(port, workdir, *extra), workdir)
        try:
            proc.launch()
            return proc
        except AssertionError as err:
            last = err
            proc.stop()
    raise AssertionError(f"could not start redis-server: {last}")


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


def start_pair(base: Path) -> ReplicaPair:
    primary = start_server(base)
    try:
        replica = start_server(base, "--replicaof", "127.0.0.1", str(primary.port))
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


@pytest.fixture(scope="module", name="replica_pair")
def replica_pair_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPair]:
    """A primary and its replica (``--replicaof``), linked and in sync; stopped at teardown."""
    pair = start_pair(tmp_path_factory.mktemp("pair"))
    try:
        yield pair
    finally:
        stop_all(pair.procs())


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
    last: AssertionError | None = None
    for _ in range(5):
        port = free_port()
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
        proc = Proc(port, [redis_server_binary(), str(conf), "--sentinel"], workdir)
        try:
            proc.launch()
            return proc
        except AssertionError as err:
            last = err
            proc.stop()
    raise AssertionError(f"could not start a sentinel: {last}")


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


@pytest.fixture(scope="module", name="sentinel_setup")
def sentinel_setup_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """A primary with a replica and a sentinel that watches them and knows both."""
    base = tmp_path_factory.mktemp("sentinel")
    pair = start_pair(base)
    procs = pair.procs()
    try:
        sentinel = start_sentinel(base, pair.primary.port)
        procs.insert(0, sentinel)
        setup = SentinelSetup(pair, sentinel)
        poll(
            lambda: sentinel_knows_replica(sentinel, pair.replica.port),
            15,
            "the sentinel to find the replica",
            interval=0.1,
        )
        yield setup
    finally:
        stop_all(procs)


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
    """Six cluster nodes: three primaries, each with one replica."""

    nodes: list[Proc]
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
        """Every live node says cluster_state:ok and knows three live primaries, each with a
        linked replica, and a fresh client sees all 16384 slots."""
        for node in self.alive():
            if parse_info(node.text("CLUSTER", "INFO")).get("cluster_state") != "ok":
                return False
            rinfo = info(node, "replication")
            if rinfo.get("role") == "slave" and rinfo.get("master_link_status") != "up":
                return False
        topology = self.topology()
        if len(topology) != 3 or not all(topology.values()):
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


def create_cluster(base: Path) -> Cluster:
    cluster_args = (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-node-timeout",
        "1000",
    )
    nodes: list[Proc] = []
    try:
        for _ in range(6):
            nodes.append(start_server(base, *cluster_args, bus=True))
        cli = shutil.which("redis-cli")
        if cli is None:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail("redis-cli not found; CI requires a real Redis", pytrace=False)
            pytest.skip("redis-cli not found on PATH")
        addresses = [f"127.0.0.1:{n.port}" for n in nodes]
        done = subprocess.run(
            [cli, "--cluster", "create", *addresses, "--cluster-replicas", "1", "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=CLUSTER_SECS,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"redis-cli --cluster create failed: {done.stdout[-2000:]!r}")
        made = Cluster(nodes)
        made.wait_healthy()
        return made
    except BaseException:
        stop_all(nodes)
        raise


@pytest.fixture(scope="session", name="cluster")
def cluster_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A local Redis Cluster of three primaries with one replica each, for the session."""
    redis_server_binary()
    made = create_cluster(tmp_path_factory.mktemp("cluster"))
    try:
        yield made
    finally:
        made.close_clients()
        stop_all(made.nodes)


@pytest.fixture(name="cluster_db")
def cluster_db_fixture(cluster: Cluster) -> Iterator[RedisCluster]:
    """A client of the session cluster, healthy and emptied for this test."""
    cluster.wait_healthy()
    cluster.flushall()
    client = cluster.client()
    try:
        yield client
    finally:
        cluster.close_clients()
