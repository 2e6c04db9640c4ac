"""Operations as plain generators of Redis calls, so the logic exists once for every driver.

An operation (see :mod:`redis_work_queue.ops`) is a generator that yields the calls it needs,
one at a time, receives each reply, and finally returns its result. It does no I/O itself: a
driver sends the calls. :func:`run` is the synchronous driver; an asynchronous one only has to
``await`` each call instead.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from . import scripts

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Run one of the package's scripts."""

    script: scripts.Script
    keys: Sequence[str]
    args: Sequence[scripts.Arg]


@dataclass(frozen=True, slots=True)
class Command:
    """Send one plain command; its reply is not decoded."""

    args: tuple[scripts.Arg, ...]


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait locally (no Redis call); the reply is None."""

    seconds: float


Call = ScriptCall | Command | Sleep
Steps = Generator[Call, Any, T]


def execute(db: Any, call: Call) -> Any:
    """Send one call on a synchronous client and return its reply."""
    if isinstance(call, ScriptCall):
        return call.script(db, call.keys, call.args)
    if isinstance(call, Sleep):
        time.sleep(call.seconds)
        return None
    return scripts.raw_command(db, *call.args)


def run(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a synchronous client."""
    try:
        call = next(steps)
        while True:
            call = steps.send(execute(db, call))
    except StopIteration as done:
        result: T = done.value
        return result
