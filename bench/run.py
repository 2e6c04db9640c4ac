"""Benchmark of redis_work_queue against the published baseline, redis-work-queue 0.1.5.

Usage: python bench/run.py [--quick] [--check] [--json FILE] [--only NAME ...] [--pin MODE]
                          [--before REV]

Starts its own redis-server on a free port, installs the baseline into bench/.baseline/ once,
runs every workload once per client, each in a fresh worker process on a freshly flushed
database, and prints a table. The ratios are what matter (they come from the same run on the
same server); the absolute figures depend on the machine. The WAIT row runs on a primary with a
replica and the cluster row on a 3-node Redis Cluster, both started (and stopped) for their job
alone. See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import redis

import regression
from rows import (
    Job,
    Ratio,
    Result,
    Row,
    div,
    per_item,
    print_table,
    rate,
    secs,
    times,
)

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.append(str(REPO / "tests"))  # the one launcher of throw-away servers

from servers import (  # noqa: E402
    BINARY_ENV,
    Cluster,
    MissingTool,
    Spawn,
    create_cluster,
    exit_on_sigterm,
    start_pair,
    start_server,
    stop_all,
    tool,
)

BASELINE_DIST = "redis-work-queue==0.1.5"
BASELINE_DIR = BENCH / ".baseline" / "mevitae"
WORKERS = {"ours": BENCH / "ours_worker.py", "baseline": BENCH / "mevitae_worker.py"}
#: The worker of every other client (a peer of bench/peers/), run with ``--peer NAME``.
PEER_WORKER = BENCH / "peer_worker.py"
#: Modules that add jobs and rows (see rows.py); adding one is one line.
ROW_MODULES = (
    "peers_rows",
    "schedules_rows",
    "shards_rows",
    "functions_rows",
    "jobs_rows",
    "events_rows",
    "batching_rows",
    "flow_rows",
)
DRAIN_WORKER = BENCH / "drain_worker.py"
JOB_TIMEOUT = 900  # seconds; a worker that takes longer has hung
SETUP_TIMEOUT = 60  # seconds to start a replica or a cluster
#: Queues (and processes) of the multi-process row.
DRAINERS = 3


# Sizes ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    """How much work each workload does."""

    roundtrip: int  # PINGs and EVALSHAs
    add: int  # items added, per client
    lease: int  # items leased and completed, per client
    hold: int  # leases kept in flight
    inflight: int  # items leased and completed with ``hold`` in flight
    light: tuple[int, ...]  # expired leases per light clean
    deep: tuple[int, int]  # queued items per deep clean (small, large)
    runner: int  # items drained by the Worker runner (and by the plain loop)
    batch: int  # items added, and leased and completed, 100 per call
    memory: int  # items queued for the memory row (once per layout)
    aio: int  # items leased and completed per asyncio mode (sync, 1 task, many tasks)
    wait: int  # items added, and completed, with WAIT and without
    drain: int  # items drained per process in the multi-process rows (cluster, one node)
    lost_base: int  # items of the deep cleans with a share lost (and of the light clean's
    #                 longest call)
    lost_large: int  # items of the large deep clean with 1% lost
    pings: int = 2_000  # PINGs per round next to the batch rounds
    tasks: int = 50  # concurrent asyncio tasks
    rounds: int = 3  # timed rounds of each rate workload (per process)
    passes: int = 2  # times the whole job list runs; each figure keeps its best pass


FULL = Sizes(
    roundtrip=30_000,
    add=30_000,
    lease=30_000,
    hold=20_000,
    inflight=9_000,
    light=(5_000, 20_000),
    deep=(20_000, 200_000),
    runner=15_000,
    batch=90_000,
    memory=1_000_000,
    aio=9_000,
    wait=6_000,
    drain=5_000,
    lost_base=100_000,
    lost_large=1_000_000,
)
QUICK = Sizes(
    roundtrip=4_000,
    add=4_000,
    lease=4_000,
    hold=5_000,
    inflight=1_500,
    light=(1_000, 4_000),
    deep=(5_000, 50_000),
    runner=3_000,
    batch=15_000,
    memory=100_000,
    aio=1_500,
    wait=1_500,
    drain=2_000,
    lost_base=20_000,
    lost_large=200_000,
    pings=1_000,
    passes=1,
)


def count(n: int) -> str:
    """20000 -> '20k', 1000000 -> '1M'."""
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1_000_000:g}M"
    if n >= 1000 and n % 100 == 0:
        return f"{n / 1000:g}k"
    return str(n)


# Redis servers (the tests' launcher, ``tests/servers.py``) --------------------------------------


UNPINNED = Spawn(die_with_parent=True)


@dataclass(frozen=True)
class Placement:
    """The CPUs the redis-server(s) and the workers run on (no CPUs: wherever the OS puts them).

    Every process is started with ``die_with_parent``: it gets SIGTERM when the benchmark dies,
    however it dies.
    """

    mode: str
    server: Spawn = UNPINNED
    clients: Spawn = UNPINNED

    def describe(self) -> str:
        if self.server.cpus is None or self.clients.cpus is None:
            return "not pinned"
        return (
            f"server on CPU {sorted(self.server.cpus)}, clients on CPU {sorted(self.clients.cpus)}"
        )


def placement(mode: str) -> Placement:
    """Work out the CPUs of ``--pin`` mode ``mode`` (same, split or off)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if mode == "off" or not cpus:
        return Placement("off")
    if mode == "same" or len(cpus) < 2:
        one = Spawn(frozenset({cpus[-1]}), die_with_parent=True)
        return Placement("same", one, one)
    server, clients = (Spawn(frozenset({c}), die_with_parent=True) for c in (cpus[0], cpus[-1]))
    return Placement("split", server, clients)


# Baseline ---------------------------------------------------------------------------------------


def ensure_baseline() -> None:
    """Install the baseline into bench/.baseline/mevitae unless it is there already."""
    marker = BASELINE_DIR / "redis_work_queue" / "workqueue.py"
    dist_info = BASELINE_DIR / "redis_work_queue-0.1.5.dist-info"
    if marker.is_file() and dist_info.is_dir():
        return
    print(f"installing {BASELINE_DIST} into {BASELINE_DIR.relative_to(REPO)} ...", file=sys.stderr)
    BASELINE_DIR.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix="mevitae-", dir=BASELINE_DIR.parent))
    try:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--target",
                str(staging),
                BASELINE_DIST,
            ],
            check=True,
        )
        shutil.rmtree(BASELINE_DIR, ignore_errors=True)
        staging.rename(BASELINE_DIR)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# Jobs -------------------------------------------------------------------------------------------


def plan(s: Sizes) -> list[Job]:
    """Every job of a run, the two clients of each workload next to each other."""
    r = s.rounds
    jobs = [
        Job("roundtrip", "ours", "roundtrip", {"n": s.roundtrip, "rounds": r}),
        Job("add", "ours", "add", {"n": s.add, "rounds": r}),
        Job("add", "baseline", "add", {"n": s.add, "rounds": r}),
        Job("add_checked", "ours", "add_checked", {"n": s.add, "rounds": r}),
        Job("lease_complete", "ours", "lease_complete", {"n": s.lease, "rounds": r}),
        Job("lease_complete", "baseline", "lease_complete", {"n": s.lease, "rounds": r}),
    ]
    for workload in ("inflight_fifo", "inflight_stuck"):
        params = {"n": s.inflight, "rounds": r, "hold": s.hold}
        jobs += [Job(workload, impl, workload, params) for impl in ("ours", "baseline")]
    for n in s.light:
        jobs += [Job(f"light_clean:{n}", impl, "light_clean", {"n": n}) for impl in WORKERS]
    jobs += [Job(f"deep_clean:{n}", "ours", "deep_clean", {"n": n}) for n in s.deep]
    jobs += clean_jobs(s)
    jobs += [
        Job("worker_runner", "ours", "worker_runner", {"n": s.runner, "rounds": r}),
        Job("batch", "ours", "batch", {"n": s.batch, "rounds": r, "pings": s.pings}),
        Job("asyncio", "ours", "asyncio", {"n": s.aio, "rounds": r, "tasks": s.tasks}),
        Job("wait", "ours", "wait", {"n": s.wait, "rounds": r}, kind="replica"),
        Job("cluster", "ours", "drain", {"n": s.drain}, kind="drain"),
        Job(
            "memory",
            "ours",
            "memory",
            {"n": s.memory, "size": 100, "chunk": 10_000},
            once=True,
        ),
    ]
    return jobs


#: The deep cleans with a share of the items lost: (job key, items, lost share); "all": every
#: item was leased, the processing list was deleted and the leases ran out.
def lost_cases(s: Sizes) -> list[tuple[str, int, str]]:
    base, large = s.lost_base, s.lost_large
    return [
        (f"deep_lost:{count(base)}:0.1%", base, "0.001"),
        (f"deep_lost:{count(base)}:10%", base, "0.1"),
        (f"deep_lost:{count(base)}:100%", base, "all"),
        (f"deep_lost:{count(large)}:1%", large, "0.01"),
    ]


def clean_jobs(s: Sizes) -> list[Job]:
    """The deep cleans with items lost, and the light clean's longest call."""
    jobs = [
        Job(key, "ours", "deep_clean_lost", {"n": n, "lost": lost})
        for key, n, lost in lost_cases(s)
    ]
    light = f"light_longest:{count(s.lost_base)}"
    jobs.append(Job(light, "ours", "light_clean_longest", {"n": s.lost_base}))
    return jobs


def schedule(jobs: list[Job], passes: int) -> list[Job]:
    """The jobs of every pass; even passes run the two clients of a workload the other way round,
    so that neither client always goes first."""
    out: list[Job] = []
    for n in range(passes):
        if n > 0:
            jobs = [job for job in jobs if not job.once]
        if n % 2 == 0:
            out += jobs
            continue
        i = 0
        while i < len(jobs):
            j = i + 1
            while j < len(jobs) and jobs[j].key == jobs[i].key:
                j += 1
            out += reversed(jobs[i:j])
            i = j
    return out


def best(old: Result | None, new: Result) -> Result:
    """Merge the results of two passes of one job: the higher rate, the shorter time.

    An error in any pass sticks: a check that failed once is a finding, not noise.
    """
    if old is None or "error" in old:
        return new if old is None else old
    if "error" in new:
        return new
    if "value" not in new:  # roundtrip: one result per measured command
        return {k: best(old.get(k), v) if isinstance(v, dict) else v for k, v in new.items()}
    if "limit" in new:  # lease_complete: its interleaved round-trip limit too
        return {**best(_without(old, "limit"), _without(new, "limit")),
                "limit": best(old.get("limit"), new["limit"])}  # fmt: skip
    higher_wins = new.get("unit") == "ops/s"
    better = new["value"] > old["value"] if higher_wins else new["value"] < old["value"]
    keep, other = (new, old) if better else (old, new)
    return {**keep, "other_passes": [*old.get("other_passes", []), other["value"]]}


def _without(r: Result, key: str) -> Result:
    return {k: v for k, v in r.items() if k != key}


#: ``src/`` of the earlier revision of ``--before`` (set by main), for impl ``before``.
BEFORE: dict[str, Path] = {}


def worker_env(impl: str) -> dict[str, str]:
    """The environment of a worker: only its own client importable first."""
    env = dict(os.environ)
    paths = {"ours": str(REPO / "src"), "baseline": str(BASELINE_DIR)}
    if impl == regression.IMPL and "src" in BEFORE:
        # This library's worker, on the earlier tree (see regression.py).
        paths[impl] = env["RWQ_BENCH_SRC"] = str(BEFORE["src"])
        env["RWQ_BENCH_IMPL"] = impl
    env["PYTHONPATH"] = paths.get(impl, "")  # a peer: neither
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def worker_script(impl: str) -> list[str]:
    """The worker script (and its arguments) of client ``impl``."""
    if impl == regression.IMPL:
        return [str(WORKERS["ours"])]
    if impl in WORKERS:
        return [str(WORKERS[impl])]
    return [str(PEER_WORKER), "--peer", impl]


def run_job(job: Job, port: int, admin: redis.Redis, spawn: Spawn) -> Result:
    """Flush the database, run the job's worker, return its result (or an ``error``)."""
    admin.flushall()
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as out:
        out_path = Path(out.name)
    cmd = [
        sys.executable, *worker_script(job.impl),
        "--port", str(port),
        "--workload", job.workload,
        "--params", json.dumps(job.params),
        "--out", str(out_path),
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            cmd,
            check=False,
            env=worker_env(job.impl),
            capture_output=True,
            text=True,
            timeout=JOB_TIMEOUT,
            **spawn.popen_kwargs(),
        )
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            return {"error": f"worker exited with {proc.returncode}", "log": tail}
        result: Result = json.loads(out_path.read_text(encoding="utf-8"))
        if result.get("impl") != job.impl:
            return {"error": f"worker reported impl {result.get('impl')!r}"}
        return result
    except subprocess.TimeoutExpired:
        return {"error": f"worker timed out after {JOB_TIMEOUT} s"}
    finally:
        out_path.unlink(missing_ok=True)


def cluster_prefixes(cluster: Cluster) -> list[str]:
    """One queue prefix per primary of the cluster: a hash tag whose slots it owns."""
    return [f"bench:{{{cluster.tag_on(primary)}}}" for primary in cluster.primaries()]


def run_drain(port: int, prefixes: list[str], n: int, cluster: bool, spawn: Spawn) -> Result:
    """Run one drain_worker.py per prefix at once (they start together); the items/s of all
    of them, from the first start to the last end."""
    cmd = [sys.executable, str(DRAIN_WORKER), "--port", str(port), "--n", str(n)]
    if cluster:
        cmd.append("--cluster")
    procs: list[subprocess.Popen[str]] = []
    logs: list[Any] = []
    try:
        for prefix in prefixes:
            log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed below)
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [*cmd, "--prefix", prefix],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                    text=True,
                    env=worker_env("ours"),
                    **spawn.popen_kwargs(),
                )
            )
        deadline = time.monotonic() + JOB_TIMEOUT
        with selectors.DefaultSelector() as waiting:
            for proc in procs:
                assert proc.stdout is not None
                waiting.register(proc.stdout, selectors.EVENT_READ, proc)
            while waiting.get_map():
                events = waiting.select(timeout=max(deadline - time.monotonic(), 0))
                if not events:
                    raise TimeoutError("the drain workers did not get ready")
                for key, _ in events:
                    line = key.fileobj.readline()  # type: ignore[union-attr]
                    if line.strip() != "ready":
                        raise RuntimeError(f"a drain worker said {line.strip()!r}, not ready")
                    waiting.unregister(key.fileobj)
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        spans = []
        for proc in procs:
            out, _ = proc.communicate(timeout=max(deadline - time.monotonic(), 1))
            if proc.returncode != 0:
                raise RuntimeError(f"a drain worker exited with {proc.returncode}")
            spans.append(json.loads(out.strip().splitlines()[-1]))
        seconds = max(s["end"] for s in spans) - min(s["start"] for s in spans)
        done = sum(s["n"] for s in spans)
        return {"value": done / seconds, "unit": "ops/s", "processes": len(procs)}
    except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as err:
        tails = []
        for log in logs:
            log.seek(0)
            tails += log.read().strip().splitlines()[-6:]
        return {"error": f"{type(err).__name__}: {err}", "log": tails}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()


def run_cluster_job(
    job: Job, port: int, admin: redis.Redis, base: Path, where: Placement
) -> Result:
    """The multi-process row: DRAINERS processes, one queue each, on a fresh cluster of
    DRAINERS primaries (one queue per node), then the same on the bench server alone."""
    n = job.params["n"]
    try:
        cluster = create_cluster(
            base, primaries=DRAINERS, replicas=0, spawn=where.server, node_timeout_ms=2000
        )
    except Exception as err:  # a set-up failure fails this row only
        return {"error": f"cluster: {type(err).__name__}: {err}"}
    try:
        prefixes = cluster_prefixes(cluster)
        on_cluster = run_drain(cluster.nodes[0].port, prefixes, n, True, where.clients)
    finally:
        cluster.close_clients()
        stop_all(cluster.nodes)
    if "error" in on_cluster:
        return on_cluster
    admin.flushall()
    on_node = run_drain(port, prefixes, n, False, where.clients)
    if "error" in on_node:
        return on_node
    return {"cluster": on_cluster, "node": on_node, "prefixes": prefixes, "impl": job.impl}


def run_any(job: Job, port: int, admin: redis.Redis, base: Path, where: Placement) -> Result:
    """Run a job of any kind (see Job.kind)."""
    if job.kind == "drain":
        return run_cluster_job(job, port, admin, base, where)
    if job.kind == "replica":
        try:
            pair = start_pair(base, spawn=where.server)
        except Exception as err:  # a set-up failure fails this row only
            return {"error": f"replica set-up: {type(err).__name__}: {err}"}
        try:
            return run_job(job, pair.primary.port, pair.primary.client(), where.clients)
        finally:
            stop_all(pair.procs())
    return run_job(job, port, admin, where.clients)


# Table ------------------------------------------------------------------------------------------


def floor_row(
    needs: tuple[str, ...], label: str, value: float | None, floor: float, ping: float | None
) -> Row:
    """A row with an absolute target (a rate of at least ``floor``), shown with its ratio to the
    PING rate of the same process, so that a reader can judge the machine."""
    ok = value is not None and value >= floor
    return Row(
        label,
        rate(value),
        f"(PING {rate(ping)})",
        times(div(value, ping)),
        "/PING, same process",
        f">= {floor:,.0f}/s",
        "PASS" if ok else "FAIL",
        needs,
    )


def build_rows(res: dict[tuple[str, str], Result], s: Sizes) -> list[Row]:
    """Turn the results into table rows, working out each ratio and its target."""

    def val(key: str, impl: str = "ours") -> float | None:
        r = res.get((key, impl), {})
        return None if "error" in r or "value" not in r else float(r["value"])

    rt = res.get(("roundtrip", "ours"), {})
    ping = rt["ping"]["value"] if "ping" in rt else None
    evalsha = rt["evalsha"]["value"] if "evalsha" in rt else None
    lc_res = res.get(("lease_complete", "ours"), {})
    limit = lc_res["limit"]["value"] if "limit" in lc_res and "error" not in lc_res else None
    add, add_base, add_checked = val("add"), val("add", "baseline"), val("add_checked")
    lc, lc_base = val("lease_complete"), val("lease_complete", "baseline")
    fifo, fifo_base = val("inflight_fifo"), val("inflight_fifo", "baseline")
    stuck, stuck_base = val("inflight_stuck"), val("inflight_stuck", "baseline")
    held = count(s.hold)
    none_in_flight = "/ours none in flight"
    rows = [
        Row("round trip: PING, 1 client", rate(ping), "", "", "", "", "info", ("roundtrip",)),
        Row(
            "round trip: EVALSHA 'return 1'", rate(evalsha), "", "", "", "", "info", ("roundtrip",)
        ),
        Ratio(div(add, add_base), "ours/base", at_least=2.0).row(
            ("add",), "add: add_unique_item vs add_item", rate(add), rate(add_base)
        ),
        Ratio(div(add_checked, add), "/add_unique").row(
            ("add", "add_checked"), "add_item (duplicate check), ours", rate(add_checked)
        ),
        Ratio(div(lc, lc_base), "ours/base", at_least=2.5).row(
            ("lease_complete",), "lease+complete", rate(lc), rate(lc_base)
        ),
        Ratio(div(lc, limit), "ours/(EVALSHA/2)", at_least=0.8).row(
            ("lease_complete",),
            "lease+complete vs round-trip limit",
            rate(lc),
            f"(limit {rate(limit)})",
        ),
        Ratio(div(fifo, lc), none_in_flight, at_least=0.9).row(
            ("inflight_fifo", "lease_complete"),
            f"lease+complete, {held} in flight, FIFO",
            rate(fifo),
            rate(fifo_base),
        ),
        Ratio(div(stuck, lc), none_in_flight).row(
            ("inflight_stuck", "lease_complete"),
            f"lease+complete, {held} older held",
            rate(stuck),
            rate(stuck_base),
        ),
    ]
    for n in s.light:
        t, t_base = val(f"light_clean:{n}"), val(f"light_clean:{n}", "baseline")
        rows.append(
            Ratio(div(t_base, t), "base/ours time", at_least=10.0).row(
                (f"light_clean:{n}",),
                f"light_clean, {count(n)} expired leases",
                secs(t),
                secs(t_base),
            )
        )
    small, large = s.deep
    t_small, t_large = val(f"deep_clean:{small}"), val(f"deep_clean:{large}")
    needs = (f"deep_clean:{small}", f"deep_clean:{large}")
    rows += [
        Row(f"deep_clean, {count(small)} items", secs(t_small), "", "", "", "", "info", needs[:1]),
        Ratio(
            div(t_large, t_small), f"t{count(large)}/t{count(small)}", at_most=1.2 * large / small
        ).row(needs, f"deep_clean, {count(large)} items", secs(t_large)),
    ]
    return rows + clean_rows(res, s) + ours_only_rows(res, s, lc_base)


#: No clean call may hold Redis longer (seconds); the light clean's goal on an idle machine.
LONGEST_CALL = 0.005
LIGHT_LONGEST_CALL = 0.002


def clean_rows(res: dict[tuple[str, str], Result], s: Sizes) -> list[Row]:
    """Deep cleans with a share lost: time and longest call as ratios to the 0.1% case (and the
    large queue's time to it); the light clean's longest call."""

    def get(key: str, field: str = "value") -> float | None:
        r = res.get((key, "ours"), {})
        return None if "error" in r or field not in r else float(r[field])

    cases = lost_cases(s)
    base_key = cases[0][0]
    t0, call0 = get(base_key), get(base_key, "longest_call")
    bounds = {"10%": 2.0, "100%": 4.0, "1%": 12.0}
    rows: list[Row] = []
    for key, n, _ in cases:
        share = key.rsplit(":", 1)[1]
        label = f"deep_clean, {count(n)} items, {share} lost"
        needs = (base_key, key)
        t, call = get(key), get(key, "longest_call")
        if key == base_key:
            rows.append(Row(label, secs(t), "", "", "", "", "info", needs))
        else:
            basis = f"/{count(cases[0][1])}, 0.1% lost"
            rows.append(Ratio(div(t, t0), basis, at_most=bounds[share]).row(needs, label, secs(t)))
        ok = call is not None and call <= LONGEST_CALL
        rows.append(
            Row(
                "  longest call",
                secs(call),
                f"(p50 {secs(get(key, 'p50_call'))}, p99 {secs(get(key, 'p99_call'))})",
                times(div(call, call0)),
                "/0.1% lost",
                f"<= {secs(LONGEST_CALL)}",
                "PASS" if ok else "FAIL",
                needs,
            )
        )
    key = f"light_longest:{count(s.lost_base)}"
    call = get(key)
    ok = call is not None and call <= LIGHT_LONGEST_CALL
    rows.append(
        Row(
            f"light_clean, {count(s.lost_base)} entries: longest call",
            secs(call),
            f"(p50 {secs(get(key, 'p50_call'))}, p99 {secs(get(key, 'p99_call'))})",
            "",
            "",
            f"<= {secs(LIGHT_LONGEST_CALL)}",
            "PASS" if ok else "FAIL",
            (key,),
        )
    )
    return rows


def ours_only_rows(
    res: dict[tuple[str, str], Result], s: Sizes, lc_base: float | None
) -> list[Row]:
    """The rows of this library alone: runner, batches, memory, asyncio, WAIT, cluster."""

    def sub(key: str, name: str) -> float | None:
        r = res.get((key, "ours"), {})
        if "error" in r or not isinstance(r.get(name), dict) or "value" not in r[name]:
            return None
        return float(r[name]["value"])

    runner, plain = sub("worker_runner", "runner"), sub("worker_runner", "plain")
    adds, pairs = sub("batch", "add_items"), sub("batch", "lease_complete_many")
    ping = sub("batch", "ping")
    mem, mem_plain = sub("memory", "ours"), sub("memory", "plain")
    sync, one, many = (sub("asyncio", m) for m in ("sync", "async_1", "async_many"))
    es_sync, es_async = sub("asyncio", "evalsha_sync"), sub("asyncio", "evalsha_async")
    add, add_wait = sub("wait", "add"), sub("wait", "add_wait")
    done, done_wait = sub("wait", "complete"), sub("wait", "complete_wait")
    on_cluster, on_node = sub("cluster", "cluster"), sub("cluster", "node")
    with_wait = "with/without"
    return [
        Ratio(div(runner, plain), "runner/plain loop", at_least=0.8).row(
            ("worker_runner",),
            "Worker runner (threads, 1 handler)",
            rate(runner),
            f"(plain {rate(plain)})",
        ),
        floor_row(("batch",), "lease_many+complete_many, 100/call", pairs, 150_000, ping),
        Ratio(div(pairs, lc_base), "/base 1 at a time", at_least=20.0).row(
            ("batch", "lease_complete"),
            "  the same vs baseline lease+complete",
            rate(pairs),
            rate(lc_base),
        ),
        floor_row(("batch",), "add_items(unique), 100/call", adds, 400_000, ping),
        Ratio(div(mem, mem_plain), "ours/plain SET+LPUSH", at_most=1.1).row(
            ("memory",),
            f"memory/item, {count(s.memory)} x 100 B queued",
            per_item(mem),
            f"(plain {per_item(mem_plain)})",
        ),
        Ratio(div(one, sync), "async/sync", at_least=0.8).row(
            ("asyncio",), "asyncio lease+complete, 1 task", rate(one), f"(sync {rate(sync)})"
        ),
        Ratio(div(many, sync), "async/sync 1 client").row(
            ("asyncio",),
            f"asyncio lease+complete, {s.tasks} tasks",
            rate(many),
            f"(sync {rate(sync)})",
        ),
        Ratio(div(es_async, es_sync), "async/sync").row(
            ("asyncio",),
            "  redis.asyncio alone: EVALSHA 'return 1'",
            rate(es_async),
            f"(sync {rate(es_sync)})",
        ),
        Ratio(div(add_wait, add), with_wait).row(
            ("wait",), "add_item, replicas=1 (WAIT)", rate(add_wait), f"(without {rate(add)})"
        ),
        Ratio(div(done_wait, done), with_wait).row(
            ("wait",), "complete, replicas=1 (WAIT)", rate(done_wait), f"(without {rate(done)})"
        ),
        Ratio(div(on_cluster, on_node), "cluster/1 node").row(
            ("cluster",),
            f"{DRAINERS} procs x {DRAINERS} queues, {DRAINERS}-node cluster",
            rate(on_cluster),
            f"(1 node {rate(on_node)})",
        ),
    ]


# Main -------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a ~30 s smoke run")
    parser.add_argument("--check", action="store_true", help="exit 1 when any target fails")
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument(
        "--redis-server", help=f"redis-server binary (default: ${BINARY_ENV}, else the PATH's)"
    )
    parser.add_argument(
        "--pin",
        choices=("same", "split", "off"),
        default="same",
        help="CPU placement: server and clients on one CPU (default), on two CPUs, or not pinned",
    )
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", help="run only jobs whose key starts with NAME"
    )
    parser.add_argument(
        "--before",
        metavar="REV",
        help="also run this library's jobs on src/ as of git revision REV, and set every row "
        "against it (a row more than 5%% slower fails)",
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    modules = [importlib.import_module(name) for name in ROW_MODULES]
    jobs = plan(sizes) + [job for module in modules for job in module.jobs(args.quick)]
    if args.only:
        jobs = [j for j in jobs if j.key.startswith(tuple(args.only))]
    if args.before:
        jobs = regression.twin_jobs(jobs)
    jobs = schedule(jobs, sizes.passes)

    # SIGTERM ends the run like Ctrl-C, so every redis-server is stopped either way.
    exit_on_sigterm()
    if args.redis_server:
        os.environ[BINARY_ENV] = args.redis_server  # the launcher's, the workers' too
    try:
        tool("redis-server")
    except MissingTool as err:
        print(f"error: {err} (see --redis-server)", file=sys.stderr)
        return 2
    try:
        if any(job.impl == "baseline" for job in jobs):
            ensure_baseline()
    except subprocess.CalledProcessError as err:
        print(f"error: could not install {BASELINE_DIST}: {err}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    results: dict[tuple[str, str], Result] = {}
    where = placement(args.pin)
    with tempfile.TemporaryDirectory(prefix="rwq-bench-") as base:
        if args.before:
            try:
                BEFORE["src"] = regression.extract(REPO, args.before, Path(base) / "before")
            except subprocess.CalledProcessError:
                print(f"error: no src/ at git revision {args.before!r}", file=sys.stderr)
                return 2
        server = start_server(Path(base), spawn=where.server)
        port = server.port
        admin = server.client(socket_timeout=None)
        print(f"redis-server on port {port}, {where.describe()}; {len(jobs)} jobs", file=sys.stderr)
        for i, job in enumerate(jobs, 1):
            t0 = time.perf_counter()
            result = run_any(job, port, admin, Path(base), where)
            results[(job.key, job.impl)] = best(results.get((job.key, job.impl)), result)
            status = result.get("error", "ok")
            print(
                f"[{i:2}/{len(jobs)}] {job.key:<18} {job.impl:<8} "
                f"{time.perf_counter() - t0:6.1f} s  {status}",
                file=sys.stderr,
            )
            for line in result.get("log", []):
                print(f"        {line}", file=sys.stderr)
        info = admin.info("server")
        server.stop()

    ran = {key for key, _ in results}

    def table_of(res: dict[tuple[str, str], Result]) -> list[Row]:
        table = build_rows(res, sizes)
        table += [row for module in modules for row in module.rows(res, args.quick)]
        return [r for r in table if ran.issuperset(r.needs)]

    rows = table_of(results)
    against: list[Row] = []
    if args.before:
        against, skipped = regression.compare(
            rows, table_of(regression.as_before(results)), args.before
        )
    mode = "quick" if args.quick else "full"
    print()
    print(
        f"redis-work-queue benchmark ({mode}; redis {info.get('redis_version')}, "
        f"Python {sys.version.split()[0]}; baseline {BASELINE_DIST}; "
        f"{time.perf_counter() - started:.0f} s; {where.describe()})"
    )
    print("Rates are the best of the timed rounds. The RATIOS are what matter: they come from")
    print("this run on this server; the absolute figures depend on the machine.")
    print()
    for module in modules:
        for line in getattr(module, "report", lambda *_: [])(results, args.quick):
            print(line)
    print_table(rows)
    failed = [r.workload for r in rows if r.result == "FAIL"]
    if args.before:
        print()
        print(f"Every row against the library as of {args.before}, in this run:")
        print_table(against, ("now", args.before))
        if skipped:
            print(f"not compared (no figure on one side): {'; '.join(skipped)}")
        failed += [f"{r.workload} (against {args.before})" for r in against if r.result == "FAIL"]
    print()
    print(f"{len(failed)} target(s) failed: {', '.join(failed)}" if failed else "all targets met")
    if args.json:
        payload = {
            "mode": mode,
            "sizes": asdict(sizes),
            "results": [{"key": k, "impl": impl, **r} for (k, impl), r in results.items()],
            "rows": [asdict(r) for r in rows],
            "against_before": [asdict(r) for r in against],
        }
        args.json.write_text(json.dumps(payload, indent=2), encoding="utf-8")
    return 1 if args.check and failed else 0


if __name__ == "__main__":
    sys.exit(main())
