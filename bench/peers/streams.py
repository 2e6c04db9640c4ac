"""Redis Streams with a consumer group, as a work queue written by hand: XADD to add,
XREADGROUP (COUNT 1 or 100, non-blocking) to lease, XACK to complete.

The entries stay in the stream after XACK, as with a plain consumer group (trimming is the
application's business); the pending entries list is the "processing list".
"""

from __future__ import annotations

from typing import Any

import redis

from workloads import DATA, FILL_BATCH, PREFIX, BenchError

STREAM = f"{PREFIX}:stream"
GROUP = "workers"
CONSUMER = "bench"


class StreamQueue:
    """A stream and one consumer group."""

    impl = "streams"

    def __init__(self, db: redis.Redis) -> None:
        self._db = db
        self.reset()

    def reset(self) -> None:
        self._db.xgroup_create(STREAM, GROUP, id="0", mkstream=True)

    def new_item(self) -> dict[str, bytes]:
        return {"d": DATA}

    def add(self, item: dict[str, bytes]) -> None:
        self._db.xadd(STREAM, item)

    def add_each(self, items: list[Any]) -> None:
        xadd = self._db.xadd
        for item in items:
            xadd(STREAM, item)

    def add_many(self, items: list[Any]) -> None:
        """XADD takes one entry: a pipeline of them, one round trip."""
        pipe = self._db.pipeline(transaction=False)
        for item in items:
            pipe.xadd(STREAM, item)
        pipe.execute()

    def fill(self, n: int, data: bytes = DATA) -> None:
        for start in range(0, n, FILL_BATCH):
            pipe = self._db.pipeline(transaction=False)
            for _ in range(min(FILL_BATCH, n - start)):
                pipe.xadd(STREAM, {"d": data})
            pipe.execute()

    def _read(self, count: int) -> list[Any]:
        reply = self._db.xreadgroup(GROUP, CONSUMER, {STREAM: ">"}, count=count)
        if not reply:
            return []
        entries: list[Any] = reply[0][1]
        return entries

    def lease(self, secs: float) -> Any | None:
        del secs  # a pending entry has no lease: XCLAIM/XAUTOCLAIM take it over by idle time
        entries = self._read(1)
        return entries[0] if entries else None

    def complete(self, item: Any) -> bool:
        return bool(self._db.xack(STREAM, GROUP, item[0]))

    def lease_many(self, n: int, secs: float) -> list[Any]:
        del secs
        return self._read(n)

    def complete_many(self, items: list[Any]) -> None:
        self._db.xack(STREAM, GROUP, *(entry_id for entry_id, _ in items))

    def run_worker(self, n: int) -> None:
        """The loop a Streams worker runs: XREADGROUP COUNT 1, the (no-op) handler, XACK."""
        read, ack = self._db.xreadgroup, self._db.xack
        for _ in range(n):
            reply = read(GROUP, CONSUMER, {STREAM: ">"}, count=1)
            if not reply:
                raise BenchError("the stream ran dry")
            ack(STREAM, GROUP, reply[0][1][0][0])

    def queue_len(self) -> int:
        """Entries not yet delivered to the group (its lag)."""
        for group in self._db.xinfo_groups(STREAM):
            if group["name"] in (GROUP, GROUP.encode()):
                return int(group["lag"])
        raise BenchError("the consumer group is gone")

    def processing(self) -> int:
        return int(self._db.xpending(STREAM, GROUP)["pending"])


def make(db: redis.Redis) -> StreamQueue:
    return StreamQueue(db)
