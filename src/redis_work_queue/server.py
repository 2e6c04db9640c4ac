"""Checks of the Redis server a queue lives on: an eviction policy that may drop queue keys.

With ``maxmemory-policy`` other than ``noeviction``, a Redis that reaches its ``maxmemory``
deletes keys to make room: an ``allkeys-*`` policy any key (queued items, the lists), a
``volatile-*`` policy any key with an expiry, and every lease has one (an evicted lease hands a
running item to a second worker) as have items added with a ``ttl``. Nothing tells the client:
work is lost silently. So any policy but ``noeviction`` is reported, whether or not a
``maxmemory`` is set now (managed services set one, and a policy applies as soon as one is).

The policy is read with ``CONFIG GET``; where that is refused (an ACL, a managed service that
renames CONFIG) from ``INFO memory``; where both are refused the check says nothing.
"""

from __future__ import annotations

import logging
from typing import Any

from . import transport
from .ops.server import SAFE_POLICY, eviction_message, may_evict, policy_steps
from .transport import arun, run

logger = logging.getLogger(__name__)

__all__ = [
    "SAFE_POLICY",
    "acheck_eviction",
    "aeviction_policy",
    "check_eviction",
    "eviction_message",
    "eviction_policy",
    "may_evict",
]


def eviction_policy(db: Any) -> str | None:
    """The server's ``maxmemory-policy``, or None when neither CONFIG GET nor INFO may be run.

    On Redis Cluster, a policy that may evict wins over ``noeviction`` if the nodes differ.
    """
    return run(db, policy_steps())


async def aeviction_policy(db: Any) -> str | None:
    """Asynchronous :func:`eviction_policy`, for a ``redis.asyncio`` client."""
    return await arun(db, policy_steps())


def _report(db: Any, policy: str | None, log: bool) -> str | None:
    if policy is None or not may_evict(policy):
        return None
    message = eviction_message(policy)
    sender = transport.sender_of(db)
    if log and not sender.warned:
        sender.warned = True
        logger.warning("%s", message)
    return message


def check_eviction(db: Any, log: bool = True) -> str | None:
    """Warn when the server may evict queue keys: one WARNING log per client.

    Args:
        db: A ``redis.Redis`` or ``RedisCluster`` client.
        log: Log the warning (once per client); False only returns it.

    Returns:
        The warning, or None when the policy is ``noeviction`` or cannot be read.
    """
    return _report(db, eviction_policy(db), log)


async def acheck_eviction(db: Any, log: bool = True) -> str | None:
    """Asynchronous :func:`check_eviction`, for a ``redis.asyncio`` client."""
    return _report(db, await aeviction_policy(db), log)
