"""The plain layout, as the memory baseline: ``SET <prefix>:item:<id> <data>`` plus
``LPUSH <prefix>:queue <id>`` per item, ids as this library makes them (UUIDv7, 32 hex
characters). Not a queue: it offers the fill and the count only."""

from __future__ import annotations

from typing import Any

import redis
from uuid6 import uuid7

from workloads import DATA, FILL_BATCH, PREFIX


class PlainLayout:
    """SET + LPUSH per item, through pipelines."""

    impl = "plain"

    def __init__(self, db: redis.Redis) -> None:
        self._db = db
        self._queue = f"{PREFIX}:queue"

    def new_item(self) -> tuple[str, bytes]:
        return uuid7().hex, DATA

    def add_each(self, items: list[Any]) -> None:
        for item_id, data in items:
            self._db.set(f"{PREFIX}:item:{item_id}", data)
            self._db.lpush(self._queue, item_id)

    def fill(self, n: int, data: bytes = DATA) -> None:
        for start in range(0, n, FILL_BATCH):
            pipe = self._db.pipeline(transaction=False)
            for _ in range(min(FILL_BATCH, n - start)):
                item_id = uuid7().hex
                pipe.set(f"{PREFIX}:item:{item_id}", data)
                pipe.lpush(self._queue, item_id)
            pipe.execute()

    def reset(self) -> None:
        pass

    def queue_len(self) -> int:
        return int(self._db.llen(self._queue))


def make(db: redis.Redis) -> PlainLayout:
    return PlainLayout(db)
