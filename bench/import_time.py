"""Import time of ``redis_work_queue``: its own modules, and redis-py, over fresh interpreters.

Usage: python bench/import_time.py [--runs N] [--json FILE]

Each run starts a new interpreter with ``-X importtime -c "import redis_work_queue"`` (this
checkout's ``src/`` first on the path) and sums the self time of the package's own modules, and
takes the cumulative time of the top-level ``redis`` import. The figures printed are the medians
over the runs, with the lowest and highest. redis-py imports ``redis.asyncio`` from its own
``__init__``, so that part is redis-py's and the same for any of its users.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "redis_work_queue"


def one_run() -> tuple[float, float, float]:
    """Milliseconds: the package's own modules, redis-py, and the whole import."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", f"import {PACKAGE}"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
        check=True,
    )
    own = redis_total = total = 0.0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        self_us, cumulative_us, name = line[len("import time:") :].split("|")
        if not self_us.strip().isdigit():
            continue  # the header line
        module = name.strip()
        if module == PACKAGE or module.startswith(PACKAGE + "."):
            own += int(self_us)
        if module == "redis":
            redis_total = max(redis_total, int(cumulative_us))
        if module == PACKAGE:
            total = int(cumulative_us)
    return own / 1000, redis_total / 1000, total / 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="fresh interpreters (default 15)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    runs = [one_run() for _ in range(args.runs)]
    names = ("own modules", "redis-py", "whole import")
    figures = {}
    print(f"import {PACKAGE}: median of {args.runs} fresh interpreters (-X importtime)")
    for i, name in enumerate(names):
        values = [run[i] for run in runs]
        median = statistics.median(values)
        figures[name] = {"median_ms": median, "min_ms": min(values), "max_ms": max(values)}
        print(
            f"  {name:<13} {median:7.1f} ms   (lowest {min(values):.1f}, highest {max(values):.1f})"
        )
    share = figures["own modules"]["median_ms"] / figures["whole import"]["median_ms"]
    print(f"  own modules are {share:.0%} of the whole import")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
