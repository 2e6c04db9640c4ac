"""The lean path (``lean.py``): the same replies and key states as redis-py's command layer,
the fallback where it does not apply, and its error and connection handling."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from redis_work_queue import (
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    WorkQueue,
    WrongKeyTypeError,
    transport,
)
from redis_work_queue import lean as wire
from servers import Proc

FLAVOURS = {
    "resp2-bytes": {"protocol": 2, "decode_responses": False},
    "resp2-str": {"protocol": 2, "decode_responses": True},
    "resp3-bytes": {"protocol": 3, "decode_responses": False},
    "resp3-str": {"protocol": 3, "decode_responses": True},
}
_LEASE_VALUE = re.compile(rb"^[0-9a-f]+@\d+$")


class Sent:
    """Counts the commands sent on the lean path (sync and asyncio)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.packets: list[bytes] = []
        send, asend = wire.send, wire.asend

        def spy(pool: Any, packed: list[bytes]) -> Any:
            self.packets.append(b"".join(packed))
            return send(pool, packed)

        async def aspy(pool: Any, packed: list[bytes]) -> Any:
            self.packets.append(b"".join(packed))
            return await asend(pool, packed)

        monkeypatch.setattr(wire, "send", spy)
        monkeypatch.setattr(wire, "asend", aspy)


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Sent:
    return Sent(monkeypatch)


@pytest.fixture
def server(redis_server: Proc) -> Iterator[Proc]:
    admin = redis_server.client()
    admin.flushall()
    admin.script_flush()
    yield redis_server


def normal_path_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "takes", lambda db: False)
    monkeypatch.setattr(transport, "_SENDERS", {})


def lean_pool(db: Any) -> Any:
    """The pool the next script call on ``db`` takes by the lean path, or None."""
    sender = transport.sender_of(db)
    if not isinstance(sender, wire.LeanSender) or wire._patched(db):
        return None
    return sender.pool if db.connection_pool is sender.pool else None


def _items(items: list[Item | None]) -> list[tuple[str, bytes, int] | None]:
    return [None if i is None else (i.id(), i.data(), i.deliveries) for i in items]


def state(admin: redis.Redis) -> dict[bytes, Any]:
    """Every key: type and value, lease values masked (their token is random)."""
    found: dict[bytes, Any] = {}
    for key in sorted(admin.scan_iter(count=1000)):
        kind = admin.type(key)
        if kind == b"string":
            value: Any = admin.get(key)
            if value is not None and _LEASE_VALUE.match(value):
                value = b"<lease>"
        elif kind == b"list":
            value = admin.lrange(key, 0, -1)
        elif kind == b"hash":
            value = admin.hgetall(key)
        elif kind == b"zset":
            value = admin.zrange(key, 0, -1)
        else:
            value = admin.smembers(key)
        found[key] = (kind, value)
    return found


def scenario(q: Any, db: Any, run: Callable[[Any], Any]) -> list[Any]:
    """Every hot operation once (sync, or asyncio through ``run``); their results."""
    out: list[Any] = []
    out.append(run(q.add_item(db, Item(b"a", id="a"))))
    out.append(run(q.add_item(db, Item(b"again", id="a"))))
    batch = [Item(b"b", id="b"), Item(b"\xff\x00c", id="c"), Item(b"d", id="d"), Item("e", id="e")]
    out.append(run(q.add_items(db, batch)))
    out.append(run(q.add_unique_item(db, Item(b"f", id="f"))))
    first = run(q.lease(db, 30, block=False))
    many = run(q.lease_many(db, 30, 3, block=False))
    out.append(_items([first, *many]))
    out.append(run(q.renew(db, first, 60)))
    out.append(run(q.release(db, many[0], reason="boom")))
    out.append(run(q.release(db, many[0])))
    out.append(run(q.complete(db, first)))
    out.append(run(q.complete(db, first)))
    out.append([i.id() for i in run(q.complete_many(db, many[1:]))])
    out.append(run(q.complete_many(db, many[1:])))
    last = run(q.lease(db, 30, block=False))
    out.append(_items([last]))
    second = run(q.lease(db, 30, block=False))
    out.append(_items([second]))
    out.append(run(q.renew_many(db, [last, second], 45)))
    out.append(run(q.release_outcome(db, second, reason="later")))
    out.append(run(q.give_back(db, [last])))
    # Longer than one read of the socket: the reply is read by redis-py's parser.
    out.append(run(q.add_item(db, Item(b"x" * 200_000, id="big"))))
    out.append(_items(run(q.lease_many(db, 30, 10, block=False))))
    out.append(run(q.add_item(db, Item(b"g", id="g"), delay=0.001)))
    out.append(_items([run(q.lease(db, 30, block=True, timeout=2, at_most_once=True))]))
    out.append(_items([run(q.lease(db, 30, block=False))]))
    return out


def _sync_run(value: Any) -> Any:
    return value


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_sync_lean_path_gives_the_normal_paths_replies_and_keys(
    server: Proc, flavour: str, sent: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = server.client()
    db = server.client(**FLAVOURS[flavour])
    lean = scenario(WorkQueue(KeyPrefix("wire")), db, _sync_run)
    lean_keys = state(admin)
    assert len(sent.packets) >= 12  # every script call went the lean way
    admin.flushall()
    normal_path_only(monkeypatch)
    sent.packets.clear()
    normal = scenario(WorkQueue(KeyPrefix("wire")), db, _sync_run)
    assert sent.packets == []
    assert lean == normal
    assert lean_keys == state(admin)
    assert lean[4][0] == ("a", b"a", 1)


@pytest.mark.parametrize("flavour", FLAVOURS)
def test_asyncio_lean_path_gives_the_normal_paths_replies_and_keys(
    server: Proc, flavour: str, sent: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    admin = server.client()

    def once() -> list[Any]:
        async def main() -> list[Any]:
            db = redis.asyncio.Redis(host=server.host, port=server.port, **FLAVOURS[flavour])
            q = AsyncWorkQueue(KeyPrefix("wire"))
            out: list[Any] = []
            out.append(await q.add_item(db, Item(b"a", id="a")))
            out.append(await q.add_item(db, Item(b"again", id="a")))
            batch = [
                Item(b"b", id="b"),
                Item(b"\xff\x00c", id="c"),
                Item(b"d", id="d"),
                Item("e", id="e"),
            ]
            out.append(await q.add_items(db, batch))
            out.append(await q.add_unique_item(db, Item(b"f", id="f")))
            first = await q.lease(db, 30, block=False)
            many = await q.lease_many(db, 30, 3, block=False)
            out.append(_items([first, *many]))
            out.append(await q.renew(db, first, 60))
            out.append(await q.release(db, many[0], reason="boom"))
            out.append(await q.release(db, many[0]))
            out.append(await q.complete(db, first))
            out.append(await q.complete(db, first))
            out.append([i.id() for i in await q.complete_many(db, many[1:])])
            out.append(await q.complete_many(db, many[1:]))
            last = await q.lease(db, 30, block=False)
            out.append(_items([last]))
            second = await q.lease(db, 30, block=False)
            out.append(_items([second]))
            out.append(await q.renew_many(db, [last, second], 45))
            out.append(await q.release_outcome(db, second, reason="later"))
            out.append(await q.give_back(db, [last]))
            out.append(await q.add_item(db, Item(b"x" * 200_000, id="big")))
            out.append(_items(await q.lease_many(db, 30, 10, block=False)))
            out.append(await q.add_item(db, Item(b"g", id="g"), delay=0.001))
            lease = q.lease(db, 30, block=True, timeout=2, at_most_once=True)
            out.append(_items([await lease]))
            out.append(_items([await q.lease(db, 30, block=False)]))
            await db.aclose()
            return out

        return asyncio.run(main())

    lean = once()
    lean_keys = state(admin)
    assert len(sent.packets) >= 12
    admin.flushall()
    normal_path_only(monkeypatch)
    sent.packets.clear()
    normal = once()
    assert sent.packets == []
    assert lean == normal
    assert lean_keys == state(admin)
    # The same results as the synchronous API's.
    admin.flushall()
    assert lean == scenario(WorkQueue(KeyPrefix("wire")), server.client(), _sync_run)


def test_cluster_clients_take_the_normal_path(
    cluster_db: RedisCluster,
    sent: Sent,
) -> None:
    q = WorkQueue(KeyPrefix("{wire}"))
    assert q.add_item(cluster_db, Item(b"a", id="a")) is True
    item = q.lease(cluster_db, 30, block=False)
    assert item is not None and item.id() == "a"
    assert q.complete(cluster_db, item) is True
    assert sent.packets == []
    assert lean_pool(cluster_db) is None


def test_fallback_clients(server: Proc, sent: Sent) -> None:
    single = server.client(single_connection_client=True)
    q = WorkQueue(KeyPrefix("wire"))
    assert q.add_item(single, Item(b"a", id="a")) is True
    assert sent.packets == []
    plain = server.client()
    assert lean_pool(plain) is plain.connection_pool
    other = server.client()
    other.set_response_callback("EVALSHA", lambda reply, **_: reply)
    assert lean_pool(other) is None


def test_a_command_path_replaced_on_the_client_sees_every_call(
    server: Proc, sent: Sent, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spy or tracer set on the instance's execute_command gets the calls: no lean path."""
    db = server.client()
    q = WorkQueue(KeyPrefix("wire"))
    assert q.add_item(db, Item(b"a", id="a")) is True
    before = len(sent.packets)
    assert before >= 1  # the lean path (EVALSHA, then EVAL on a new server), until replaced
    seen: list[Any] = []
    original = db.execute_command

    def spy(*args: Any, **options: Any) -> Any:
        seen.append(args[0])
        return original(*args, **options)

    monkeypatch.setattr(db, "execute_command", spy)
    assert q.add_item(db, Item(b"b", id="b")) is True
    assert len(sent.packets) == before
    assert seen == ["FCALL"]  # the package's functions, on a Redis 7 server
    assert lean_pool(db) is None


def test_wrong_type_is_translated(server: Proc, sent: Sent) -> None:
    db = server.client()
    db.set("wire:queue", "not a list")
    with pytest.raises(WrongKeyTypeError):
        WorkQueue(KeyPrefix("wire")).add_item(db, Item(b"a", id="a"))
    assert sent.packets


@pytest.mark.parametrize("api", ["sync", "asyncio"])
def test_noscript_sends_eval_once(
    server: Proc, sent: Sent, api: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RWQ_FUNCTIONS", "never")  # scripts: see test_functions.py for FCALL
    admin = server.client()

    def add(item_id: str) -> bool:
        if api == "sync":
            return WorkQueue(KeyPrefix("wire")).add_item(server.client(), Item(b"x", id=item_id))

        async def main() -> bool:
            db = redis.asyncio.Redis(host=server.host, port=server.port)
            try:
                return await AsyncWorkQueue(KeyPrefix("wire")).add_item(db, Item(b"x", id=item_id))
            finally:
                await db.aclose()

        return asyncio.run(main())

    assert add("a") is True
    admin.script_flush()
    sent.packets.clear()
    assert add("b") is True
    assert [p.split(b"\r\n")[2] for p in sent.packets] == [b"EVALSHA", b"EVAL"]
    sent.packets.clear()
    assert add("c") is True  # loaded by the EVAL: EVALSHA again
    assert [p.split(b"\r\n")[2] for p in sent.packets] == [b"EVALSHA"]
    assert admin.llen("wire:queue") == 3


def _kill_after_checkout(db: redis.Redis, admin: redis.Redis, monkeypatch: Any) -> list[int]:
    """Kill the connection the next checkout hands out (after the pool's own checks)."""
    pool = db.connection_pool
    taken = pool.get_connection
    killed: list[int] = []

    def get_connection(*args: Any) -> Any:
        conn = taken(*args)
        if not killed:
            conn.send_command("CLIENT", "ID")
            client_id = int(conn.read_response())
            admin.client_kill_filter(_id=client_id)
            killed.append(client_id)
        return conn

    monkeypatch.setattr(pool, "get_connection", get_connection)
    return killed


def test_connection_killed_is_retried_as_the_client_says(
    server: Proc, monkeypatch: pytest.MonkeyPatch, sent: Sent
) -> None:
    admin = server.client()
    q = WorkQueue(KeyPrefix("wire"))
    retrying = server.client(retry=Retry(NoBackoff(), 2))
    q.stats(retrying)  # its first script call reads the eviction policy: done before the kill
    killed = _kill_after_checkout(retrying, admin, monkeypatch)
    assert q.add_item(retrying, Item(b"a", id="a")) is True
    assert killed and admin.llen("wire:queue") == 1
    monkeypatch.undo()
    sent = Sent(monkeypatch)
    once = server.client(retry=Retry(NoBackoff(), 0))
    q.stats(once)
    _kill_after_checkout(once, admin, monkeypatch)
    with pytest.raises(redis.ConnectionError):
        q.add_item(once, Item(b"b", id="b"))
    assert sent.packets
    assert q.add_item(once, Item(b"c", id="c")) is True  # the next call works
    assert admin.lrange("wire:queue", 0, -1) == [b"c", b"a"]


def test_a_timed_out_connection_is_never_reused_half_read(server: Proc, sent: Sent) -> None:
    admin = server.client()
    db = server.client(socket_timeout=0.2, retry=Retry(NoBackoff(), 0))
    q = WorkQueue(KeyPrefix("wire"))
    assert q.add_item(db, Item(b"a", id="a")) is True
    busy = threading.Thread(
        target=admin.eval,
        args=("local n = 0 for i = 1, 100000000 do n = n + i end return 1", 0),
    )
    busy.start()
    time.sleep(0.05)
    try:
        with pytest.raises(redis.TimeoutError):
            q.add_item(db, Item(b"b", id="b"))
    finally:
        busy.join()
    # The late reply of the timed-out call is never read as the reply of a later one.
    assert q.add_item(db, Item(b"b", id="b")) is False
    item = q.lease(db, 30, block=False)
    assert item is not None and item.id() == "a"
    assert sent.packets


def test_a_connection_past_descriptor_1023_is_taken_from_the_pool(server: Proc, sent: Sent) -> None:
    """The readiness check of a pooled connection works on any descriptor (poll, not select)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"needs 1200 open files, the limit is {soft}")
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    db = server.client()
    try:
        q = WorkQueue(KeyPrefix("wire"))
        assert q.add_item(db, Item(b"a", id="a")) is True
        assert q.add_item(db, Item(b"a", id="a")) is False  # the pooled connection, checked
        (conn,) = db.connection_pool._available_connections
        assert conn._sock.fileno() > 1023
    finally:
        db.close()
        for fd in held:
            os.close(fd)
    assert sent.packets  # the lean path (EVALSHA, EVAL on a flushed script cache, EVALSHA)


# Packing ------------------------------------------------------------------------------------


def _redis_py_packed(*args: Any) -> bytes:
    # Text as pack sends it (UTF-8, surrogateescape: an id read back as bytes round-trips).
    args = tuple(a.encode("utf-8", "surrogateescape") if isinstance(a, str) else a for a in args)
    return b"".join(redis.Connection().pack_command(*args))


PACK_ARGS: list[Any] = [
    "p",
    "",
    "30000",
    "é",
    "\udcff-surrogate",
    "x" * wire._KEPT_ARG,
    "x" * (wire._KEPT_ARG + 1),
    0,
    -7,
    30_000,
    10**30,
    b"",
    b"\x00\xff",
    1.5,
    b"b" * (wire._BIG_ARG + 1),
    "s" * (wire._BIG_ARG + 1),
]


@pytest.mark.parametrize("arg", PACK_ARGS, ids=lambda a: f"{type(a).__name__}-{len(str(a))}")
def test_pack_gives_redis_py_s_bytes_first_and_when_kept(arg: Any) -> None:
    head = wire.head(b"EVALSHA", b"0" * 40, ["k"])
    want = _redis_py_packed("EVALSHA", "0" * 40, 1, "k", arg, "id", arg)
    for _ in range(2):  # packed, then (short text and integers) taken from what was kept
        packed = wire.pack(head, 4, [arg, "id", arg])
        assert packed is not None
        assert b"".join(packed) == want


def test_pack_keeps_text_and_integers_apart_and_bounded() -> None:
    head = wire.head(b"EVALSHA", b"0" * 40, [])
    for arg, other in (("1", 1), ("-1", -1)):
        got = wire.pack(head, 3, [arg, other, arg, other])
        assert got is not None
        assert b"".join(got) == _redis_py_packed("EVALSHA", "0" * 40, 0, arg, other, arg, other)
    # Ids and tokens pass through too: the store is emptied when full, never grows past it.
    for n in range(3 * wire._MAX_KEPT):
        got = wire.pack(head, 3, [f"id-{n}", n])
        assert got is not None
        assert b"".join(got) == _redis_py_packed("EVALSHA", "0" * 40, 0, f"id-{n}", n)
        assert len(wire._PACKED) <= wire._MAX_KEPT
    assert wire.pack(head, 3, [True]) is None  # not an int: redis-py's path raises its error
    assert wire.pack(head, 3, [object()]) is None


# Reading ------------------------------------------------------------------------------------

#: A completion with a lease's reply: 1 (completed), then the flat lease reply (queue index,
#: id, data, deliveries; the lease time), a null, an empty bulk string and a nested array.
WHOLE_REPLY = (
    b"*5\r\n:1\r\n*5\r\n:1\r\n$4\r\nid-1\r\n$5\r\nda\r\nt\r\n:2\r\n:1795479556590\r\n"
    b"$-1\r\n$0\r\n\r\n*2\r\n*1\r\n:-3\r\n+OK\r\n"
)
WHOLE_VALUE = [1, [1, b"id-1", b"da\r\nt", 2, 1795479556590], None, b"", [[-3], b"OK"]]


def test_a_reply_is_parsed_only_when_whole() -> None:
    parser = redis.Connection()._parser
    assert wire._whole_reply(parser, WHOLE_REPLY) == (WHOLE_VALUE, len(WHOLE_REPLY))
    assert wire._whole_reply(parser, WHOLE_REPLY + b"+next\r\n") == (WHOLE_VALUE, len(WHOLE_REPLY))
    for cut in range(1, len(WHOLE_REPLY)):
        assert wire._whole_reply(parser, WHOLE_REPLY[:cut]) is None, cut
