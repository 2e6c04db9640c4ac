"""The exception hierarchy of redis_work_queue."""

from __future__ import annotations

from redis import exceptions as rex


class WorkQueueError(Exception):
    """Base class of every error this library raises on purpose."""


class InvalidArgumentError(WorkQueueError, ValueError):
    """An argument was rejected before anything was sent to Redis."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument of the wrong Python type (also a ``TypeError``, as Python's own checks)."""


class WrongKeyTypeError(WorkQueueError, TypeError):
    """A key of the queue holds a Redis value of the wrong type (the queue was not touched)."""


class ScriptError(WorkQueueError):
    """A queue script failed on the server for a reason other than a wrong key type."""


class LuaSourceError(ScriptError):
    """The package's Lua could not be assembled: an include is missing, circular or malformed.

    Raised when a script is first loaded, before anything is sent to Redis; the message names the
    chain of includes that leads to the fault (``lease.lua -> delay.lua -> nope.lua``).
    """


class CrossSlotError(WorkQueueError):
    """Queues that one call must touch together live in different Redis Cluster slots."""


class ReplicationError(WorkQueueError):
    """A write reached the primary, but fewer replicas than asked acknowledged it in time.

    The write is not undone: it is on the primary and may or may not survive a failover.

    Attributes:
        acked: How many replicas acknowledged the write.
        wanted: How many were asked for.
        result: What the operation returned for what was written, set once when the error is
            made: for one item, its bool (``add_item``: True when it was added; ``complete``:
            True when this call completed it); for a batch, the list of results of the chunks
            written so far (``add_items``: flags; ``complete_many``: the items completed).
    """

    def __init__(self, acked: int, wanted: int, timeout_ms: int, result: object) -> None:
        super().__init__(
            f"the write reached the primary but only {acked} of {wanted} replicas acknowledged "
            f"it within {timeout_ms} ms"
        )
        self.acked = acked
        self.wanted = wanted
        self.result = result


class OutcomeUnknownError(WorkQueueError, rex.ConnectionError):
    """The connection was lost after a write was sent and before its reply came back.

    The write may or may not have happened, and it was not sent again (a write that waits for
    replicas is never re-run). Check before repeating it: an ``add_item`` of the same id
    returns False when the first one happened; ``complete`` returns False once the item is gone.

    It is also a ``redis.exceptions.ConnectionError``, so code that catches those catches it.

    Attributes:
        operation: The script that was sent (``add``, ``complete``, ...).
        result: For a batch (``add_items``, ``complete_many``), the results of the chunks
            written before the one whose outcome is unknown; None otherwise.
    """

    def __init__(self, operation: str, cause: BaseException) -> None:
        super().__init__(
            f"the connection was lost after the {operation} script was sent and before its "
            f"reply ({type(cause).__name__}: {cause}): the write may or may not have happened, "
            "and it was not sent again. Check before repeating it: add_item of the same id "
            "returns False if the add happened, complete returns False if the item is gone"
        )
        self.operation = operation
        self.result: object = None


class WorkerFailedError(WorkQueueError):
    """A worker runner stopped on an error it cannot recover from by reconnecting.

    Examples: a key of the wrong type, a script error from bad state, an authentication or
    permission failure. The original error is the exception's ``__cause__``.
    """


#: The name this package is installed under (``pip install redis-work-queue-lua``); the import
#: name is ``redis_work_queue``.
DISTRIBUTION = "redis-work-queue-lua"


def install_hint(
    feature: str, extra: str, missing: str | None, packages: tuple[str, ...] = ()
) -> str:
    """What to run to install an extra, in each form the package may be had.

    From a package index (``pip install 'redis-work-queue-lua[extra]'``), from a checkout of
    the repository (``pip install '.[extra]'``), from a wheel file (its path, then
    ``[extra]``), or the extra's packages alone (which works whichever way the package itself
    was installed).

    Args:
        feature: What needs the extra (``the dashboard``).
        extra: The extra's name.
        missing: The module that could not be imported.
        packages: The extra's packages, as pip names them.

    Returns:
        One line.
    """
    hint = (
        f"{feature} needs the '{extra}' extra ({missing or 'a dependency'} is missing): "
        f"pip install '{DISTRIBUTION}[{extra}]' from a package index; "
        f"pip install '.[{extra}]' in a checkout of the repository; "
        f"pip install 'dist/redis_work_queue_lua-<version>-py3-none-any.whl[{extra}]' "
        "from a wheel"
    )
    if packages:
        hint += f"; or the packages alone: pip install {' '.join(packages)}"
    return hint


class MissingExtraError(WorkQueueError, ImportError):
    """An optional module needs packages that are not installed; the message names the extra.

    It is also an ``ImportError``, so code that guards an optional import with
    ``except ImportError`` still works.

    Attributes:
        extra: The extra to install (``spark``, ``prometheus``, ``dashboard``, ``embedded``).
        missing: The module that could not be imported.
    """

    def __init__(
        self, feature: str, extra: str, missing: str | None, packages: tuple[str, ...] = ()
    ) -> None:
        super().__init__(install_hint(feature, extra, missing, packages), name=missing)
        self.extra = extra
        self.missing = missing


class ItemDeadError(WorkQueueError):
    """The item a caller waits for (``result``) is in the dead letters: no result will come.

    Attributes:
        item_id: The item's id.
        reason: The reason of its last failure (its dead letter's), or None.
    """

    def __init__(self, item_id: str, reason: str | None) -> None:
        super().__init__(
            f"item {item_id!r} is dead (in the dead letters), so it has no result: "
            f"{reason or 'no reason recorded'}; retry(db, id) puts it back on the queue"
        )
        self.item_id = item_id
        self.reason = reason


class ResultTimeoutError(WorkQueueError, TimeoutError):
    """No result came for the item within ``result``'s timeout.

    It is also a ``TimeoutError``.

    Attributes:
        item_id: The item's id.
        state: The item's state when the wait ended (``queued``, ``leased``, ``gone``...).
    """

    def __init__(self, item_id: str, state: str, timeout: float) -> None:
        hint = (
            " (done without a kept result, or never added: is the queue made with keep_results?)"
            if state == "gone"
            else ""
        )
        super().__init__(
            f"no result for item {item_id!r} within {timeout:g} s: it is {state}{hint}"
        )
        self.item_id = item_id
        self.state = state
