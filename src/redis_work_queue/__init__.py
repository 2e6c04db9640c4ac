"""A reliable work queue on stock Redis, every operation one atomic Lua script."""

from .aio import AsyncWorkQueue
from .aio import lease_from as alease_from
from .aioworker import AsyncWorker
from .errors import (
    CrossSlotError,
    InvalidArgumentError,
    OutcomeUnknownError,
    ReplicationError,
    ScriptError,
    WorkerFailedError,
    WorkQueueError,
    WrongKeyTypeError,
)
from .health import WorkerInfo, alive_workers, live_workers
from .item import Item
from .keyprefix import KeyPrefix
from .ops import (
    CleanReport,
    DeadLetter,
    FlushReport,
    PendingItem,
    QueuedItem,
    QueueStats,
    Released,
)
from .worker import Worker, WorkerStats
from .workqueue import WorkQueue, lease_from

__version__ = "0.2.0"

__all__ = [
    "AsyncWorkQueue",
    "AsyncWorker",
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
    "Released",
    "ReplicationError",
    "ScriptError",
    "WorkQueue",
    "WorkQueueError",
    "Worker",
    "WorkerFailedError",
    "WorkerInfo",
    "WorkerStats",
    "WrongKeyTypeError",
    "__version__",
    "alease_from",
    "alive_workers",
    "lease_from",
    "live_workers",
]
