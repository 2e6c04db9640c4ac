"""Row module of flow control: what a rate limit costs a lease.

Workload (key ``flow:rate_limit``): the plain non-blocking lease + complete loop, one item at a
time, on a queue with a rate limit it never reaches and on the same queue without one, in
alternating rounds of the same run (``rate_limited`` in ``ours_workloads.py``).
"""

from __future__ import annotations

from rows import Job, Ratio, Result, Results, Row, div, rate

KEY = "flow:rate_limit"
#: A limit costs the lease one read of ``<prefix>:rate`` and one write: at least this ratio.
TARGET = 0.8


def jobs(quick: bool) -> list[Job]:
    """One job: both loops, rounds alternating."""
    params: Result = {"n": 1_500 if quick else 9_000, "rounds": 1 if quick else 3}
    return [Job(KEY, "ours", "rate_limited", params)]


def _value(results: Results, part: str) -> float | None:
    r = results.get((KEY, "ours"), {})
    if "error" in r:
        return None
    value = r.get(part, {}).get("value")
    return None if value is None else float(value)


def rows(results: Results, quick: bool) -> list[Row]:
    """lease+complete with a limit against without one."""
    del quick
    if (KEY, "ours") not in results:
        return []
    limited, none = _value(results, "limited"), _value(results, "none")
    ratio = Ratio(div(limited, none), "limited / no limit, same run", at_least=TARGET)
    return [
        ratio.row((KEY,), "lease+complete, rate-limited (never reached)", rate(limited), rate(none))
    ]


def report(results: Results, quick: bool) -> list[str]:
    """No table of its own."""
    del results, quick
    return []
