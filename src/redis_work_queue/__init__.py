"""A reliable work queue on stock Redis, every operation one atomic Lua script.

The synchronous API is imported with the package. The asyncio API (``AsyncWorkQueue``,
``AsyncWorker``, ``alease_from``, ``acomplete_and_lease_from``, ``alive_workers``), the worker
runner and the heartbeat readers are imported on first use, so that ``import redis_work_queue``
does not load ``redis.asyncio`` or the runner for code that never touches them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .errors import (
    CrossSlotError,
    InvalidArgumentError,
    ItemDeadError,
    MissingExtraError,
    OutcomeUnknownError,
    ReplicationError,
    ResultTimeoutError,
    ScriptError,
    WorkerFailedError,
    WorkQueueError,
    WrongKeyTypeError,
)
from .flow import GroupStats, RateLimit
from .item import Item
from .keyprefix import KeyPrefix
from .ops.events import Event
from .ops.jobs import Cancelled, ItemState, Renewed
from .ops.listing import DelayedItem
from .ops.schedules import Schedule
from .ops.sharded import ShardStats
from .results import (
    CleanProgress,
    CleanReport,
    DeadLetter,
    FlushReport,
    PendingItem,
    QueuedItem,
    QueueStats,
    Released,
)
from .workqueue import WorkQueue, complete_and_lease_from, lease_from

if TYPE_CHECKING:
    from .aio import AsyncWorkQueue
    from .aio import complete_and_lease_from as acomplete_and_lease_from
    from .aio import lease_from as alease_from
    from .aioworker import AsyncWorker
    from .health import WorkerInfo, alive_workers, live_workers
    from .worker import Worker, WorkerStats

__version__ = "0.2.0"

#: Names imported on first use: name -> (module, attribute in that module).
_LAZY: dict[str, tuple[str, str]] = {
    "AsyncWorkQueue": (".aio", "AsyncWorkQueue"),
    "alease_from": (".aio", "lease_from"),
    "acomplete_and_lease_from": (".aio", "complete_and_lease_from"),
    "AsyncWorker": (".aioworker", "AsyncWorker"),
    "Worker": (".worker", "Worker"),
    "WorkerStats": (".worker", "WorkerStats"),
    "WorkerInfo": (".health", "WorkerInfo"),
    "alive_workers": (".health", "alive_workers"),
    "live_workers": (".health", "live_workers"),
}


def __getattr__(name: str) -> Any:
    """Import the asyncio API, the runner and the heartbeat readers on first use."""
    try:
        module, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(import_module(module, __name__), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AsyncWorkQueue",
    "AsyncWorker",
    "Cancelled",
    "CleanProgress",
    "CleanReport",
    "CrossSlotError",
    "DeadLetter",
    "DelayedItem",
    "Event",
    "FlushReport",
    "GroupStats",
    "InvalidArgumentError",
    "Item",
    "ItemDeadError",
    "ItemState",
    "KeyPrefix",
    "MissingExtraError",
    "OutcomeUnknownError",
    "PendingItem",
    "QueueStats",
    "QueuedItem",
    "RateLimit",
    "Released",
    "Renewed",
    "ReplicationError",
    "ResultTimeoutError",
    "Schedule",
    "ScriptError",
    "ShardStats",
    "WorkQueue",
    "WorkQueueError",
    "Worker",
    "WorkerFailedError",
    "WorkerInfo",
    "WorkerStats",
    "WrongKeyTypeError",
    "__version__",
    "acomplete_and_lease_from",
    "alease_from",
    "alive_workers",
    "complete_and_lease_from",
    "lease_from",
    "live_workers",
]
