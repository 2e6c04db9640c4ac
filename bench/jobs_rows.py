"""Row module of job control by id (see ``rows.py``): ``state()`` server time on a big queue
against a small one, lease+complete with ``keep_results`` against without, and the latency of
``result()`` from the completion to the waiting caller (``jobs_workloads.py``)."""

from __future__ import annotations

from rows import Job, Ratio, Result, Results, Row, rate, secs

KEYS = {
    "state": "jobs:state",
    "keep": "jobs:keep_results",
    "latency": "jobs:result_latency",
}


def jobs(quick: bool) -> list[Job]:
    """The three workloads (the state row is measured once: server time)."""
    big = 100_000 if quick else 1_000_000
    n, rounds = (1_500, 1) if quick else (9_000, 3)
    return [
        Job(KEYS["state"], "ours", "jobs_state", {"small": 1_000, "big": big}, once=True),
        Job(KEYS["keep"], "ours", "jobs_keep_results", {"n": n, "rounds": rounds}),
        Job(KEYS["latency"], "ours", "jobs_result_latency", {"n": 200 if quick else 1_000}),
    ]


def _get(results: Results, key: str) -> Result:
    r = results.get((key, "ours"), {})
    return {} if "error" in r else r


def report(results: Results, quick: bool) -> list[str]:
    """The server time of state() per state and queue size."""
    del quick
    r = _get(results, KEYS["state"])
    if not r:
        return []
    small, big = r["sizes"]
    lines = [f"state() server time per call (us), {small:,} vs {big:,} items:"]
    for name in r["small"]:
        lines.append(f"  {name:<13} {r['small'][name]:6.1f}  {r['big'][name]:6.1f}")
    return [*lines, ""]


def rows(results: Results, quick: bool) -> list[Row]:
    """The targets: state() bounded, keep_results' cost, result() latency (info)."""
    del quick
    state, keep, latency = (_get(results, KEYS[k]) for k in ("state", "keep", "latency"))
    worst = state.get("value")
    server = keep.get("server_us", {})
    big = max(state.get("big", {"-": 0.0}).values(), default=0.0)
    sizes = state.get("sizes", [0, 0])
    out = [
        Ratio(worst, "big/small queue, worst state", at_most=1.5).row(
            (KEYS["state"],),
            f"state() server time, {sizes[1]:,} vs {sizes[0]:,} items",
            f"{big:.1f} us (slowest state)",
            "",
        ),
        Ratio(keep.get("value"), "keep_results/none, server time", at_most=1.5).row(
            (KEYS["keep"],),
            "lease+complete with keep_results vs without",
            f"{server.get('kept', 0):.1f} us/pair, {rate(keep.get('kept', {}).get('value'))}",
            f"({server.get('plain', 0):.1f} us, {rate(keep.get('plain', {}).get('value'))})",
        ),
    ]
    median, p99 = latency.get("median"), latency.get("p99")
    out.append(
        Row(
            "result() latency, completion to waiter (median, p99)",
            f"{secs(median)}, {secs(p99)}",
            "",
            "",
            "",
            "",
            "info",
            (KEYS["latency"],),
        )
    )
    return out
