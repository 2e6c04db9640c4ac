"""Row module of schedules: the server time of the scheduler's housekeeping call with 1, 100
and 10,000 schedules of one queue.

Workload ``schedules_tick`` (``ours_workloads.py``): for each count, the schedules are written,
then the call the runners and ``rwq scheduler`` make (``ops.schedules.run_steps``) is timed by
the server (``INFO commandstats``, the time of its script calls, as scripts or functions): with
nothing due (the usual call), and with every schedule due (the call then takes the 25 soonest
and adds one occurrence each); the median call of each case is reported. Its cost must not
grow with the number of schedules: the due ones are read from a sorted set by due time, at
most 25 per call. A hundred times more schedules would cost a hundred times more if it did;
what is left is Redis's larger encodings past 128 entries (a skip list and a hash table instead
of a listpack) and the logarithm of the sorted set's size.
"""

from __future__ import annotations

from rows import Job, Ratio, Results, Row, div

COUNTS = (1, 100, 10_000)
#: The target: a call's server time at 10,000 schedules, every one due, in ms.
TARGET_MS = 2.0


def jobs(quick: bool) -> list[Job]:
    """One job: every count, both cases."""
    calls = 20 if quick else 100
    return [Job("schedules:tick", "ours", "schedules_tick", {"counts": COUNTS, "calls": calls})]


def _ms(results: Results, count: int, case: str) -> float | None:
    r = results.get(("schedules:tick", "ours"), {})
    if "error" in r:
        return None
    value = r.get("server_us", {}).get(f"{count}:{case}")
    return None if value is None else value / 1000


def _fmt(ms: float | None) -> str:
    return "ERR" if ms is None else f"{ms * 1000:,.0f} us"


def report(results: Results, quick: bool) -> list[str]:
    """Server time per housekeeping call, by number of schedules."""
    del quick
    if ("schedules:tick", "ours") not in results:
        return []
    lines = ["Schedules: server time per scheduler call (EVALSHA/FCALL, INFO commandstats):"]
    lines.append(f"  {'schedules':>10}  {'nothing due':>12}  {'all due (25 taken)':>20}")
    for count in COUNTS:
        idle, due = _ms(results, count, "idle"), _ms(results, count, "due")
        lines.append(f"  {count:>10,}  {_fmt(idle):>12}  {_fmt(due):>20}")
    return [*lines, ""]


def rows(results: Results, quick: bool) -> list[Row]:
    """Bounded: a call costs the same with 10,000 schedules as with 100, under 2 ms."""
    del quick
    needs = ("schedules:tick",)
    idle_big, idle_one = _ms(results, 10_000, "idle"), _ms(results, 1, "idle")
    due_big, due_mid = _ms(results, 10_000, "due"), _ms(results, 100, "due")
    return [
        Ratio(div(idle_big, idle_one), "10,000/1 schedules", at_most=2.0).row(
            needs, "scheduler call, nothing due, 10,000 schedules", _fmt(idle_big),
            f"(1: {_fmt(idle_one)})",
        ),
        Ratio(div(due_big, due_mid), "10,000/100 schedules", at_most=3.0).row(
            needs, "scheduler call, all due, 10,000 schedules", _fmt(due_big),
            f"(100: {_fmt(due_mid)})",
        ),
        Ratio(div(due_big, TARGET_MS), f"time/{TARGET_MS:g} ms target", at_most=1.0).row(
            needs, "scheduler call, all due, 10,000 schedules, vs 2 ms", _fmt(due_big),
            f"({TARGET_MS:g} ms)",
        ),
    ]  # fmt: skip
