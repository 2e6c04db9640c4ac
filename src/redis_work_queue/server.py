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
from collections.abc import Generator
from typing import Any

from redis.exceptions import RedisError

from . import cluster
from .errors import WorkQueueError
from .protocol import Command
from .scripts import araw_command, raw_command

logger = logging.getLogger(__name__)

#: The one policy under which Redis never deletes a key to make room (it refuses writes).
SAFE_POLICY = "noeviction"
_CHECKED = "_rwq_eviction_checked"

_Steps = Generator[Command, Any, "str | None"]


def may_evict(policy: str) -> bool:
    """Whether Redis may delete queue keys under ``policy`` (anything but ``noeviction``)."""
    return policy.lower() != SAFE_POLICY


def eviction_message(policy: str) -> str:
    """The warning for a server whose eviction policy is ``policy``."""
    return (
        f"Redis maxmemory-policy is {policy}: when it reaches maxmemory, Redis deletes keys, "
        "queued items and leases included, and the queue silently loses or repeats work. "
        f"Set maxmemory-policy {SAFE_POLICY} (CONFIG SET maxmemory-policy {SAFE_POLICY}, or in "
        "redis.conf or your provider's parameter group) and size maxmemory for the backlog"
    )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _found(reply: Any, field: str) -> list[str]:
    """Every value of ``field`` in a parsed reply: a dict (per node, on a cluster) or pairs."""
    if isinstance(reply, dict):
        values = []
        for key, value in reply.items():
            if _text(key) == field and not isinstance(value, dict | list):
                values.append(_text(value))
            else:
                values += _found(value, field)
        return values
    if isinstance(reply, list | tuple):
        pairs = zip(reply[0::2], reply[1::2], strict=False)
        return [_text(v) for k, v in pairs if isinstance(k, bytes | str) and _text(k) == field]
    if isinstance(reply, bytes | str):  # INFO unparsed
        prefix = field + ":"
        lines = _text(reply).splitlines()
        return [line[len(prefix) :].strip() for line in lines if line.startswith(prefix)]
    return []


def _worst(policies: list[str]) -> str | None:
    """One policy for several nodes: the first that may evict, else the first."""
    for policy in policies:
        if may_evict(policy):
            return policy
    return policies[0] if policies else None


def _policy_steps() -> _Steps:
    """Read ``maxmemory-policy``: CONFIG GET, else INFO memory, else None."""
    try:
        reply = yield Command(("CONFIG", "GET", "maxmemory-policy"))
        found = _worst(_found(reply, "maxmemory-policy"))
        if found is not None:
            return found
    except (RedisError, WorkQueueError) as err:
        logger.debug("CONFIG GET maxmemory-policy refused (%s); reading INFO memory", err)
    try:
        reply = yield Command(("INFO", "memory"))
    except (RedisError, WorkQueueError) as err:
        logger.debug("INFO memory refused too (%s): the eviction policy is unknown", err)
        return None
    return _worst(_found(reply, "maxmemory_policy"))


def _targets(db: Any) -> dict[str, Any]:
    """On Redis Cluster, ask every primary (each has its own policy)."""
    return {"target_nodes": db.get_primaries()} if cluster.is_cluster(db) else {}


def _drive(db: Any, steps: _Steps) -> str | None:
    """Run the steps, handing a refused command back to them as its error."""
    options = _targets(db)
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            result: str | None = done.value
            return result
        try:
            reply, error = raw_command(db, *call.args, **options), None
        except (RedisError, WorkQueueError) as err:
            reply, error = None, err


async def _adrive(db: Any, steps: _Steps) -> str | None:
    if cluster.is_cluster(db):
        await db.initialize()  # a new client reads the slot map on first use
    options = _targets(db)
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            call = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            result: str | None = done.value
            return result
        try:
            reply, error = await araw_command(db, *call.args, **options), None
        except (RedisError, WorkQueueError) as err:
            reply, error = None, err


def eviction_policy(db: Any) -> str | None:
    """The server's ``maxmemory-policy``, or None when neither CONFIG GET nor INFO may be run.

    On Redis Cluster, a policy that may evict wins over ``noeviction`` if the nodes differ.
    """
    return _drive(db, _policy_steps())


async def aeviction_policy(db: Any) -> str | None:
    """Asynchronous :func:`eviction_policy`, for a ``redis.asyncio`` client."""
    return await _adrive(db, _policy_steps())


def _report(db: Any, policy: str | None, log: bool) -> str | None:
    if policy is None or not may_evict(policy):
        return None
    message = eviction_message(policy)
    if log and not db.__dict__.get(_CHECKED):
        db.__dict__[_CHECKED] = True
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
