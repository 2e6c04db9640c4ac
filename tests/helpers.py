"""Small helpers shared by the tests (not fixtures)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis
from redis.cluster import RedisCluster

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def raw(db: redis.Redis, *args: Any) -> Any:
    """Run a command and get its reply undecoded, whatever the client's decode_responses."""
    return db.execute_command(*args, NEVER_DECODE=True)


def b(text: str | bytes) -> bytes:
    """UTF-8 bytes of a key or id."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def lrange(db: redis.Redis, key: str) -> list[bytes]:
    """A whole list, as bytes."""
    return list(raw(db, "LRANGE", key, 0, -1))


def get(db: redis.Redis, key: str) -> bytes | None:
    """A string value, as bytes."""
    return raw(db, "GET", key)


#: A database as :func:`dump_state` sees it: key -> (type, whole value, TTL).
Dump = dict[bytes, tuple[str, Any, Any]]


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A map or flat-pairs reply (HGETALL; ZRANGE WITHSCORES in RESP2) as a list of pairs."""
    if isinstance(reply, dict):
        return list(reply.items())
    if reply and isinstance(reply[0], list | tuple):  # RESP3: [member, score] pairs
        return [tuple(pair) for pair in reply]
    return list(zip(reply[0::2], reply[1::2], strict=True))


def dump_state(db: redis.Redis, ttl_step_ms: int | None = None) -> Dump:
    """Every key of the database with its type, its whole value and its time to live.

    The TTL is whether the key has one (a bool), or with ``ttl_step_ms`` its PTTL rounded to
    steps of that many ms (-1: none), so that two dumps a moment apart compare equal. Replies
    are read undecoded, whatever the client's ``decode_responses``. On a Redis Cluster client,
    every primary's keys.
    """
    if isinstance(db, RedisCluster):
        merged: Dump = {}
        for node in db.get_primaries():
            merged.update(dump_state(db.get_redis_connection(node), ttl_step_ms))
        return merged
    keys: set[bytes] = set()
    cursor: Any = 0
    while True:
        cursor, found = raw(db, "SCAN", cursor, "COUNT", 1000)
        keys.update(bytes(k) for k in found)
        if int(cursor) == 0:
            break
    state: Dump = {}
    for key in sorted(keys):
        kind = raw(db, "TYPE", key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        value: Any
        if kind == "string":
            value = raw(db, "GET", key)
        elif kind == "list":
            value = list(raw(db, "LRANGE", key, 0, -1))
        elif kind == "hash":
            value = sorted(_pairs(raw(db, "HGETALL", key)))
        elif kind == "set":
            value = sorted(raw(db, "SMEMBERS", key))
        elif kind == "zset":
            value = [(m, float(s)) for m, s in _pairs(raw(db, "ZRANGE", key, 0, -1, "WITHSCORES"))]
        elif kind == "stream":
            value = [(bytes(i), list(f)) for i, f in raw(db, "XRANGE", key, "-", "+")]
        else:
            value = kind
        pttl = int(raw(db, "PTTL", key))
        ttl: Any = (
            pttl > 0 if ttl_step_ms is None else (round(pttl / ttl_step_ms) if pttl > 0 else pttl)
        )
        state[bytes(key)] = (kind, value, ttl)
    return state


def script_calls(admin: redis.Redis) -> int:
    """FCALL, EVALSHA and EVAL calls a server has run since its stats were reset (decoded
    client); a call refused whole (a function not loaded, NOSCRIPT) is not counted."""
    stats = admin.info("commandstats")
    return sum(
        int(stats.get(f"cmdstat_{c}", {}).get("calls", 0))
        - int(stats.get(f"cmdstat_{c}", {}).get("rejected_calls", 0))
        for c in ("evalsha", "eval", "fcall")
    )


def kill_clients_in(admin: redis.Redis, command: str, timeout: float = 15.0) -> None:
    """Wait until a client of the server runs ``command`` (such as a blocked WAIT), then kill
    that client's connection (CLIENT KILL ID) through ``admin`` (a decoded client)."""
    ids = wait_for(
        lambda: [c["id"] for c in admin.client_list() if c.get("cmd") == command],
        timeout,
        0.01,
        f"a client running {command}",
    )
    for client_id in ids:
        admin.client_kill_filter(_id=client_id)


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` in a daemon thread; the list gets its result or the exception it raised."""
    outcome: list[Any] = []

    def body() -> None:
        try:
            outcome.append(call())
        except BaseException as err:  # handed to the test
            outcome.append(err)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, outcome


def all_keys(db: redis.Redis, pattern: str = "*") -> list[bytes]:
    """The keys matching ``pattern``, as bytes: on a Redis Cluster client, every primary's."""
    if isinstance(db, RedisCluster):
        found = []
        for node in db.get_primaries():
            client = db.get_redis_connection(node)
            found += raw(client, "KEYS", pattern)
        return [bytes(k) for k in found]
    return [bytes(k) for k in raw(db, "KEYS", pattern)]


def node_client(db: redis.Redis, key: str) -> redis.Redis:
    """The client of the server that holds ``key``: ``db`` itself, or on a Redis Cluster
    client, that of the primary owning ``key``'s slot (for SCAN and other keyless commands)."""
    if isinstance(db, RedisCluster):
        found: redis.Redis = db.get_redis_connection(db.get_node_from_key(key))
        return found
    return db


def server_infos(db: redis.Redis, section: str) -> list[dict[str, Any]]:
    """INFO ``section`` of the server, or of every primary of a Redis Cluster client."""
    if isinstance(db, RedisCluster):
        return [db.get_redis_connection(n).info(section) for n in db.get_primaries()]
    return [db.info(section)]


def wake_slice(db: redis.Redis) -> float:
    """How much later (s) a blocked worker of a sharded queue may wake on ``db`` than on one
    server: on Redis Cluster it blocks on its own shard and looks at the others once every
    ``SHARD_WAIT_SLICE``, so an item on another shard wakes it within that slice and a look at
    every shard (given 0.25 s here, on a busy machine)."""
    from redis_work_queue.ops.sharded import SHARD_WAIT_SLICE  # noqa: PLC0415

    return SHARD_WAIT_SLICE + 0.25 if isinstance(db, RedisCluster) else 0.0


def blocked_clients(db: redis.Redis) -> int:
    """Clients blocked in a command: on the server, or on every primary of a cluster."""
    return sum(int(found["blocked_clients"]) for found in server_infos(db, "clients"))


def shard_prefixes(queue: Any) -> list[str]:
    """The key prefixes of a queue's shards (the queue's own for an unsharded queue)."""
    return [shard.keys.prefix for shard in getattr(queue.ops, "shard_ops", [queue.ops])]


def keys_of(queue: Any, item_id: str) -> Any:
    """The ``QueueKeys`` of the shard that holds ``item_id`` (the queue's own when unsharded)."""
    shard_for = getattr(queue.ops, "shard_for", None)
    return queue.keys if shard_for is None else shard_for(item_id).keys


def keys_left(db: redis.Redis) -> list[bytes]:
    """Every key of the database but the queues' counters (``<prefix>:counts``), which stay
    when an item's every trace is gone."""
    return sorted(k for k in all_keys(db) if not k.endswith(b":counts"))


def traces(db: redis.Redis, pattern: str) -> list[bytes]:
    """The keys matching ``pattern`` but a queue's counters (``<prefix>:counts``) and job
    durations (``<prefix>:durations``), which outlive the items they count."""
    kept = (b":counts", b":durations")
    return sorted(k for k in all_keys(db, pattern) if not k.endswith(kept))
