"""Progress reports from a handler run by the worker runner.

While a runner calls a handler, the job it runs (its queue, its client and the leased item) is
the current job of the handler's context (a ``contextvars.ContextVar``: the handler's thread, or
its asyncio task). :func:`report_progress` (a synchronous handler, under ``Worker``) and
:func:`areport_progress` (an asyncio handler, under ``AsyncWorker``) report on it; each report is
one script call (``lua/progress.lua``): kept while the lease lasts, shown by ``state``, renewing
nothing.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from .. import transport
from ..errors import InvalidArgumentError
from ..item import Item
from ..ops import jobs
from ..queue_base import QueueBase


@dataclass(frozen=True)
class CurrentJob:
    """The job a handler runs: its queue, the runner's client and the leased item."""

    queue: QueueBase
    db: Any
    item: Item
    #: Whether it runs under an asyncio runner (``db`` is a ``redis.asyncio`` client).
    asynchronous: bool = False


#: The job of the handler running in this context (None outside a handler run by a runner).
CURRENT: contextvars.ContextVar[CurrentJob | None] = contextvars.ContextVar(
    "redis_work_queue_job", default=None
)


def _current(what: str) -> CurrentJob:
    job = CURRENT.get()
    if job is None:
        raise InvalidArgumentError(
            f"{what} reports the progress of the job a worker runner's handler runs: call it "
            "from a handler (elsewhere, use WorkQueue.report_progress(db, item, progress))"
        )
    return job


def report_progress(progress: object) -> bool:
    """Report the progress of the job this handler runs (a handler run by ``Worker``).

    Args:
        progress: A number, or a small JSON-able value (at most 4,096 bytes as JSON).

    Returns:
        True when kept (shown by ``state`` while the lease lasts); False when the lease is no
        longer the worker's (it ran out, or the item was cancelled).

    Raises:
        InvalidArgumentError: It is called outside a handler, from an asyncio handler (use
            :func:`areport_progress`), or ``progress`` is not JSON-able or too long.
    """
    job = _current("report_progress")
    if job.asynchronous:
        raise InvalidArgumentError(
            "report_progress is for handlers run by Worker: an AsyncWorker handler awaits "
            "areport_progress(progress)"
        )
    return transport.run(job.db, jobs.report_progress(job.queue.ops, job.item, progress))


async def areport_progress(progress: object) -> bool:
    """Report the progress of the job this asyncio handler runs (under ``AsyncWorker``).

    See :func:`report_progress`.
    """
    job = _current("areport_progress")
    if not job.asynchronous:
        raise InvalidArgumentError(
            "areport_progress is for handlers run by AsyncWorker: a Worker handler calls "
            "report_progress(progress)"
        )
    return await transport.arun(job.db, jobs.report_progress(job.queue.ops, job.item, progress))
