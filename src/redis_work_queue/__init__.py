"""A reliable work queue on stock Redis, every operation one atomic Lua script."""

from .errors import InvalidArgumentError, ScriptError, WorkQueueError, WrongKeyTypeError
from .item import Item
from .keyprefix import KeyPrefix
from .ops import CleanReport, DeadLetter
from .workqueue import WorkQueue

__version__ = "0.2.0"

__all__ = [
    "CleanReport",
    "DeadLetter",
    "InvalidArgumentError",
    "Item",
    "KeyPrefix",
    "ScriptError",
    "WorkQueue",
    "WorkQueueError",
    "WrongKeyTypeError",
    "__version__",
]
