"""Run the synchronous test cases against AsyncWorkQueue.

``BlockingAsyncQueue`` has the synchronous API of WorkQueue, but every call is made by an
``AsyncWorkQueue`` on a ``redis.asyncio`` twin of the test's client (same server, same reply
flavour), on an event loop in a background thread. The test cases stay as written: the
``queue_kind`` fixture runs each one twice, once per API. The bridged methods are read from
AsyncWorkQueue's public surface (see :data:`BRIDGED`); ``tests/test_parity.py`` checks that it
matches WorkQueue's.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import fakeredis
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from redis_work_queue import AsyncWorkQueue, KeyPrefix, WorkQueue

T = TypeVar("T")

_SHARED = ("decode_responses", "protocol", "db", "host", "port", "socket_timeout")


class _Loop:
    """One event loop in a daemon thread, shared by the bridges."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()


_LOOPS: list[_Loop] = []
#: The asyncio twins of Redis Cluster clients, by the id of the synchronous client (kept with
#: it): shared by the bridges while that client lives, and closed by :func:`close_twins`.
_CLUSTER_TWINS: dict[int, tuple[redis.cluster.RedisCluster, Any]] = {}


def close_twins() -> None:
    """Close the asyncio cluster clients made so far, on their loop."""
    while _CLUSTER_TWINS:
        _, twin = _CLUSTER_TWINS.popitem()[1]
        loop().run(twin.aclose())


def _cluster_twin(db: redis.cluster.RedisCluster) -> Any:
    """The asyncio client of the same cluster as ``db``, of the same reply flavour."""
    found = _CLUSTER_TWINS.get(id(db))
    if found is None:
        manager = db.nodes_manager
        nodes = [
            redis.asyncio.cluster.ClusterNode(n.host, n.port)
            for n in manager.startup_nodes.values()
        ]
        options = {k: v for k, v in manager.connection_kwargs.items() if k in _SHARED[:2]}

        async def make() -> Any:
            made = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **options)
            # reads the slot map now, as the synchronous client did when it was made
            return await made.initialize()

        found = (db, loop().run(make()))
        _CLUSTER_TWINS[id(db)] = found
    return found[1]


def loop() -> _Loop:
    if not _LOOPS:
        _LOOPS.append(_Loop())
    return _LOOPS[0]


class BlockingAsyncQueue(WorkQueue):
    """WorkQueue's synchronous API, carried out by an AsyncWorkQueue."""

    def __init__(self, name: KeyPrefix, **options: Any) -> None:
        super().__init__(name, **options)
        self.aio = AsyncWorkQueue(name, **options)
        self._twins: dict[int, tuple[redis.Redis, Any]] = {}

    def _twin(self, db: redis.Redis) -> Any:
        """The asyncio client of the same server as ``db``."""
        found = self._twins.get(id(db))
        if found is None:
            if isinstance(db, redis.cluster.RedisCluster):
                return _cluster_twin(db)
            kwargs = db.connection_pool.connection_kwargs
            if isinstance(db, fakeredis.FakeRedis):

                async def make() -> Any:
                    return fakeredis.FakeAsyncRedis(
                        server=kwargs["server"], decode_responses=kwargs["decode_responses"]
                    )
            else:
                shared = {k: kwargs[k] for k in _SHARED if k in kwargs}

                async def make() -> Any:
                    return redis.asyncio.Redis(**shared)

            found = (db, loop().run(make()))
            self._twins[id(db)] = found
        return found[1]

    def _call(self, name: str, db: redis.Redis, *args: Any, **kwargs: Any) -> Any:
        return loop().run(getattr(self.aio, name)(self._twin(db), *args, **kwargs))

    def _enter(self, name: str, db: redis.Redis, *args: Any, **kwargs: Any) -> Iterator[Any]:
        """Run the asyncio context manager ``name`` as a synchronous one."""
        manager = getattr(self.aio, name)(self._twin(db), *args, **kwargs)
        value = loop().run(manager.__aenter__())
        try:
            yield value
        except BaseException as err:
            if not loop().run(manager.__aexit__(type(err), err, err.__traceback__)):
                raise
        else:
            loop().run(manager.__aexit__(None, None, None))


#: Public methods of WorkQueue that the bridge leaves to the synchronous code, and why.
NOT_BRIDGED = {
    name: (
        "it takes the caller's pipeline, not a client, and only queues a call on it: a "
        "synchronous pipeline cannot be handed to the asyncio queue. The asyncio twin is run "
        "on a redis.asyncio pipeline by test_reference_api and compared by test_parity."
    )
    for name in ("add_item_to_pipeline", "add_unique_item_to_pipeline")
}


def public_methods(cls: type) -> set[str]:
    """The public methods of ``cls`` (its own and inherited; properties are not methods)."""
    return {
        name
        for name in dir(cls)
        if not name.startswith("_") and inspect.isfunction(inspect.getattr_static(cls, name))
    }


def _bridge(name: str) -> Callable[..., Any]:
    """The synchronous stand-in of ``AsyncWorkQueue.<name>``, which takes a client first."""
    method = getattr(AsyncWorkQueue, name)
    if inspect.iscoroutinefunction(method):

        def call(self: BlockingAsyncQueue, db: Any, *a: Any, **k: Any) -> Any:
            return self._call(name, db, *a, **k)

    elif inspect.isasyncgenfunction(method):  # an async iterator (events)

        def call(self: BlockingAsyncQueue, db: Any, *a: Any, **k: Any) -> Iterator[Any]:
            found = getattr(self.aio, name)(self._twin(db), *a, **k)
            while True:
                try:
                    yield loop().run(found.__anext__())
                except StopAsyncIteration:
                    return

    elif inspect.isasyncgenfunction(inspect.unwrap(method)):  # an asynccontextmanager

        @contextlib.contextmanager
        def call(self: BlockingAsyncQueue, db: Any, *a: Any, **k: Any) -> Iterator[Any]:
            yield from self._enter(name, db, *a, **k)

    else:
        raise TypeError(
            f"AsyncWorkQueue.{name} is neither a coroutine function, an async iterator nor an "
            "async context manager: say in NOT_BRIDGED why the bridge leaves it to the "
            "synchronous code"
        )
    call.__name__ = name
    call.__qualname__ = f"BlockingAsyncQueue.{name}"
    return call


#: The methods the bridge runs through the asyncio queue: every public method of
#: AsyncWorkQueue that is not in NOT_BRIDGED, read from the class itself, so a method added
#: later is bridged without a line here (and test_parity fails for one that has no twin).
BRIDGED = frozenset(public_methods(AsyncWorkQueue) - NOT_BRIDGED.keys())
for _name in sorted(BRIDGED):
    setattr(BlockingAsyncQueue, _name, _bridge(_name))
