"""CPU per job of the no-op ``Worker`` and ``AsyncWorker`` against a Redis Streams loop.

Starts its own ``redis-server`` on a free port (the tests' launcher, never 6379) and, in rounds
alternating, drains ``--n`` pre-added items with each way of ``batching_rows.py`` (``Worker`` of
``--concurrency`` threads, ``AsyncWorker`` of as many tasks, the Streams consumer-group loop
with the same batch bound), then prints per job: the client's CPU (this process's
``time.process_time``), the server's CPU (``used_cpu_user`` + ``used_cpu_sys`` of ``INFO cpu``)
and the script or stream calls the server ran (``INFO commandstats``), best round of each.
With the server and this process on one CPU (``taskset -c 1 python bench/worker_cpu.py``), a
way's items/s is about 1e6 / (client + server µs per job), which is what the pinned rows of
``run.py`` compare. ``--profile threads|asyncio`` prints cProfile's view of the runner's loops
(every slot thread's, or the event loop's) over the timed rounds.

    python bench/worker_cpu.py [--n 6000] [--rounds 3] [--ways threads,asyncio,streams]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.append(str(BENCH.parent / "tests"))

import redis  # noqa: E402

import redis_work_queue as rwq  # noqa: E402
import servers  # noqa: E402
from batching_rows import Clock, asyncio_round, streams_round, threads_round  # noqa: E402
from ours_worker import OursQueue  # noqa: E402
from redis_work_queue.runner import drivers  # noqa: E402

#: Calls the server counts as one call of a way (scripts, functions, stream commands).
CALLS = ("fcall", "evalsha", "eval", "xreadgroup", "xack", "xdel")
#: (items/s, client µs per job, server µs per job, server calls per job)
Figures = tuple[float, float, float, float]


class Bench:
    """One server, the benchmark's queue, and the profiles of the runner's loops."""

    def __init__(self, port: int, concurrency: int, profile: str) -> None:
        self.db = redis.Redis(port=port)
        self.url = f"redis://127.0.0.1:{port}/0"
        self.queue = OursQueue(rwq, self.db)
        self.concurrency = concurrency
        self.profile = profile
        self.profiles: list[cProfile.Profile] = []
        self.db.flushall()

    def _sample(self) -> tuple[float, float, int]:
        cpu = self.db.info("cpu")
        stats = self.db.info("commandstats")
        calls = sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in CALLS)
        server = float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        return time.process_time(), server, calls

    def _measure(self, k: int, run: Callable[[Clock], float], profiled: bool) -> Figures:
        """Run one round; sample the CPU as its clock starts and stops (and profile it)."""
        marks: list[tuple[float, float, int]] = []
        profile = cProfile.Profile() if profiled else None

        def clock() -> None:
            if profile is not None and marks:
                profile.disable()
            marks.append(self._sample())
            if profile is not None and len(marks) == 1:
                self.profiles.append(profile)
                profile.enable()

        rate = run(clock)
        client, server, calls = (a - b for a, b in zip(marks[1], marks[0], strict=True))
        return rate, client / k * 1e6, server / k * 1e6, calls / k

    def threads(self, k: int) -> Figures:
        return self._measure(
            k, lambda clock: threads_round(
                self.queue, self.db, self.url, k, True, clock, self.concurrency
            ), False,
        )  # fmt: skip

    def asyncio(self, k: int) -> Figures:
        return self._measure(
            k, lambda clock: asyncio_round(
                self.queue, self.db, self.url, k, True, clock, self.concurrency
            ), self.profile == "asyncio",
        )  # fmt: skip

    def streams(self, k: int) -> Figures:
        return self._measure(
            k, lambda clock: streams_round(self.db, k, clock, self.concurrency), False
        )

    def profile_threads(self) -> None:
        """Profile every loop the thread runner runs (each in a thread of its own)."""
        run_loop = drivers.run_loop

        def profiled(*args: Any, **kwargs: Any) -> None:
            profile = cProfile.Profile()
            self.profiles.append(profile)
            profile.enable()
            try:
                run_loop(*args, **kwargs)
            finally:
                profile.disable()

        drivers.run_loop = profiled  # type: ignore[assignment]
        worker_module = sys.modules["redis_work_queue.worker"]
        if getattr(worker_module, "run_loop", None) is run_loop:
            worker_module.run_loop = profiled


def main() -> None:
    """See the module's description."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    parser.add_argument("--n", type=int, default=6000, help="items per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--ways", default="threads,asyncio,streams")
    parser.add_argument("--profile", choices=("", "threads", "asyncio"), default="")
    parser.add_argument("--sort", default="tottime", help="cProfile's sort key")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rwq-worker-cpu-") as base:
        proc = servers.start_server(Path(base))
        try:
            bench = Bench(proc.port, args.concurrency, args.profile)
            ways: dict[str, Callable[[int], Figures]] = {
                "threads": bench.threads,
                "asyncio": bench.asyncio,
                "streams": bench.streams,
            }
            chosen = [way for way in args.ways.split(",") if way]
            for way in chosen:
                ways[way](500)  # warm-up
            if args.profile == "threads":
                bench.profile_threads()
            best: dict[str, Figures] = {}
            for _ in range(args.rounds):
                for way in chosen:
                    got = ways[way](args.n)
                    if way not in best or got[0] > best[way][0]:
                        best[way] = got
        finally:
            proc.stop()
    print(f"redis-py {redis.__version__}, pid {os.getpid()}; best of {args.rounds} rounds")
    for way, (rate, client, server, calls) in best.items():
        print(
            f"{way:8s} {rate:9,.0f}/s  client {client:5.1f} µs/job  server {server:5.1f} µs/job"
            f"  calls/job {calls:.3f}"
        )
    if "streams" in best:
        for way in best:
            if way != "streams":
                print(f"{way}/streams: {best[way][0] / best['streams'][0]:.2f}x")
    if bench.profiles:
        stats = pstats.Stats(bench.profiles[0])
        for profile in bench.profiles[1:]:
            stats.add(profile)
        stats.sort_stats(args.sort).print_stats(40)


if __name__ == "__main__":
    main()
