"""Which errors of Redis are waited out: the one classification of the runners and the deep clean.

An error of an unavailable or changing server (a lost connection, a timeout, a server loading
its data or busy running a script, a failover, a Redis Cluster redirection, out of memory) is
*transient*: waiting and trying again cures it. Bad credentials or rights, keys of the wrong
type, other script errors and bad arguments are not.
"""

from __future__ import annotations

import random

from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    ClusterError,
    NoPermissionError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import (
    CrossSlotError,
    InvalidArgumentError,
    ReplicationError,
    ScriptError,
    WrongKeyTypeError,
)

#: The first and the longest wait between two tries while Redis is unavailable.
RECONNECT_FIRST_SECS = 0.1
RECONNECT_MAX_SECS = 10.0


def reconnect_delay(attempt: int) -> float:
    """The wait before try ``attempt + 1`` while Redis is unavailable: capped, with jitter."""
    delay = min(RECONNECT_FIRST_SECS * 2.0 ** min(attempt, 32), RECONNECT_MAX_SECS)
    return float(delay * random.uniform(0.5, 1.0))


#: Errors that no reconnect cures: bad credentials or rights, bad state, bad arguments.
_FATAL: tuple[type[BaseException], ...] = (
    AuthenticationError,
    AuthorizationError,
    NoPermissionError,
    WrongKeyTypeError,
    InvalidArgumentError,
    CrossSlotError,
)
#: Errors of an unavailable or changing server: wait and try again.
_TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    TryAgainError,
    ClusterDownError,
    ClusterError,
    SlotNotCoveredError,
    AskError,
    OutOfMemoryError,
    ReplicationError,
)
#: Server replies of the same kind, as found in the message of a script's error.
_TRANSIENT_REPLIES = (
    "LOADING",
    "READONLY",
    "OOM command not allowed",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "BUSY ",
    "NOREPLICAS",
    "MOVED ",
    "ASK ",
)


def transient(err: BaseException) -> bool:
    """Whether ``err`` is cured by waiting and reconnecting (else the worker stops).

    Connection loss, timeouts, a server loading its data, a read-only replica after a failover,
    Redis Cluster redirections and outages, out of memory, and writes that too few replicas
    acknowledged are transient. Authentication and permission failures, keys of the wrong
    type, other script errors and bad arguments are not.
    """
    seen: set[int] = set()
    cause: BaseException | None = err
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, _FATAL):
            return False
        if isinstance(cause, _TRANSIENT):
            return True
        if isinstance(cause, ResponseError | ScriptError):
            message = str(cause)
            if any(reply in message for reply in _TRANSIENT_REPLIES):
                return True
        cause = cause.__cause__
    return False
