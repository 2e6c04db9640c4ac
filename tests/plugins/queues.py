"""The queue fixtures shared by the test modules.

A module names its queue's key prefix in a module-level ``QUEUE`` (a ``KeyPrefix`` or a
string) and, if it needs any, the queue's options in ``QUEUE_OPTIONS``; ``queue`` is then that
queue on the sync and the asyncio API (every test that takes it runs on both), ``sync_queue``
the same queue as a plain ``WorkQueue``. A module may still define a ``queue`` of its own.

A module that sets ``QUEUE_SHARDS`` (shard counts, such as ``(1, 4)``) runs every test that
takes ``queue`` or ``sync_queue`` once per count: the same suite on a sharded queue
(``WorkQueue(prefix, shards=4)``). A test that reads a shard's keys itself asks for
``queue_shards`` and skips itself on a sharded queue (:func:`unsharded_only`), or is named in
the module's ``SHARDS_SKIP``.
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


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a module's queue tests once per count of its ``QUEUE_SHARDS``."""
    if "queue_shards" in metafunc.fixturenames:
        counts = tuple(getattr(metafunc.module, "QUEUE_SHARDS", (1,)))
        if metafunc.function.__name__ in getattr(metafunc.module, "SHARDS_SKIP", ()):
            counts = (1,)
        metafunc.parametrize("queue_shards", counts, ids=[f"shards{n}" for n in counts])


@pytest.fixture
def queue_shards() -> int:
    """How many shards the module's queue has (see ``QUEUE_SHARDS``)."""
    return 1


def unsharded_only(shards: int) -> None:
    """Skip a test that reads a queue's keys itself when its queue is sharded."""
    if shards > 1:
        pytest.skip("reads the keys of an unsharded queue")


def _module_queue(
    request: pytest.FixtureRequest, shards: int = 1
) -> tuple[KeyPrefix, dict[str, Any]]:
    name = getattr(request.module, "QUEUE", None)
    if name is None:
        raise pytest.UsageError(f"{request.module.__name__} takes `queue` but sets no QUEUE")
    prefix = name if isinstance(name, KeyPrefix) else KeyPrefix(name)
    options = dict(getattr(request.module, "QUEUE_OPTIONS", {}))
    if shards > 1:
        options["shards"] = shards
    return prefix, options


@pytest.fixture
def queue(
    request: pytest.FixtureRequest, queue_kind: Callable[..., WorkQueue], queue_shards: int
) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) on the sync and the asyncio API."""
    prefix, options = _module_queue(request, queue_shards)
    return queue_kind(prefix, **options)


@pytest.fixture
def sync_queue(request: pytest.FixtureRequest, queue_shards: int) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) as a plain ``WorkQueue``."""
    prefix, options = _module_queue(request, queue_shards)
    return WorkQueue(prefix, **options)
