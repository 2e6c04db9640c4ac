"""Real faults for the fault suite and the fault bench: a connection-cutting TCP proxy, a
redis-server that can be SIGKILLed and started again with its data, and a server out of memory.

- :class:`Proxy` forwards 127.0.0.1:<port> to a redis-server. It can cut every open connection
  now, cut at random intervals (seeded, bounded), pause (connections are accepted, nothing is
  forwarded: a server that never answers) and resume.
- :class:`RestartableServer` runs redis-server with ``appendonly yes`` and
  ``appendfsync always`` in its own directory: every write acknowledged before a SIGKILL is
  there after :meth:`RestartableServer.restart` (on the same port).
- :class:`OomServer` runs out of memory on demand: ``maxmemory`` is set just under what a filler
  key takes, with ``noeviction`` (CONFIG SET at run time), so every write fails with OOM until
  :meth:`OomServer.relieve` deletes the filler.

Everything started here is stopped at teardown (by PID, on failure too). Test modules import the
fixtures into their namespace, as for ``servers.py``::

    from faults import aof_server_fixture, oom_server_fixture, proxy_factory_fixture  # noqa: F401

The bench imports this module by path (it needs ``conftest`` and ``servers`` beside it).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import faults_handlers
from conftest import redis_server_binary
from redis_work_queue import Item
from servers import Proc, free_port, start_server

TESTS_DIR = Path(__file__).resolve().parent
SRC_DIR = TESTS_DIR.parent / "src"
#: ``rwq``, run by this interpreter (the entry point runs ``redis_work_queue.cli:main``).
RWQ = [sys.executable, "-m", "redis_work_queue.cli"]

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


class RestartableServer:
    """A redis-server with ``appendonly yes`` and ``appendfsync always`` in its own directory,
    that can be SIGKILLed and started again on the same port with its data."""

    def __init__(self, workdir: Path) -> None:
        port = free_port()
        self.proc = Proc(port, self.argv(port, workdir), workdir)
        self.restarts = 0

    @staticmethod
    def argv(port: int, workdir: Path) -> list[str]:
        return [
            redis_server_binary(),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "redis.log"),
        ]

    @property
    def port(self) -> int:
        return self.proc.port

    @property
    def url(self) -> str:
        return self.proc.url

    def start(self) -> None:
        self.proc.launch()

    def client(self, **kwargs: object) -> redis.Redis:
        """A new client (closed when the server is stopped)."""
        return self.proc.client(**kwargs)

    def alive(self) -> bool:
        return self.proc.alive()

    def kill(self) -> None:
        """SIGKILL: no shutdown, no last write; only what was fsynced survives."""
        self.proc.kill()

    def restart(self) -> None:
        """Start again on the same port, from the append-only file; wait until it answers."""
        self.proc.kill()
        self.proc.launch()
        self.restarts += 1

    def stop(self) -> None:
        self.proc.stop()


@dataclass
class OomServer:
    """A redis-server that runs out of memory (``noeviction``) when told to."""

    proc: Proc
    filler_key: str = "oom-filler"
    filler_bytes: int = 8 * 1024 * 1024
    #: Room left under maxmemory once the filler is gone.
    headroom: int = 4 * 1024 * 1024
    history: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.proc.url

    def client(self, **kwargs: object) -> redis.Redis:
        return self.proc.client(**kwargs)

    def exhaust(self) -> None:
        """Fill memory, then set ``maxmemory`` below it: every write fails with OOM."""
        admin = self.proc.admin()
        admin.config_set("maxmemory", "0")
        admin.config_set("maxmemory-policy", "noeviction")
        used = int(admin.info("memory")["used_memory"])
        admin.setrange(self.filler_key, self.filler_bytes - 1, "x")
        admin.config_set("maxmemory", str(used + self.headroom))
        self.history.append("exhausted")

    def out_of_memory(self) -> bool:
        """A write is refused with OOM now."""
        try:
            self.proc.admin().set("oom-probe", "x")
        except redis.exceptions.OutOfMemoryError:
            return True
        self.proc.admin().delete("oom-probe")
        return False

    def relieve(self) -> None:
        """Delete the filler (``maxmemory`` stays): writes fit again."""
        self.proc.admin().delete(self.filler_key)
        self.history.append("relieved")

    def stop(self) -> None:
        self.proc.stop()


# What the handlers saw -----------------------------------------------------------------------


@dataclass
class Verdict:
    """What the record of a run says about loss and duplication.

    Attributes:
        calls: How many times the handler was called, per id.
        lost: Acknowledged adds the handler never saw.
        relet: Ids leased again after a completion of theirs was acknowledged.
        done_twice: Ids whose completion was acknowledged twice.
        forgiven: Ids leased again after a completion acknowledged before the ``forgive`` mark
            (asynchronous replication may lose what the replica had not received).
        done: Ids whose completion was acknowledged.
    """

    calls: dict[str, int]
    lost: list[str]
    relet: list[str]
    done_twice: list[str]
    forgiven: list[str]
    done: set[str] = field(default_factory=set)

    def ok(self) -> bool:
        return not (self.lost or self.relet or self.done_twice)

    def summary(self) -> str:
        repeats = sum(n - 1 for n in self.calls.values() if n > 1)
        return (
            f"{len(self.calls)} ids handled, {repeats} repeat calls; lost {self.lost[:10]}"
            f" ({len(self.lost)}), leased after done {self.relet[:10]} ({len(self.relet)}),"
            f" done twice {self.done_twice[:10]} ({len(self.done_twice)}), forgiven"
            f" {len(self.forgiven)}, {len(self.done)} completions acknowledged"
        )


def read_events(results: redis.Redis) -> list[tuple[str, str]]:
    """The record, in order: ``(kind, subject)`` pairs (kinds: call, done, mark)."""
    out = []
    for raw in results.lrange(faults_handlers.EVENTS, 0, -1):
        kind, _, subject = (raw.decode() if isinstance(raw, bytes) else raw).partition(" ")
        out.append((kind, subject))
    return out


def handled(results: redis.Redis) -> set[str]:
    """The ids the handlers have been called with so far."""
    return {subject for kind, subject in read_events(results) if kind == "call"}


def judge(
    events: list[tuple[str, str]], acked: Iterable[str], forgive: str | None = None
) -> Verdict:
    """Check the record against the acknowledged adds.

    Args:
        events: :func:`read_events`.
        acked: Ids whose add returned True.
        forgive: A mark: a lease again of an id whose completion was acknowledged before it is
            forgiven (counted apart), not a failure.
    """
    calls: dict[str, int] = {}
    done_at: dict[str, int] = {}
    done_twice: list[str] = []
    relet: list[str] = []
    forgiven: list[str] = []
    mark_at = None
    for n, (kind, subject) in enumerate(events):
        if kind == "mark" and subject == forgive and mark_at is None:
            mark_at = n
        elif kind == "call":
            calls[subject] = calls.get(subject, 0) + 1
            if subject in done_at:
                early = mark_at is not None and done_at[subject] < mark_at
                (forgiven if early else relet).append(subject)
                del done_at[subject]  # judged; its next completion is judged afresh
        elif kind == "done":
            if subject in done_at:
                done_twice.append(subject)
            done_at[subject] = n
    lost = sorted(set(acked) - set(calls))
    done = {subject for kind, subject in events if kind == "done"}
    return Verdict(calls, lost, relet, done_twice, forgiven, done)


def at_rest(db: Any, queue: Any) -> bool:
    """Nothing queued, leased, delayed or dead in ``queue``."""
    stats = queue.stats(db)
    return not (stats.queued or stats.leased or stats.expired or stats.delayed or stats.dead)


def add_numbered(db: Any, queue: Any, label: str, count: int) -> list[str]:
    """Add ``label-0000``... one by one; return the ids whose add was acknowledged (True).

    An add that raises (a cut connection, a server down) is not retried: its outcome is
    unknown, and it is not counted.
    """
    acked = []
    for n in range(count):
        item_id = f"{label}-{n:04d}"
        try:
            if queue.add_item(db, Item(item_id.encode(), id=item_id)):
                acked.append(item_id)
        except redis.RedisError:
            pass
    return acked


# The rwq worker command -------------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    """The worker processes (multiprocessing spawn children) of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


class WorkerCommand:
    """``rwq --url URL worker faults_handlers:record ...`` in its own process group.

    The handler records to ``results_url`` (nothing is recorded without one); stdout and stderr
    go to files in ``workdir``.
    """

    def __init__(
        self,
        url: str,
        results_url: str | None,
        queues: list[str],
        workdir: Path,
        *options: str,
        handler: str = "faults_handlers:record",
        sleep: float = 0.005,
    ) -> None:
        env = dict(os.environ)
        if results_url:
            env[faults_handlers.RESULTS_ENV] = results_url
            env[faults_handlers.RECORD_DONE_ENV] = "1"
        env[faults_handlers.SLEEP_ENV] = str(sleep)
        # This checkout's source unless the caller's path puts another first.
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(TESTS_DIR), env.get("PYTHONPATH", ""), str(SRC_DIR)) if p
        )
        workdir.mkdir(parents=True, exist_ok=True)
        self.stdout_path = workdir / "worker.out"
        self.stderr_path = workdir / "worker.err"
        self.argv = [*RWQ, "--url", url, "worker", handler, *queues, *options]
        with self.stdout_path.open("wb") as out, self.stderr_path.open("wb") as err:
            self.process = subprocess.Popen(
                self.argv,
                cwd=TESTS_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def alive(self) -> bool:
        return self.process.poll() is None

    def children(self) -> list[int]:
        return _children(self.pid) if self.alive() else []

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def tail(self) -> str:
        return f"stdout: {self.stdout()[-1500:]!r}; stderr: {self.stderr()[-3000:]!r}"

    def terminate(self, timeout: float) -> int:
        """SIGTERM, then wait up to ``timeout`` seconds for the exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"rwq worker still running after {timeout} s: {self.tail()}"
            ) from None

    def kill(self) -> None:
        """SIGKILL the command and its worker processes (its process group), if still there."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)


@contextlib.contextmanager
def worker_command(*args: Any, **kwargs: Any) -> Iterator[WorkerCommand]:
    """A :class:`WorkerCommand`, killed (with its process group) on the way out."""
    command = WorkerCommand(*args, **kwargs)
    try:
        yield command
    finally:
        command.kill()


# Fixtures ---------------------------------------------------------------------------------------


@pytest.fixture(name="proxy_factory")
def proxy_factory_fixture() -> Iterator[Callable[[int], Proxy]]:
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


@pytest.fixture(name="aof_server")
def aof_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RestartableServer]:
    """A fresh redis-server with AOF (``appendfsync always``), restartable with its data."""
    server = RestartableServer(tmp_path_factory.mktemp("aof"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(name="oom_server")
def oom_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OomServer]:
    """A fresh redis-server that :meth:`OomServer.exhaust` runs out of memory."""
    server = OomServer(start_server(tmp_path_factory.mktemp("oom")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(name="results_server", scope="module")
def results_server_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A redis-server apart from the one under fault, where handlers record what they saw."""
    proc = start_server(tmp_path_factory.mktemp("results"))
    try:
        yield proc
    finally:
        proc.stop()
