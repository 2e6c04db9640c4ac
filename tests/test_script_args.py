"""Every script of ``lua/`` has one argument builder (``ops.registry.builds``), every call of a
script is made by it, and the script's header lists the builder's arguments, in its order.

A header names the script's KEYS and ARGV in one form: the queue line (``KEYS[1] the main
queue; ARGV[1] the key prefix``, or ``KEYS[i] queue i's main queue and ARGV[i] its key
prefix`` for a script over several queues), then one line per argument of its own::

    -- arg(<position>) <name>[ (optional)]: <what it is>

where the position is ``k`` (the k-th), ``k...`` (the k-th and every one after it), ``k+i`` (one
per queue, i = 1..n) or ``k+n`` (after those); a longer description goes on over lines that
start with ``--   ``. The builder takes the queue (``keys``) or the queues (``plan``), then one
parameter per argument, of the same name and in the same order: a variadic one for ``k...``,
a sequence for ``k+i``, a parameter defaulting to None for an optional one. The call it makes
carries exactly those values in those places, after the queues' key prefixes.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import redis_work_queue
from redis_work_queue import KeyPrefix
from redis_work_queue.calls import ScriptCall
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.loader import lua_dir, script_names
from redis_work_queue.ops import QueueOps, registry
from redis_work_queue.ops.lease import LeasePlan

ONE_QUEUE = "-- KEYS[1] the main queue; ARGV[1] the key prefix (see queue.lua)"
SEVERAL_QUEUES = "-- KEYS[i] queue i's main queue and ARGV[i] its key prefix, for queues i = 1..n"
ARG = re.compile(
    r"-- arg\((?P<at>\d+)(?:\+(?P<per>[in]))?(?P<rest>\.\.\.)?\) "
    r"(?P<name>[a-z][a-z_]*)(?P<optional> \(optional\))?: \S.*"
)
PACKAGE = Path(redis_work_queue.__file__).parent


@dataclass(frozen=True)
class Arg:
    """One argument of a script's header."""

    name: str
    at: int
    per: str  # "", "i" (one per queue) or "n" (after the ones per queue)
    rest: bool
    optional: bool


def header(name: str) -> list[str]:
    lines = (lua_dir() / f"{name}.lua").read_text("utf-8").split("\n")
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]


def parse_header(name: str) -> tuple[bool, list[Arg]]:
    """Whether the script works on several queues, and its arguments, as its header says."""
    lines = header(name)
    queue_lines = [line for line in lines if line.startswith("-- KEYS[")]
    assert len(queue_lines) == 1, f"{name}.lua: one KEYS line"
    several = queue_lines[0].startswith(SEVERAL_QUEUES)
    assert several or queue_lines[0] == ONE_QUEUE, f"{name}.lua: {queue_lines[0]!r}"
    args = []
    for line in lines:
        if line.startswith("-- arg"):
            found = ARG.fullmatch(line)
            assert found is not None, f"{name}.lua: {line!r} is not an argument line"
            args.append(
                Arg(
                    found["name"],
                    int(found["at"]),
                    found["per"] or "",
                    found["rest"] is not None,
                    found["optional"] is not None,
                )
            )
    return several, args


def check_positions(name: str, args: list[Arg]) -> None:
    """The positions follow each other from arg(1), a variadic one last, optional ones at the
    end, and positions per queue only in a script over several queues."""
    at = (0, 0)  # the last position taken: at[0] + at[1] * n
    for k, arg in enumerate(args):
        if arg.per == "i":
            assert at == (arg.at, 0), f"{name}: arg({arg.at}+i) follows arg{at}"
            at = (arg.at, 1)
        else:
            step = 1 if arg.per == "n" else 0
            assert at == (arg.at - 1, step), f"{name}: arg({arg.at}) is out of place"
            at = (arg.at, step)
        assert not arg.rest or k == len(args) - 1, f"{name}: a variadic arg({arg.at}...) is last"
        assert not args[k - 1].optional or arg.optional or k == 0, f"{name}: optional ones last"


def test_every_script_has_one_builder_and_every_builder_a_script() -> None:
    assert sorted(registry.builders()) == script_names()


@pytest.mark.parametrize("name", script_names())
def test_the_header_lists_the_builder_s_arguments_in_order(name: str) -> None:
    several, args = parse_header(name)
    assert args, f"{name}.lua names no argument"
    check_positions(name, args)
    assert several or not any(a.per for a in args), name
    params = list(inspect.signature(registry.builders()[name]).parameters.values())
    target, own = params[0], params[1:]
    assert (target.name, target.annotation) == (
        ("plan", "LeasePlan") if several else ("keys", "QueueKeys")
    ), name
    positional = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    own = [p for p in own if p.kind in positional]
    assert [p.name for p in own] == [a.name for a in args], name
    for param, arg in zip(own, args, strict=True):
        assert (param.kind == inspect.Parameter.VAR_POSITIONAL) == arg.rest, (name, arg.name)
        assert str(param.annotation).startswith("Sequence[") == (arg.per == "i"), arg.name
        optional = param.default is None
        assert optional == arg.optional, (name, arg.name, "(optional) iff the default is None")


def _target(several: bool) -> QueueKeys | LeasePlan:
    if several:
        return LeasePlan([QueueOps(QueueKeys(KeyPrefix(p))) for p in ("P1", "P2")])
    return QueueKeys(KeyPrefix("P"))


def _values(args: list[Arg], queues: int) -> list[Any]:
    """A distinct value for each argument (two for a variadic one, one per queue for k+i)."""
    values: list[Any] = []
    for arg in args:
        if arg.rest:
            values += [f"{arg.name}.1", f"{arg.name}.2"]
        elif arg.per == "i":
            values.append(tuple(f"{arg.name}.{i}" for i in range(1, queues + 1)))
        else:
            values.append(arg.name)
    return values


def _flat(values: list[Any]) -> list[Any]:
    return [v for value in values for v in (value if isinstance(value, tuple) else (value,))]


@pytest.mark.parametrize("name", script_names())
def test_the_builder_puts_each_argument_where_the_header_says(name: str) -> None:
    several, args = parse_header(name)
    build: Callable[..., ScriptCall] = registry.builders()[name]
    target = _target(several)
    queues = len(target.script_keys)
    for given in (args, [a for a in args if not a.optional]):
        values = _values(given, queues)
        call = build(target, *values)
        assert call.script.name == name
        assert call.keys == target.script_keys
        assert call.slot_keys == target.slot_keys
        # Arguments k: ARGV[n + k]: after the queues' prefixes, in the header's places.
        assert list(call.args) == [*target.script_args, *_flat(values)], name


def _builder_names(tree: ast.Module) -> set[str]:
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and getattr(d.func, "id", None) == "builds"
            for d in node.decorator_list
        )
    }


def test_every_script_call_is_made_by_a_builder() -> None:
    """No code of the package but the builders makes a script call or loads a script."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("calls.py", "scripts.py"):
            continue
        tree = ast.parse(path.read_text("utf-8"))
        builders = _builder_names(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name in builders:
                continue
            for inner in ast.walk(node):
                if isinstance(inner, ast.Call):
                    called = ast.unparse(inner.func)
                    if called in ("ScriptCall", "scripts.load"):
                        found.append(f"{path.relative_to(PACKAGE)}: {node.name} calls {called}")
    assert found == []
