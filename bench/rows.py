"""What ``run.py`` and its row modules share: jobs, table rows, ratios and their targets.

A row module (listed in ``run.ROW_MODULES``) has three functions:

* ``jobs(quick: bool) -> list[Job]``: the jobs it needs run (each job runs one workload of one
  client in a fresh worker process on a freshly flushed server; ``Job.impl`` names the client:
  ``ours``, ``baseline`` or a peer of ``bench/peers/``);
* ``rows(results, quick) -> list[Row]``: rows for the targets table (``results`` maps
  ``(job.key, job.impl)`` to what the job's worker returned, or ``{"error": ...}``);
* ``report(results, quick) -> list[str]``: lines printed before the targets table (a table of
  its own), or none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

Result = dict[str, Any]
Results = dict[tuple[str, str], Result]


@dataclass
class Job:
    """One workload run by one client in its own process."""

    key: str
    impl: str
    workload: str
    params: Result = field(default_factory=dict)
    #: Where it runs: "worker" (a worker process on the bench server), "replica" (a worker
    #: process on a primary with a replica) or "drain" (processes on a cluster, see run.py).
    kind: str = "worker"
    #: Run it in the first pass only (a deterministic figure, or an expensive one).
    once: bool = False


@dataclass
class Row:
    """One line of the table."""

    workload: str
    ours: str
    baseline: str
    ratio: str
    basis: str
    target: str
    result: str  # PASS, FAIL or info
    needs: tuple[str, ...] = ()  # the job keys it is made from (not printed)


def rate(v: float | None) -> str:
    return "ERR" if v is None else f"{v:,.0f}/s"


def secs(v: float | None) -> str:
    if v is None:
        return "ERR"
    return f"{v * 1000:,.1f} ms" if v < 1 else f"{v:,.2f} s"


def times(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def per_item(v: float | None) -> str:
    return "ERR" if v is None else f"{v:,.1f} B"


def div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


@dataclass(frozen=True)
class Ratio:
    """A ratio, what it is a ratio of, and optionally its bounds."""

    value: float | None
    basis: str
    at_least: float | None = None
    at_most: float | None = None

    def row(self, needs: tuple[str, ...], label: str, ours: str, baseline: str = "") -> Row:
        """The table row of this ratio; without bounds it is for information only."""
        if self.at_least is not None:
            target, ok = f">= {self.at_least:.2f}x", self._ok(lambda v: v >= self.at_least)
        elif self.at_most is not None:
            target, ok = f"<= {self.at_most:.2f}x", self._ok(lambda v: v <= self.at_most)
        else:
            return Row(label, ours, baseline, times(self.value), self.basis, "", "info", needs)
        result = "PASS" if ok else "FAIL"
        return Row(label, ours, baseline, times(self.value), self.basis, target, result, needs)

    def _ok(self, test: Callable[[float], bool]) -> bool:
        return self.value is not None and test(self.value)


def print_table(rows: list[Row], names: tuple[str, str] = ("ours", "baseline")) -> None:
    """Print ``rows`` as a table; ``names`` heads the two figure columns."""
    header = Row("workload", *names, "ratio", "ratio of", "target", "result")
    table = [header, *rows]
    columns = [c for c in asdict(header) if c != "needs"]
    widths = {c: max(len(getattr(r, c)) for r in table) for c in columns}
    right = {"ours", "baseline", "ratio"}

    def line(r: Row) -> str:
        cells = []
        for c in columns:
            text = getattr(r, c)
            cells.append(text.rjust(widths[c]) if c in right else text.ljust(widths[c]))
        return "  ".join(cells).rstrip()

    print(line(header))
    print("  ".join("-" * widths[c] for c in columns))
    for r in rows:
        print(line(r))
