"""The Redis clients the library accepts, as types, and what it reads from their settings.

A synchronous queue takes a :class:`redis.Redis` (and so a ``fakeredis.FakeRedis`` or a
Sentinel master) or a :class:`redis.cluster.RedisCluster`; an asyncio queue takes their
``redis.asyncio`` twins. The asyncio aliases are built on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

from redis.client import Pipeline
from redis.client import Redis as _Redis
from redis.cluster import ClusterPipeline, RedisCluster

#: A reply to a command or script, as the client hands it over: bytes (or str with
#: ``decode_responses``), int, None, or a list of replies; a float or dict on RESP3. Left open
#: (``Any``): each operation reads the shape its script returns, named where it is received.
Reply: TypeAlias = Any

#: A synchronous client: ``redis.Redis`` or ``redis.cluster.RedisCluster``.
SyncClient: TypeAlias = _Redis | RedisCluster
#: A synchronous pipeline, plain or Redis Cluster.
SyncPipeline: TypeAlias = Pipeline | ClusterPipeline

if TYPE_CHECKING:
    import redis.asyncio
    import redis.asyncio.client
    import redis.asyncio.cluster

    #: An asyncio client: ``redis.asyncio.Redis`` or ``redis.asyncio.RedisCluster``.
    AsyncClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.RedisCluster
    #: An asyncio pipeline, plain or Redis Cluster.
    AsyncPipeline: TypeAlias = redis.asyncio.client.Pipeline | redis.asyncio.cluster.ClusterPipeline


def __getattr__(name: str) -> Any:
    """Build the asyncio aliases on first use, importing ``redis.asyncio`` only then."""
    if name not in ("AsyncClient", "AsyncPipeline"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import redis.asyncio.client  # noqa: PLC0415 (kept out of synchronous programs)
    import redis.asyncio.cluster  # noqa: PLC0415

    found = {
        "AsyncClient": redis.asyncio.client.Redis | redis.asyncio.cluster.RedisCluster,
        "AsyncPipeline": redis.asyncio.client.Pipeline | redis.asyncio.cluster.ClusterPipeline,
    }
    globals().update(found)
    return found[name]


def max_block(db: Any) -> float:
    """The longest single blocking wait that fits in ``db``'s socket timeout."""
    socket_timeout = _connection_kwargs(db).get("socket_timeout")
    if not socket_timeout:
        return 60.0
    return max(float(socket_timeout) / 2, 0.01)


def _connection_kwargs(db: Any) -> dict[str, Any]:
    pool = getattr(db, "connection_pool", None)
    if pool is None and hasattr(db, "get_default_node"):  # Redis Cluster: ask one node
        node = db.get_default_node()
        pool = getattr(getattr(node, "redis_connection", None), "connection_pool", node)
    kwargs = getattr(pool, "connection_kwargs", None)
    return kwargs if isinstance(kwargs, dict) else {}
