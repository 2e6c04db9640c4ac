"""The registry of operations (``redis_work_queue.ops.registry``) against everything that must
know each operation: the queues' public methods and the package's functions, the write-check
and out-of-memory tables (the ``WRITE_CHECKS`` and ``OOM_CHECKS`` rows of any test module), the
scripts of ``lua/``, the docs and the command line. An operation registered without its rows,
or a public method or function without its operation, fails here."""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import async_bridge
import redis_work_queue
from redis_work_queue import AsyncWorkQueue, WorkQueue, cli
from redis_work_queue.loader import script_names
from redis_work_queue.ops import registry
from redis_work_queue.ops.registry import Operation

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs"
OPERATIONS = registry.operations()
TABLES = ("WRITE_CHECKS", "OOM_CHECKS")


def resolve(name: str) -> Any:
    """A name of ``redis_work_queue`` (``lease_from``, ``server.eviction_policy``)."""
    *modules, attribute = name.split(".")
    if modules:
        return getattr(importlib.import_module(f"redis_work_queue.{'.'.join(modules)}"), attribute)
    return getattr(redis_work_queue, attribute)


@cache
def row_modules() -> tuple[ModuleType, ...]:
    """Every test module that declares rows of a table, imported."""
    found = []
    for path in sorted(TESTS.glob("test_*.py")):
        if re.search(rf"^({'|'.join(TABLES)}) = ", path.read_text("utf-8"), re.MULTILINE):
            found.append(importlib.import_module(path.stem))
    return tuple(found)


def rows(table: str) -> Iterator[Any]:
    for module in row_modules():
        yield from getattr(module, table, [])


def covered_names() -> dict[str, Operation]:
    """Each name a row may give, and its operation."""
    return {name: op for op in OPERATIONS.values() for name in op.covered_as}


def test_the_tables_hold_rows_of_several_modules() -> None:
    """Control: the rows are found where they are (the tables' own module and others)."""
    names = {module.__name__ for module in row_modules()}
    assert {"test_write_checks", "test_oom", "test_heartbeat"} <= names
    assert len(list(rows("WRITE_CHECKS"))) > 50


def test_every_public_method_of_the_queues_is_registered_once() -> None:
    registered = [m for op in OPERATIONS.values() for m in op.methods]
    assert len(registered) == len(set(registered)), "a method registered twice"
    assert async_bridge.public_methods(WorkQueue) == set(registered)
    assert async_bridge.public_methods(AsyncWorkQueue) == set(registered)


def test_every_function_of_the_package_is_registered() -> None:
    registered = [name for op in OPERATIONS.values() for pair in op.functions for name in pair]
    assert len(registered) == len(set(registered)), "a function registered twice"
    for name in registered:
        assert inspect.isfunction(resolve(name)), name
    exported = {
        name
        for name in redis_work_queue.__all__
        if inspect.isfunction(getattr(redis_work_queue, name))
    }
    assert exported, "control: the package exports functions"
    assert exported <= set(registered), "functions of the package that no operation names"


def test_every_script_is_run_by_an_operation() -> None:
    run = {script for op in OPERATIONS.values() for script in op.scripts}
    assert sorted(run) == script_names()


def test_operations_made_of_others_name_registered_ones() -> None:
    names = covered_names()
    for op in OPERATIONS.values():
        for part in op.via:
            assert part in names, f"{op.name} is made of {part}, which is not registered"
            assert names[part] is not op


@pytest.mark.parametrize("table", TABLES)
def test_every_writing_operation_has_rows_in_each_table(table: str) -> None:
    """Each public name of a writing operation (or its name, when it has none) is the name of a
    row of the table, in some test module; an operation made of others has theirs."""
    covered = {row.covered for row in rows(table)}
    missing = [
        name
        for op in OPERATIONS.values()
        if op.writes and not op.via
        for name in op.covered_as
        if name not in covered
    ]
    assert missing == [], f"writing operations without {table} rows"
    unknown = covered - set(covered_names())
    assert unknown == set(), f"{table} rows of no registered operation"


def test_the_rows_of_every_module_are_tests() -> None:
    """A module that declares rows makes them a test (``write_check_test``, ``oom_test``), so
    rows cannot be declared and never run."""
    for module in row_modules():
        for table in TABLES:
            declared = getattr(module, table, None)
            if declared is None:
                continue
            tests = [
                value
                for name, value in vars(module).items()
                if name.startswith("test") and getattr(value, "rows", None) is declared
            ]
            assert tests, f"{module.__name__}.{table} is made into no test"


def _slug(heading: str) -> str:
    """The anchor MkDocs gives a heading."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def section(page: str, anchor: str) -> str:
    """The text of the section of ``page`` that ``anchor`` names, its subsections included."""
    lines = (DOCS / page).read_text("utf-8").split("\n")
    for k, line in enumerate(lines):
        found = re.match(r"(#+) (.*)", line)
        if found and _slug(found[2]) == anchor:
            level = len(found[1])
            end = next(
                (j for j in range(k + 1, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[j])),
                len(lines),
            )
            return "\n".join(lines[k:end])
    raise AssertionError(f"docs/{page} has no section #{anchor}")


@pytest.mark.parametrize("name", sorted(OPERATIONS))
def test_the_docs_describe_each_operation_by_its_public_names(name: str) -> None:
    op = OPERATIONS[name]
    page, _, anchor = op.docs.partition("#")
    text = section(page, anchor)
    spans = re.findall(r"`([^`]+)`", text)
    for public in op.public:
        word = public.rsplit(".", 1)[-1]
        assert any(re.search(rf"\b{word}\b", span) for span in spans), (
            f"docs/{op.docs} does not name {word}"
        )


def test_each_operation_s_command_line_exists() -> None:
    parser = cli.build_parser()
    commands = next(
        action.choices
        for action in parser._actions  # argparse keeps the subcommands there
        if isinstance(action.choices, dict)
    )
    named = {op.cli for op in OPERATIONS.values() if op.cli}
    assert named <= set(commands)
    # Every command of rwq runs operations, but the runner, the dashboard, the demo and the
    # loading of the function library.
    assert set(commands) - named == {"worker", "dashboard", "demo", "functions"}


def test_registering_twice_is_refused() -> None:
    op = next(iter(OPERATIONS.values()))
    with pytest.raises(ValueError, match="registered twice"):
        registry.register(op)
    with pytest.raises(ValueError, match="two builders"):
        registry.builds("add")(lambda: None)
