"""Connections of the data source's tasks: one client per task for the queue's server."""

from __future__ import annotations

from typing import Any

from redis import Redis, RedisCluster
from redis.sentinel import Sentinel, SentinelManagedSSLConnection

from .options import QueueOptions


def connect(where: QueueOptions) -> Any:
    """Open a client for the queue's server: a node, a Redis Cluster, or Sentinel's primary.

    Its replies are never decoded by the calls of this package.
    """
    extra: dict[str, Any] = {}
    if where.username is not None:
        extra["username"] = where.username
    if where.password is not None:
        extra["password"] = where.password
    if where.tls_ca_certs is not None:
        extra["ssl_ca_certs"] = where.tls_ca_certs
    if where.sentinels is not None:
        # The primary's credentials (and TLS) go to the primary; the Sentinels take none.
        sentinel = Sentinel(list(where.sentinels))  # type: ignore[no-untyped-call]
        if where.tls_ca_certs is not None or where.url.startswith("rediss://"):
            extra["connection_class"] = SentinelManagedSSLConnection
        return sentinel.master_for(where.sentinel_master, **extra)  # type: ignore[no-untyped-call]
    if where.cluster:
        return RedisCluster.from_url(where.url, **extra)
    return Redis.from_url(where.url, **extra)
