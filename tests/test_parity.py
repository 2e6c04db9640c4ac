"""The synchronous and asyncio APIs stay twins: same methods, same parameters, same defaults.

Read from the classes with ``inspect.signature``, so a method or option added to one API only
fails here. Annotations are compared as written (the modules use postponed annotations), after
naming each synchronous type by its asyncio twin; a return annotation is compared as it is,
the asyncio method being awaited for it. Every difference that is meant is listed below with
its reason.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

import async_bridge
import redis_work_queue
from redis_work_queue import (
    AsyncWorker,
    AsyncWorkQueue,
    Worker,
    WorkQueue,
    acomplete_and_lease_from,
    alease_from,
    complete_and_lease_from,
    lease_from,
)
from redis_work_queue.ops import registry

#: Synchronous names in annotations, and the asyncio name that stands for each.
TWIN_NAMES = {
    "SyncClient": "AsyncClient",
    "SyncPipeline": "AsyncPipeline",
    "WorkQueue": "AsyncWorkQueue",
    "Iterator": "AsyncIterator",
    "Handler": "AsyncHandler",
    "Redis": "AsyncRedis",
}
_TWIN = re.compile(r"\b(" + "|".join(TWIN_NAMES) + r")\b")

#: Methods that queue a call on the caller's pipeline: not awaited in either API.
PIPELINE_METHODS = {"add_item_to_pipeline", "add_unique_item_to_pipeline"}

#: Constructor parameters of Worker and AsyncWorker that differ on purpose: (sync, asyncio).
WORKER_DIFFERENCES: dict[tuple[str | None, str | None], str] = {
    ("redis_url", "db"): (
        "Worker's first argument is mainly a URL (worker processes each connect by URL); "
        "AsyncWorker's is mainly a redis.asyncio client, which processes cannot share"
    ),
    ("processes", None): "an asyncio worker runs its handlers as tasks of one event loop",
}


def as_async(annotation: object) -> object:
    """A synchronous annotation with each name replaced by its asyncio twin."""
    if not isinstance(annotation, str):
        return annotation
    return _TWIN.sub(lambda m: TWIN_NAMES[m.group(1)], annotation)


def shape(param: inspect.Parameter, twin: bool) -> tuple[Any, ...]:
    annotation = as_async(param.annotation) if twin else param.annotation
    return (param.name, param.kind, param.default, annotation)


def assert_twins(sync: Callable[..., Any], aio: Callable[..., Any]) -> None:
    """``aio`` has ``sync``'s parameters, kinds, defaults, annotations and return annotation."""
    want = inspect.signature(sync)
    got = inspect.signature(aio)
    expected = [shape(p, True) for p in want.parameters.values()]
    actual = [shape(p, False) for p in got.parameters.values()]
    assert actual == expected, f"{aio.__qualname__} differs from {sync.__qualname__}"
    assert got.return_annotation == as_async(want.return_annotation), aio.__qualname__


def test_both_queues_have_the_same_public_methods() -> None:
    sync = async_bridge.public_methods(WorkQueue)
    aio = async_bridge.public_methods(AsyncWorkQueue)
    assert sorted(sync - aio) == [], "WorkQueue methods without an asyncio twin"
    assert sorted(aio - sync) == [], "AsyncWorkQueue methods without a synchronous twin"


@pytest.mark.parametrize("name", sorted(async_bridge.public_methods(WorkQueue)))
def test_each_method_has_the_same_signature_on_both_queues(name: str) -> None:
    sync = getattr(WorkQueue, name)
    aio = getattr(AsyncWorkQueue, name, None)
    assert aio is not None, f"AsyncWorkQueue has no {name}"
    assert_twins(sync, aio)


@pytest.mark.parametrize("name", sorted(async_bridge.public_methods(WorkQueue)))
def test_each_asyncio_method_is_awaited_as_its_twin_is_called(name: str) -> None:
    sync = inspect.unwrap(getattr(WorkQueue, name))
    aio = inspect.unwrap(getattr(AsyncWorkQueue, name))
    if name in PIPELINE_METHODS:
        # They only queue a call on the pipeline; the pipeline's execute is what is awaited.
        assert not inspect.iscoroutinefunction(aio)
        assert not inspect.iscoroutinefunction(sync)
    elif inspect.isgeneratorfunction(sync):  # a context manager: ``async with`` in asyncio
        assert inspect.isasyncgenfunction(aio), name
    else:
        assert inspect.iscoroutinefunction(aio), name
        assert not inspect.iscoroutinefunction(sync), name


def test_both_queues_take_the_same_options() -> None:
    assert_twins(WorkQueue.__init__, AsyncWorkQueue.__init__)


def test_lease_from_and_alease_from_are_twins() -> None:
    assert_twins(lease_from, alease_from)
    assert inspect.iscoroutinefunction(alease_from)
    assert not inspect.iscoroutinefunction(lease_from)


def test_complete_and_lease_from_and_its_asyncio_twin_are_twins() -> None:
    assert_twins(complete_and_lease_from, acomplete_and_lease_from)
    assert inspect.iscoroutinefunction(acomplete_and_lease_from)
    assert not inspect.iscoroutinefunction(complete_and_lease_from)


OPERATIONS = registry.operations()
#: The registry's queue methods, and its functions with their asyncio twins.
METHODS = sorted({name for op in OPERATIONS.values() for name in op.methods})
FUNCTIONS = sorted(pair for op in OPERATIONS.values() for pair in op.functions)


def _function(name: str) -> Callable[..., Any]:
    """A function of the package by its registered name (``lease_from``, ``server.x``)."""
    module, _, attribute = name.rpartition(".")
    owner = importlib.import_module(f"redis_work_queue.{module}") if module else redis_work_queue
    found: Callable[..., Any] = getattr(owner, attribute)
    return found


@pytest.mark.parametrize("name", METHODS)
def test_each_registered_method_has_its_twin(name: str) -> None:
    assert_twins(getattr(WorkQueue, name), getattr(AsyncWorkQueue, name))


@pytest.mark.parametrize(("sync", "aio"), FUNCTIONS, ids=[sync for sync, _ in FUNCTIONS])
def test_each_registered_function_has_its_asyncio_twin(sync: str, aio: str) -> None:
    sync_function, aio_function = _function(sync), _function(aio)
    assert_twins(sync_function, aio_function)
    assert inspect.iscoroutinefunction(aio_function)
    assert not inspect.iscoroutinefunction(sync_function)


def test_workers_take_the_same_options_but_the_listed_ones() -> None:
    sync = inspect.signature(Worker.__init__).parameters
    aio = inspect.signature(AsyncWorker.__init__).parameters
    for (sync_name, aio_name), reason in WORKER_DIFFERENCES.items():
        assert reason
        assert sync_name is None or sync_name in sync, f"Worker has no {sync_name} any more"
        assert aio_name is None or aio_name in aio, f"AsyncWorker has no {aio_name} any more"
    skip_sync = {s for s, _ in WORKER_DIFFERENCES if s is not None}
    skip_aio = {a for _, a in WORKER_DIFFERENCES if a is not None}
    expected = [shape(p, True) for p in sync.values() if p.name not in skip_sync]
    actual = [shape(p, False) for p in aio.values() if p.name not in skip_aio]
    assert actual == expected
    # The first argument, renamed, is the same position and kind.
    assert list(sync).index("redis_url") == list(aio).index("db") == 1
    assert sync["redis_url"].kind == aio["db"].kind


def test_workers_have_the_same_public_methods() -> None:
    sync = async_bridge.public_methods(Worker)
    aio = async_bridge.public_methods(AsyncWorker)
    assert sync == aio
    for name in sorted(sync):
        sync_method, aio_method = getattr(Worker, name), getattr(AsyncWorker, name)
        assert_twins(sync_method, aio_method)
        # run is the one awaited: it is the worker's life; the others only set flags or compute.
        assert inspect.iscoroutinefunction(aio_method) == (name == "run"), name


def test_the_async_bridge_runs_every_method_through_the_asyncio_queue() -> None:
    """A WorkQueue method the bridge does not send to AsyncWorkQueue would test sync code twice.

    The bridge reads AsyncWorkQueue's methods, so a method that exists on WorkQueue only, or
    that was removed from AsyncWorkQueue, is missing from it and fails here.
    """
    sync = async_bridge.public_methods(WorkQueue)
    bridged = async_bridge.BRIDGED
    left = set(async_bridge.NOT_BRIDGED)
    assert sorted(sync - bridged - left) == [], "methods the bridge leaves to the sync code"
    assert left <= sync
    for name in sorted(bridged):
        own = vars(async_bridge.BlockingAsyncQueue).get(name)
        assert own is not None and own is not vars(WorkQueue).get(name), name
