"""Row module of flow control: what a rate limit and fair groups cost a lease.

Workload (key ``flow:rate_limit``): the plain non-blocking lease + complete loop, one item at a
time, on a queue with a rate limit it never reaches and on the same queue without one, in
alternating rounds of the same run (``rate_limited`` in ``ours_workloads.py``).

Workload (key ``flow:groups``): the same loop on ungrouped items, on items of 10 groups and on
items of 100,000 groups (two ready items each, so the ring holds them all and each lease puts
its group back), in alternating rounds of one run (``grouped``).

Workload (key ``flow:group_rate``): the loop on items of 10 groups, each with a rate limit it
never reaches and without one, in alternating rounds of one run (``group_rate_limited``).
"""

from __future__ import annotations

from rows import Job, Ratio, Result, Results, Row, div, rate

KEY = "flow:rate_limit"
GROUPS_KEY = "flow:groups"
GROUP_RATE_KEY = "flow:group_rate"
#: Groups with a limit (a pacing clock each, the pacer on the ring) against none: at least this.
GROUP_RATE_TARGET = 0.8
#: A limit costs the lease one read of ``<prefix>:rate`` and one write: at least this ratio.
TARGET = 0.8
#: Grouped items against ungrouped ones: at least this ratio.
GROUPED_TARGET = 0.7
#: 100,000 groups against 10 (a lease does the same work whatever the number of groups).
MANY_TARGET = 0.9
MANY = 100_000


def jobs(quick: bool) -> list[Job]:
    """Three jobs: each runs its loops in alternating rounds."""
    params: Result = {"n": 1_500 if quick else 9_000, "rounds": 1 if quick else 3}
    grouped: Result = {**params, "many": 10_000 if quick else MANY}
    return [
        Job(KEY, "ours", "rate_limited", params),
        Job(GROUPS_KEY, "ours", "grouped", grouped),
        Job(GROUP_RATE_KEY, "ours", "group_rate_limited", params),
    ]


def _value(results: Results, part: str, key: str = KEY) -> float | None:
    r = results.get((key, "ours"), {})
    if "error" in r:
        return None
    value = r.get(part, {}).get("value")
    return None if value is None else float(value)


def rows(results: Results, quick: bool) -> list[Row]:
    """lease+complete with a limit against without one; grouped against ungrouped, and with
    100,000 groups against 10."""
    out: list[Row] = []
    if (KEY, "ours") in results:
        limited, none = _value(results, "limited"), _value(results, "none")
        ratio = Ratio(div(limited, none), "limited / no limit, same run", at_least=TARGET)
        out.append(
            ratio.row(
                (KEY,), "lease+complete, rate-limited (never reached)", rate(limited), rate(none)
            )
        )
    if (GROUPS_KEY, "ours") in results:
        plain = _value(results, "ungrouped", GROUPS_KEY)
        ten = _value(results, "groups_10", GROUPS_KEY)
        many = _value(results, "groups_many", GROUPS_KEY)
        grouped = Ratio(div(ten, plain), "10 groups / ungrouped, same run", at_least=GROUPED_TARGET)
        out.append(
            grouped.row((GROUPS_KEY,), "lease+complete, grouped items", rate(ten), rate(plain))
        )
        label = "100,000 groups" if not quick else "10,000 groups"
        scale = Ratio(div(many, ten), f"{label} / 10 groups, same run", at_least=MANY_TARGET)
        out.append(
            scale.row((GROUPS_KEY,), f"lease+complete, {label} on the ring", rate(many), rate(ten))
        )
    if (GROUP_RATE_KEY, "ours") in results:
        limited = _value(results, "limited", GROUP_RATE_KEY)
        none = _value(results, "none", GROUP_RATE_KEY)
        ratio = Ratio(
            div(limited, none), "limited groups / no limit, same run", at_least=GROUP_RATE_TARGET
        )
        out.append(
            ratio.row(
                (GROUP_RATE_KEY,),
                "lease+complete, 10 rate-limited groups (never reached)",
                rate(limited),
                rate(none),
            )
        )
    return out


def report(results: Results, quick: bool) -> list[str]:
    """No table of its own."""
    del results, quick
    return []
