"""What the library reads of the server itself: its eviction policy (see :mod:`..server`)."""

from __future__ import annotations

import logging
from typing import Any

from redis.exceptions import RedisError

from ..calls import Command, Steps
from ..errors import WorkQueueError
from .registry import operation

logger = logging.getLogger("redis_work_queue.server")

#: The one policy under which Redis never deletes a key to make room (it refuses writes).
SAFE_POLICY = "noeviction"


def eviction_message(policy: str) -> str:
    """The warning for a server whose eviction policy is ``policy``."""
    return (
        f"Redis maxmemory-policy is {policy}: when it reaches maxmemory, Redis deletes keys, "
        "queued items and leases included, and the queue silently loses or repeats work. "
        f"Set maxmemory-policy {SAFE_POLICY} (CONFIG SET maxmemory-policy {SAFE_POLICY}, or in "
        "redis.conf or your provider's parameter group) and size maxmemory for the backlog"
    )


def may_evict(policy: str) -> bool:
    """Whether Redis may delete queue keys under ``policy`` (anything but ``noeviction``)."""
    return policy.lower() != SAFE_POLICY


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


@operation(
    functions=(
        ("server.eviction_policy", "server.aeviction_policy"),
        ("server.check_eviction", "server.acheck_eviction"),
    ),
    commands=("CONFIG", "INFO"),
    refusable=True,
    docs="operations.md#eviction-policy",
)
def policy_steps() -> Steps[str | None]:
    """Read ``maxmemory-policy``: CONFIG GET, else INFO memory, else None."""
    try:
        reply = yield Command(("CONFIG", "GET", "maxmemory-policy"), every_primary=True)
        found = _worst(_found(reply, "maxmemory-policy"))
        if found is not None:
            return found
    except (RedisError, WorkQueueError) as err:
        logger.debug("CONFIG GET maxmemory-policy refused (%s); reading INFO memory", err)
    try:
        reply = yield Command(("INFO", "memory"), every_primary=True)
    except (RedisError, WorkQueueError) as err:
        logger.debug("INFO memory refused too (%s): the eviction policy is unknown", err)
        return None
    return _worst(_found(reply, "maxmemory_policy"))
