"""The benchmark's machinery works: ``bench/run.py --quick`` runs every row end to end.

Timed goals live in the benchmark itself; this test only proves that its launcher, workers,
peer adapters and tables run (bounded: about a minute and a half).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servers import MissingTool, tool

pytestmark = [pytest.mark.slow, pytest.mark.real_redis]

BENCH = Path(__file__).resolve().parents[1] / "bench"


def _needs(*modules: str) -> None:
    """Skip without the bench extra's packages (fail under CI=true)."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    try:
        tool("redis-server")
    except MissingTool as err:
        missing.append(str(err))
    if missing:
        reason = f"needs {', '.join(missing)} (pip install 'redis-work-queue-lua[bench]')"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


def test_quick_run_of_every_row_runs_and_prints_both_tables(tmp_path: Path) -> None:
    """Every row of ``bench/run.py`` (``--quick`` sizes, about a minute) runs to its end on each
    client, and its figures reach both tables, so that a row broken by a change of the library
    shows here rather than in the next full run."""
    _needs("rq", "bullmq")
    out = tmp_path / "bench.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "run.py"), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text = done.stdout
    assert "add, 100 per call" in text and "bytes per waiting item" in text
    assert "bytes per waiting 100 B item, 20k items" in text  # a target row
    assert "memory/item, 100k x 100 B queued" in text
    assert " ERR " not in text and "worker exited" not in text, text
    results = json.loads(out.read_text())["results"]
    failed = [(r["key"], r["impl"], r["error"]) for r in results if "error" in r]
    assert not failed, failed
    ran = {(r["key"], r["impl"]) for r in results}
    assert {impl for key, impl in ran if key == "peers:memory_per_item"} == {
        "ours", "baseline", "rq", "bullmq", "streams", "plain"
    }  # fmt: skip
    workers = {impl for key, impl in ran if key == "peers:worker"}
    assert workers == {"ours", "rq", "bullmq", "streams"}
    assert {key for key, _ in ran} >= {
        "roundtrip", "add", "add_checked", "lease_complete", "inflight_fifo", "inflight_stuck",
        "worker_runner", "batch", "asyncio", "wait", "cluster", "memory",
    }  # fmt: skip


def test_script_instructions_are_counted_under_callgrind() -> None:
    """``bench/script_time.py --instructions`` counts each call's instructions inside EVALSHA:
    the same figure whatever the machine's load, ours above the minimal script's."""
    _needs()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        reason = "needs valgrind (Debian's valgrind package)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    argv = [sys.executable, str(BENCH / "script_time.py"), "--instructions", "--quick"]
    done = subprocess.run(
        [*argv, "--only", "single"], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {
        line.split()[0]: [float(word) for word in line.split() if word.replace(".", "").isdigit()]
        for line in done.stdout.splitlines()
        if line.startswith(("  add ", "  lease ", "  complete "))
    }
    assert set(rows) == {"add", "lease", "complete"}, done.stdout
    for op, (ours, least, ratio, *_) in rows.items():
        assert ours > least > 0, (op, done.stdout)
        assert ratio == pytest.approx(ours / least, abs=0.01), (op, done.stdout)
    assert "server instructions per call (callgrind, inside EVALSHA/FCALL)" in done.stdout


def test_wire_bench_measures_every_row() -> None:
    """``bench/wire_bench.py`` runs each measure (one item at a time with
    ``complete_and_lease_from`` too, on both APIs) and prints its ratios."""
    _needs()
    argv = [sys.executable, str(BENCH / "wire_bench.py"), "--rounds", "1", "--n", "200"]
    done = subprocess.run(
        [*argv, "--pin", "off"], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rates = {
        line.split()[0]: float(line.split()[1])
        for line in done.stdout.splitlines()
        if line.endswith(" /s")
    }
    assert set(rates) == {
        "evalsha", "lean", "add", "pair", "chain", "aevalsha", "alean", "apair", "achain"
    }  # fmt: skip
    assert all(rate > 0 for rate in rates.values()), done.stdout
    assert "complete_and_lease / (evalsha/2)" in done.stdout
    assert "async same / (async evalsha/2)" in done.stdout
    assert "wire path alone / evalsha" in done.stdout
