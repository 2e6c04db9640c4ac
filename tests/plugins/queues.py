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

Such a module's sharded tests also run on the session's Redis Cluster: once more per API, on a
queue of :data:`CLUSTER_SHARDS` shards whose data fixture (``backend``, ``bytes_backend`` or
``real_backend``, and so ``db``, ``bytes_db``, ``real_db``) is the cluster, test id
``sharded-cluster``. The shards lie on at least two primaries (the ``queue`` fixture checks it
for every such test). A test that cannot run on a cluster is named in the module's
``CLUSTER_SKIP``, a dict of test name to the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from plugins.backends import FAKE_FLAVOURS, REAL_FLAVOURS, SHARDED_CLUSTER
from redis_work_queue import KeyPrefix, WorkQueue

#: How many shards a queue on the session's cluster (three primaries) has: shard ``i``'s tag
#: lies in the ``i``-th quarter of the slots, so the shards span at least two primaries.
CLUSTER_SHARDS = 4
#: The fixtures that say where a test's data lives, and the flavours each is run with.
DATA_FIXTURES = {
    "backend": (*REAL_FLAVOURS, *FAKE_FLAVOURS),
    "bytes_backend": ("redis-resp2-bytes", "fakeredis-bytes"),
    "real_backend": ("redis-resp2-bytes",),
}


@pytest.fixture(params=["sync", "asyncio"])
def queue_kind(request: pytest.FixtureRequest) -> Callable[..., WorkQueue]:
    """Make queues of either API: WorkQueue, or AsyncWorkQueue behind a blocking bridge."""
    if request.param == "sync":
        return WorkQueue
    from async_bridge import BlockingAsyncQueue  # noqa: PLC0415 (only when needed)

    return BlockingAsyncQueue


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run a module's queue tests once per count of its ``QUEUE_SHARDS``, and its sharded ones
    on the session's cluster too.

    The cluster run sets the test's data fixture and its shard count together: a
    ``parametrize`` mark on the test, so pytest does not also apply the fixture's own params.
    """
    if "queue_shards" not in metafunc.fixturenames:
        return
    module, name = metafunc.module, metafunc.function.__name__
    counts = tuple(getattr(module, "QUEUE_SHARDS", (1,)))
    if name in getattr(module, "SHARDS_SKIP", ()):
        counts = (1,)
    data = next((f for f in DATA_FIXTURES if f in metafunc.fixturenames), None)
    on_cluster = max(counts) > 1 and name not in getattr(module, "CLUSTER_SKIP", {})
    if data is None or not on_cluster:
        metafunc.parametrize("queue_shards", counts, ids=[f"shards{n}" for n in counts])
        return
    cases = [
        pytest.param(flavour, n, id=f"{flavour}-shards{n}")
        for flavour in DATA_FIXTURES[data]
        for n in counts
    ]
    cases.append(pytest.param(SHARDED_CLUSTER, CLUSTER_SHARDS, id=SHARDED_CLUSTER))
    metafunc.definition.add_marker(
        pytest.mark.parametrize((data, "queue_shards"), cases, indirect=[data])
    )


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


def on_cluster(request: pytest.FixtureRequest) -> bool:
    """Whether the test is a sharded queue module's run on the session's cluster."""
    callspec = getattr(request.node, "callspec", None)
    params = callspec.params if callspec is not None else {}
    return SHARDED_CLUSTER in {params.get(name) for name in DATA_FIXTURES}


def spread_over_primaries(request: pytest.FixtureRequest, queue: WorkQueue) -> set[int]:
    """The ports of the primaries that own the shards of ``queue``; fails below two."""
    cluster = request.getfixturevalue("cluster")
    ports = {cluster.primary_for(shard.keys.queue).port for shard in queue.ops.shard_ops}
    assert len(ports) >= 2, f"the shards of {queue.ops.name} all lie on one primary {ports}"
    return ports


def _made(request: pytest.FixtureRequest, make: Callable[..., WorkQueue], shards: int) -> WorkQueue:
    prefix, options = _module_queue(request, shards)
    made = make(prefix, **options)
    if on_cluster(request):
        spread_over_primaries(request, made)
    return made


@pytest.fixture
def queue(
    request: pytest.FixtureRequest, queue_kind: Callable[..., WorkQueue], queue_shards: int
) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) on the sync and the asyncio API."""
    return _made(request, queue_kind, queue_shards)


@pytest.fixture
def sync_queue(request: pytest.FixtureRequest, queue_shards: int) -> WorkQueue:
    """The module's queue (``QUEUE``, ``QUEUE_OPTIONS``) as a plain ``WorkQueue``."""
    return _made(request, WorkQueue, queue_shards)
