"""Every row of ``run.py`` against the library as of an earlier revision, in the same run.

``run.py --before REV`` extracts ``src/`` and ``lua/`` of git revision REV into the run's temporary
directory and runs each of this library's jobs a second time on that tree (impl ``before``,
same worker script, same workload, next to the job it copies, so passes alternate as they do
for the other clients). The table is then built twice, once from this tree's results and once
with the earlier tree's results in their place, and each row's figure is set against its twin:
a row more than 5% slower than before fails (``--check`` exits 1).

A job the earlier tree cannot run (a workload of a later feature) has no twin; its rows are
listed as not compared.
"""

from __future__ import annotations

import re
import subprocess
import tarfile
import tempfile
from dataclasses import replace
from pathlib import Path

from rows import Job, Ratio, Results, Row

IMPL = "before"
#: A row is slower than before when its speed falls below this share of the earlier tree's.
AT_LEAST = 0.95

_FIGURE = re.compile(r"^([0-9][0-9,]*(?:\.[0-9]+)?)\s*(/s|ms|µs|s|B)$")


def extract(repo: Path, rev: str, into: Path) -> Path:
    """``src/`` and ``lua/`` (the scripts it loads) of git revision ``rev`` of ``repo``,
    written under ``into``; the path of ``src/``."""
    with tempfile.TemporaryFile() as archive:
        subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", rev, "src", "lua"],
            check=True,
            stdout=archive,
        )
        archive.seek(0)
        with tarfile.open(fileobj=archive) as tar:
            tar.extractall(into, filter="data")
    return into / "src"


def twin_jobs(jobs: list[Job]) -> list[Job]:
    """``jobs`` with a copy of each of this library's jobs, run on the earlier tree, right after
    it (a cluster drain, which starts its own processes, has none)."""
    out: list[Job] = []
    for job in jobs:
        out.append(job)
        if job.impl == "ours" and job.kind != "drain":
            out.append(replace(job, impl=IMPL))
    return out


def as_before(results: Results) -> Results:
    """The results with the earlier tree's in place of this tree's (this tree's dropped where
    the earlier tree has no result, so that a row made from them reads as not measured)."""
    out = {key: r for key, r in results.items() if key[1] not in ("ours", IMPL)}
    for (key, impl), r in results.items():
        if impl == IMPL:
            out[(key, "ours")] = r
    return out


def speed(figure: str) -> float | None:
    """A row's figure as a speed (higher is faster): a rate as it is, a time or a size as its
    inverse; None for a figure that is none of these."""
    match = _FIGURE.match(figure.strip())
    if not match:
        return None
    value = float(match.group(1).replace(",", ""))
    if value == 0:
        return None
    unit = match.group(2)
    if unit == "/s":
        return value
    scale = {"ms": 1e-3, "µs": 1e-6, "s": 1.0, "B": 1.0}[unit]
    return 1.0 / (value * scale)


def compare(now: list[Row], before: list[Row], rev: str) -> tuple[list[Row], list[str]]:
    """Each row of ``now`` with a figure against its twin of ``before`` (the same table built
    from the earlier tree's results); and the labels of rows that could not be compared."""
    rows: list[Row] = []
    skipped: list[str] = []
    twins = dict(_keyed(before))
    for key, new in _keyed(now):
        label = new.workload.strip()
        old = twins.get(key)
        a, b = speed(new.ours), None if old is None else speed(old.ours)
        if a is None and b is None:
            continue  # a row without a figure of this library (a peer's, a note)
        if a is None or b is None or old is None:
            skipped.append(label)
            continue
        ratio = Ratio(a / b, f"speed now/{rev}", at_least=AT_LEAST)
        rows.append(ratio.row(new.needs, label, new.ours, old.ours))
    return rows, skipped


def _keyed(rows: list[Row]) -> list[tuple[tuple[str, int], Row]]:
    """Each row keyed by its label and how many rows of that label came before it (a row module
    leaves out rows it has no figures for, so the two tables need not line up)."""
    seen: dict[str, int] = {}
    out = []
    for row in rows:
        n = seen[row.workload] = seen.get(row.workload, -1) + 1
        out.append(((row.workload, n), row))
    return out
