"""The lease engine: how a lease, from one queue or several, is made of script calls.

A lease runs in two phases. *Take now*: the lease script (``lua/lease.lua``) hands out what the
queues hold, in priority order; when it has spent its budget (:data:`LEASE_BUDGET`) on ids it
dropped or buried without handing anything out, it replies :data:`CALL_AGAIN` and is called
again. *Then wait*, when a blocking lease found nothing: one queue blocks with BRPOPLPUSH and a
claim (``lua/claim.lua``); several queues (which must share one script call) block on their
wake lists. For that, the lease script that finds nothing registers the caller as a worker
blocked on the queues, and every script that pushes onto a queue with a registered worker also
pushes a wake-up token. A caller blocked on one queue is registered only while the queue holds a
delayed item: any push wakes its BRPOPLPUSH, so a worker waiting on a queue with nothing delayed
writes nothing, as the reference clients' blocking lease writes nothing. A wake-up carries no
item, so a worker that dies while waiting loses nothing. A delayed item that falls due before
the others also wakes a waiting worker (see ``schedule`` in ``lua/include/delay.lua``), which
then waits for the new due time. Each wait is followed by another look. Once items come, the
rest of the count is taken without waiting.

A queue's rate limit (``lua/include/rate.lua``, :mod:`.flow`) may hold items back: the look
then replies :data:`RATE_WAIT` minus the ms until the caller's turn, and a blocking lease sleeps
exactly that long (within its timeout) before it looks again; one that does not block finds
nothing.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import scripts
from ..calls import Ask, Command, ScriptCall, Sleep, Steps
from ..errors import InvalidArgumentError
from ..item import Item
from ..keyprefix import QueueKeys
from ..validation import check_item, decode, new_token, to_ms
from .flow import declare_rates
from .registry import builds, operation

if TYPE_CHECKING:
    from .queue import QueueOps

logger = logging.getLogger("redis_work_queue")

#: The lease script's reply when it spent its budget without handing anything out: call again
#: (``CALL_AGAIN`` in lua/lease.lua).
CALL_AGAIN = -2
#: The lease script's reply to a caller a rate limit refused is this minus the ms until its turn
#: (``RATE_WAIT`` in lua/lease.lua).
RATE_WAIT = -3
#: Ids a lease call may drop or bury before handing control back (and due delayed items it
#: promotes per queue); passed to the lease script as its budget.
LEASE_BUDGET = 100
#: Items leased per script call by lease_many.
LEASE_CHUNK = 500
#: Redis checks the timeouts of blocked clients on its own clock tick (100 ms at the default
#: hz 10), so a waiting worker wakes for a delayed item by blocking until shortly before it is
#: due and then sleeping locally for the rest: it gets the item within a few ms of its due time.
TICK_SECS = 0.11
#: The longest single blocking wait of a worker, whatever the timeout asked. A worker of
#: another implementation blocked on the same main queue may take the wake-up meant for ours
#: (see ``schedule`` in ``lua/include/delay.lua``); ours then still looks again within this
#: time. A worker's registration in ``P:waiting`` lapses one second after its wait ends, so
#: a worker killed while waiting leaves no trace after two.
WAIT_SLICE_SECS = 1.0
#: How long a blocked worker's registration in ``P:waiting`` outlives its wait.
REGISTRATION_GRACE_MS = 1000
#: The shortest wait: a blocking lease with less time left than this does not wait.
MIN_WAIT_SECS = 0.001
#: How long a worker leasing from queues in several cluster slots waits on its first queue
#: before it looks at the others again.
FALLBACK_SLICE = 0.5


@dataclass(frozen=True)
class LeaseRequest:
    """What one lease asks for, checked once (see ``WorkQueue.lease``).

    Attributes:
        count: The most items to lease.
        lease_ms: The length of each lease, in ms.
        at_most_once: Hand each item out at most once (it is removed as it is handed out)
            instead of leasing it.
        block: Wait for an item when there is none.
        timeout_ms: How long a blocking lease waits in all, in ms; 0 for no limit.
        max_block: The longest single blocking command, in seconds (it must fit in the
            connection's socket timeout).
    """

    count: int
    lease_ms: int
    at_most_once: bool = False
    block: bool = False
    timeout_ms: int = 0
    max_block: float = 60.0

    @classmethod
    def of(
        cls,
        lease_secs: float,
        *,
        block: bool = False,
        timeout: float = 0,
        at_most_once: bool = False,
        max_block: float = 60.0,
        count: int = 1,
    ) -> LeaseRequest:
        """Check a lease's arguments, as the public methods take them, and make the request.

        Raises:
            InvalidArgumentError: ``count`` is not a positive int, ``lease_secs`` not a positive
                number of seconds, or (when blocking) ``timeout`` not zero or positive. A
                positive ``timeout`` shorter than one millisecond waits one millisecond.
        """
        if type(count) is not int or count < 1:
            raise InvalidArgumentError(f"count must be a positive int, got {count!r}")
        lease_ms = to_ms(lease_secs, "lease_secs")
        timeout_ms = to_ms(timeout, "timeout", minimum=0) if block else 0
        if block and timeout_ms == 0 and timeout > 0:
            # Below half a millisecond: never 0 ms, which Redis and this engine read as
            # "no limit".
            timeout_ms = 1
        return cls(count, lease_ms, bool(at_most_once), bool(block), timeout_ms, max_block)

    def blocking_at_most(self, max_block: float) -> LeaseRequest:
        """This request, its single blocking command at most ``max_block`` seconds long."""
        return LeaseRequest(
            self.count, self.lease_ms, self.at_most_once, self.block, self.timeout_ms, max_block
        )

    @property
    def chunk(self) -> int:
        """How many items the first look asks for."""
        return min(self.count, LEASE_CHUNK)


def lease_request(
    lease_secs: float, block: bool, timeout: float, at_most_once: bool = False, count: int = 1
) -> Steps[LeaseRequest]:
    """Check a lease's arguments and make its request (see :meth:`LeaseRequest.of`).

    A blocking request asks the driver how long its one blocking command may be.
    """
    request = LeaseRequest.of(
        lease_secs, block=block, timeout=timeout, at_most_once=at_most_once, count=count
    )
    if block:
        request = request.blocking_at_most((yield Ask("max_block")))
    return request


@builds("lease")
def lease_call(
    plan: LeasePlan,
    lease_ms: int,
    token: str,
    once: str,
    count: int,
    budget: int,
    register_ms: int,
    waiter: str,
    registered: str,
    max_deliveries: Sequence[int],
    finish_queue: int | None = None,
    finish_id: str | None = None,
) -> ScriptCall:
    """``lua/lease.lua``: lease up to ``count`` items from the plan's queues, in their order.

    ``max_deliveries`` holds one limit per queue; ``finish_queue`` (the index from 1) and
    ``finish_id`` name an item to complete first, in the same call.
    """
    args: tuple[scripts.Arg, ...] = (
        *plan.script_args,
        lease_ms,
        token,
        once,
        count,
        budget,
        register_ms,
        waiter,
        registered,
        *max_deliveries,
    )
    if finish_queue is not None and finish_id is not None:
        args += (finish_queue, finish_id)
    return ScriptCall(scripts.load("lease"), plan.script_keys, args, None, plan.slot_keys)


@builds("claim")
def claim_call(
    keys: QueueKeys,
    lease_ms: int,
    token: str,
    once: str,
    moved: bytes,
    waiter: str,
    max_deliveries: int,
) -> ScriptCall:
    """``lua/claim.lua``: lease the id ``moved`` that a blocking pop took off the main queue."""
    return ScriptCall.on(keys, "claim", lease_ms, token, once, moved, waiter, max_deliveries)


class LeasePlan:
    """The fixed parts of the lease calls over one list of queues (built once per queue)."""

    __slots__ = ("limits", "queues", "script_args", "script_keys", "slot_keys")

    def __init__(self, queues: Sequence[QueueOps]) -> None:
        self.queues = tuple(queues)
        #: The queues' part of the lease script's KEYS and ARGV, and the keys named from them.
        self.script_keys = tuple(k for q in queues for k in q.script_keys)
        self.script_args = tuple(a for q in queues for a in q.script_args)
        self.slot_keys = tuple(k for q in queues for k in q.slot_keys)
        self.limits = tuple(q.max_deliveries for q in queues)

    def lease(
        self,
        request: LeaseRequest,
        token: str,
        want: int,
        register_ms: int = 0,
        waiter: str = "",
        registered: bool = False,
        finish: tuple[int, str] | None = None,
    ) -> ScriptCall:
        """The lease script call (see lua/lease.lua) for up to ``want`` items.

        Args:
            request: The lease.
            token: The token of the leases this call gives.
            want: How many items to take.
            register_ms: When nothing is found, register the caller as a worker blocked on the
                queues for this long (0: it will not block).
            waiter: The caller's id as a blocked worker.
            registered: The caller is registered already (it leaves once it has items, or when
                ``register_ms`` is 0).
            finish: (queue index, item id): complete that item first, in the same call (the
                reply is then the pair (1 when this call completed it, the lease's reply)).
                Only when the call will not block (``register_ms`` 0).
        """
        finish_queue, finish_id = (None, None) if finish is None else (finish[0] + 1, finish[1])
        return lease_call(
            self,
            request.lease_ms,
            token,
            "1" if request.at_most_once else "0",
            want,
            LEASE_BUDGET,
            register_ms,
            waiter,
            "1" if registered else "0",
            self.limits,
            finish_queue,
            finish_id,
        )

    def claim(self, request: LeaseRequest, token: str, moved: bytes, waiter: str) -> ScriptCall:
        """The claim script call (see lua/claim.lua) of an id a blocking pop moved; one queue."""
        once = "1" if request.at_most_once else "0"
        keys = self.queues[0].keys
        return claim_call(keys, request.lease_ms, token, once, moved, waiter, self.limits[0])


@dataclass(frozen=True)
class _Round:
    """One look and wait of a blocking lease: the time left, and the longest this wait blocks."""

    left: float
    slice_secs: float

    @property
    def register_ms(self) -> int:
        """How long the look registers the caller as a blocked worker (0: it will not wait)."""
        if self.left <= MIN_WAIT_SECS:
            return 0
        return round(self.slice_secs * 1000) + REGISTRATION_GRACE_MS


class _Waiter:
    """A blocking lease between its looks: its id as a blocked worker, and its deadline."""

    __slots__ = ("deadline", "id", "max_block", "registered")

    def __init__(self, request: LeaseRequest) -> None:
        self.id = new_token()
        timeout = request.timeout_ms / 1000
        self.deadline = time.monotonic() + timeout if timeout else math.inf
        self.max_block = request.max_block
        #: Whether a look registered it (it then looks again as a registered worker).
        self.registered = False

    def next_round(self) -> _Round:
        """The time left now, and the longest the next wait may block."""
        left = self.deadline - time.monotonic()
        return _Round(left, max(min(left, self.max_block, WAIT_SLICE_SECS), MIN_WAIT_SECS))


def lease_items(queues: Sequence[QueueOps], request: LeaseRequest) -> Steps[list[tuple[int, Item]]]:
    """Lease up to ``request.count`` items from ``queues`` in priority order.

    Returns:
        (queue index, item) pairs, in the order handed out; empty when nothing came in time.
    """
    plan = plan_of(queues)
    yield from declare_rates(plan.queues)
    waiter = _Waiter(request) if request.block else None
    while True:
        token = new_token()
        this_round = waiter.next_round() if waiter is not None else None
        look = yield from _take_now(plan, request, token, waiter, this_round)
        if isinstance(look, list):
            got = _leased(look, token, request.at_most_once)
            more = len(got) == request.chunk
        else:
            if waiter is None or this_round is None or this_round.left <= MIN_WAIT_SECS:
                return []
            if look <= RATE_WAIT:  # the caller's turn comes in RATE_WAIT - look ms
                yield Sleep(min((RATE_WAIT - look) / 1000, this_round.left))
                continue
            claimed = yield from _wait(plan, request, token, waiter, this_round, look)
            if claimed is None:
                continue
            # What woke us may have brought more: take it too, without waiting.
            got, more = _leased(claimed, token, request.at_most_once), True
        return (yield from _take_rest(plan, request, got, more))


def complete_and_lease(
    queues: Sequence[QueueOps], index: int, item_id: str, request: LeaseRequest
) -> Steps[tuple[bool, list[tuple[int, Item]]]]:
    """Complete queue ``index``'s item ``item_id``, then lease without blocking, in one call.

    ``request`` is a lease that does not block (the script does not register a waiter with a
    completion).

    The script completes the item before it leases anything (the completion is not undone when
    the lease part fails). A lease that spends its budget on ids it drops or buries goes on with
    plain lease calls.

    Returns:
        Whether this call completed the item, and the (queue index, item) pairs leased.
    """
    plan = plan_of(queues)
    yield from declare_rates(plan.queues)
    token = new_token()
    done, reply = yield plan.lease(request, token, request.chunk, finish=(index, item_id))
    if reply == CALL_AGAIN:
        return bool(done), (yield from lease_items(queues, request))
    if not isinstance(reply, list):
        return bool(done), []
    got = _leased(reply, token, request.at_most_once)
    more = len(got) == request.chunk
    return bool(done), (yield from _take_rest(plan, request, got, more))


def _take_now(
    plan: LeasePlan,
    request: LeaseRequest,
    token: str,
    waiter: _Waiter | None,
    this_round: _Round | None,
) -> Steps[list[Any] | int]:
    """Phase one: look at the queues, registering as a blocked worker when a wait may follow.

    Returns:
        The reply that handed items out; or, when there are none, the ms until the next delayed
        item is due (-1 when none is), or RATE_WAIT minus the ms until a rate limit's turn.
    """
    register_ms = this_round.register_ms if this_round is not None else 0
    while True:
        if waiter is None:
            reply = yield plan.lease(request, token, request.chunk)
        else:
            reply = yield plan.lease(
                request, token, request.chunk, register_ms, waiter.id, waiter.registered
            )
        if reply != CALL_AGAIN:
            break
    if waiter is not None and register_ms > 0 and not isinstance(reply, list):
        # A caller a rate limit refused is not registered (a registered one has left); the
        # script registers a caller of one queue only when a delayed item is there (the reply
        # is then its due time), a caller of several queues always.
        waiter.registered = int(reply) >= 0 or (len(plan.queues) > 1 and reply > RATE_WAIT)
    return reply if isinstance(reply, list) else int(reply)


def _wait(
    plan: LeasePlan,
    request: LeaseRequest,
    token: str,
    waiter: _Waiter,
    this_round: _Round,
    due_ms: int,
) -> Steps[list[Any] | None]:
    """Phase two: wait, at most this round's slice, for something to lease.

    ``due_ms`` is the look's reply: the ms until the next delayed item is due, or -1.

    Returns:
        The claim's reply when one queue's blocking pop brought an item; None to look again.
    """
    slice_secs = this_round.slice_secs
    if due_ms >= 0:
        # A delayed item falls due: block until one tick before, then sleep to it.
        due = due_ms / 1000 + 0.001
        if due <= TICK_SECS:
            yield Sleep(min(due, this_round.left))
            return None
        slice_secs = min(slice_secs, due - TICK_SECS)
    wait = round(max(slice_secs, MIN_WAIT_SECS), 3)
    if len(plan.queues) > 1:
        yield Command(("BLPOP", *(q.keys.wake for q in plan.queues), wait))
        return None
    keys = plan.queues[0].keys
    moved = yield Command(("BRPOPLPUSH", keys.queue, keys.processing, wait))
    if moved is None:
        return None
    reply = yield plan.claim(request, token, moved, waiter.id)
    return reply if isinstance(reply, list) else None


def _take_rest(
    plan: LeasePlan, request: LeaseRequest, got: list[tuple[int, Item]], more: bool
) -> Steps[list[tuple[int, Item]]]:
    """Take what is left of the count, in chunks, without waiting (while there may be ``more``)."""
    while more and len(got) < request.count:
        want = min(request.count - len(got), LEASE_CHUNK)
        token = new_token()
        reply = yield plan.lease(request, token, want)
        if reply == CALL_AGAIN:
            continue
        if not isinstance(reply, list):
            break
        taken = _leased(reply, token, request.at_most_once)
        got += taken
        more = len(taken) == want
    return got


def _leased(reply: list[Any], token: str, at_most_once: bool) -> list[tuple[int, Item]]:
    """The (queue index, item) pairs of a lease or claim reply.

    The reply is flat: queue index (from 1), id, data and delivery count of each item in turn,
    then the ms the items were leased at.
    """
    lease_token = None if at_most_once else f"{token}@{reply[-1]}"
    handed_out = Item.handed_out
    return [
        (reply[k] - 1, handed_out(decode(reply[k + 1]), reply[k + 2], reply[k + 3], lease_token))
        for k in range(0, len(reply) - 1, 4)
    ]


@operation(
    functions=(("lease_from", "alease_from"),),
    scripts=("lease", "claim", "set_rate"),
    commands=("BRPOPLPUSH", "BLPOP"),
    writes=True,
    docs="queue.md#the-api",
)
def lease_from(
    queues: Sequence[QueueOps],
    lease_secs: float,
    block: bool,
    timeout: float,
    at_most_once: bool,
) -> Steps[tuple[int, Item] | None]:
    """Lease one item from the first of ``queues`` that has one; see ``lease_from``.

    The queues are looked at in one script call when they can be named together (always on one
    server; on Redis Cluster when they share a slot); otherwise each is tried in turn, and a
    blocked caller waits on the first for at most :data:`FALLBACK_SLICE` at a time.

    Returns:
        The index in ``queues`` of the item's queue, and the item; None when nothing came.
    """
    if not queues:
        raise InvalidArgumentError("lease_from needs at least one queue")
    request = yield from lease_request(lease_secs, block, timeout, at_most_once)
    if _sharded(queues):
        sharded: tuple[int, Item] | None = yield from _shards().lease_from(queues, request)
        return sharded
    if len(queues) == 1 or (yield Ask("together", plan_of(queues).slot_keys)):
        leased = yield from lease_items(queues, request)
        return leased[0] if leased else None
    logger.debug("leasing from %d queues in turn: they are in different slots", len(queues))
    deadline = time.monotonic() + timeout if timeout else math.inf
    look = LeaseRequest.of(lease_secs, at_most_once=at_most_once)
    while True:
        for index, queue in enumerate(queues):
            found = yield from lease_items([queue], look)
            if found:
                return index, found[0][1]
        remaining = deadline - time.monotonic()
        if not block or remaining <= 0:
            return None
        wait = LeaseRequest.of(
            lease_secs,
            block=True,
            timeout=min(remaining, FALLBACK_SLICE),
            at_most_once=at_most_once,
            max_block=request.max_block,
        )
        found = yield from lease_items(queues[:1], wait)
        if found:
            return 0, found[0][1]


@operation(
    functions=(("complete_and_lease_from", "acomplete_and_lease_from"),),
    scripts=("lease", "complete", "set_rate"),
    writes=True,
    docs="queue.md#the-api",
)
def complete_and_lease_from(
    queue: QueueOps, item: Item, queues: Sequence[QueueOps], lease_secs: float
) -> Steps[tuple[bool, tuple[int, Item] | None]]:
    """Complete ``item`` of ``queue``, then lease from ``queues``; see ``complete_and_lease_from``.

    One script call (``lua/lease.lua`` with a completion) when ``queue`` is one of ``queues``,
    they can be leased from together and ``queue`` waits for no replicas; otherwise the
    completion, then a lease that does not block, as two calls.

    Returns:
        Whether this call completed the item, and the (index in ``queues``, item) leased.
    """
    if not queues:
        raise InvalidArgumentError("complete_and_lease_from needs at least one queue to lease from")
    item = check_item(item)
    if _sharded([queue, *queues]):
        outcome: tuple[
            bool, tuple[int, Item] | None
        ] = yield from _shards().complete_and_lease_from(queue, item, queues, lease_secs)
        return outcome
    request = LeaseRequest.of(lease_secs)
    prefix = queue.keys.prefix
    index = next((i for i, q in enumerate(queues) if q.keys.prefix == prefix), None)
    together = len(queues) == 1 or (yield Ask("together", plan_of(queues).slot_keys))
    if index is None or not together or queue.replicas:
        done = yield from queue.complete_one(item)
        leased = yield from lease_from(queues, lease_secs, False, 0, False)
        return done, leased
    done, rows = yield from complete_and_lease(queues, index, item.id(), request)
    return done, rows[0] if rows else None


def plan_of(queues: Sequence[QueueOps]) -> LeasePlan:
    """The lease plan of ``queues``: a queue's own for one queue, else a new one."""
    return queues[0].plan if len(queues) == 1 else LeasePlan(queues)


@functools.cache
def _shards() -> Any:
    """The sharded queues' module (which imports this one); looked up once."""
    from . import sharded  # noqa: PLC0415 (a cycle: it builds on this module)

    return sharded


def _sharded(queues: Sequence[QueueOps]) -> bool:
    """Whether one of ``queues`` is spread over shards (see :mod:`.sharded`)."""
    return any(getattr(queue, "shard_ops", None) is not None for queue in queues)
