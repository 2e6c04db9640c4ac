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


class ReplicationError(WorkQueueError):
    """A write reached the primary, but fewer replicas than asked acknowledged it in time.

    The write is not undone: it is on the primary and may or may not survive a failover.

    Attributes:
        acked: How many replicas acknowledged the write.
        wanted: How many were asked for.
        result: What the operation returned for the part that was written (for a batch, the
            results of the chunks written so far).
    """

    def __init__(self, acked: int, wanted: int, timeout_ms: int, result: object) -> None:
        super().__init__(
            f"the write reached the primary but only {acked} of {wanted} replicas acknowledged "
            f"it within {timeout_ms} ms"
        )
        self.acked = acked
        self.wanted = wanted
        self.result = result


class WorkerFailedError(WorkQueueError):
    """A worker runner stopped on an error it cannot recover from by reconnecting.

    Examples: a key of the wrong type, a script error from bad state, an authentication or
    permission failure. The original error is the exception's ``__cause__``.
    """
