"""SVG charts of a benchmark run, for the docs: python bench/charts.py out.json [--out DIR].

Reads the JSON that ``python bench/run.py --json out.json`` writes and draws, into
``docs/assets/bench/`` by default:

* ``rates.svg``: items per second of this library and of the published client, per workload
  run on both;
* ``ratios.svg``: every same-run ratio of the run's table (log scale; 1 is parity);
* ``cleans.svg``: light clean times of both clients, and deep clean times by size and share lost.

Each chart's title says which run it comes from (quick or full, and ``--note``). Needs
matplotlib (the ``docs`` extra).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("svg")
import matplotlib.pyplot as plt

OUT = Path(__file__).resolve().parents[1] / "docs" / "assets" / "bench"
OURS, BASE = "#1f77b4", "#b0b0b0"
RATE_WORKLOADS = {
    "add": "add",
    "lease_complete": "lease + complete",
    "inflight_fifo": "lease + complete,\nmany in flight",
    "inflight_stuck": "lease + complete,\nolder leases held",
}


def load(path: Path) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads(path.read_text("utf-8"))
    payload["by_key"] = {(r["key"], r["impl"]): r for r in payload["results"]}
    return payload


def subtitle(run: dict[str, Any], note: str) -> str:
    mode = "quick run (small sizes, one pass)" if run["mode"] == "quick" else "full run"
    return f"bench/run.py, {mode}" + (f"; {note}" if note else "")


def save(fig: Any, path: Path) -> None:
    fig.tight_layout()
    fig.savefig(path, format="svg", metadata={"Date": None})
    plt.close(fig)
    print(f"wrote {path}")


def rates(run: dict[str, Any], note: str, out: Path) -> None:
    found = [
        (label, run["by_key"][(key, "ours")]["value"], run["by_key"][(key, "baseline")]["value"])
        for key, label in RATE_WORKLOADS.items()
        if (key, "ours") in run["by_key"] and (key, "baseline") in run["by_key"]
    ]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    xs = range(len(found))
    ax.bar([x - 0.2 for x in xs], [f[1] for f in found], 0.4, label="this library", color=OURS)
    ax.bar(
        [x + 0.2 for x in xs],
        [f[2] for f in found],
        0.4,
        label="published client 0.1.5",
        color=BASE,
    )
    ax.set_xticks(list(xs), [f[0] for f in found], fontsize=8)
    ax.set_ylabel("items per second (best round)")
    ax.set_title(f"One item at a time, same run\n{subtitle(run, note)}", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    save(fig, out / "rates.svg")


def ratio_value(text: str) -> float | None:
    found = re.fullmatch(r"([0-9.]+)x", text.strip())
    return float(found.group(1)) if found else None


def ratios(run: dict[str, Any], note: str, out: Path) -> None:
    rows = [
        (f"{r['workload'].strip()}  ({r['basis']})", value)
        for r in run["rows"]
        if (value := ratio_value(r["ratio"])) is not None and value > 0
    ]
    fig, ax = plt.subplots(figsize=(9, 0.32 * len(rows) + 1.4))
    ys = range(len(rows))
    ax.barh(list(ys), [v for _, v in rows], color=OURS)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(list(ys), [label for label, _ in rows], fontsize=7)
    ax.invert_yaxis()
    for y, (_, v) in zip(ys, rows, strict=True):
        ax.text(v, y, f" {v:.2f}x", va="center", fontsize=7)
    ax.set_xlabel("ratio, as the table defines it (log scale; 1 = parity)")
    ax.set_title(f"Same-run ratios\n{subtitle(run, note)}", fontsize=10)
    ax.grid(axis="x", alpha=0.3, which="both")
    save(fig, out / "ratios.svg")


def cleans(run: dict[str, Any], note: str, out: Path) -> None:
    by_key = run["by_key"]
    light = sorted(int(k.split(":")[1]) for k, impl in by_key if k.startswith("light_clean:"))
    light = sorted(set(light))
    deep = [
        (k.split(":", 1)[1], r["value"])
        for (k, impl), r in by_key.items()
        if impl == "ours" and (k.startswith(("deep_clean:", "deep_lost:")))
    ]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    xs = range(len(light))
    for offset, impl, label, color in (
        (-0.2, "ours", "this library", OURS),
        (0.2, "baseline", "published client 0.1.5", BASE),
    ):
        values = [by_key.get((f"light_clean:{n}", impl), {}).get("value", 0) for n in light]
        left.bar([x + offset for x in xs], values, 0.4, label=label, color=color)
    left.set_xticks(list(xs), [f"{n:,} expired leases" for n in light], fontsize=8)
    left.set_ylabel("seconds")
    left.set_title("Light clean", fontsize=10)
    left.legend(fontsize=8)
    left.grid(axis="y", alpha=0.3)
    right.barh(range(len(deep)), [v for _, v in deep], color=OURS)
    right.set_yticks(
        range(len(deep)),
        [
            f"{name} items" if ":" not in name else name.replace(":", " items, ") + " lost"
            for name, _ in deep
        ],
        fontsize=8,
    )
    right.invert_yaxis()
    right.set_xlabel("seconds")
    right.set_title("Deep clean (this library)", fontsize=10)
    right.grid(axis="x", alpha=0.3)
    fig.suptitle(f"Clean times\n{subtitle(run, note)}", fontsize=10)
    save(fig, out / "cleans.svg")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="SVG charts of a bench/run.py --json file")
    parser.add_argument("json", type=Path, help="the file bench/run.py --json wrote")
    parser.add_argument("--out", type=Path, default=OUT, help=f"directory (default {OUT})")
    parser.add_argument("--note", default="", help="added to every title (the machine, say)")
    args = parser.parse_args(argv)
    mpl.rcParams["svg.hashsalt"] = "redis-work-queue"  # stable ids: diffs show real changes
    mpl.rcParams["svg.fonttype"] = "none"  # text stays text
    run = load(args.json)
    args.out.mkdir(parents=True, exist_ok=True)
    rates(run, args.note, args.out)
    ratios(run, args.note, args.out)
    cleans(run, args.note, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
