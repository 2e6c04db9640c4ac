"""Faults for the fault suite and the fault bench, and how to judge a run under them.

The servers under fault (a redis-server to SIGKILL and start again with its data, the
connection-cutting proxy) are in ``servers.py``, the one launcher; here:

- :class:`OomServer` runs out of memory on demand: ``maxmemory`` is set just under what a filler
  key takes, with ``noeviction`` (CONFIG SET at run time), so every write fails with OOM until
  :meth:`OomServer.relieve` deletes the filler;
- :func:`judge` reads what the handlers recorded (``faults_handlers``) against the acknowledged
  adds: lost items, items leased again after their completion was acknowledged;
- :class:`WorkerCommand` runs ``rwq worker`` in its own process group.

The fixtures are in ``plugins/faults.py``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

import faults_handlers
from redis_work_queue import Item
from servers import Proc

TESTS_DIR = Path(__file__).resolve().parent
SRC_DIR = TESTS_DIR.parent / "src"
#: ``rwq``, run by this interpreter (the entry point runs ``redis_work_queue.cli:main``).
RWQ = [sys.executable, "-m", "redis_work_queue.cli"]


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
