"""The package's layers, read from its import statements (no import is run).

The operations layer (the ``ops`` package, ``queue_base``, ``results``, ``validation``,
``clients``, ``calls``) never imports a facade; the asyncio facade and runner never import
the synchronous ones; the synchronous modules leave ``redis.asyncio`` alone at import time.
Imports under ``if TYPE_CHECKING:`` are only for the type checker and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import redis_work_queue

PACKAGE = Path(redis_work_queue.__file__).parent
OPERATIONS = ("ops", "queue_base", "results", "validation", "clients", "calls")
SYNC_FACADES = ("workqueue", "worker")
ASYNC_FACADES = ("aio", "aioworker")
#: Synchronous modules of the layers above that must not load redis.asyncio when imported.
SYNC_MODULES = ("clients", "ops", "queue_base", "results", "validation", "workqueue")


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Import statements run at import time: module level, outside ``if TYPE_CHECKING:``."""
    found: list[ast.Import | ast.ImportFrom] = []
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.extend(n for n in node.orelse if isinstance(n, ast.Import | ast.ImportFrom))
        elif isinstance(node, ast.Try | ast.If):
            found.extend(n for n in ast.walk(node) if isinstance(n, ast.Import | ast.ImportFrom))
    return found


def _files(module: str) -> list[Path]:
    """The files of a module of the package: one file, or every file of a subpackage."""
    path = PACKAGE / module
    return sorted(path.glob("*.py")) if path.is_dir() else [PACKAGE / f"{module}.py"]


def _tree(file: Path) -> ast.Module:
    return ast.parse(file.read_text(encoding="utf-8"))


def _exists(name: str) -> bool:
    return (PACKAGE / f"{name}.py").exists() or (PACKAGE / name / "__init__.py").exists()


def package_imports(module: str) -> set[str]:
    """The package's own top-level modules that ``module`` imports at import time."""
    out: set[str] = set()
    for file in _files(module):
        depth = 1 if file.parent == PACKAGE else 2  # the level of a relative import of the root
        for node in _runtime_imports(_tree(file)):
            if isinstance(node, ast.ImportFrom) and node.level == depth:
                if node.module:
                    out.add(node.module.split(".")[0])
                else:  # from . import a, b
                    out.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                "redis_work_queue."
            ):
                out.add((node.module or "").split(".")[1])
    return {name for name in out if _exists(name) and name != module}


def closure(module: str) -> set[str]:
    """Every package module loaded by importing ``module`` (its package aside)."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(package_imports(name))
    return seen - {module}


def test_the_import_graph_is_read() -> None:
    """The reader sees the edges that exist, so the checks below cannot pass vacuously."""
    assert {"queue_base", "results", "clients", "transport"} <= package_imports("aio")
    assert "ops" in closure("aio")
    assert "workqueue" in closure("worker")


@pytest.mark.parametrize("module", OPERATIONS)
def test_the_operations_layer_imports_no_facade(module: str) -> None:
    facades = set(SYNC_FACADES + ASYNC_FACADES + ("runner",))
    assert closure(module) & facades == set()


@pytest.mark.parametrize("module", ASYNC_FACADES)
def test_the_asyncio_api_does_not_import_the_synchronous_one(module: str) -> None:
    assert closure(module) & set(SYNC_FACADES) == set()


@pytest.mark.parametrize("module", SYNC_MODULES)
def test_synchronous_modules_do_not_import_redis_asyncio(module: str) -> None:
    nodes = [node for file in _files(module) for node in _runtime_imports(_tree(file))]
    for node in nodes:
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
        )
        assert not any(n.startswith("redis.asyncio") for n in names), (module, names)
