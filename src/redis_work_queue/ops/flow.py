"""Flow control: a queue's rate limit and fair groups, kept in Redis and enforced by the lease.

The limit lives in ``<prefix>:rate`` (see ``lua/include/rate.lua``): every lease and claim of
this library reads it before its first write and hands out only the items its token bucket
allows; a lease refused by it replies with the ms until the caller's turn, which a blocking
lease (and so every worker runner) sleeps (see :mod:`.lease`). A queue object made with
``rate_limit=`` declares its limit before its first lease: the declaration is stored only when
no limit was ever set on the queue, and :func:`set_rate_limit` changes it for the whole fleet.

Groups (``lua/include/group.lua``): a grouped item waits on its group's list, and the lease
script takes from the ring of groups in turn. The group concurrency lives in
``<prefix>:groups:state`` (field ``cap``) and is declared and changed as the rate limit is
(:func:`declare_rates`, :func:`set_group_concurrency`), and so is the rate limit of every
group (field ``rate``, :func:`set_default_group_rate_limit`); :func:`set_group_rate_limit`,
:func:`pause_group` and :func:`resume_group` write the same hash.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .. import scripts
from ..calls import ScriptCall, Steps
from ..flow import (
    RateLimit,
    check_group,
    check_group_concurrency,
    check_rate_limit,
    rate_spec,
)
from ..keyprefix import QueueKeys
from .registry import builds, operation

if TYPE_CHECKING:
    from .queue import QueueOps

#: Where the docs describe flow control.
DOCS = "flow-control.md#rate-limits"
GROUP_DOCS = "flow-control.md#fair-groups"


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
    """Declare the rate limit and group concurrency of ``queues`` made with them, once each.

    A declaration is stored only when none was ever set on the queue (see ``lua/set_rate.lua``
    and ``lua/group_set.lua``); it is part of the lease that follows it.
    """
    for queue in queues:
        if queue.rate_limit is not None and not queue.rate_declared:
            yield _rate_call(queue.keys, "declare", queue.rate_limit)
            queue.rate_declared = True
        if queue.group_concurrency is not None and not queue.cap_declared:
            yield group_set_call(queue.keys, "declare", queue.group_concurrency)
            queue.cap_declared = True
        if queue.group_rate_limit is not None and not queue.group_rate_declared:
            yield group_set_call(queue.keys, "rate_declare", rate_spec(queue.group_rate_limit))
            queue.group_rate_declared = True


@builds("group_set")
def group_set_call(
    keys: QueueKeys, mode: str, value: scripts.Arg, limit: scripts.Arg | None = None
) -> ScriptCall:
    """``lua/group_set.lua``: set the group concurrency or a group rate limit, or (un)pause a group.

    ``mode`` is ``'cap'`` or ``'declare'`` (``value``: the cap, 0 for none), ``'pause'`` or
    ``'resume'`` (``value``: the group), ``'rate'`` (``value``: the group, ``limit``: its
    limit as :func:`~redis_work_queue.flow.rate_spec` makes it, ``''`` for none of its own;
    None sends no limit),
    or ``'rate_all'`` or ``'rate_declare'`` (``value``: the limit of every group, ``'0'`` for
    none).
    """
    if limit is None:
        return ScriptCall.on(keys, "group_set", mode, value)
    return ScriptCall.on(keys, "group_set", mode, value, limit)


@operation(
    methods=("set_group_concurrency",),
    scripts=("group_set",),
    writes=True,
    cli="groups",
    docs=GROUP_DOCS,
)
def set_group_concurrency(queue: QueueOps, limit: int | None) -> Steps[None]:
    """Set the cap on the items of one group in flight for the fleet, or remove it (None)."""
    cap = check_group_concurrency(limit)
    yield group_set_call(queue.group_keys(), "cap", cap or 0)


@operation(
    methods=("pause_group",), scripts=("group_set",), writes=True, cli="groups", docs=GROUP_DOCS
)
def pause_group(queue: QueueOps, group: str) -> Steps[bool]:
    """Pause ``group``: True when it was not paused already."""
    name = check_group(group)
    return bool((yield group_set_call(queue.group_keys(), "pause", name)))


@operation(
    methods=("resume_group",), scripts=("group_set",), writes=True, cli="groups", docs=GROUP_DOCS
)
def resume_group(queue: QueueOps, group: str) -> Steps[bool]:
    """Resume ``group``: True when it was paused."""
    name = check_group(group)
    return bool((yield group_set_call(queue.group_keys(), "resume", name)))


@operation(
    methods=("set_group_rate_limit",),
    scripts=("group_set",),
    writes=True,
    cli="groups",
    docs=GROUP_DOCS,
)
def set_group_rate_limit(queue: QueueOps, group: str, limit: RateLimit | None) -> Steps[bool]:
    """Set ``group``'s own rate limit for the fleet, or remove it (None): True when it changed."""
    name = check_group(group)
    check_rate_limit(limit, "set_group_rate_limit's limit")
    spec = "" if limit is None else rate_spec(limit)
    return bool((yield group_set_call(queue.group_keys(), "rate", name, spec)))


@operation(
    methods=("set_default_group_rate_limit",),
    scripts=("group_set",),
    writes=True,
    cli="groups",
    docs=GROUP_DOCS,
)
def set_default_group_rate_limit(queue: QueueOps, limit: RateLimit | None) -> Steps[None]:
    """Set the rate limit of every group (without one of its own), or remove it (None)."""
    check_rate_limit(limit, "set_default_group_rate_limit's limit")
    yield group_set_call(queue.group_keys(), "rate_all", rate_spec(limit))
