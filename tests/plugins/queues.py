"""The queue fixtures shared by the test modules.

A module names its queue's key prefix in a module-level ``QUEUE`` (a ``KeyPrefix`` or a
string) and, if it needs any, the queue's options in ``QUEUE_OPTIONS``; ``queue`` is then that
queue on the sync and the asyncio API (every test that takes it runs on both), ``sync_queue``
the same queue as a plain ``WorkQueue``. A module may still define a ``queue`` of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from redis_work_queue import KeyPrefix, WorkQueue


@pytest.fixture(params=["sync", "asyncio"])
def queue_kind(request: pytest.FixtureRequest) -> Callable[..., WorkQueue]:
    """Make queues of either API: WorkQueue, or AsyncWorkQueue behind a blocking bridge."""
    if request.param == "sync":
        return WorkQueue
    from async_bridge import BlockingAsyncQueue  # noqa: PLC0415 (only when needed)

    return BlockingAsyncQueue


def _module_queue(request: pytest.FixtureRequest) -> tuple[KeyPrefix, dict[str, Any]]:
    name = getattr(request.module, "QUEUE", None)
    if name is None:
        raise pytest.UsageError(f"{request.module.__name__} takes `queue` but sets no QUEUE")
    prefix = name if isinstance(name, KeyPrefix) else KeyPrefix(name)
    return prefix, dict(getattr(request.module, "QUEUE_OPTIONS", {}))


@pytest.fixture
def queue(request: pytest.FixtureRequest, queue_kind: Callable[..., WorkQueue]) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) on the sync and the asyncio API."""
    prefix, options = _module_queue(request)
    return queue_kind(prefix, **options)


@pytest.fixture
def sync_queue(request: pytest.FixtureRequest) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) as a plain ``WorkQueue``."""
    prefix, options = _module_queue(request)
    return WorkQueue(prefix, **options)
