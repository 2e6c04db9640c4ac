"""Handlers of the fault suite, importable by name (``rwq worker faults_handlers:record``).

Each handler call appends ``call <id>`` to the ``events`` list of a results server that no
fault touches (its URL in ``$RWQ_FAULTS_RESULTS``). With :func:`install` (done at import when
``$RWQ_FAULTS_RECORD_DONE`` is set, so in worker processes too) every ``complete`` that returns
True appends ``done <id>`` as well, and so does every completion made with the next lease
(``complete_and_lease_from``, as the runners complete): the operation generators are wrapped,
so the record holds whichever runner or facade drives them. The order of the list is the
results server's order of arrival, so a ``call`` after a ``done`` of the same id is a lease of
an item whose completion had been acknowledged.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Generator, Iterable
from typing import Any

import redis

from redis_work_queue import Item
from redis_work_queue.ops import QueueOps
from redis_work_queue.ops import lease as lease_ops
from redis_work_queue.ops.lease import LeaseRequest

RESULTS_ENV = "RWQ_FAULTS_RESULTS"
RECORD_DONE_ENV = "RWQ_FAULTS_RECORD_DONE"
SLEEP_ENV = "RWQ_FAULTS_SLEEP"
EVENTS = "events"

_clients: dict[tuple[int, str], redis.Redis] = {}
_lock = threading.Lock()
_originals: dict[str, Any] = {}


def results() -> redis.Redis:
    """This process's client of the results server."""
    key = (os.getpid(), os.environ[RESULTS_ENV])
    with _lock:
        if key not in _clients:
            _clients[key] = redis.Redis.from_url(key[1], socket_timeout=10)
        return _clients[key]


def note(event: str) -> None:
    """Append one event to the record."""
    results().rpush(EVENTS, event)


def _pause() -> float:
    return float(os.environ.get(SLEEP_ENV, "0.005"))


def record(item: Item) -> None:
    """Record the call, then 'work' for ``$RWQ_FAULTS_SLEEP`` seconds (default 5 ms)."""
    note(f"call {item.id()}")
    time.sleep(_pause())


async def arecord(item: Item) -> None:
    """The asyncio twin of :func:`record`."""
    note(f"call {item.id()}")
    await asyncio.sleep(_pause())


def noop(item: Item) -> None:
    """Do nothing (the bench's handler)."""


def install() -> None:
    """Record ``done <id>`` for every completion acknowledged to this process (idempotent)."""
    with _lock:
        if _originals:
            return
        _originals["complete_one"] = one = QueueOps.complete_one
        _originals["complete"] = many = QueueOps.complete
        _originals["complete_and_lease"] = chained = lease_ops.complete_and_lease

    def complete_one(
        self: QueueOps, item: Item, replicas: int | None = None
    ) -> Generator[Any, Any, bool]:
        done: bool = yield from one(self, item, replicas)
        # With replicas it runs through complete(), which has recorded it already.
        if done and replicas is None and not self.replicas:
            note(f"done {item.id()}")
        return done

    def complete(
        self: QueueOps, items: Iterable[Item], replicas: int | None = None
    ) -> Generator[Any, Any, list[Item]]:
        completed: list[Item] = yield from many(self, items, replicas)
        for item in completed:
            note(f"done {item.id()}")
        return completed

    def complete_and_lease(
        queues: list[QueueOps], index: int, item_id: str, request: LeaseRequest
    ) -> Generator[Any, Any, Any]:
        # The one-call path of complete_and_lease_from (its other path calls complete_one).
        done, leased = yield from chained(queues, index, item_id, request)
        if done:
            note(f"done {item_id}")
        return done, leased

    QueueOps.complete_one = complete_one  # type: ignore[method-assign]
    QueueOps.complete = complete  # type: ignore[method-assign]
    lease_ops.complete_and_lease = complete_and_lease  # type: ignore[assignment]


def uninstall() -> None:
    """Undo :func:`install`."""
    with _lock:
        if not _originals:
            return
        QueueOps.complete_one = _originals.pop("complete_one")  # type: ignore[method-assign]
        QueueOps.complete = _originals.pop("complete")  # type: ignore[method-assign]
        lease_ops.complete_and_lease = _originals.pop("complete_and_lease")


if os.environ.get(RECORD_DONE_ENV) and os.environ.get(RESULTS_ENV):
    install()
