"""Fairness of fair groups under real workers: a big backlog does not hold up the other tenants.

Usage: python bench/fairness.py [--quick] [--check] [--job-ms MS]

Starts its own redis-server on a free port. Tenant A adds 50,000 items, then tenants B..K add
100 each; one ``Worker`` with 8 threads runs a handler that sleeps a fixed job time (2 ms).
The same run does this twice: with each tenant's items in its own group, and with the same
items on a queue without groups (in the same order). Each run stops as soon as every item of
B..K is done, then deletes the queue's keys. It prints how far A's backlog had dropped when
the last item of B..K was done (the bound: 10 x 100 x ``FACTOR``), and the p50/p99 wait of
the items of B..K (from the return of their add to the start of their handler) with groups
and without. ``--check`` exits 1 if the grouped run breaks the bound.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.append(str(BENCH.parent / "tests"))  # the launcher of servers and the scenario

import fair_tenants  # noqa: E402
from servers import exit_on_sigterm, start_server  # noqa: E402

#: Items of A done when the last item of B..K is done: at most 10 x 100 x FACTOR.
FACTOR = 2
BACKLOG = 50_000
PER_OTHER = 100
WORKERS = 8


def main() -> int:
    """Run the grouped and ungrouped scenario on one server and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a backlog of 10,000 items")
    parser.add_argument("--check", action="store_true", help="exit 1 if the bound is broken")
    parser.add_argument("--job-ms", type=float, default=2.0, help="the handler's job time")
    args = parser.parse_args()
    exit_on_sigterm()
    backlog = 10_000 if args.quick else BACKLOG
    bound = len(fair_tenants.OTHERS) * PER_OTHER * FACTOR
    with tempfile.TemporaryDirectory(prefix="rwq-fair-") as base:
        server = start_server(Path(base))
        try:
            db = server.client(socket_timeout=30)
            outcomes = {
                grouped: fair_tenants.run(
                    db,
                    f"{{fair}}:{'grouped' if grouped else 'plain'}",
                    grouped=grouped,
                    backlog=backlog,
                    per_other=PER_OTHER,
                    concurrency=WORKERS,
                    job_secs=args.job_ms / 1000,
                    timeout=300,
                )
                for grouped in (True, False)
            }
        finally:
            server.stop()
    print(
        f"A: {backlog:,} items, then B..K: {PER_OTHER} each; {WORKERS} worker threads, "
        f"{args.job_ms:g} ms job"
    )
    print(f"{'queue':<10} {'A done at last B..K':>20} {'p50 wait':>10} {'p99 wait':>10} {'run':>8}")
    for grouped, out in outcomes.items():
        name = "groups" if grouped else "no groups"
        print(
            f"{name:<10} {out.a_done:>20,} {out.p50 * 1000:>8.0f}ms {out.p99 * 1000:>8.0f}ms "
            f"{out.seconds:>7.1f}s"
        )
    g, u = outcomes[True], outcomes[False]
    ok = g.a_done <= bound
    print(
        f"bound: A done <= 10 x {PER_OTHER} x {FACTOR} = {bound:,}: {'ok' if ok else 'BROKEN'}; "
        f"p50 wait no groups / groups = {u.p50 / g.p50:.0f}x, p99 = {u.p99 / g.p99:.0f}x"
    )
    return 1 if args.check and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
