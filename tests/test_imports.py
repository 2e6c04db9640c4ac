"""What ``import redis_work_queue`` loads, and the error an optional module gives without its extra.

Each check runs in a fresh interpreter, since this test process has imported everything already.
A missing package is simulated by a ``sys.meta_path`` finder that refuses to import it, so the
tests do not depend on which extras are installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from redis_work_queue.errors import MissingExtraError
from redis_work_queue.extras import extra_needed

SRC = Path(__file__).resolve().parents[1] / "src"

#: Loaded on first use only: the asyncio API, the runner and the optional extras' packages.
LAZY_MODULES = (
    "redis_work_queue.aio",
    "redis_work_queue.aioworker",
    "redis_work_queue.worker",
    "redis_work_queue.runner",
    "redis_work_queue.health",
    "redis_work_queue.spark",
    "redis_work_queue.dashboard",
    "redis_work_queue.metrics",
    "pyspark",
    "pyarrow",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "jinja2",
    "fakeredis",
    "multiprocessing",
)

BLOCKER = """
import sys

class Blocker:
    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Blocker(BLOCKED))
"""


def run_python(code: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports this checkout, hiding ``blocked``."""
    prelude = f"BLOCKED = {list(blocked)!r}\n" + BLOCKER if blocked else ""
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def loaded_after(code: str) -> set[str]:
    done = run_python(
        textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def lazy_loaded(modules: set[str]) -> set[str]:
    return {m for m in modules for lazy in LAZY_MODULES if m == lazy or m.startswith(lazy + ".")}


def test_import_loads_no_optional_or_asyncio_module() -> None:
    modules = loaded_after("import redis_work_queue")
    assert "redis_work_queue.workqueue" in modules
    assert lazy_loaded(modules) == set()


def test_a_sync_queue_loads_no_optional_or_asyncio_module() -> None:
    modules = loaded_after(
        """
        from redis import Redis
        from redis_work_queue import Item, KeyPrefix, WorkQueue
        queue = WorkQueue(KeyPrefix("imports"), max_deliveries=3)
        Redis(host="127.0.0.1", port=1)
        Item(b"x")
        """
    )
    assert lazy_loaded(modules) == set()


def test_the_package_adds_no_asyncio_module_to_what_redis_py_loads() -> None:
    # redis-py's own __init__ imports redis.asyncio: only what the package adds is its own.
    base = loaded_after("import redis")
    ours = loaded_after("import redis_work_queue")
    added = ours - base
    assert not {m for m in added if m.startswith(("redis.asyncio", "asyncio"))}


def test_lazy_names_resolve_on_first_use() -> None:
    done = run_python(
        """
        import sys
        import redis_work_queue as rwq
        assert "redis_work_queue.aio" not in sys.modules
        from redis_work_queue import AsyncWorkQueue, AsyncWorker, alease_from, Worker
        from redis_work_queue.aio import AsyncWorkQueue as direct, lease_from
        assert AsyncWorkQueue is direct and alease_from is lease_from
        assert Worker.__module__ == "redis_work_queue.worker"
        assert AsyncWorker.__module__ == "redis_work_queue.aioworker"
        assert set(rwq.__all__) <= set(dir(rwq))
        for name in rwq.__all__:
            getattr(rwq, name)
        try:
            rwq.NoSuchName
        except AttributeError as err:
            assert "NoSuchName" in str(err)
        else:
            raise AssertionError("no AttributeError")
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("code", "blocked", "extra", "missing"),
    [
        ("import redis_work_queue.spark", ("pyspark",), "spark", "pyspark"),
        ("import redis_work_queue.spark", ("pyarrow",), "spark", "pyarrow"),
        ("import redis_work_queue.dashboard", ("starlette",), "dashboard", "starlette"),
        ("import redis_work_queue.dashboard", ("uvicorn",), "dashboard", "uvicorn"),
        (
            "from redis import Redis\n"
            "from redis_work_queue import KeyPrefix, WorkQueue\n"
            "from redis_work_queue.metrics import QueueCollector\n"
            "QueueCollector(Redis(port=1), [WorkQueue(KeyPrefix('m'))])",
            ("prometheus_client",),
            "prometheus",
            "prometheus_client",
        ),
        (
            "from redis_work_queue.demo import embedded_server\nwith embedded_server():\n    pass",
            ("fakeredis",),
            "embedded",
            "fakeredis",
        ),
    ],
)
def test_a_missing_extra_is_named(
    code: str, blocked: tuple[str, ...], extra: str, missing: str
) -> None:
    done = run_python(
        f"""
        from redis_work_queue import MissingExtraError
        try:
{textwrap.indent(code, " " * 12)}
        except MissingExtraError as err:
            assert isinstance(err, ImportError)
            print(err.extra, err.missing)
            print(err)
        else:
            raise AssertionError("no MissingExtraError")
        """,
        blocked,
    )
    assert done.returncode == 0, done.stderr
    first, message = done.stdout.strip().splitlines()[:2]
    assert first == f"{extra} {missing}"
    assert f"pip install 'redis-work-queue-lua[{extra}]'" in message
    assert f"({missing} is missing)" in message


def test_rwq_demo_without_its_extra_prints_one_line() -> None:
    done = run_python(
        "import sys\nfrom redis_work_queue.cli import main\nsys.exit(main(['demo']))",
        ("fakeredis",),
    )
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "pip install 'redis-work-queue-lua[embedded]'" in lines[0]
    assert "Traceback" not in done.stderr


def test_an_unrelated_import_error_passes_through() -> None:
    with pytest.raises(ImportError) as caught, extra_needed("the dashboard", "dashboard"):
        raise ModuleNotFoundError("No module named 'some_app'", name="some_app")
    assert not isinstance(caught.value, MissingExtraError)
    with pytest.raises(MissingExtraError) as named, extra_needed("the dashboard", "dashboard"):
        raise ModuleNotFoundError("No module named 'jinja2.ext'", name="jinja2.ext")
    assert named.value.extra == "dashboard" and named.value.missing == "jinja2.ext"
