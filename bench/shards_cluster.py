"""Server time per job of a sharded queue on a local Redis Cluster, primary by primary.

Starts a cluster of ``--primaries`` primaries (no replicas), then runs the same work twice for
``--secs`` seconds each: producer threads adding one item per call and worker threads leasing
and completing (``complete_and_lease_from``, as the runner does), first on an unsharded queue
(one per primary, each under a hash tag of that primary: the queue split by hand), then on one
queue of ``--shards`` shards; and, for information, on one unsharded queue (one primary does
all the work while the others idle, so its calls compete less for the machine's CPUs). Server
time is read from ``INFO commandstats`` (the ``usec`` of the calls the clients send: scripts and
blocking pops, whose time includes the commands they run; ``CONFIG RESETSTAT`` before each run)
and from the ``used_cpu_sys`` + ``used_cpu_user`` deltas (which also count the server's network
work), on every primary. Producers stay at most ``BACKLOG`` items ahead of the workers, so that
the server time per completed job covers its add too; as many producers as workers (6 and 6 by
default) keep the queue from running dry, so that the polls of idle workers do not weigh on
the figures (the calls and commands per job, printed for each run, show it: about 2 calls a
job, its add and its complete-and-lease).

Printed, as same-run ratios:

- each primary's share of the sharded run's server time (target: the busiest at most
  1.3 / primaries);
- the sharded run's total server time per job against the unsharded run's (target: at most
  1.3x).

With ``--wake N`` it then measures, on the sharded queue, the wake-up latency of a blocked
lease for an item added to a random shard (N samples: median and p99) and the calls a second
that idle workers send (``--idle-workers`` workers blocked for ``--idle-secs`` seconds).

``--check`` exits 1 when a target is missed. Usage::

    python bench/shards_cluster.py [--secs 12] [--shards 12] [--primaries 3] [--wake 40]
        [--check]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (REPO / "tests", REPO / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import redis  # noqa: E402

from redis_work_queue import Item, KeyPrefix, WorkQueue, complete_and_lease_from  # noqa: E402
from redis_work_queue.ops.sharded import SHARD_WAIT_SLICE  # noqa: E402
from servers import Cluster, Spawn, create_cluster, stop_all  # noqa: E402
from sharded_workloads import block_idle  # noqa: E402

#: Items added ahead of the workers at most: every job is added and completed in the run.
BACKLOG = 1000
#: The calls the clients send (the commands a script runs are counted in its own time).
CALLS = ("fcall", "evalsha", "eval", "brpoplpush", "blpop")


def server_time(cluster: Cluster) -> dict[int, tuple[float, float]]:
    """Each primary's (command usec, cpu seconds) since its last reset."""
    out = {}
    for node in cluster.primaries():
        admin = node.admin()
        stats = admin.info("commandstats")
        usec = sum(float(stats.get(f"cmdstat_{c}", {}).get("usec", 0)) for c in CALLS)
        cpu = admin.info("cpu")
        out[node.port] = (usec, float(cpu["used_cpu_sys"]) + float(cpu["used_cpu_user"]))
    return out


def run(
    cluster: Cluster, queues: list[WorkQueue], secs: float, workers: int, producers: int
) -> Any:
    """Producers and workers for ``secs`` seconds: each producer adds to ``queues`` in turn, each
    worker leases from one of them (the workers spread over them in turn).

    Returns:
        Jobs completed, each primary's command usec and cpu seconds, and the calls sent and
        commands run (:func:`calls`).
    """
    cluster.flushall()
    stop = threading.Event()
    completed = [0] * workers
    before_cpu = {port: cpu for port, (_, cpu) in server_time(cluster).items()}
    for node in cluster.primaries():
        node.admin().config_resetstat()

    added = [0] * producers

    def produce(slot: int) -> None:
        db = cluster.client()
        while not stop.is_set():
            if added[slot] * producers - sum(completed) > BACKLOG:
                time.sleep(0.001)  # the workers are behind: keep the backlog bounded
                continue
            queue = queues[(slot + added[slot]) % len(queues)]  # every queue gets its share
            queue.add_unique_item(db, Item(b"x" * 100, id=f"p{slot}-{added[slot]}"))
            added[slot] += 1

    def work(slot: int) -> None:
        db = cluster.client()
        queue = queues[slot % len(queues)]
        item = None
        while not stop.is_set():
            if item is None:
                item = queue.lease(db, 30, timeout=0.2)
                continue
            done, found = complete_and_lease_from(db, queue, item, [queue], 30)
            completed[slot] += int(done)
            item = None if found is None else found[1]

    threads = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    threads += [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    time.sleep(secs)
    stop.set()
    for t in threads:
        t.join(30)
    after = server_time(cluster)
    usec = {port: u for port, (u, _) in after.items()}
    cpu = {port: c - before_cpu[port] for port, (_, c) in after.items()}
    return sum(completed), usec, cpu, calls(cluster)


def calls(cluster: Cluster) -> tuple[int, int]:
    """The calls the clients sent to every primary since the last reset, and the commands the
    servers ran (those calls and the commands their scripts ran; not INFO nor CONFIG)."""
    sent = ran = 0
    for node in cluster.primaries():
        stats = node.admin().info("commandstats")
        sent += sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in CALLS)
        ran += sum(
            int(row.get("calls", 0))
            for name, row in stats.items()
            if name not in ("cmdstat_info", "cmdstat_config") and isinstance(row, dict)
        )
    return sent, ran


def wake_and_idle(
    cluster: Cluster, queue: WorkQueue, samples: int, workers: int, secs: float
) -> tuple[list[float], float]:
    """Wake-up latencies of a blocked lease for items added to random shards, then the calls a
    second per idle worker.

    Returns:
        The latencies (seconds, sorted) and the idle calls a second per worker.
    """
    cluster.flushall()
    db = cluster.client()
    waiter = cluster.client()
    latencies = []
    for n in range(samples):
        got: dict[str, float] = {}

        def lease(got: dict[str, float] = got) -> None:
            if queue.lease(waiter, 30, timeout=5) is not None:
                got["at"] = time.monotonic()

        thread = threading.Thread(target=lease)
        thread.start()
        time.sleep(0.1 + random.random() * SHARD_WAIT_SLICE)  # any moment of the wait
        added = time.monotonic()
        queue.add_item(db, Item(b"w", id=f"w{n}-{random.getrandbits(64):x}"))  # a random shard
        thread.join(10)
        latencies.append(got["at"] - added)
    cluster.flushall()
    for node in cluster.primaries():
        node.admin().config_resetstat()
    block_idle(cluster.client, queue, workers, secs)
    return sorted(latencies), calls(cluster)[0] / secs / workers


def versions(cluster: Cluster) -> str:
    """The date, the server's, redis-py's and Python's versions, the machine's CPUs and load."""
    server = cluster.primaries()[0].admin().info("server")["redis_version"]
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{now}; Redis {server}, redis-py {redis.__version__}, Python "
        f"{platform.python_version()}; {os.cpu_count()} CPUs, load average {load} at the end"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--secs", type=float, default=12.0)
    parser.add_argument("--shards", type=int, default=12)
    parser.add_argument("--primaries", type=int, default=3)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--producers", type=int, default=6)
    parser.add_argument("--wake", type=int, default=0, help="wake-up samples (0: none)")
    parser.add_argument("--idle-workers", type=int, default=4)
    parser.add_argument("--idle-secs", type=float, default=5.0)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as base:
        cluster = create_cluster(
            Path(base), args.primaries, replicas=0, spawn=Spawn(die_with_parent=True)
        )
        try:
            # The baseline: one unsharded queue per primary (split by hand), so that every
            # primary is as busy as in the sharded run.
            plain = [
                WorkQueue(KeyPrefix(f"{{{cluster.tag_on(node)}}}:jobs"))
                for node in cluster.primaries()
            ]
            sharded = [WorkQueue(KeyPrefix("jobs"), shards=args.shards)]
            work = (args.secs, args.workers, args.producers)
            jobs_u, usec_u, cpu_u, ops_u = run(cluster, plain, *work)
            jobs_s, usec_s, cpu_s, ops_s = run(cluster, sharded, *work)
            jobs_1, usec_1, cpu_1, ops_1 = run(cluster, plain[:1], *work)
            held = Counter(
                cluster.primary_for(shard.keys.queue).port for shard in sharded[0].ops.shard_ops
            )
            waking = (
                wake_and_idle(cluster, sharded[0], args.wake, args.idle_workers, args.idle_secs)
                if args.wake
                else None
            )
            when = versions(cluster)
        finally:
            stop_all(cluster.nodes)
    total_u, total_s = sum(usec_u.values()), sum(usec_s.values())
    per_job_u, per_job_s = total_u / max(jobs_u, 1), total_s / max(jobs_s, 1)
    cpu_job_u = sum(cpu_u.values()) * 1e6 / max(jobs_u, 1)
    cpu_job_s = sum(cpu_s.values()) * 1e6 / max(jobs_s, 1)
    shares = {port: u / total_s for port, u in usec_s.items()}
    busiest = max(shares.values())
    limit = 1.3 / args.primaries
    overhead = per_job_s / per_job_u
    print(when)
    print(
        f"cluster of {args.primaries} primaries, {args.secs:.0f} s per run, "
        f"{args.workers} workers, {args.producers} producers"
    )
    print(f"unsharded, one queue per primary: {jobs_u} jobs, {per_job_u:.1f} us of calls per job "
          f"({cpu_job_u:.1f} us cpu)")  # fmt: skip
    per_job_1 = sum(usec_1.values()) / max(jobs_1, 1)
    cpu_job_1 = sum(cpu_1.values()) * 1e6 / max(jobs_1, 1)
    print(f"unsharded, one queue: {jobs_1} jobs, {per_job_1:.1f} us of calls per job "
          f"({cpu_job_1:.1f} us cpu)")  # fmt: skip
    print(f"{args.shards} shards: {jobs_s} jobs, {per_job_s:.1f} us of calls per job "
          f"({cpu_job_s:.1f} us cpu)")  # fmt: skip
    total_cpu_s = sum(cpu_s.values())
    print("sharded run, by primary (shards held; us of calls per job, share; cpu us per job, "
          "share):")  # fmt: skip
    for port in sorted(usec_s):
        print(f"  {port}: {held[port]} shards; {usec_s[port] / max(jobs_s, 1):.1f} us, "
              f"{shares[port]:.2f}; {cpu_s[port] * 1e6 / max(jobs_s, 1):.1f} us, "
              f"{cpu_s[port] / total_cpu_s:.2f}")  # fmt: skip
    cpu_busiest = max(cpu_s.values()) / total_cpu_s
    print(f"busiest primary's share of cpu {cpu_busiest:.2f} (info: cpu counts network work)")
    print(f"busiest primary's share {busiest:.2f} (target <= {limit:.2f}): "
          f"{'PASS' if busiest <= limit else 'FAIL'}")  # fmt: skip
    print(f"server time per job, sharded/unsharded {overhead:.2f}x (target <= 1.30x): "
          f"{'PASS' if overhead <= 1.3 else 'FAIL'}; cpu {cpu_job_s / cpu_job_u:.2f}x")  # fmt: skip
    print(f"server time per job, sharded/one unsharded queue {per_job_s / per_job_1:.2f}x, "
          f"cpu {cpu_job_s / cpu_job_1:.2f}x (info)")  # fmt: skip
    for label, jobs, (sent, ran) in (
        ("unsharded, one queue per primary", jobs_u, ops_u),
        ("unsharded, one queue", jobs_1, ops_1),
        (f"{args.shards} shards", jobs_s, ops_s),
    ):
        print(f"{label}: {sent / max(jobs, 1):.2f} calls and {ran / max(jobs, 1):.2f} commands "
              "run per job")  # fmt: skip
    if waking is not None:
        latencies, idle_rate = waking
        p99 = latencies[min(len(latencies) - 1, round(0.99 * (len(latencies) - 1)))]
        print(f"wake-up, item added to a random shard ({len(latencies)} samples): median "
              f"{statistics.median(latencies) * 1e3:.0f} ms, p99 {p99 * 1e3:.0f} ms, max "
              f"{latencies[-1] * 1e3:.0f} ms")  # fmt: skip
        print(f"idle calls a second per worker ({args.idle_workers} workers, {args.shards} "
              f"shards): {idle_rate:.1f}")  # fmt: skip
    if args.check and (busiest > limit or overhead > 1.3):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
