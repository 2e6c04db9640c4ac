"""Redis Cluster support: slot checks and routing for the calls that are not routed by key.

A queue lives in one slot when its prefix holds a ``{hash tag}``: every script call then names
keys of that slot only, and redis-py routes it. What redis-py cannot route by itself is sent to
the node that owns the queue's slot: SCAN (the deep clean, flush) and the WAIT that follows a
write on the same connection (sent once on a connection of a client of that node: see
:mod:`.replicated`). Pipelined adds are checked for the slot before they are queued.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.cluster import ClusterPipeline, RedisCluster
from redis.crc import key_slot
from redis.retry import Retry

from .errors import CrossSlotError

_NODE_CLIENTS = "_rwq_node_clients"


_CLUSTERS = (RedisCluster, AsyncRedisCluster)
_CLUSTER_PIPELINES = (ClusterPipeline, AsyncClusterPipeline)
_known: dict[type, bool] = {}


def is_cluster(db: object) -> bool:
    """True for a ``RedisCluster`` client (sync or asyncio)."""
    kind = type(db)
    found = _known.get(kind)
    if found is None:
        found = _known[kind] = issubclass(kind, _CLUSTERS)
    return found


@lru_cache(maxsize=1024)
def slot_of(keys: tuple[str, ...]) -> int:
    """The one cluster slot of ``keys``.

    Raises:
        CrossSlotError: The keys are in several slots (a queue prefix without a hash tag, or
            queues with different tags in one call).
    """
    slots = {key_slot(key.encode("utf-8", "surrogateescape")) for key in keys}
    if len(slots) != 1:
        raise CrossSlotError(
            "on Redis Cluster the keys of one call must share a slot: give the queue prefix a "
            "{hash tag} (for example '{jobs}' or 'app:{jobs}'), and queues leased together the "
            f"same tag; keys: {', '.join(sorted(keys)[:4])}..."
        )
    return slots.pop()


def check_pipeline(pipeline: object, keys: Sequence[str]) -> None:
    """On a Redis Cluster pipeline (sync or asyncio), check that ``keys`` share one slot.

    Raises:
        CrossSlotError: They do not (nothing has been queued on the pipeline).
    """
    if isinstance(pipeline, _CLUSTER_PIPELINES):
        slot_of(tuple(keys))


def same_slot(keys: Sequence[str]) -> bool:
    """True when ``keys`` share one slot."""
    try:
        slot_of(tuple(keys))
    except CrossSlotError:
        return False
    return True


def target(db: Any, key: str) -> dict[str, Any]:
    """The options that send a keyless command to the node owning ``key``'s slot."""
    if not is_cluster(db):
        return {}
    return {"target_nodes": db.get_node_from_key(key)}


def node_client(db: Any, key: str) -> Any:
    """A plain client (sync or asyncio, like ``db``) of the primary owning ``key``'s slot."""
    node = db.get_node_from_key(key)
    clients: dict[tuple[str, int], Any] = db.__dict__.setdefault(_NODE_CLIENTS, {})
    found = clients.get((node.host, node.port))
    if found is None:
        kind = redis.asyncio.Redis if isinstance(db, AsyncRedisCluster) else redis.Redis
        accepted = set(inspect.signature(kind.__init__).parameters) - {"self", "host", "port"}
        settings = getattr(db.nodes_manager, "connection_kwargs", None) or getattr(
            db, "connection_kwargs", {}
        )
        kwargs = {k: v for k, v in settings.items() if k in accepted and k != "retry"}
        # No automatic retry: a write followed by WAIT must not run twice when the reply of
        # the first run was lost (replicated.py sends it on a connection of this client).
        if isinstance(db, AsyncRedisCluster):
            found = redis.asyncio.Redis(
                host=node.host, port=node.port, retry=AsyncRetry(NoBackoff(), 0), **kwargs
            )
        else:
            found = redis.Redis(
                host=node.host, port=node.port, retry=Retry(NoBackoff(), 0), **kwargs
            )
        clients[(node.host, node.port)] = found
    return found


def forget_nodes(db: Any) -> None:
    """Drop the cached node clients of ``db`` (after a failover or a slot move).

    Synchronous clients are closed; asyncio ones are left to be collected.
    """
    clients: dict[tuple[str, int], Any] = db.__dict__.get(_NODE_CLIENTS, {})
    for client in clients.values():
        if isinstance(client, redis.Redis):
            with contextlib.suppress(redis.RedisError, OSError):  # the node may be gone
                client.close()
    clients.clear()
