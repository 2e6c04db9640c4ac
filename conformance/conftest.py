"""The conformance tests: the library's public operations on one redis-py release.

``conformance/run.py`` (``make conformance``) runs this directory once per redis-py release it
tests, with that release alone first on ``PYTHONPATH`` and ``RWQ_REDIS_PY`` naming it; the run
stops at once when the redis-py it imports is another one, so a wrong path cannot pass. The
tests need only real ``redis-server`` processes, started on free ports by the suite's one
launcher (``tests/servers.py``): no fakeredis, Spark, Node.js or browser. A missing
``redis-server`` skips them, and fails them under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import sys
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio

TESTS_DIR = Path(__file__).resolve().parent.parent / "tests"
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

# The lanes' comparisons are assertions: rewritten, their failures show what differs.
pytest.register_assert_rewrite("lanes")

from lanes import Loop, ScriptRoutes  # noqa: E402
from servers import (  # noqa: E402
    MissingTool,
    Proc,
    ReplicaPair,
    start_pair,
    start_server,
    stop_all,
    tool,
)

#: The redis-py release the run was asked for (set by ``conformance/run.py``).
VERSION_ENV = "RWQ_REDIS_PY"
#: The directory that release was installed into.
TARGET_ENV = "RWQ_REDIS_PY_DIR"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() == "true"


def pytest_configure(config: pytest.Config) -> None:
    """Stop before any test when the redis-py imported is not the one asked for."""
    config.addinivalue_line("markers", "conformance: the public API on one redis-py release")
    wanted = os.environ.get(VERSION_ENV)
    if wanted is not None and redis.__version__ != wanted:
        raise pytest.UsageError(
            f"{VERSION_ENV}={wanted} but redis {redis.__version__} was imported from "
            f"{redis.__file__}"
        )
    target = os.environ.get(TARGET_ENV)
    if target is not None and not Path(redis.__file__).resolve().is_relative_to(
        Path(target).resolve()
    ):
        raise pytest.UsageError(f"redis was imported from {redis.__file__}, not from {target}")


def pytest_report_header() -> list[str]:
    from redis_work_queue import transport  # noqa: PLC0415 - after the version check

    sync_lean = transport.lean_available(redis.Redis())
    async_lean = transport.lean_available(redis.asyncio.Redis())
    try:
        banner = subprocess.run(
            [tool("redis-server"), "--version"], capture_output=True, text=True, check=False
        ).stdout
        found = re.search(r"\bv=(\S+)", banner)
        server = found.group(1) if found else banner.strip()
    except MissingTool as err:
        server = f"missing ({err})"
    return [
        f"redis-py {redis.__version__} from {Path(redis.__file__).parent}",
        f"lean path available: sync {sync_lean}, asyncio {async_lean}",
        f"redis-server {server}, Python {platform.python_version()}",
    ]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.conformance)


@contextlib.contextmanager
def tools() -> Iterator[None]:
    """Skip on a missing ``redis-server``, or fail under ``CI=true``."""
    try:
        yield
    except MissingTool as err:
        if in_ci():
            pytest.fail(f"{err}; CI requires a real Redis", pytrace=False)
        pytest.skip(str(err))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under ``CI=true`` nothing here may skip: a skip is reported as a failure."""
    report = yield
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI=true, which runs every conformance test: {report.longrepr}"
        )
    return report


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """One redis-server for the session; each test empties the databases it uses."""
    with tools():
        server = start_server(tmp_path_factory.mktemp("redis"), client_timeout=None)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def replica_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicaPair]:
    """A primary and its replica, for writes that wait for a replica (WAIT)."""
    with tools():
        pair = start_pair(tmp_path_factory.mktemp("pair"))
    try:
        yield pair
    finally:
        stop_all(pair.procs())


@pytest.fixture(scope="session")
def loop() -> Iterator[Loop]:
    """The event loop (in a thread of its own) of the asyncio lanes."""
    made = Loop()
    yield made
    made.close()


@pytest.fixture
def routes(monkeypatch: pytest.MonkeyPatch) -> ScriptRoutes:
    """Counts the script calls each client sends through redis-py's command layer."""
    return ScriptRoutes(monkeypatch)
