"""A blocking lease on one queue with nothing delayed writes nothing while it waits, as the
reference clients' blocking lease writes nothing; a lease over several queues, or on a queue
with a delayed item, registers (it needs the wake-up), and its registration lapses."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from helpers import dump_state, wait_for
from lifecycle_helpers import blocked_clients
from plugins.backends import Backend
from redis_work_queue import Item, KeyPrefix, WorkQueue, lease_from

QUEUE = KeyPrefix("quiet")
OTHER = KeyPrefix("quiet-other")


def _in_thread(call: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["result"] = call()
        except BaseException as err:  # reported by the test
            out["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def test_a_blocked_lease_on_a_queue_with_nothing_delayed_writes_nothing(
    real_backend: Backend, queue: WorkQueue
) -> None:
    admin = real_backend.client()
    admin.flushdb()
    before = dump_state(admin)
    thread, out = _in_thread(lambda: queue.lease(real_backend.client(), 30, timeout=2.5))
    wait_for(lambda: blocked_clients(admin) >= 1, timeout=5, what="the lease to block")
    deadline = time.monotonic() + 2.0  # over more than one wait slice and look
    while time.monotonic() < deadline:
        assert admin.keys("*") == []
        time.sleep(0.05)
    thread.join(5)
    assert "error" not in out, out.get("error")
    assert out["result"] is None
    assert dump_state(admin) == before


def test_it_still_gets_an_item_added_while_it_waits(
    real_backend: Backend, queue: WorkQueue
) -> None:
    admin = real_backend.client()
    thread, out = _in_thread(lambda: queue.lease(real_backend.client(), 30, timeout=5))
    try:
        wait_for(lambda: blocked_clients(admin) >= 1, timeout=5, what="the lease to block")
        added = time.monotonic()
        queue.add_item(admin, Item(b"x", id="x"))
        thread.join(5)
    finally:
        thread.join(5)
    assert out["result"].id() == "x"
    assert time.monotonic() - added < 1.0
    assert queue.complete(admin, out["result"])


@pytest.mark.parametrize("how", ["several queues", "a delayed item"])
def test_a_lease_that_needs_a_wake_up_registers_and_its_registration_lapses(
    real_backend: Backend, how: str
) -> None:
    admin = real_backend.client()
    admin.flushdb()
    queue = WorkQueue(QUEUE)
    if how == "a delayed item":
        queue.add_item(admin, Item(b"later", id="later"), delay=60)

        def call() -> Any:
            return queue.lease(real_backend.client(), 30, timeout=0.5)
    else:

        def call() -> Any:
            return lease_from(real_backend.client(), [queue, WorkQueue(OTHER)], 30, timeout=0.5)

    thread, out = _in_thread(call)
    wait_for(lambda: admin.exists(f"{QUEUE.prefix}:waiting"), timeout=5, what="a registration")
    thread.join(5)
    assert out["result"] is None
    wait_for(
        lambda: not admin.exists(f"{QUEUE.prefix}:waiting", f"{OTHER.prefix}:waiting"),
        timeout=5,
        what="the registration to lapse",
    )
