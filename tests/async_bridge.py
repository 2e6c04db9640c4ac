"""Run the synchronous test cases against AsyncWorkQueue.

``BlockingAsyncQueue`` has the synchronous API of WorkQueue, but every call is made by an
``AsyncWorkQueue`` on a ``redis.asyncio`` twin of the test's client (same server, same reply
flavour), on an event loop in a background thread. The test cases stay as written: the
``queue_kind`` fixture runs each one twice, once per API.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import fakeredis
import redis
import redis.asyncio

from redis_work_queue import AsyncWorkQueue, Item, KeyPrefix, WorkQueue

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

    # Every public operation with a client goes through the asyncio queue.
    def add_item(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("add_item", db, *a, **k)

    def add_unique_item(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("add_unique_item", db, *a, **k)

    def add_items(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("add_items", db, *a, **k)

    def lease(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("lease", db, *a, **k)

    def lease_many(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("lease_many", db, *a, **k)

    def renew(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("renew", db, *a, **k)

    def release(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("release", db, *a, **k)

    def renew_many(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("renew_many", db, *a, **k)

    def give_back(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("give_back", db, *a, **k)

    def complete(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("complete", db, *a, **k)

    def complete_many(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("complete_many", db, *a, **k)

    def light_clean(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("light_clean", db, *a, **k)

    def deep_clean(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("deep_clean", db, *a, **k)

    def dead_letters(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("dead_letters", db, *a, **k)

    def dead_count(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("dead_count", db, *a, **k)

    def requeue_dead(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("requeue_dead", db, *a, **k)

    def purge_dead(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("purge_dead", db, *a, **k)

    def stats(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("stats", db, *a, **k)

    def peek(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("peek", db, *a, **k)

    def pending(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("pending", db, *a, **k)

    def flush(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("flush", db, *a, **k)

    def queue_len(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("queue_len", db, *a, **k)

    def processing(self, db: Any, *a: Any, **k: Any) -> Any:
        return self._call("processing", db, *a, **k)

    @contextlib.contextmanager
    def leased(self, db: Any, *a: Any, **k: Any) -> Iterator[Item | None]:
        manager = self.aio.leased(self._twin(db), *a, **k)
        item = loop().run(manager.__aenter__())
        try:
            yield item
        except BaseException as err:
            if not loop().run(manager.__aexit__(type(err), err, err.__traceback__)):
                raise
        else:
            loop().run(manager.__aexit__(None, None, None))
