"""Benchmark of the worker runner under connection cuts: items/s with cuts vs. without.

Usage: python bench/faults_bench.py [--quick] [--json FILE] [--seed N] [--only MODE ...]

Starts its own redis-server on a free port with the fault suite's TCP proxy in front of it
(``tests/servers.py``, the tests' launcher), and an ``rwq worker`` (no-op handler) connected through
the proxy. Each round queues a batch of items directly on the server and times until the worker
has drained it (nothing queued or leased), once with the proxy cutting every connection at
random intervals and once without; rounds alternate and the best round of each counts (after
one warm-up round). The ratio is what matters: a lease whose reply a cut destroys costs the
worker its lease time (``--lease-secs``) before it is handed out again.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
for path in (REPO / "tests", REPO / "src"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import redis  # noqa: E402

import faults  # noqa: E402
import rows  # noqa: E402
from redis_work_queue import Item, KeyPrefix, WorkQueue  # noqa: E402
from servers import Proxy, exit_on_sigterm, poll, start_server  # noqa: E402

LEASE_SECS = 2.0
#: Gaps between cuts, in seconds.
CUT_GAPS = (0.1, 0.4)
DRAIN_DEADLINE = 60.0


@dataclass(frozen=True)
class Mode:
    """One way of running the worker."""

    key: str
    label: str
    options: tuple[str, ...]


MODES = (
    Mode("threads", "rwq worker, 4 threads", ("--concurrency", "4")),
    Mode("processes", "rwq worker, 2 processes", ("--processes", "--concurrency", "2")),
)


def drain_secs(
    db: redis.Redis, queue: WorkQueue, proxy: Proxy, items: int, cuts: bool, seed: int
) -> tuple[float, int]:
    """Queue ``items`` and time until the worker has drained them; return (secs, cuts)."""
    queue.add_items(db, [Item(b"x" * 82) for _ in range(items)])
    before = proxy.cuts
    started = time.perf_counter()
    if cuts:
        proxy.cut_randomly(seed, *CUT_GAPS)
    try:
        poll(lambda: faults.at_rest(db, queue), DRAIN_DEADLINE, "the worker to drain", 0.01)
        took = time.perf_counter() - started
    finally:
        proxy.stop_cutting()
    return took, proxy.cuts - before


def run_mode(
    mode: Mode, port: int, proxy: Proxy, workdir: Path, items: int, rounds: int, seed: int
) -> dict[str, Any]:
    db = redis.Redis(port=port, socket_timeout=10)
    queue = WorkQueue(KeyPrefix(f"faults-bench-{mode.key}"))
    options = (*mode.options, "--lease-secs", str(LEASE_SECS))
    result: dict[str, Any] = {"clean": [], "cut": [], "cuts": []}
    with faults.worker_command(
        proxy.url,
        None,
        [queue.keys.prefix],
        workdir / mode.key,
        *options,
        handler="faults_handlers:noop",
    ) as worker:
        try:
            poll(lambda: proxy.open_links() > 0, 30, "the worker to connect")
            drain_secs(db, queue, proxy, items, False, seed)  # warm-up: imports, script loads
            for n in range(rounds):
                clean, _ = drain_secs(db, queue, proxy, items, False, seed + n)
                result["clean"].append(items / clean)
                if not worker.alive():
                    raise AssertionError("the worker exited")
                cut, count = drain_secs(db, queue, proxy, items, True, seed + n)
                result["cut"].append(items / cut)
                result["cuts"].append(count)
                if not worker.alive():
                    raise AssertionError("the worker exited under cuts")
            result["exit"] = worker.terminate(20)
        except AssertionError as err:
            result["error"] = f"{err}; {worker.tail()[-600:]}"
    db.close()
    return result


def table_rows(modes: list[Mode], results: dict[str, dict[str, Any]], items: int) -> list[Any]:
    out = []
    low, high = CUT_GAPS
    for mode in modes:
        res = results[mode.key]
        clean = max(res["clean"], default=None) if "error" not in res else None
        cut = max(res["cut"], default=None) if "error" not in res else None
        ratio = rows.Ratio(rows.div(cut, clean), "same worker, no cuts")
        cuts = sum(res["cuts"])
        label = f"{mode.label}, {items} items, cut every {low:g}-{high:g} s ({cuts} cut)"
        out.append(ratio.row((), label, rows.rate(cut), f"no cuts {rows.rate(clean)}"))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, one round")
    parser.add_argument("--json", type=Path, help="also write the raw results to this file")
    parser.add_argument("--seed", type=int, default=7, help="seed of the cut intervals")
    parser.add_argument(
        "--only", nargs="+", choices=[m.key for m in MODES], help="run these modes only"
    )
    args = parser.parse_args(argv)
    modes = [m for m in MODES if not args.only or m.key in args.only]
    exit_on_sigterm()  # every server is stopped on SIGTERM too
    items, rounds = (1_000, 1) if args.quick else (3_000, 3)
    started = time.perf_counter()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="rwq-faults-bench-") as tmp:
        server = start_server(Path(tmp))
        proxy = Proxy(server.port)
        try:
            for mode in modes:
                t0 = time.perf_counter()
                results[mode.key] = run_mode(
                    mode, server.port, proxy, Path(tmp), items, rounds, args.seed
                )
                status = results[mode.key].get("error", "ok")
                took = time.perf_counter() - t0
                print(f"{mode.key:<10} {took:6.1f} s  {status}", file=sys.stderr)
            version = server.admin().info("server").get("redis_version")
        finally:
            proxy.stop()
            server.stop()
    mode_name = "quick" if args.quick else "full"
    print()
    print(
        f"redis-work-queue worker under connection cuts ({mode_name}; redis {version}, Python"
        f" {sys.version.split()[0]}; lease {LEASE_SECS:g} s; {time.perf_counter() - started:.0f} s)"
    )
    print("Rates are the best round of each; the ratio is what matters.")
    print()
    rows.print_table(table_rows(modes, results, items))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
