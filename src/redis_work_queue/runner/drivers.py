"""How a loop of the core runs: in a thread on a synchronous client, or as an asyncio task.

Each is the package's one driver (:func:`~redis_work_queue.calls.drive`,
:func:`~redis_work_queue.calls.adrive`) with a perform function of its own: the runner's steps
(:class:`~.actions.Handle`, :class:`~.actions.Pause`, :class:`~.actions.Replace`) are performed
here, and every call of :mod:`redis_work_queue.calls` is sent by
:func:`~redis_work_queue.transport.execute` (or ``aexecute``) on the loop's client. An error that
escapes a loop stops the worker (:meth:`.core.Core.fail`).

Whatever a handler raises is its item's failure, ``SystemExit``, ``KeyboardInterrupt`` and
``GeneratorExit`` included: the slot goes on. In an asyncio task, a ``CancelledError`` is the
handler's own failure unless the task itself is being cancelled (the runner ending a timed-out
handler or aborting, or whoever owns the event loop): then it ends the task.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any

from .. import transport
from ..calls import adrive, drive
from ..item import Item
from .actions import Handle, Loop, Pause, Replace, Returned, Step
from .core import Core, Job
from .progress import CURRENT, CurrentJob

Handler = Callable[[Item], Any]
AsyncHandler = Callable[[Item], Awaitable[Any]]
Replacer = Callable[[Job], None]

#: The tasks the runner has cancelled (Python 3.10 cannot tell otherwise; see _cancelling).
_CANCELLED: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()


def call_handler(handler: Handler, item: Item) -> BaseException | Returned | None:
    """Call a synchronous handler: what it raised, what it returned, or None.

    A return value other than None comes as :class:`~.actions.Returned`.

    A handler that returns an awaitable (a coroutine: an ``async def`` function wrapped in a
    plain one) did not run the job: that is its failure, a ``TypeError``.
    """
    try:
        result = handler(item)
    except BaseException as err:  # whatever it raised is the item's failure: the slot goes on
        return err
    if result is None:  # the common case, before the slower check of the abstract class
        return None
    if isinstance(result, Awaitable):
        if isinstance(result, Coroutine):
            result.close()  # never to run: no warning that it was never awaited
        what = "a coroutine" if isinstance(result, Coroutine) else type(result).__name__
        return TypeError(
            f"the handler returned {what}, which was never awaited, so the job did not run: "
            "run an asynchronous handler with AsyncWorker"
        )
    return None if result is None else Returned(result)


def run_loop(core: Core, loop: Loop[Any], db: Any, handler: Handler, replace: Replacer) -> None:
    """Run one of ``core``'s loops in this thread, on a synchronous client."""

    def perform(step: Step) -> Any:
        if isinstance(step, Handle):
            current = CURRENT.set(CurrentJob(step.queue, db, step.item))
            try:
                return call_handler(handler, step.item)
            finally:
                CURRENT.reset(current)
        if isinstance(step, Pause):
            if not step.seconds:
                time.sleep(0)  # let the other threads run
                return step.until.is_set()
            return step.until.wait(step.seconds)
        if isinstance(step, Replace):
            return replace(step.job)
        return transport.execute(db, step)

    try:
        drive(loop, perform)
    except BaseException as err:  # a loop never ends unseen
        core.fail(err)


def cancel(task: asyncio.Task[Any]) -> None:
    """Cancel one of the runner's tasks: the ``CancelledError`` its handler gets ends the task."""
    _CANCELLED.add(task)
    task.cancel()


def _cancelling(core: Core) -> bool:
    """Whether this task is being cancelled (not merely handed a handler's CancelledError)."""
    task = asyncio.current_task()
    if task is None:
        return True
    cancelling = getattr(task, "cancelling", None)  # Python 3.11 and later
    if cancelling is not None:
        return bool(cancelling())
    return task in _CANCELLED or core.stop_flag.is_set()


async def acall_handler(
    handler: AsyncHandler, item: Item, core: Core
) -> BaseException | Returned | None:
    """Call and await an asyncio handler: what it raised, what it returned, or None.

    A return value other than None comes as :class:`~.actions.Returned`.

    A handler whose call returns no awaitable (a plain function) is that item's failure, a
    ``TypeError``. A cancellation of this task is raised: it ends the task.
    """
    try:
        result = handler(item)
        if type(result) is not CoroutineType and not isinstance(result, Awaitable):
            return TypeError(
                f"the handler returned {type(result).__name__}, not an awaitable: AsyncWorker "
                "awaits what its handler returns; run a plain function with Worker"
            )
        value = await result
    except asyncio.CancelledError as err:
        if _cancelling(core):
            raise
        return err
    except BaseException as err:  # whatever it raised is the item's failure: the slot goes on
        return err
    return None if value is None else Returned(value)


async def arun_loop(
    core: Core, loop: Loop[Any], db: Any, handler: AsyncHandler, replace: Replacer
) -> None:
    """Run one of ``core``'s loops as an asyncio task, on a ``redis.asyncio`` client."""

    async def perform(step: Step) -> Any:
        if isinstance(step, Handle):
            current = CURRENT.set(CurrentJob(step.queue, db, step.item, asynchronous=True))
            try:
                return await acall_handler(handler, step.item, core)
            finally:
                CURRENT.reset(current)
        if isinstance(step, Pause):
            if not step.seconds:
                await asyncio.sleep(0)  # let the other tasks run
                return step.until.is_set()
            return await step.until.wait_async(step.seconds)
        if isinstance(step, Replace):
            return replace(step.job)
        return await transport.aexecute(db, step)

    try:
        await adrive(loop, perform)
    except Exception as err:
        core.fail(err)
