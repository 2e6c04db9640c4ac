"""Run the conformance tests on each redis-py release the package is tested with.

Each release is installed once, with its own required dependencies, into a directory of its own
(``pip install --target <cache>/redis-<version> redis==<version>``), and the tests of
``conformance/`` run with that directory first on ``PYTHONPATH``, under this interpreter and
its pytest. The tests stop at once when the redis-py they import is not the release asked for
(``RWQ_REDIS_PY``), so a wrong path cannot pass. Several releases run at once (``--jobs``);
each one's output is printed whole when it ends, then a table of every release: its pass
counts, its wall time and whether the lean path takes its clients.

Exit status 0 only when every release ran and passed and, under ``CI=true``, none skipped a
test.

Usage: ``python conformance/run.py [--versions 5.0.0 8.1.0] [--jobs 3] [--cache DIR]
[-- pytest arguments]``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The oldest and the newest release of each major line ``pyproject.toml`` allows.
VERSIONS = ("5.0.0", "5.3.1", "6.0.0", "6.4.0", "7.0.0", "7.4.1", "8.0.0", "8.1.0")
#: How a release's run ends: pytest's summary line, and the header line naming its paths.
_SUMMARY = re.compile(r"^=+ (.*\bin [0-9.]+s.*) =+$")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)")
_LEAN = re.compile(r"^lean path available: sync (\w+), asyncio (\w+)$", re.MULTILINE)
_ON = re.compile(r"^(redis-server .*, Python .*)$", re.MULTILINE)


@dataclass
class Outcome:
    """One release's run."""

    version: str
    code: int
    output: str
    seconds: float

    def counts(self) -> dict[str, int]:
        summary = [m.group(1) for m in map(_SUMMARY.match, self.output.splitlines()) if m]
        found = {"passed": 0, "failed": 0, "errors": 0, "skipped": 0}
        for number, word in _COUNT.findall(summary[-1] if summary else ""):
            key = "errors" if word.startswith("error") else word
            found[key] = found.get(key, 0) + int(number)
        return found

    def lean(self) -> str:
        found = _LEAN.search(self.output)
        if found is None:
            return "?"
        return {
            ("True", "True"): "sync, asyncio",
            ("True", "False"): "sync",
            ("False", "True"): "asyncio",
        }.get((found.group(1), found.group(2)), "no")


def install(version: str, cache: Path) -> Path:
    """The directory holding redis-py ``version`` and its required dependencies (installed
    with pip on first use; a half-made directory is never taken for a made one)."""
    target = cache / f"redis-{version}"
    if (target / "redis" / "__init__.py").is_file():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".redis-{version}-", dir=cache))
    try:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                "--no-input", "--no-warn-conflicts", "--target", str(staging), f"redis=={version}",
            ],
            check=True,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def run_one(version: str, target: Path, pytest_args: list[str]) -> Outcome:
    """The conformance tests on the release installed in ``target``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(target), str(ROOT / "src"), str(ROOT / "tests"), env.get("PYTHONPATH", "")]
    ).rstrip(os.pathsep)
    env["RWQ_REDIS_PY"] = version
    env["RWQ_REDIS_PY_DIR"] = str(target)
    # Only the plugins named here: an installed plugin may import redis-py on its own terms.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    command = [
        sys.executable, "-m", "pytest", str(ROOT / "conformance"),
        "-p", "no:cacheprovider", "--tb=short", *pytest_args,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    return Outcome(version, done.returncode, done.stdout, time.monotonic() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS), metavar="VERSION")
    parser.add_argument("--jobs", type=int, default=3, help="releases run at once (3)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=ROOT / ".venv" / "redis-py",
        help="where the releases are installed (.venv/redis-py)",
    )
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args(argv)
    ci = os.environ.get("CI", "").lower() == "true"
    started = time.monotonic()
    targets = {version: install(version, args.cache.resolve()) for version in args.versions}
    print(f"redis-py releases installed in {time.monotonic() - started:.1f} s", flush=True)

    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max(args.jobs, 1)) as pool:
        futures = [
            pool.submit(run_one, version, targets[version], args.pytest_args)
            for version in args.versions
        ]
        for future in futures:
            outcome = future.result()
            outcomes.append(outcome)
            print(f"\n===== redis-py {outcome.version} =====", flush=True)
            print(outcome.output, end="" if outcome.output.endswith("\n") else "\n", flush=True)

    print("\nredis-py  lean path       passed  failed  errors  skipped  seconds")
    failures: list[str] = []
    totals = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome in outcomes:
        counts = outcome.counts()
        for key in totals:
            totals[key] += counts[key]
        print(
            f"{outcome.version:<9} {outcome.lean():<14} {counts['passed']:>6} "
            f"{counts['failed']:>7} {counts['errors']:>7} {counts['skipped']:>8} "
            f"{outcome.seconds:>8.1f}"
        )
        if outcome.code != 0:
            failures.append(f"redis-py {outcome.version}: pytest exited {outcome.code}")
        elif counts["passed"] == 0:
            failures.append(f"redis-py {outcome.version}: no test passed")
        elif ci and counts["skipped"]:
            failures.append(f"redis-py {outcome.version}: {counts['skipped']} skipped under CI")
    where = {m.group(1) for m in (_ON.search(o.output) for o in outcomes) if m}
    print(f"all releases in {time.monotonic() - started:.1f} s, on {'; '.join(sorted(where))}")
    for failure in failures:
        print(f"FAILED {failure}")
    failed = totals["failed"] + len(failures)
    print(f"conformance: {totals['passed']} passed, {failed} failed, {totals['skipped']} skipped")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
