"""The worker runner and job control: an item cancelled while its handler runs is stopped as a
timed-out one is (its asyncio task cancelled, its worker process killed and replaced, its thread
abandoned), nothing is written for it and it is never handed out again; the slot goes on. On the
thread, process and asyncio runners."""

from __future__ import annotations

import pytest

from redis_work_queue import Cancelled, KeyPrefix, WorkQueue
from servers import Proc
from test_runner import KINDS, TAG, P, add, done, running


def started(db: object) -> list[str]:
    return [v.decode() for v in db.lrange(f"{TAG}:started", 0, -1)]  # type: ignore[attr-defined]


@pytest.mark.parametrize("kind", KINDS)
def test_a_cancelled_running_item_is_stopped_and_never_handed_out_again(
    server: Proc, kind: str
) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix(P))
    add(db, server.url, ["stuck"], hang=True)
    try:
        with running(kind, server.url, lease_secs=1.5) as run:
            run.until(lambda: started(db) == ["stuck"], "the start")
            assert queue.cancel(db, "stuck") == Cancelled.SIGNALLED
            # The next renewal (every half second) reports it; the slot takes the next item.
            add(db, server.url, ["after"])
            run.until(lambda: done(db) == ["after"], "the next item")
            stats = run.stop()
    finally:
        db.set(f"{TAG}:release", 1)  # lets an abandoned thread end
    assert started(db) == ["stuck", "after"]
    assert done(db) == ["after"]
    assert stats.cancelled == 1 and stats.completed == 1 and stats.failed == 0
    assert queue.dead_count(db) == 0 and queue.queue_len(db) == 0
    assert queue.state(db, "stuck").state == "gone"
    assert queue.counts(db).cancelled == 1
