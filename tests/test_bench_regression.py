"""``bench/run.py --before REV``: every row against the library as of an earlier revision.

The comparison's parts on made-up rows (which figure is a speed, which way, what fails), and one
short run end to end against the checkout's own HEAD, whose rows must all be compared.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servers import MissingTool, tool

BENCH = Path(__file__).resolve().parents[1] / "bench"
REPO = BENCH.parent
sys.path.insert(0, str(BENCH))

import regression  # noqa: E402
from rows import Job, Row  # noqa: E402


def _row(label: str, ours: str) -> Row:
    return Row(label, ours, "", "", "", "", "info", ("k",))


@pytest.mark.parametrize(
    ("figure", "speed"),
    [
        ("12,000/s", 12_000.0),
        ("250.0 ms", 4.0),
        ("2.00 s", 0.5),
        ("100.0 B", 0.01),
        ("ERR", None),
        ("-", None),
        ("", None),
        ("1.20x", None),
        ("0/s", None),
    ],
)
def test_a_figure_reads_as_a_speed_where_it_is_a_rate_a_time_or_a_size(
    figure: str, speed: float | None
) -> None:
    if speed is None:
        assert regression.speed(figure) is None
    else:
        assert regression.speed(figure) == pytest.approx(speed)


def test_a_row_fails_when_more_than_five_percent_slower_either_way_round() -> None:
    now = [
        _row("rate kept", "9,600/s"),
        _row("rate lost", "9,400/s"),
        _row("time kept", "104.0 ms"),
        _row("time lost", "106.0 ms"),
        _row("a peer's row", "ERR"),
        _row("new row", "1,000/s"),
    ]
    before = [
        _row("rate kept", "10,000/s"),
        _row("rate lost", "10,000/s"),
        _row("time kept", "100.0 ms"),
        _row("time lost", "100.0 ms"),
        _row("a peer's row", "ERR"),
        _row("new row", "ERR"),
    ]
    # A row module leaves out the rows it has no figures for: the tables need not line up.
    before.insert(0, _row("only before", "1,000/s"))
    rows, skipped = regression.compare(now, before, "abc123")
    results = {r.workload: r.result for r in rows}
    assert results == {
        "rate kept": "PASS",
        "rate lost": "FAIL",
        "time kept": "PASS",
        "time lost": "FAIL",
    }
    assert skipped == ["new row"]
    assert all(r.basis == "speed now/abc123" for r in rows)


def test_the_twins_run_next_to_their_jobs_and_take_their_place_in_the_tables() -> None:
    jobs = [
        Job("add", "ours", "add"),
        Job("add", "baseline", "add"),
        Job("cluster", "ours", "drain", kind="drain"),
    ]
    twinned = regression.twin_jobs(jobs)
    assert [(j.key, j.impl) for j in twinned] == [
        ("add", "ours"),
        ("add", "before"),
        ("add", "baseline"),
        ("cluster", "ours"),
    ]
    results = {
        ("add", "ours"): {"value": 2.0},
        ("add", "before"): {"value": 1.0},
        ("add", "baseline"): {"value": 3.0},
        ("cluster", "ours"): {"value": 4.0},
    }
    assert regression.as_before(results) == {
        ("add", "ours"): {"value": 1.0},
        ("add", "baseline"): {"value": 3.0},
    }


def test_the_earlier_tree_is_extracted_with_its_scripts(tmp_path: Path) -> None:
    src = regression.extract(REPO, "HEAD", tmp_path)
    assert (src / "redis_work_queue" / "__init__.py").is_file()
    assert (tmp_path / "lua" / "lease.lua").is_file()


@pytest.mark.slow
@pytest.mark.real_redis
def test_a_short_run_against_head_compares_every_row_it_ran() -> None:
    try:
        tool("redis-server")
    except MissingTool as err:
        pytest.fail(str(err), pytrace=False)
    done = subprocess.run(
        [
            sys.executable,
            str(BENCH / "run.py"),
            "--quick",
            "--only",
            "roundtrip",
            "add",
            "--before",
            "HEAD",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout
    assert "Every row against the library as of HEAD, in this run:" in text
    tail = text.split("Every row against the library as of HEAD")[1]
    for label in ("round trip: PING, 1 client", "add: add_unique_item vs add_item"):
        assert label in tail, tail
    assert "speed now/HEAD" in tail
    assert "not compared" not in tail, tail
    assert "[ 2/" in done.stderr and "before" in done.stderr
