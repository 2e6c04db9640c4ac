"""How a loop of the core runs: in a thread on a synchronous client, or as an asyncio task.

Each is the package's one driver (:func:`~redis_work_queue.calls.drive`,
:func:`~redis_work_queue.calls.adrive`) with a perform function of its own: the runner's steps
(:class:`~.actions.Handle`, :class:`~.actions.Pause`, :class:`~.actions.Replace`) are performed
here, and every call of :mod:`redis_work_queue.calls` is sent by
:func:`~redis_work_queue.transport.execute` (or ``aexecute``) on the loop's client. An error that
escapes a loop stops the worker (:meth:`.core.Core.fail`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from .. import transport
from ..calls import adrive, drive
from ..item import Item
from .actions import Handle, Loop, Pause, Replace, Step
from .core import Core, Job

Handler = Callable[[Item], Any]
AsyncHandler = Callable[[Item], Awaitable[Any]]
Replacer = Callable[[Job], None]


def call_handler(handler: Handler, item: Item) -> BaseException | None:
    """Call a synchronous handler: None when it returned, else what it raised."""
    try:
        handler(item)
    except Exception as err:  # the item's failure: the loop goes on
        return err
    return None


def run_loop(core: Core, loop: Loop[Any], db: Any, handler: Handler, replace: Replacer) -> None:
    """Run one of ``core``'s loops in this thread, on a synchronous client."""

    def perform(step: Step) -> Any:
        if isinstance(step, Handle):
            return call_handler(handler, step.item)
        if isinstance(step, Pause):
            return step.until.wait(step.seconds)
        if isinstance(step, Replace):
            return replace(step.job)
        return transport.execute(db, step)

    try:
        drive(loop, perform)
    except Exception as err:
        core.fail(err)


async def acall_handler(handler: AsyncHandler, item: Item) -> BaseException | None:
    """Call and await an asyncio handler: None when it returned, else what it raised."""
    try:
        await handler(item)
    except Exception as err:  # the item's failure: the loop goes on
        return err
    return None


async def arun_loop(
    core: Core, loop: Loop[Any], db: Any, handler: AsyncHandler, replace: Replacer
) -> None:
    """Run one of ``core``'s loops as an asyncio task, on a ``redis.asyncio`` client."""

    async def perform(step: Step) -> Any:
        if isinstance(step, Handle):
            return await acall_handler(handler, step.item)
        if isinstance(step, Pause):
            return await step.until.wait_async(step.seconds)
        if isinstance(step, Replace):
            return replace(step.job)
        return await transport.aexecute(db, step)

    try:
        await adrive(loop, perform)
    except Exception as err:
        core.fail(err)
