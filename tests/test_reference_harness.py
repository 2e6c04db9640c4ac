"""The reference design's own integration harness, run on this library.

``../shared/peers/mevitae/tests`` is the harness as published: ``run-test.sh`` starts two
Python workers (``python-tests.py``), then ``job-spawner-and-cleaner.py`` checks that the
database is empty (so workers waiting on empty queues must have written nothing), feeds jobs,
drops and copies ids between the lists, light- and deep-cleans, and at the end checks every
result and that no other key is left. The tree is copied out, this package takes the place of
``python/redis_work_queue`` (and comes first on ``PYTHONPATH``), and a redis-server of its own
is given to it. One change is made to the copy: the final check skips ``<queue>:counts``, the
counters this library documents (docs/operations.md#counters). Node.js workers are not run here
(``test_interop_node.py`` runs the reference Node client against ours).

A missing harness, ``bash`` or ``redis-server`` skips the test, and fails it under CI=true.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servers import Proc

pytestmark = [pytest.mark.slow]

TESTS_DIR = Path(__file__).resolve().parent
SRC = TESTS_DIR.parent / "src"
HARNESS_CANDIDATES = (
    TESTS_DIR.parent.parent / "shared" / "peers" / "mevitae",
    Path("/work/shared/peers/mevitae"),
)
#: The harness feeds three rounds of jobs, with half-second pauses: about two to four minutes.
HARNESS_DEADLINE_SECS = 900
#: The one line of the final check that is changed in the copy (see the module's doc).
KEY_LOOP = 'for key in db.keys("*"):'
KEY_LOOP_OURS = 'for key in [k for k in db.keys("*") if not k.endswith(b":counts")]:'


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI requires the reference harness", pytrace=False)
    pytest.skip(reason)


def _harness() -> Path:
    configured = os.environ.get("RWQ_REFERENCE_TREE")
    candidates = (Path(configured),) if configured else HARNESS_CANDIDATES
    for candidate in candidates:
        if (candidate / "tests" / "run-test.sh").is_file():
            return candidate
    _skip_or_fail("the reference harness (../shared/peers/mevitae/tests) is missing")
    raise AssertionError("unreachable")


def test_the_reference_harness_passes_with_python_workers_of_this_library(
    server: Proc, tmp_path: Path
) -> None:
    source = _harness()
    if shutil.which("bash") is None:
        _skip_or_fail("bash is missing")
    tree = tmp_path / "mevitae"
    shutil.copytree(source / "tests", tree / "tests", ignore=shutil.ignore_patterns("node"))
    (tree / "python").mkdir()
    shutil.copytree(SRC / "redis_work_queue", tree / "python" / "redis_work_queue")
    spawner = tree / "tests" / "job-spawner-and-cleaner.py"
    text = spawner.read_text()
    assert text.count(KEY_LOOP) == 1, "the harness's final check changed: update this test"
    spawner.write_text(text.replace(KEY_LOOP, KEY_LOOP_OURS))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC)
    # The harness runs `python3`: this interpreter's (its environment has redis-py).
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "python3").exists():
        _skip_or_fail(f"no python3 beside {sys.executable}")
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env.pop("CI", None)
    host = f"{server.host}:{server.port}"
    log = tmp_path / "harness.log"
    with log.open("w") as out:
        harness = subprocess.Popen(
            ["bash", "run-test.sh", "-t", "python_jobs", "-h", host],
            cwd=tree / "tests",
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its workers run in the background: killed with the group
        )
        try:
            # Its workers never end (and hold the log open): wait for run-test.sh alone.
            harness.wait(timeout=HARNESS_DEADLINE_SECS)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(harness.pid, signal.SIGKILL)
            harness.wait(10)
    output = log.read_text(errors="replace")
    tail = "\n".join(output.splitlines()[-40:])
    assert "isn't clean" not in output, tail
    assert harness.returncode == 0, tail
    assert "Job counts:" in output, tail
