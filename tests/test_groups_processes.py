"""The group concurrency across worker processes: a monitor reads, in one script call at a
time, how many items of each group hold a live lease, and never sees more than the cap, while
workers lease and complete, one is SIGKILLed holding items, its leases run out and the light
clean requeues them; at the end every item is done once and no group counts an item in flight.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import groups_workers
from helpers import keys_left, wait_for
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue

CTX = multiprocessing.get_context("spawn")
QUEUE = KeyPrefix("gp")
KEYS = WorkQueue(QUEUE).keys
CAP = 2
DONE = "test:gp:done"

pytestmark = pytest.mark.slow

#: Per group, how many items hold a live lease now (one atomic look at the processing list; the
#: group of an item in flight is marked with a leading byte 0xFF in P:grouped).
LIVE = """
local counts = {}
for _, id in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  if redis.call('EXISTS', ARGV[1] .. id) == 1 then
    local g = redis.call('HGET', KEYS[2], id)
    if g and string.byte(g, 1) == 255 then
      g = string.sub(g, 2)
    end
    if g then
      counts[g] = (counts[g] or 0) + 1
    end
  end
end
local out = {}
for g, n in pairs(counts) do
  out[#out + 1] = g
  out[#out + 1] = n
end
return out
"""


@contextmanager
def holding_workers(count: int, *args: Any) -> Iterator[list[Any]]:
    """``count`` spawned ``holding_worker`` processes; any still alive at the end is killed."""
    started = [
        CTX.Process(target=groups_workers.holding_worker, args=args, daemon=True)
        for _ in range(count)
    ]
    for process in started:
        process.start()
    try:
        yield started
    finally:
        for process in (p for p in started if p.is_alive()):
            process.kill()
            process.join(timeout=10)


def test_the_cap_holds_across_processes_and_a_killed_worker(real_backend: Backend) -> None:
    db = real_backend.client()
    url = real_backend.url
    queue = WorkQueue(QUEUE, group_concurrency=CAP)
    groups = ["A", "B", "C"]
    for group in groups:
        assert all(
            queue.add_items(db, [Item(b"d", id=f"{group}{k}") for k in range(12)], group=group)
        )
    live = db.register_script(LIVE)
    worst: Counter[str] = Counter()
    stop = threading.Event()

    def monitor() -> None:
        while not stop.is_set():
            reply = live(keys=[KEYS.processing, KEYS.grouped], args=[KEYS.lease_prefix])
            for k in range(0, len(reply), 2):
                name = reply[k].decode()
                worst[name] = max(worst[name], int(reply[k + 1]))
            time.sleep(0.002)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    try:
        with holding_workers(6, url, QUEUE.prefix, CAP, 0.05, DONE) as started:
            # Kill one worker while it holds an item (its lease is a second long).
            victim = started[0]
            wait_for(lambda: db.llen(KEYS.processing) >= 3, timeout=30, what="items leased")
            os.kill(victim.pid, signal.SIGKILL)
            victim.join(timeout=10)
            # Its leases run out; the light clean requeues them onto their groups.
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and db.llen(DONE) < 36:
                queue.light_clean(db)
                time.sleep(0.2)
            for process in started[1:]:
                process.join(timeout=30)
    finally:
        stop.set()
        watcher.join(timeout=10)
    done = [bytes(i).decode() for i in db.lrange(DONE, 0, -1)]
    missing = {f"{g}{k}" for g in groups for k in range(12)} - set(done)
    # An item the killed worker held is done by another once the clean requeued it, unless the
    # victim completed it just before the kill and died before recording it: then it is the
    # last id the victim noted as completing, and the queue no longer knows it.
    completing = f"{DONE}:completing:{victim.pid}"
    victims_last = [bytes(i).decode() for i in db.lrange(completing, -1, -1)]
    assert missing <= set(victims_last), (missing, victims_last)
    states = {id: queue.state(db, id).state for id in missing}
    assert all(state == "gone" for state in states.values()), states
    assert max(worst.values()) <= CAP, worst
    assert set(worst) == set(groups)
    assert all(
        s.in_flight == 0 and s.ready == 0 for s in queue.stats(db, groups=groups).groups.values()
    )
    db.delete(DONE, *(f"{DONE}:completing:{p.pid}" for p in started))
    # The cap stays; the blocked workers' registrations lapse with them.
    state = KEYS.groups_state.encode()
    wait_for(lambda: keys_left(db) == [state], timeout=15, what="registrations to lapse")
    assert db.hkeys(KEYS.groups_state) == [b"cap"]
