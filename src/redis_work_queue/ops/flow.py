"""Flow control: a queue's rate limit, set in Redis and enforced by the lease script.

The limit lives in ``<prefix>:rate`` (see ``lua/include/rate.lua``): every lease and claim of
this library reads it before its first write and hands out only the items its token bucket
allows; a lease refused by it replies with the ms until the caller's turn, which a blocking
lease (and so every worker runner) sleeps (see :mod:`.lease`). A queue object made with
``rate_limit=`` declares its limit before its first lease: the declaration is stored only when
no limit was ever set on the queue, and :func:`set_rate_limit` changes it for the whole fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import scripts
from ..calls import ScriptCall, Steps
from ..flow import RateLimit, check_rate_limit
from ..keyprefix import QueueKeys
from .registry import builds, operation

if TYPE_CHECKING:
    from .queue import QueueOps

#: Where the docs describe flow control.
DOCS = "flow-control.md#rate-limits"


@builds("set_rate")
def set_rate_call(
    keys: QueueKeys, mode: str, count: scripts.Arg, per_ms: scripts.Arg, burst: int
) -> ScriptCall:
    """``lua/set_rate.lua``: ``'set'`` or ``'declare'`` the queue's limit (count 0: none)."""
    args = (keys.prefix, mode, count, per_ms, burst)
    return ScriptCall(scripts.load("set_rate"), keys.script_keys, args, None, keys.slot_keys)


def _rate_call(keys: QueueKeys, mode: str, limit: RateLimit | None) -> ScriptCall:
    if limit is None:
        return set_rate_call(keys, mode, "0", "0", 0)
    return set_rate_call(keys, mode, repr(limit.count), repr(limit.per_ms), limit.burst)


@operation(
    methods=("set_rate_limit",), scripts=("set_rate",), writes=True, cli="rate-limit", docs=DOCS
)
def set_rate_limit(queue: QueueOps, limit: RateLimit | None) -> Steps[None]:
    """Set the queue's rate limit for every worker, or remove it (None); see the facade."""
    check_rate_limit(limit, "set_rate_limit's limit")
    yield _rate_call(queue.keys, "set", limit)


def declare_rates(queues: Sequence[QueueOps]) -> Steps[None]:
    """Declare the rate limit of each of ``queues`` made with one, once per queue object.

    A declaration is stored only when no limit was ever set on the queue (see
    ``lua/set_rate.lua``); it is part of the lease that follows it.
    """
    for queue in queues:
        if queue.rate_limit is not None and not queue.rate_declared:
            yield _rate_call(queue.keys, "declare", queue.rate_limit)
            queue.rate_declared = True
