"""The retry policy: which errors are waited out, how long to wait, and the one retrying step.

Every loop of the runner that sends a call (lease, complete, release, renew, heartbeat, clean)
sends it through :func:`retrying`: it tries the operation, classifies an error
(:func:`transient`), notes the outage's start and end (:class:`Outage`), backs off
(:func:`reconnect_delay`) and tries again, until the operation succeeds or the caller's
``give_up`` says to stop. An error that waiting cannot cure is raised: it stops the worker.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..retryable import RECONNECT_MAX_SECS, reconnect_delay, transient
from .actions import Flag, Pause, Step

logger = logging.getLogger("redis_work_queue.worker")

T = TypeVar("T")


def backoff_delay(backoff: float, max_backoff: float, deliveries: int) -> float:
    """Exponential backoff: ``backoff`` doubled per delivery after the first, capped, +0-10%."""
    delay = min(backoff * 2 ** min(max(deliveries - 1, 0), 64), max_backoff)
    return delay * (1 + random.random() / 10) if delay else 0.0


#: How soon after an outage's end a failed call continues it quietly (see :meth:`Outage.failed`).
RELAPSE_SECS = 5.0


class Outage:
    """Whether Redis is unavailable to this worker; logs once when it starts and once when it ends.

    Shared by every loop of a worker, so an outage is one WARNING and one INFO, however many
    threads or tasks retry through it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.errors = 0
        #: When the last outage ended, and whether the current one is a quiet relapse.
        self.ended: float | None = None
        self.quiet = False
        #: How many outages have started (a completion written after one began is counted as
        #: one retried across it: see :mod:`.batching`).
        self.started = 0

    @property
    def active(self) -> bool:
        """True from the first failed call until a call succeeds."""
        return self.since is not None

    def failed(self, err: BaseException) -> None:
        """Note a failed call (logs a WARNING if this starts an outage).

        A call that fails within :data:`RELAPSE_SECS` of an outage's end (on a pooled
        connection left from before it, which no call had used since) carries that outage on
        quietly: no WARNING, and no INFO when it ends, unless it lasts longer.
        """
        with self._lock:
            now = time.monotonic()
            starting = self.since is None
            if starting:
                self.since = now
                self.errors = 0
                self.started += 1
                self.quiet = self.ended is not None and now - self.ended < RELAPSE_SECS
            self.errors += 1
            since = self.since if self.since is not None else now
            warn = (starting and not self.quiet) or (self.quiet and now - since >= RELAPSE_SECS)
            if warn:
                self.quiet = False
        if warn:
            logger.warning(
                "Redis is unavailable (%s: %s): retrying with backoff up to %.0f s",
                type(err).__name__,
                err,
                RECONNECT_MAX_SECS,
            )

    def recovered(self, begun: float) -> None:
        """Note a successful call sent at ``begun`` (logs an INFO if this ends an outage).

        A call sent before the outage began (its reply came just before the connection went)
        says nothing about its end, and leaves it on.
        """
        if self.since is None:
            return
        with self._lock:
            if self.since is None or begun < self.since:
                return
            since, errors, quiet = self.since, self.errors, self.quiet
            self.since, self.quiet = None, False
            self.ended = time.monotonic()
        if quiet:
            return
        logger.info(
            "Redis is back after %.1f s (%d failed calls): working again",
            time.monotonic() - since,
            errors,
        )


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The operation succeeded: its result, and whether it took more than one try."""

    value: T
    retried: bool


@dataclass(frozen=True, slots=True)
class GaveUp:
    """The operation failed on a transient error and the caller gave up: the last error."""

    error: Exception
    retried: bool


def once() -> bool:
    """A ``give_up`` for one try: the next tick of the loop tries again."""
    return True


def retrying(
    attempt: Callable[[], Generator[Step, Any, T]],
    outage: Outage,
    until: Flag,
    give_up: Callable[[], bool],
) -> Generator[Step, Any, Done[T] | GaveUp]:
    """Run the operation ``attempt()`` makes until it succeeds, waiting out transient errors.

    After each failure on a transient error (noted in ``outage``), and again after each back-off
    (:func:`reconnect_delay`, cut short when ``until`` is set), ``give_up()`` decides whether to
    stop trying. A success ends the outage (see :meth:`Outage.recovered`).

    Args:
        attempt: Makes a fresh operation (steps) for each try.
        outage: The worker's outage, shared by its loops.
        until: The flag that cuts a back-off short.
        give_up: Whether to stop trying; :func:`once` stops after the first failure.

    Returns:
        :class:`Done` with the operation's result, or :class:`GaveUp` with the last error.

    Raises:
        Exception: What the operation raised, when waiting cannot cure it.
    """
    tries = 0
    while True:
        begun = time.monotonic()
        try:
            value = yield from attempt()
        except Exception as err:
            if not transient(err):
                raise
            outage.failed(err)
            if give_up():
                return GaveUp(err, tries > 0)
            yield Pause(reconnect_delay(tries), until)
            tries += 1
            if give_up():
                return GaveUp(err, True)
            continue
        outage.recovered(begun)
        return Done(value, tries > 0)
