"""A reliable work queue on stock Redis, every operation one atomic Lua script."""

from .aio import AsyncWorkQueue
from .aio import lease_from as alease_from
from .aioworker import AsyncWorker
from .cleaning import CleanProgress, CleanReport
from .errors import (
    CrossSlotError,
    InvalidArgumentError,
    OutcomeUnknownError,
    ReplicationError,
    ScriptError,
    WorkQueueError,
    WrongKeyTypeError,
)
from .item import Item
from .keyprefix import KeyPrefix
from .ops import DeadLetter, FlushReport, PendingItem, QueuedItem, QueueStats
from .worker import Worker, WorkerStats
from .workqueue import WorkQueue, lease_from

__version__ = "0.2.0"

__all__ = [
    "AsyncWorkQueue",
    "AsyncWorker",
    "CleanProgress",
    "CleanReport",
    "CrossSlotError",
    "DeadLetter",
    "FlushReport",
    "InvalidArgumentError",
    "Item",
    "KeyPrefix",
    "OutcomeUnknownError",
    "PendingItem",
    "QueueStats",
    "QueuedItem",
    "ReplicationError",
    "ScriptError",
    "WorkQueue",
    "WorkQueueError",
    "Worker",
    "WorkerStats",
    "WrongKeyTypeError",
    "__version__",
    "alease_from",
    "lease_from",
]
