"""What the package does to Redis, registered where it is written: operations and script builders.

Every operation of :mod:`redis_work_queue.ops` is registered next to its code, by the
:func:`operation` decorator (or :func:`register`, for one made of other operations): its public
names on the queues and as functions, the scripts it runs and the other commands it sends,
whether it writes, its command of ``rwq`` and where the docs describe it. Every script of
``lua/`` has one argument builder, registered by :func:`builds`: the one function that puts the
script's KEYS and ARGV in their places, used by every call of that script.

Nothing here runs a call. The tests read the registry, so that an operation cannot be added
without its rows: each writing operation needs rows in the write-check and out-of-memory tables
(``WRITE_CHECKS`` and ``OOM_CHECKS`` of any test module), each public method and function of
the queues must be registered and have its asyncio twin, the least-privilege ACL of the docs
must grant every command of every operation, the docs must name it, and each script's header
must list the arguments its builder takes, in the builder's order.
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Operation:
    """One operation of the package, as the registry knows it.

    Attributes:
        name: Its name: the name of the function (or method of ``QueueOps``) that is it.
        methods: The methods of ``WorkQueue`` that run it, each with the same name on
            ``AsyncWorkQueue``.
        functions: The functions that run it, as pairs of names in ``redis_work_queue``: the
            synchronous one and its asyncio twin (``("lease_from", "alease_from")``).
        scripts: The scripts of ``lua/`` it runs.
        commands: The other commands it sends (plain commands, not scripts).
        writes: Whether it may write.
        cli: The ``rwq`` command that runs it, if any.
        docs: Where the docs describe it: ``page.md#anchor``.
        via: The operations it is made of, by public name (or name, for one that has none):
            their rows in the test tables stand for its own.
        refusable: It copes with a server that refuses its commands (it reads something it can
            do without), so a least-privilege ACL need not grant them.
    """

    name: str
    methods: tuple[str, ...] = ()
    functions: tuple[tuple[str, str], ...] = ()
    scripts: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    writes: bool = False
    cli: str | None = None
    docs: str = ""
    via: tuple[str, ...] = ()
    refusable: bool = False

    @property
    def public(self) -> tuple[str, ...]:
        """Its public names: the queues' methods, then the synchronous functions."""
        return (*self.methods, *(sync for sync, _ in self.functions))

    @property
    def covered_as(self) -> tuple[str, ...]:
        """The names a row of a test table gives it: its public names, else its name."""
        return self.public or (self.name,)


#: Every operation registered so far, by name (see :func:`operations`).
OPERATIONS: dict[str, Operation] = {}
#: The argument builder of each script, by script name (see :func:`builders`).
BUILDERS: dict[str, Callable[..., Any]] = {}


def register(op: Operation) -> Operation:
    """Register ``op``; return it.

    Raises:
        ValueError: An operation of that name is registered already.
    """
    if op.name in OPERATIONS:
        raise ValueError(f"operation {op.name!r} is registered twice")
    OPERATIONS[op.name] = op
    return op


def operation(
    *,
    docs: str,
    methods: tuple[str, ...] = (),
    functions: tuple[tuple[str, str], ...] = (),
    scripts: tuple[str, ...] = (),
    commands: tuple[str, ...] = (),
    writes: bool = False,
    cli: str | None = None,
    via: tuple[str, ...] = (),
    refusable: bool = False,
) -> Callable[[F], F]:
    """Register the decorated function (or ``QueueOps`` method) as an operation named for it.

    The arguments are the fields of :class:`Operation`. The function is returned as it is.
    """

    def record(fn: F) -> F:
        register(
            Operation(
                fn.__name__,
                methods,
                functions,
                scripts,
                commands,
                writes,
                cli,
                docs,
                via,
                refusable,
            )
        )
        return fn

    return record


def builds(script: str) -> Callable[[F], F]:
    """Register the decorated function as the argument builder of ``lua/<script>.lua``.

    A builder takes the queue (``QueueKeys``, or a lease plan for a script over several
    queues), then one parameter per argument of the script's header, in its order (a variadic
    one for an ``arg(k...)``), and returns the script call. The function is returned as it is.

    Raises:
        ValueError: The script has a builder already.
    """

    def record(fn: F) -> F:
        if script in BUILDERS:
            raise ValueError(f"script {script!r} has two builders")
        BUILDERS[script] = fn
        return fn

    return record


def _load() -> None:
    """Import every module of the ``ops`` package: each registers what it holds."""
    package = import_module(__package__ or "redis_work_queue.ops")
    for module in pkgutil.iter_modules(package.__path__):
        import_module(f"{package.__name__}.{module.name}")


def operations() -> dict[str, Operation]:
    """Every operation of the package, by name (the modules that register them imported)."""
    _load()
    return dict(OPERATIONS)


def builders() -> dict[str, Callable[..., Any]]:
    """The argument builder of every script, by script name (their modules imported)."""
    _load()
    return dict(BUILDERS)
