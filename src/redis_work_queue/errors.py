"""The exception hierarchy of redis_work_queue."""

from __future__ import annotations


class WorkQueueError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidArgumentError(WorkQueueError, ValueError):
    """An argument was rejected before anything was sent to Redis."""


class WrongKeyTypeError(WorkQueueError, TypeError):
    """A key of the queue holds a Redis value of the wrong type (the queue was not touched)."""


class ScriptError(WorkQueueError):
    """A queue script failed on the server for a reason other than a wrong key type."""


class CrossSlotError(WorkQueueError):
    """Queues that one call must touch together live in different Redis Cluster slots."""
