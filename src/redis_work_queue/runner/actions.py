"""The runner's own steps, and the flags its loops wait on.

A loop of the runner (see :mod:`.core`) is a generator, as an operation is: besides the calls of
:mod:`redis_work_queue.calls`, which go to Redis, it yields the steps below, which a driver
(:mod:`.drivers`) performs itself: call the handler (:class:`Handle`), wait (:class:`Pause`),
end a timed-out handler and start another in its slot (:class:`Replace`).

A :class:`Flag` (stop, abort, the job loops' end) is set once, from any thread or a signal
handler, and is waited on by threads (a ``threading.Event``) and by asyncio tasks (an
``asyncio.Event`` of their loop, set with ``call_soon_threadsafe`` from another thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Generator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..calls import Call
from ..item import Item

if TYPE_CHECKING:
    from .core import Job

T = TypeVar("T")


class Flag:
    """A flag that is set once; threads and asyncio tasks wait for it, with a timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        #: Whether the flag is set (the event's own method: no frame of this class's).
        self.is_set = self._event.is_set
        # Reentrant: a signal handler may set the flag while its thread is setting it.
        self._lock = threading.RLock()
        #: The futures of the tasks waiting, by event loop.
        self._loops: dict[asyncio.AbstractEventLoop, set[asyncio.Future[None]]] = {}

    def set(self) -> None:
        """Set the flag and wake every waiter, in any thread or event loop."""
        self._event.set()
        with self._lock:
            waiting = [(loop, list(futures)) for loop, futures in self._loops.items() if futures]
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for loop, futures in waiting:
            if loop is running:
                _wake(futures)
            else:
                with contextlib.suppress(RuntimeError):  # that loop has closed
                    loop.call_soon_threadsafe(_wake, futures)

    def wait(self, seconds: float) -> bool:
        """Block this thread until the flag is set or ``seconds`` pass; whether it is set."""
        return self._event.wait(seconds)

    async def wait_async(self, seconds: float | None) -> bool:
        """Wait in this task until the flag is set or ``seconds`` pass (None: no limit)."""
        if self._event.is_set():
            return True
        loop = asyncio.get_running_loop()
        # A future and a timer rather than ``wait_for``, which makes a task of every wait.
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            futures = self._loops.get(loop)
            if futures is None:
                futures = self._loops[loop] = set()
            futures.add(future)
        timer = None if seconds is None else loop.call_later(seconds, _wake, (future,))
        try:
            # Set before this future was known: set() did not see it, but it is set now.
            if not self._event.is_set():
                await future
        finally:
            if timer is not None:
                timer.cancel()
            with self._lock:
                futures.discard(future)
        return self._event.is_set()


def _wake(futures: Iterable[asyncio.Future[None]]) -> None:
    """Let the tasks waiting on ``futures`` go on (those still waiting)."""
    for future in futures:
        if not future.done():
            future.set_result(None)


@dataclass(frozen=True, slots=True)
class Handle:
    """Call the handler with the item; the reply is None when it returned, else what it raised.

    Whatever the handler raises (``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit``
    included) is its item's failure, handed back as a value: the loop goes on. Only a
    cancellation of the runner's own asyncio task ends a loop here.
    """

    item: Item
    #: The queue it was leased from (the handler's current job, for progress reports).
    queue: Any = None


@dataclass(frozen=True, slots=True)
class Returned:
    """The reply to :class:`Handle` when the handler returned something other than None."""

    value: Any


@dataclass(frozen=True, slots=True)
class Pause:
    """Wait ``seconds``, or less when ``until`` is set; with 0, let the other slots run first.

    The reply is whether ``until`` is set.
    """

    seconds: float
    until: Flag


@dataclass(frozen=True, slots=True)
class Replace:
    """A held job ran past its timeout: end its handler if the runner can, and start another."""

    job: Job


Step = Call | Handle | Pause | Replace
#: A loop of the runner: yields steps, receives their replies, returns its result.
Loop = Generator[Step, Any, T]
