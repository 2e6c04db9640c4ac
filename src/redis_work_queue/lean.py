"""The lean path of script calls: sent on a connection of the client's pool, packed once.

redis-py spends most of a short command's time in its command layer (argument encoding,
response callbacks, instrumentation) rather than on the wire. A queue's hot operations (add,
lease, complete, renew, release and their batch forms) are a handful of script calls whose
command prefix (``EVALSHA <sha> <numkeys> <keys>``) never changes for a queue, so they take a
shorter path on the very client the caller passed (:class:`LeanSender`):

* a connection is taken from the client's own pool and given back after: with the pool's
  own steps, taken directly for redis-py 8's ``ConnectionPool`` (see below), or else through
  its ``get_connection()`` (which connects it, and checks that nothing is left unread on it)
  and ``release()``;
* the command is the cached prefix followed by the arguments, packed here;
* the reply is read without decoding: a short one in one read and parsed here, anything else
  by the parser's ``read_response(disable_decoding=True)``, as redis-py's own pipelines read
  theirs, so it is the same value the command layer returns;
* sending and reading go through the connection's ``retry`` exactly as redis-py's
  ``execute_command`` does: a lost connection or a timeout (the retry's supported errors) is
  disconnected and sent again as the client's ``Retry`` allows, then raised. A connection that
  failed half-way is disconnected before it goes back to the pool, so it is never handed out
  with a reply left unread.

This is the one module that reads redis-py's private attributes (a pool's lock and lists, a
connection's socket and parser, a parser's buffer). So the path is taken only where it was
tested: the redis-py releases of :data:`TESTED_VERSIONS` (each is run by the conformance job,
which compares every operation's replies and key states with the public path), and clients
that behave as stock redis-py: a ``redis.Redis`` or ``redis.asyncio.Redis`` (or a subclass that
leaves command execution alone) over a stock ``ConnectionPool``, ``BlockingConnectionPool`` or
Sentinel pool of stock TCP, TLS, Unix-socket or Sentinel-managed connections, read by redis-py's
own RESP2/RESP3 parsers or hiredis. Every other client takes redis-py's public path
(:class:`~.senders.Sender`): any other redis-py release, Redis Cluster clients (redis-py routes
by slot and follows MOVED/ASK), clients made with ``single_connection_client=True``, pools of
other classes or with client-side caching, connections of other classes (fakeredis), clients
with a response callback registered for EVAL or EVALSHA, a client whose command methods were
replaced on the instance (a spy, a tracer), and every client while redis-py's OpenTelemetry
metrics are switched on (so that they count every command).
"""

from __future__ import annotations

import asyncio
import io
import os
import select
from collections.abc import Sequence
from typing import Any, cast

import redis
import redis.asyncio
from redis.asyncio.connection import BlockingConnectionPool as AsyncBlockingConnectionPool
from redis.asyncio.connection import Connection as AsyncConnection
from redis.asyncio.connection import ConnectionPool as AsyncConnectionPool
from redis.asyncio.connection import SSLConnection as AsyncSSLConnection
from redis.asyncio.connection import (
    UnixDomainSocketConnection as AsyncUnixDomainSocketConnection,
)
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.asyncio.sentinel import (
    SentinelManagedSSLConnection as AsyncSentinelManagedSSLConnection,
)
from redis.connection import (
    BlockingConnectionPool,
    Connection,
    ConnectionPool,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import (
    SentinelConnectionPool,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)

from . import functions
from .calls import ScriptCall
from .scripts import Script, translate_error
from .senders import Sender, name_args

#: Where a client keeps its decision: ``(pool, lean)``.
#: The redis-py releases the lean path was tested with (the conformance job runs each).
TESTED_VERSIONS = frozenset(
    {"5.0.0", "5.3.1", "6.0.0", "6.4.0", "7.0.0", "7.4.1", "8.0.0", "8.1.0"}
)

_SYNC_POOLS = frozenset({ConnectionPool, BlockingConnectionPool, SentinelConnectionPool})
_SYNC_CONNECTIONS = frozenset(
    {
        Connection,
        SSLConnection,
        UnixDomainSocketConnection,
        SentinelManagedConnection,
        SentinelManagedSSLConnection,
    }
)
_ASYNC_POOLS = frozenset(
    {AsyncConnectionPool, AsyncBlockingConnectionPool, AsyncSentinelConnectionPool}
)
_ASYNC_CONNECTIONS = frozenset(
    {
        AsyncConnection,
        AsyncSSLConnection,
        AsyncUnixDomainSocketConnection,
        AsyncSentinelManagedConnection,
        AsyncSentinelManagedSSLConnection,
    }
)
#: The methods through which redis-py sends a command: a subclass that replaces one of them
#: (to trace or reroute commands) keeps its own path.
_COMMAND_METHODS = ("execute_command", "_execute_command", "parse_response")

#: Arguments longer than this are sent as their own buffer rather than copied into one.
_BIG_ARG = 16384
#: The most command prefixes cached per script (one per queue or list of queues leased).
_MAX_HEADS = 256
#: Text and integer arguments packed once and kept, by (type, value), when at most _KEPT_ARG
#: bytes long (a queue's prefix, lease lengths, flags; lease tokens and the library's ids are
#: longer); the store is emptied when it holds _MAX_KEPT (short ids of a caller's own pass
#: through it too).
_PACKED: dict[tuple[type, Any], bytes] = {}
_KEPT_ARG = 20
_MAX_KEPT = 1024


# Packing -------------------------------------------------------------------------------------


def _bulk(value: bytes) -> bytes:
    return b"$%d\r\n%b\r\n" % (len(value), value)


def head(command: bytes, script: bytes, keys: Sequence[str]) -> bytes:
    """The fixed part of a script call: command, script (sha or source), numkeys and keys.

    The leading ``*<count>`` is left out: it depends on the number of arguments.
    """
    parts = [_bulk(command), _bulk(script), _bulk(b"%d" % len(keys))]
    parts += (_bulk(key.encode("utf-8", "surrogateescape")) for key in keys)
    return b"".join(parts)


def pack(head: bytes, count: int, args: Sequence[Any]) -> list[bytes] | None:
    """The whole command: ``*<count>``, ``head``, then ``args`` as bulk strings.

    ``count`` is the number of items in ``head``. Text is encoded as UTF-8 (with
    ``surrogateescape``, so that ids read back as bytes round-trip), numbers as redis-py
    encodes them. Returns None for an argument of another type (the caller then sends the call
    through redis-py, which raises the error it raises for it).

    Short text and integers, most of them the same on every call of a queue (its prefix, the
    lease length, flags), are packed once and kept (:data:`_PACKED`).
    """
    parts = [b"*%d\r\n" % (count + len(args)), head]
    out: list[bytes] = []
    packed = _PACKED
    for arg in args:
        kind = type(arg)
        if kind is str or kind is int:
            bulk = packed.get((kind, arg))
            if bulk is not None:
                parts.append(bulk)
                continue
            value = arg.encode("utf-8", "surrogateescape") if kind is str else b"%d" % arg
            if len(value) <= _KEPT_ARG:
                if len(packed) >= _MAX_KEPT:
                    packed.clear()
                bulk = packed[(kind, arg)] = b"$%d\r\n%b\r\n" % (len(value), value)
                parts.append(bulk)
                continue
        elif kind is bytes:
            value = arg
        elif kind is float:
            value = repr(arg).encode()
        else:
            return None
        if len(value) > _BIG_ARG:
            parts.append(b"$%d\r\n" % len(value))
            out += (b"".join(parts), value)
            parts = [b"\r\n"]
        else:
            parts.append(b"$%d\r\n%b\r\n" % (len(value), value))
    out.append(b"".join(parts))
    return out


class Heads:
    """The cached command prefixes of one script, by (EVALSHA, EVAL or FCALL, keys)."""

    __slots__ = ("_cache", "_function", "_sha", "_source", "sha")

    def __init__(self, sha: str, source: bytes, function: str | None = None) -> None:
        self.sha = sha
        self._sha = sha.encode("ascii")
        self._source = source
        self._function = None if function is None else function.encode("ascii")
        self._cache: dict[tuple[bool | None, tuple[str, ...]], bytes] = {}

    def packed(self, by_sha: bool, keys: Sequence[str], args: Sequence[Any]) -> list[bytes] | None:
        """The whole EVALSHA (or EVAL) command for ``keys`` and ``args``; see :func:`pack`."""
        keys = keys if type(keys) is tuple else tuple(keys)
        found = self._cache.get((by_sha, keys))
        if found is None:
            if len(self._cache) >= _MAX_HEADS:
                self._cache.clear()
            if by_sha:
                found = head(b"EVALSHA", self._sha, keys)
            else:
                found = head(b"EVAL", self._source, keys)
            self._cache[(by_sha, keys)] = found
        return pack(found, 3 + len(keys), args)

    def packed_call(self, keys: Sequence[str], args: Sequence[Any]) -> list[bytes] | None:
        """The whole FCALL command of the script's function for ``keys`` and ``args``."""
        keys = keys if type(keys) is tuple else tuple(keys)
        found = self._cache.get((None, keys))
        if found is None:
            if len(self._cache) >= _MAX_HEADS:
                self._cache.clear()
            assert self._function is not None
            found = self._cache[(None, keys)] = head(b"FCALL", self._function, keys)
        return pack(found, 3 + len(keys), args)


# Which clients --------------------------------------------------------------------------------


def _observed() -> bool:
    """Whether redis-py's OpenTelemetry metrics are switched on (redis-py 7.1 and later)."""
    try:
        from redis.observability.providers import (  # noqa: PLC0415 - optional module
            get_observability_instance,
        )
    except ImportError:
        return False
    try:
        manager = get_observability_instance().get_provider_manager()
    except Exception:  # whatever it is, treat it as switched on
        return True
    return manager is not None and bool(getattr(manager.config, "enabled_telemetry", True))


def _stock(db: Any, base: type, pools: frozenset[type], connections: frozenset[type]) -> bool:
    kind = type(db)
    if not isinstance(db, base):
        return False
    if any(getattr(kind, name, None) is not getattr(base, name, None) for name in _COMMAND_METHODS):
        return False
    pool = getattr(db, "connection_pool", None)
    if type(pool) not in pools or getattr(pool, "connection_class", None) not in connections:
        return False
    if getattr(pool, "cache", None) is not None:
        return False
    callbacks = getattr(db, "response_callbacks", {})
    if "EVALSHA" in callbacks or "EVAL" in callbacks:
        return False
    return not _observed()


def _patched(db: Any) -> bool:
    """Whether this client's command path was replaced on the instance (a spy, a tracer)."""
    own = db.__dict__
    return any(name in own for name in _COMMAND_METHODS)


def redis_version() -> str:
    """The version of redis-py in use."""
    return str(redis.__version__)


def takes(db: Any) -> bool:
    """Whether the lean path takes this client (see the module's description)."""
    if redis.__version__ not in TESTED_VERSIONS or not hasattr(db, "__dict__"):
        return False
    if isinstance(db, redis.asyncio.Redis):
        stock = _stock(db, redis.asyncio.Redis, _ASYNC_POOLS, _ASYNC_CONNECTIONS)
        return stock and not db.single_connection_client
    stock = _stock(db, redis.Redis, _SYNC_POOLS, _SYNC_CONNECTIONS)
    return stock and db.connection is None  # not a single-connection client


class LeanSender(Sender):
    """The sender of a client the lean path takes (:func:`takes`): scripts by the lean path.

    Everything else, and a script call with an argument the packer does not know, goes by the
    public path; so does every call once the client's pool was replaced or its command methods
    were replaced on the instance.
    """

    __slots__ = ("pool",)

    def __init__(self, pool: Any) -> None:
        super().__init__()
        self.pool = pool

    def script(self, db: Any, call: ScriptCall) -> Any:
        """As :meth:`Sender.script`, by the lean path."""
        pool = self.pool
        if db.connection_pool is not pool or _patched(db):
            return Sender.script(self, db, call)
        script = call.script
        heads = _heads(script)
        if self.functions is not False and script.packaged:
            packed = heads.packed_call(call.keys, call.args)
            if packed is None:
                return Sender.script(self, db, call)
            try:
                reply = send(pool, packed)
            except ResponseError as err:
                if self.function_error(err) != "load" or not self.load(db):
                    return self._evalsha(db, pool, heads, call)
                try:
                    reply = send(pool, packed)
                except ResponseError as again:
                    if functions.missing(again):  # flushed again at once: a script this time
                        return self._evalsha(db, pool, heads, call)
                    raise translate_error(again) from again
            self.functions = True
            return reply
        return self._evalsha(db, pool, heads, call)

    def _evalsha(self, db: Any, pool: Any, heads: Heads, call: ScriptCall) -> Any:
        packed = heads.packed(True, call.keys, call.args)
        if packed is None:
            return Sender.evalsha(self, db, call, call.script.params(call.keys, call.args))
        try:
            try:
                return send(pool, packed)
            except NoScriptError:
                return send(pool, cast(list[bytes], heads.packed(False, call.keys, call.args)))
        except ResponseError as err:
            raise translate_error(err) from err

    async def ascript(self, db: Any, call: ScriptCall) -> Any:
        """As :meth:`Sender.ascript`, by the lean path."""
        pool = self.pool
        if db.connection_pool is not pool or _patched(db):
            return await Sender.ascript(self, db, call)
        heads = _heads(call.script)
        if self.functions is not False and call.script.packaged:
            packed = heads.packed_call(call.keys, call.args)
            if packed is None:
                return await Sender.ascript(self, db, call)
            try:
                reply = await asend(pool, packed)
            except ResponseError as err:
                if self.function_error(err) != "load" or not await self.aload(db):
                    return await self._aevalsha(db, pool, heads, call)
                try:
                    reply = await asend(pool, packed)
                except ResponseError as again:
                    if functions.missing(again):
                        return await self._aevalsha(db, pool, heads, call)
                    raise translate_error(again) from again
            self.functions = True
            return reply
        return await self._aevalsha(db, pool, heads, call)

    async def _aevalsha(self, db: Any, pool: Any, heads: Heads, call: ScriptCall) -> Any:
        packed = heads.packed(True, call.keys, call.args)
        if packed is None:
            params = call.script.params(call.keys, call.args)
            return await Sender.aevalsha(self, db, call, params)
        try:
            try:
                return await asend(pool, packed)
            except NoScriptError:
                again = cast(list[bytes], heads.packed(False, call.keys, call.args))
                return await asend(pool, again)
        except ResponseError as err:
            raise translate_error(err) from err


#: Each script's cached command prefixes, by name.
_HEADS: dict[str, Heads] = {}


def _heads(script: Script) -> Heads:
    found = _HEADS.get(script.name)
    if found is None or found.sha != script.sha:
        function = functions.library().function(script.name) if script.packaged else None
        found = _HEADS[script.name] = Heads(script.sha, script.script, function)
    return found


# The pool's own steps, taken directly ------------------------------------------------------------
#
# redis-py's ``get_connection`` and ``release`` cost more than the exchange itself on a short
# script call (deprecation wrapper, metrics calls, a readiness check that costs three system
# calls). For the pool class whose steps are mirrored here (``ConnectionPool`` of redis-py 8),
# the same steps are taken directly: the connection is popped and pushed under the pool's lock
# and moved between its in-use and available sets, the released event is dispatched, and a
# connection is taken as ready only when it is connected, its parser holds nothing unread and
# its socket has nothing to read (one ``poll``). Every other case (a new connection, one
# with something to read, a forked process, a connection to drop, another pool class or
# redis-py version) takes the pool's own ``get_connection`` and ``release``.

try:
    from redis._parsers import _HiredisParser, _RESP2Parser, _RESP3Parser
    from redis._parsers.socket import SERVER_CLOSED_CONNECTION_ERROR
    from redis.event import AfterConnectionReleasedEvent
except ImportError:  # an older redis-py: its own steps throughout
    _FAST_POOL: type | None = None
    _PY_PARSERS: frozenset[type] = frozenset()
    _HIREDIS: type | None = None
else:
    _FAST_POOL = ConnectionPool if redis.__version__.split(".")[0] == "8" else None
    _PY_PARSERS = frozenset({_RESP2Parser, _RESP3Parser})
    _HIREDIS = _HiredisParser
#: ``select.poll`` where there is one: ``select.select`` fails on descriptors past 1023.
_POLL = getattr(select, "poll", None)


def _own_steps(pool: Any) -> bool:
    """Whether ``pool``'s steps can be taken directly (see above).

    Not when ``get_connection`` or ``release`` was replaced on the pool (a spy, a test's
    fault), nor in a forked process before the pool has reset itself.
    """
    kind: Any = type(pool)
    if kind is not _FAST_POOL or pool.pid != os.getpid():
        return False
    own = pool.__dict__
    return "get_connection" not in own and "release" not in own


def _take(pool: Any) -> tuple[Any, bool]:
    """A ready connection of ``pool``, as ``pool.get_connection()`` gives it.

    Returns:
        The connection, and whether it was taken with the pool's steps directly (it then goes
        back with :func:`_give`, else with ``pool.release``).
    """
    if _own_steps(pool):
        with pool._lock:
            try:
                conn = pool._available_connections.pop()
            except IndexError:
                conn = None
            else:
                pool._in_use_connections.add(conn)
        if conn is not None:
            sock = conn._sock
            if sock is not None and _quiet(conn, sock):
                return conn, True
            with pool._lock:  # back as it was: the pool's own steps check and reconnect it
                pool._in_use_connections.discard(conn)
                pool._available_connections.append(conn)
    return pool.get_connection(*name_args(pool)), False


def _quiet(conn: Any, sock: Any) -> bool:
    """Whether nothing is left to read on a connected connection (``can_read`` is false)."""
    parser = conn._parser
    kind = type(parser)
    if kind in _PY_PARSERS:
        if parser._buffer is None or parser._buffer.unread_bytes():
            return False
    elif kind is not _HIREDIS or parser._reader is None or parser._reader.has_data():
        return False
    if _POLL is None:  # no poll() (Windows): select, whose descriptors there are not capped
        return not select.select((sock,), (), (), 0)[0]
    poller = _POLL()
    poller.register(sock, select.POLLIN)
    return not poller.poll(0)


def _give(pool: Any, conn: Any) -> None:
    """Give back a connection :func:`_take` took directly, as ``pool.release(conn)`` does."""
    if not _own_steps(pool):
        pool.release(conn)
        return
    with pool._lock:
        if (
            conn in pool._in_use_connections
            and conn.pid == pool.pid
            and not conn.should_reconnect()
        ):
            pool._in_use_connections.remove(conn)
            pool._available_connections.append(conn)
            event = AfterConnectionReleasedEvent(conn)  # type: ignore[no-untyped-call]
            pool._event_dispatcher.dispatch(event)
            return
    pool.release(conn)


class _Defer(Exception):
    """A reply the short parser leaves to redis-py's (incomplete, or of another kind)."""


_DEFER = _Defer()


def _parse(data: bytes, pos: int) -> tuple[Any, int]:  # noqa: PLR0911 - one per kind
    """One RESP value of the kinds scripts reply with, from ``data[pos:]``; its end.

    Integers, bulk and simple strings (as bytes), nulls and arrays of them; anything else
    (an error inside an array, a double, a map, a push message) or a reply cut short raises
    :class:`_Defer`.
    """
    end = data.find(b"\r\n", pos)
    if end < 0:
        raise _DEFER
    kind = data[pos]
    if kind == 36:  # $
        size = int(data[pos + 1 : end])
        if size < 0:
            return None, end + 2
        start = end + 2
        stop = start + size
        if stop + 2 > len(data):
            raise _DEFER
        return data[start:stop], stop + 2
    if kind == 58:  # :
        return int(data[pos + 1 : end]), end + 2
    if kind == 42:  # *
        count = int(data[pos + 1 : end])
        if count < 0:
            return None, end + 2
        pos = end + 2
        items: list[Any] = []
        size_of = len(data)
        for _ in range(count):
            # Integers and bulk strings, the usual elements, here; anything else by a call.
            element = data[pos]
            if element in (58, 36):  # : or $
                end = data.find(b"\r\n", pos)
                if end < 0:
                    raise _DEFER
                number = int(data[pos + 1 : end])
                if element == 58:
                    items.append(number)
                    pos = end + 2
                elif number < 0:
                    items.append(None)
                    pos = end + 2
                else:
                    start = end + 2
                    pos = start + number + 2
                    if pos > size_of:
                        raise _DEFER
                    items.append(data[start : pos - 2])
            else:
                value, pos = _parse(data, pos)
                items.append(value)
        return items, pos
    if kind == 95:  # _
        return None, end + 2
    if kind == 43:  # +
        return data[pos + 1 : end], end + 2
    raise _DEFER


def _inject(parser: Any, data: bytes) -> None:
    """Put bytes read from the socket into the parser's buffer, as its own reads do."""
    kind: Any = type(parser)
    if kind is _HIREDIS:
        parser._reader.feed(data)
        return
    buf = parser._buffer._buffer
    pos = buf.tell()
    buf.seek(0, io.SEEK_END)
    buf.write(data)
    buf.seek(pos)


def _read(conn: Any, parser: Any) -> Any:
    """Read one reply as ``conn.read_response(disable_decoding=True)`` does.

    Replies that arrive whole in one read and are of the kinds :func:`_parse` knows are
    parsed here; anything else (a longer reply, a push message, another kind) is handed to
    the parser (its buffer, or hiredis's reader) and read by redis-py. Errors are redis-py's
    (``parse_error``).
    """
    kind: Any = type(parser)
    if kind is _HIREDIS:
        if parser._reader is None:
            return conn.read_response(disable_decoding=True)
        size = parser.socket_read_size
    else:
        buffer = parser._buffer
        if buffer is None:  # nothing unread otherwise: the connection was checked when taken
            return conn.read_response(disable_decoding=True)
        size = buffer.socket_read_size
    try:
        data = conn._sock.recv(size)
    except TimeoutError:  # socket.timeout
        conn.disconnect()
        raise RedisTimeoutError(f"Timeout reading from {conn._host_error()}") from None
    except OSError as err:
        conn.disconnect()
        raise RedisConnectionError(
            f"Error while reading from {conn._host_error()} : {err.args}"
        ) from None
    if not data:
        conn.disconnect()
        raise RedisConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
    got = _whole_reply(parser, data)
    if isinstance(got, BaseException):
        if isinstance(got, RedisConnectionError):
            conn.disconnect()
        raise got
    if got is not None:
        value, end = got
        if end != len(data):
            _inject(parser, data[end:])
        return value
    _inject(parser, data)
    return conn.read_response(disable_decoding=True)


def _whole_reply(parser: Any, data: bytes) -> tuple[Any, int] | BaseException | None:
    """The reply at the start of ``data`` (one read), when it is whole and of a kind parsed here.

    Returns its value and where it ends, or an error reply as ``parser``'s exception; None
    otherwise (the parser reads it).
    """
    if data[0] == 45:  # -: an error reply
        end = data.find(b"\r\n")
        if end == len(data) - 2:
            error: BaseException = parser.parse_error(data[1:end].decode("utf-8", errors="replace"))
            return error
        return None
    try:
        return _parse(data, 0)
    except (_Defer, IndexError):  # IndexError: cut short between two elements
        return None


# The same for redis.asyncio: ``ConnectionPool`` of redis-py 8, its Python parsers. Taking and
# giving back make no await between looking at the pool and changing it, so no other task sees
# it half-changed; while another task holds the pool's lock, the pool's own steps are taken.

try:
    from redis._parsers import _AsyncRESP2Parser, _AsyncRESP3Parser
    from redis.asyncio.connection import async_timeout  # type: ignore[attr-defined]
    from redis.event import AsyncAfterConnectionReleasedEvent
except ImportError:  # an older redis-py: its own steps throughout
    _AFAST_POOL: type | None = None
    _APY_PARSERS: frozenset[type] = frozenset()
else:
    _AFAST_POOL = AsyncConnectionPool if _FAST_POOL is not None else None
    _APY_PARSERS = frozenset({_AsyncRESP2Parser, _AsyncRESP3Parser})
#: The most bytes one read of a ``redis.asyncio`` stream takes.
_AREAD_SIZE = 65536


def _atake(pool: Any) -> Any:
    """A ready connection of a ``redis.asyncio`` pool, or None: take the pool's own steps."""
    kind: Any = type(pool)
    if kind is not _AFAST_POOL or pool._lock.locked():
        return None
    own = pool.__dict__
    if "get_connection" in own or "release" in own:
        return None
    try:
        conn = pool._available_connections.pop()
    except IndexError:
        return None
    pool._in_use_connections.add(conn)
    if _aquiet(conn):
        return conn
    pool._in_use_connections.discard(conn)
    pool._available_connections.append(conn)
    return None


def _aquiet(conn: Any) -> bool:
    """Whether a ``redis.asyncio`` connection is connected with nothing to read (``can_read``)."""
    parser = conn._parser
    if type(parser) not in _APY_PARSERS or not conn.is_connected or not parser._connected:
        return False
    reader = conn._reader
    return not parser._buffer and not reader._buffer and not reader.at_eof()


async def _agive(pool: Any, conn: Any) -> None:
    """Give back a connection :func:`_atake` took, as ``pool.release(conn)`` does."""
    if pool._lock.locked() or conn not in pool._in_use_connections or conn.should_reconnect():
        await pool.release(conn)
        return
    pool._in_use_connections.remove(conn)
    pool._available_connections.append(conn)
    event = AsyncAfterConnectionReleasedEvent(conn)  # type: ignore[no-untyped-call]
    await pool._event_dispatcher.dispatch_async(event)


async def _asend_packed(conn: Any, packed: list[bytes]) -> None:
    """``conn.send_packed_command(packed)``, without a task per call when nothing waits."""
    if not conn.is_connected or conn.health_check_interval:
        await conn.send_packed_command(packed)
        return
    writer = conn._writer
    timeout = conn.socket_timeout
    try:
        writer.writelines(packed)
        transport = writer.transport
        if timeout and (transport.get_write_buffer_size() or transport.is_closing()):
            async with async_timeout(timeout):
                await writer.drain()
        else:
            await writer.drain()  # nothing left to write: returns at once, or raises if lost
    except asyncio.TimeoutError:
        await conn.disconnect(nowait=True)
        raise RedisTimeoutError("Timeout writing to socket") from None
    except OSError as err:
        await conn.disconnect(nowait=True)
        if len(err.args) == 1:
            number, message = "UNKNOWN", err.args[0]
        else:
            number, message = err.args[0], err.args[1]
        raise RedisConnectionError(f"Error {number} while writing to socket. {message}.") from err
    except BaseException:
        await conn.disconnect(nowait=True)
        raise


async def _aread(conn: Any) -> Any:
    """Read one reply as ``await conn.read_response(disable_decoding=True)`` does.

    As :func:`_read`: a reply whole in one read, of the kinds :func:`_parse` knows, is parsed
    here; anything else is put back in front of the stream's buffer for redis-py's parser.
    """
    parser = conn._parser
    if type(parser) not in _APY_PARSERS or parser._buffer or conn.health_check_interval:
        return await conn.read_response(disable_decoding=True)
    reader = conn._reader
    timeout = conn.socket_timeout
    try:
        if timeout:
            # As redis-py: a maintenance notification may reschedule the read's timeout.
            async with async_timeout(timeout) as active:
                conn._active_read_timeout = active
                try:
                    data = await reader.read(_AREAD_SIZE)
                finally:
                    conn._active_read_timeout = None
        else:
            data = await reader.read(_AREAD_SIZE)
    except asyncio.TimeoutError:
        await conn.disconnect(nowait=True)
        raise RedisTimeoutError(f"Timeout reading from {conn._host_error()}") from None
    except OSError as err:
        await conn.disconnect(nowait=True)
        raise RedisConnectionError(
            f"Error while reading from {conn._host_error()} : {err.args}"
        ) from None
    except BaseException:
        await conn.disconnect(nowait=True)
        raise
    if not data:
        await conn.disconnect(nowait=True)
        raise RedisConnectionError(SERVER_CLOSED_CONNECTION_ERROR)
    got = _whole_reply(parser, data)
    if isinstance(got, BaseException):
        if isinstance(got, RedisConnectionError):
            await conn.disconnect(nowait=True)
        raise got from None
    if got is not None:
        value, end = got
        if end != len(data):
            reader._buffer[:0] = data[end:]
        return value
    reader._buffer[:0] = data
    return await conn.read_response(disable_decoding=True)


# Sending -------------------------------------------------------------------------------------


def _exchange(conn: Any, packed: list[bytes]) -> Any:
    """Send one packed command and read its reply, undecoded."""
    conn.send_packed_command(packed)
    try:
        parser = conn._parser
        kind = type(parser)
        if (kind in _PY_PARSERS or kind is _HIREDIS) and not conn.health_check_interval:
            return _read(conn, parser)
        return conn.read_response(disable_decoding=True)
    except ResponseError:
        raise
    except BaseException:  # the reply may be left unread: the connection is not reusable
        conn.disconnect()
        raise


def send(pool: Any, packed: list[bytes]) -> Any:
    """Send ``packed`` on a connection of ``pool`` and return its reply, undecoded.

    The connection's retry applies, as in redis-py's ``execute_command``: a connection error
    or timeout disconnects it, and the command is sent again while the retry allows, then
    the error is raised.

    Raises:
        redis.exceptions.ResponseError: The server's error reply (such as NOSCRIPT).
        redis.exceptions.ConnectionError: The connection was lost (retries spent).
        redis.exceptions.TimeoutError: No reply within the socket timeout (retries spent).
    """
    conn, taken = _take(pool)
    try:
        return conn.retry.call_with_retry(
            lambda: _exchange(conn, packed), lambda _error, *_: conn.disconnect()
        )
    finally:
        if taken:
            _give(pool, conn)
        else:
            pool.release(conn)


async def _aexchange(conn: Any, packed: list[bytes]) -> Any:
    """Asynchronous :func:`_exchange`."""
    await _asend_packed(conn, packed)
    try:
        return await _aread(conn)
    except ResponseError:
        raise
    except BaseException:  # cancelled mid-read too: the reply may be left unread
        await conn.disconnect()
        raise


async def asend(pool: Any, packed: list[bytes]) -> Any:
    """Asynchronous :func:`send`, on a ``redis.asyncio`` pool."""
    conn = _atake(pool)
    taken = conn is not None
    if conn is None:
        conn = await pool.get_connection(*name_args(pool))
    try:
        return await conn.retry.call_with_retry(
            lambda: _aexchange(conn, packed), lambda _error, *_: conn.disconnect()
        )
    finally:
        if taken:
            await _agive(pool, conn)
        else:
            await pool.release(conn)
