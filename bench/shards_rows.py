"""Row module of sharded queues: ``shards=8`` against the unsharded queue on one server.

On one server sharding spreads nothing; these rows check that it costs almost nothing: add one
per call, lease+complete one at a time and the ``Worker`` runner (no-op handler), each in rounds
alternating between the two queues in one process (``sharded_workloads.shards_compare``). The
ratio is the median of the ratios of the pairs of rounds (shown with their lowest and
highest), 30 pairs in one pass of a full run. Target: at least 0.9x. Keys ``shards:<workload>``.
"""

from __future__ import annotations

from rows import Job, Ratio, Results, Row, rate, secs

SHARDS = 8
WORKLOADS = {
    "add": "add, 1 per call",
    "lease_complete": "lease+complete, 1 at a time",
    "worker": "worker runner, no-op handler",
}


WAKE = "shards:wake"


def jobs(quick: bool) -> list[Job]:
    # Many short pairs, in one pass: a moment of load on the machine spoils few of them.
    n, rounds = (1_500, 3) if quick else (2_000, 30)
    wake = {"shards": SHARDS, "n": 40 if quick else 200, "idle": 4, "idle_secs": 2 if quick else 5}
    return [
        *(
            Job(
                f"shards:{w}",
                "ours",
                "shards_compare",
                {"workload": w, "shards": SHARDS, "n": n, "rounds": rounds},
                once=True,
            )
            for w in WORKLOADS
        ),
        Job(WAKE, "ours", "shards_wake", wake, once=True),
    ]


def _part(results: Results, workload: str, part: str) -> float | None:
    r = results.get((f"shards:{workload}", "ours"), {})
    return None if "error" in r or part not in r else float(r[part]["value"])


def report(results: Results, quick: bool) -> list[str]:
    del results, quick
    return []


def rows(results: Results, quick: bool) -> list[Row]:
    del quick
    out = []
    for workload, label in WORKLOADS.items():
        if (f"shards:{workload}", "ours") not in results:
            continue
        sharded, plain = _part(results, workload, "sharded"), _part(results, workload, "plain")
        median = _part(results, workload, "ratio")
        r = results[(f"shards:{workload}", "ours")]
        pairs = r.get("ratio", {}).get("rounds", []) if isinstance(r, dict) else []
        spread = f", pairs {min(pairs):.2f}-{max(pairs):.2f}x" if pairs else ""
        out.append(
            Ratio(median, "shards/unsharded, median of pairs", at_least=0.9).row(
                (f"shards:{workload}",),
                f"{label}, shards={SHARDS} vs unsharded (one server)",
                rate(sharded),
                f"(unsharded {rate(plain)}{spread})",
            )
        )
    wake = results.get((WAKE, "ours"), {})
    if wake and "error" not in wake:
        out.append(
            Row(
                f"blocking lease wake-up, item on a random shard of {SHARDS} (median, p99)",
                f"{secs(wake.get('median'))}, {secs(wake.get('p99'))}",
                f"(idle: {wake.get('idle_calls', 0):.1f} calls/s per worker)",
                "",
                "",
                "",
                "info",
                (WAKE,),
            )
        )
    return out
