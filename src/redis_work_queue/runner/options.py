"""A worker's options, checked before anything starts, and the limits they are checked against."""

from __future__ import annotations

import inspect
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ..errors import InvalidArgumentError
from ..validation import MAX_SECS

#: The most handlers one worker runs at once; run more workers for more.
MAX_CONCURRENCY = 10_000
#: The shortest lease and the shortest poll, clean and heartbeat intervals, in seconds.
MIN_LEASE_SECS = 0.01
MIN_INTERVAL_SECS = 0.01
#: The longest poll of an idle worker, in seconds.
MAX_POLL_SECS = 3600
#: Connections a worker's client needs besides one per slot: the watchdog, housekeeping, and
#: a spare for a call racing a blocked one.
EXTRA_CONNECTIONS = 4

CleanSecs = float | None | Literal["auto"]


def socket_timeout_for(poll_secs: float) -> float:
    """The socket timeout of the runners' own clients: a hung server is noticed in it."""
    return max(5.0, 2 * poll_secs + 2)


@dataclass(frozen=True)
class Options:
    """A worker's checked options (see :class:`redis_work_queue.worker.Worker`)."""

    lease_secs: float
    concurrency: int
    backoff: float
    max_backoff: float
    poll_secs: float
    timeout: float | None = None
    clean_secs: float | None = None
    heartbeat_secs: float | None = None
    health_file: str | None = None
    schedule_secs: float | None = None
    batch: bool = True


def _seconds(name: str, value: object, example: str, *, zero: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds, not {type(value).__name__}: pass e.g. "
            f"{name}={example}"
        )
    low_ok = value >= 0 if zero else value > 0
    if not math.isfinite(value) or not low_ok or value > MAX_SECS:
        kind = "zero or more" if zero else "more than zero"
        raise InvalidArgumentError(
            f"{name} must be a finite number of seconds, {kind} and at most {MAX_SECS}, got "
            f"{value!r}: pass e.g. {name}={example}"
        )
    return float(value)


def _at_least(name: str, value: float, given: object, least: float, example: str) -> float:
    if value < least:
        raise InvalidArgumentError(
            f"{name} must be at least {least:g}, got {given!r}: pass e.g. {name}={example}"
        )
    return value


def _asynchronous(handler: object) -> bool:
    """Whether calling ``handler`` only makes a coroutine or an async generator."""

    def makes_one(function: object) -> bool:
        return inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)

    if makes_one(handler):
        return True
    # An object with an ``async def __call__``.
    return not inspect.isroutine(handler) and makes_one(type(handler).__call__)


def check_handler(handler: object, asynchronous: bool) -> None:
    """Check a handler for the runner that will call it.

    A synchronous runner (threads, processes) calls the handler and takes its return for
    success: an ``async def`` function (or an object with an ``async def __call__``) would only
    make a coroutine and never run, so it is refused. The asyncio runner takes any callable; a
    call that returns no awaitable is a failure of that item.

    Raises:
        InvalidArgumentError: The handler is not callable, or is asynchronous for a synchronous
            runner.
    """
    if not callable(handler):
        raise InvalidArgumentError("the handler must be callable")
    if not asynchronous and _asynchronous(handler):
        name = getattr(handler, "__qualname__", type(handler).__name__)
        raise InvalidArgumentError(
            f"the handler {name} is asynchronous (async def): Worker would call it without "
            "awaiting it, so it would never run; run it with AsyncWorker, or pass a plain function"
        )


def check_options(
    queues: Sequence[object],
    kind: type,
    handler: object,
    concurrency: int,
    lease_secs: float,
    poll_secs: float,
    backoff: float,
    max_backoff: float,
    timeout: float | None = None,
    clean_secs: CleanSecs = None,
    heartbeat_secs: float | None = None,
    health_file: str | os.PathLike[str] | None = None,
    *,
    asynchronous: bool = False,
    schedule_secs: float | None = None,
    batch: bool = True,
) -> Options:
    """Validate the options every worker runner takes, before anything starts.

    ``clean_secs="auto"`` stands for the lease time (at least one second). ``asynchronous``
    says which runner calls the handler (see :func:`check_handler`).

    Returns:
        The options, as floats.

    Raises:
        InvalidArgumentError: One is out of range; the message names it and the fix.
    """
    if not queues or not all(isinstance(q, kind) for q in queues):
        raise InvalidArgumentError(f"a worker needs one or more {kind.__name__}")
    check_handler(handler, asynchronous)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise InvalidArgumentError(
            f"concurrency must be a positive int, got {concurrency!r}: pass e.g. concurrency=4"
        )
    if concurrency > MAX_CONCURRENCY:
        raise InvalidArgumentError(
            f"concurrency must be at most {MAX_CONCURRENCY}, got {concurrency}: run more "
            "workers instead"
        )
    lease = _seconds("lease_secs", lease_secs, "30")
    _at_least("lease_secs", lease, lease_secs, MIN_LEASE_SECS, "30")
    poll = _seconds("poll_secs", poll_secs, "1")
    _at_least("poll_secs", poll, poll_secs, MIN_INTERVAL_SECS, "1")
    if poll > MAX_POLL_SECS:
        raise InvalidArgumentError(
            f"poll_secs must be at most {MAX_POLL_SECS}, got {poll_secs!r}: pass e.g. poll_secs=1"
        )
    first = _seconds("backoff", backoff, "1", zero=True)
    longest = _seconds("max_backoff", max_backoff, "300", zero=True)
    if longest < first:
        raise InvalidArgumentError(
            f"max_backoff ({max_backoff!r}) must be at least backoff ({backoff!r}): raise "
            "max_backoff or lower backoff"
        )
    limit = None if timeout is None else _seconds("timeout", timeout, "600")
    if clean_secs == "auto":
        clean: float | None = max(lease, 1.0)
    elif clean_secs is None:
        clean = None
    else:
        clean = _seconds("clean_secs", clean_secs, "30")
        _at_least("clean_secs", clean, clean_secs, MIN_INTERVAL_SECS, "30")
    beat = None if heartbeat_secs is None else _seconds("heartbeat_secs", heartbeat_secs, "5")
    if beat is not None:
        _at_least("heartbeat_secs", beat, heartbeat_secs, MIN_INTERVAL_SECS, "5")
    path = None if health_file is None else _health_file(health_file, beat)
    turn = None if schedule_secs is None else _seconds("schedule_secs", schedule_secs, "1")
    if turn is not None:
        _at_least("schedule_secs", turn, schedule_secs, MIN_INTERVAL_SECS, "1")
    if not isinstance(batch, bool):
        raise InvalidArgumentError(
            f"batch must be True or False, got {batch!r}: pass batch=False to lease and "
            "complete one item per call in each slot"
        )
    return Options(lease, concurrency, first, longest, poll, limit, clean, beat, path, turn, batch)


def _health_file(health_file: object, beat: float | None) -> str:
    if not isinstance(health_file, str | os.PathLike):
        raise InvalidArgumentError(f"health_file must be a path, not {type(health_file).__name__}")
    path = os.fspath(health_file)
    if beat is None:
        raise InvalidArgumentError(
            "health_file needs heartbeats: pass heartbeat_secs (e.g. 5) with it"
        )
    if not os.path.isdir(os.path.dirname(os.path.abspath(path))):
        raise InvalidArgumentError(
            f"health_file {path!r} is in a directory that does not exist: create it first"
        )
    return path


def check_pool(db: object, concurrency: int) -> None:
    """Check that a client given to a worker has connections enough for its concurrency.

    Every slot may hold a connection at once (a blocking lease), besides the watchdog and
    housekeeping.

    Raises:
        InvalidArgumentError: The client's pool is smaller than ``concurrency + 4``.
    """
    pool = getattr(db, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    needed = concurrency + EXTRA_CONNECTIONS
    if isinstance(size, int) and size < needed:
        raise InvalidArgumentError(
            f"the client's connection pool holds at most {size} connections; a worker with "
            f"concurrency={concurrency} needs {needed}: make the client with "
            f"max_connections={needed} (or pass a URL)"
        )
