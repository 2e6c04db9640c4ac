"""The lease engine: the request object, the interface of lua/lease.lua (its budget and its
call-again reply), and the calls a lease makes in its two phases (look now, then wait)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import redis

from redis_work_queue import InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.calls import Command, ScriptCall, Sleep
from redis_work_queue.keyprefix import QueueKeys
from redis_work_queue.loader import lua_dir
from redis_work_queue.ops import QueueOps
from redis_work_queue.ops.lease import (
    CALL_AGAIN,
    LEASE_BUDGET,
    LEASE_CHUNK,
    LeaseRequest,
    lease_items,
)
from redis_work_queue.transport import run

PREFIX = KeyPrefix("engine")
KEYS = QueueKeys(PREFIX)
#: Where the lease script's own arguments start: after the queue's key prefix.
ARG = 1


def _lua(name: str) -> str:
    return (lua_dir() / f"{name}.lua").read_text("utf-8")


def test_call_again_is_the_same_number_on_both_sides() -> None:
    found = re.findall(r"^local CALL_AGAIN = (-?\d+)$", _lua("lease"), re.MULTILINE)
    assert found == [str(CALL_AGAIN)]
    assert "reply = CALL_AGAIN" in _lua("lease")
    assert "return -2" not in _lua("lease")


def test_the_budget_is_an_argument_of_the_lease_script() -> None:
    assert re.search(r"BUDGET = \d", _lua("lease")) is None
    call = QueueOps(KEYS).plan.lease(LeaseRequest(1, 1000), "t", 1)
    assert call.args[ARG + 4] == LEASE_BUDGET


def test_the_lease_script_spends_the_budget_it_is_given(db: redis.Redis) -> None:
    WorkQueue(PREFIX).add_item(db, Item(b"real", id="real"))
    db.rpush(KEYS.queue, *[f"gone-{i}" for i in range(5)])  # taken before the real one

    def look(budget: int) -> Any:
        call = QueueOps(KEYS).plan.lease(LeaseRequest(1, 30_000), "t", 1)
        args = list(call.args)
        args[ARG + 4] = budget
        return (yield ScriptCall(call.script, call.keys, tuple(args), None, call.slot_keys))

    assert run(db, look(3)) == CALL_AGAIN  # three gone ids dropped, nothing handed out
    assert db.llen(KEYS.queue) == 3
    index, item_id, data, deliveries, _at = run(db, look(3))  # two more dropped, then the item
    assert (index, item_id, data, deliveries) == (1, b"real", b"real", 1)
    assert run(db, look(3)) == -1  # nothing left, nothing delayed


# The request --------------------------------------------------------------------------------


def test_a_request_is_checked_once_when_made() -> None:
    request = LeaseRequest.of(1.5, block=True, timeout=2, count=3, max_block=5.0)
    assert request == LeaseRequest(3, 1500, False, True, 2000, 5.0)
    assert request.chunk == 3
    assert LeaseRequest.of(1, count=10_000).chunk == LEASE_CHUNK
    with pytest.raises(InvalidArgumentError, match="count must be a positive int"):
        LeaseRequest.of(1, count=0)
    with pytest.raises(InvalidArgumentError, match="lease_secs must be positive"):
        LeaseRequest.of(0)
    with pytest.raises(InvalidArgumentError, match="timeout must be zero or positive"):
        LeaseRequest.of(1, block=True, timeout=-1)
    # A lease that does not block never waits: its timeout is not looked at.
    assert LeaseRequest.of(1, block=False, timeout=-1).timeout_ms == 0


def test_the_request_is_frozen() -> None:
    request = LeaseRequest(1, 1000)
    with pytest.raises(AttributeError):
        request.count = 2  # type: ignore[misc]


# The two phases, call by call (no server: each reply is given by the test) ------------------


def _lease_args(call: object) -> dict[str, Any]:
    assert isinstance(call, ScriptCall)
    assert call.script.name == "lease"
    names = ["lease_ms", "token", "once", "want", "budget", "register_ms", "waiter", "registered"]
    return dict(zip(names, call.args[ARG : ARG + len(names)], strict=True))


def test_a_look_that_is_asked_to_call_again_does_so_before_waiting() -> None:
    ops = QueueOps(KEYS)
    steps = lease_items([ops], LeaseRequest.of(30, block=True, timeout=5))
    first = _lease_args(next(steps))
    assert first["register_ms"] > 0
    assert first["registered"] == "0"
    again = _lease_args(steps.send(CALL_AGAIN))
    # The script registered nobody when it asked to be called again: the caller is not
    # registered yet, and looks with the same token.
    assert again["registered"] == "0"
    assert again["token"] == first["token"]
    blocked = steps.send(-1)  # nothing: now it waits on the queue
    assert isinstance(blocked, Command)
    assert blocked.args[:3] == ("BRPOPLPUSH", KEYS.queue, KEYS.processing)
    look = _lease_args(steps.send(None))  # the wait ended empty-handed: it looks again
    # Nothing delayed on its one queue: the script registered nobody (a push wakes the wait).
    assert look["registered"] == "0"
    assert look["waiter"] == first["waiter"]
    steps.send(5000)  # a delayed item now, due in 5 s: this look registered it
    look = _lease_args(steps.send(None))
    assert look["registered"] == "1"


def test_a_delayed_item_due_within_a_tick_is_slept_for() -> None:
    steps = lease_items([QueueOps(KEYS)], LeaseRequest.of(30, block=True, timeout=5))
    next(steps)
    sleep = steps.send(50)  # due in 50 ms: sleep to it rather than block
    assert isinstance(sleep, Sleep)
    assert 0.05 <= sleep.seconds <= 0.052
    assert _lease_args(steps.send(None))["registered"] == "1"


def test_several_queues_wait_on_their_wake_lists() -> None:
    other = QueueKeys(KeyPrefix("engine-low"))
    steps = lease_items([QueueOps(KEYS), QueueOps(other)], LeaseRequest.of(30, block=True))
    call = next(steps)
    assert isinstance(call, ScriptCall)
    assert call.keys == (KEYS.queue, other.queue)
    blocked = steps.send(-1)
    assert isinstance(blocked, Command)
    assert blocked.args[:3] == ("BLPOP", KEYS.wake, other.wake)


def test_a_claim_after_a_wake_up_takes_the_rest_without_waiting() -> None:
    request = LeaseRequest.of(30, block=True, count=3)
    steps = lease_items([QueueOps(KEYS)], request)
    token = _lease_args(next(steps))["token"]
    steps.send(-1)  # BRPOPLPUSH
    claim = steps.send(b"a")
    assert isinstance(claim, ScriptCall)
    assert claim.script.name == "claim"
    rest = _lease_args(steps.send([1, b"a", b"data", 1, 7]))
    assert (rest["want"], rest["register_ms"], rest["registered"]) == (2, 0, "0")
    with pytest.raises(StopIteration) as done:
        steps.send([1, b"b", b"more", 1, 8])
    leased = done.value.value
    assert [(i, item.id(), item.lease_token) for i, item in leased] == [
        (0, "a", f"{token}@7"),
        (0, "b", f"{rest['token']}@8"),
    ]


def test_a_lease_that_does_not_block_never_registers() -> None:
    steps = lease_items([QueueOps(KEYS)], LeaseRequest.of(30, count=2))
    first = _lease_args(next(steps))
    assert (first["register_ms"], first["waiter"], first["registered"]) == (0, "", "0")
    assert _lease_args(steps.send(CALL_AGAIN))["token"] == first["token"]
    with pytest.raises(StopIteration) as done:
        steps.send(1234)  # nothing now (an item is due later): no wait
    assert done.value.value == []
