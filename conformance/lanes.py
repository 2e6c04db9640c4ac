"""Lanes: one scenario run at once through several clients, compared step by step.

A :class:`Lane` is one way of reaching Redis: the synchronous or the asyncio API, on one path
(``"public"``: redis-py's command layer; ``"lean"``: the library's own; ``"auto"``: the
library's choice), each on a database of its own of the same server. :func:`run_lanes` runs the
same scenario in every lane, each in its own thread, in lockstep: at every :meth:`Check.__call__`
each lane records the reply and its database's whole state (type, value and time to live of
every key) and waits for the others. Then every lane's record must equal the first lane's,
step by step, after :func:`canon` has made them comparable: lease tokens (random) are numbered
in the order they appear, and times (scores, lease times, times to live) are equal within
:data:`TIME_SLACK_MS`.

:class:`ScriptRoutes` counts, per client, the script calls that went through redis-py's
public command layer (``Redis.execute_command``), so that a test can tell which path a lane's
calls took.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import inspect
import re
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio

from redis_work_queue import (
    AsyncWorkQueue,
    Item,
    KeyPrefix,
    WorkQueue,
    acomplete_and_lease_from,
    alease_from,
    complete_and_lease_from,
    lease_from,
    transport,
)
from redis_work_queue.queue_base import QueueBase
from servers import Proc

T = TypeVar("T")

#: Two lanes' times (epoch ms, times to live) may differ by this much.
TIME_SLACK_MS = 2000
#: How long a lane waits for the others at a step before the run is abandoned.
STEP_SECS = 60.0
#: A lease key's value, and a leased item's token: random hex, then the lease time in ms (a
#: cancelled item's lease is marked by a prefix, kept).
_TOKEN = re.compile(r"^((?:cancelled:)?)([0-9a-f]{8,})@(\d{10,})$")
_SCRIPT_COMMANDS = frozenset({"EVALSHA", "EVAL", "FCALL", b"EVALSHA", b"EVAL", b"FCALL"})

#: Client options of each flavour a scenario runs under.
FLAVOURS: dict[str, dict[str, Any]] = {
    "resp2-bytes": {"protocol": 2, "decode_responses": False},
    "resp2-str": {"protocol": 2, "decode_responses": True},
    "resp3-bytes": {"protocol": 3, "decode_responses": False},
    "resp3-str": {"protocol": 3, "decode_responses": True},
}


# Comparing replies and states -----------------------------------------------------------------


class Near:
    """A time, equal to another within ``slack``."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, value: float, slack: float) -> None:
        self.value = value
        self.slack = slack

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Near):
            return NotImplemented
        return abs(self.value - other.value) <= max(self.slack, other.slack)

    def __repr__(self) -> str:
        return f"~{self.value!r}"


@dataclasses.dataclass(frozen=True)
class Token:
    """A lease token, by the order in which its lane first saw it, and its lease time."""

    number: int
    at: Near


def _number(value: float) -> Near:
    """A float of a reply or a state: epoch ms (scores) or seconds (times, durations)."""
    return Near(value, TIME_SLACK_MS if abs(value) > 1e11 else TIME_SLACK_MS / 1000)


#: Where the server says a script or function failed (``script: <sha1>, on @user_script:12.``
#: or ``script: <function>, on @user_function:40.``): the one part of an error that differs
#: between the two; the library's own ``lua/<file>:<line>`` in front of it is compared.
_SERVER_PLACE = re.compile(
    r"script: \S+, on @user_(?:script|function):\d+\.|user_(?:script|function):\d+:"
)


def canon(value: Any, tokens: dict[str, int]) -> Any:
    """``value`` in a form that compares equal between two lanes that did the same thing.

    Lease tokens are numbered in the order ``tokens`` (the lane's own) first saw them; floats
    become :class:`Near`; items, queues, records and exceptions become tuples naming what they
    are, so that a difference reads clearly. In an error's text, the server's own place of
    the failure (its script's SHA1 or its function's name, and the line in either) is left out.
    """
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str | bytes):
        text = value.decode("latin-1") if isinstance(value, bytes) else value
        found = _TOKEN.match(text)
        if found is None:
            return value
        number = tokens.setdefault(found.group(2), len(tokens))
        token = Token(number, Near(int(found.group(3)), TIME_SLACK_MS))
        return (type(value).__name__, found.group(1), token)
    if isinstance(value, Item):
        return (
            "Item",
            value.id(),
            value.data(),
            value.deliveries,
            canon(value.lease_token, tokens),
        )
    if isinstance(value, QueueBase):
        return ("queue", value.name.prefix)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name)
    if isinstance(value, BaseException):
        return ("raised", type(value).__name__, _SERVER_PLACE.sub("<server's place>", str(value)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [canon(getattr(value, f.name), tokens) for f in dataclasses.fields(value)]
        return (type(value).__name__, *fields)
    if isinstance(value, dict):
        pairs = sorted(value.items(), key=lambda pair: repr(pair[0]))
        return {"dict": [(canon(k, tokens), canon(v, tokens)) for k, v in pairs]}
    if isinstance(value, list):
        return [canon(v, tokens) for v in value]
    if isinstance(value, tuple):
        return tuple(canon(v, tokens) for v in value)
    raise TypeError(f"no canonical form for {type(value).__name__}: {value!r}")


#: A database as :func:`snapshot` reads it: key -> (type, whole value, PTTL in ms).
Dump = dict[bytes, tuple[str, Any, int]]


def snapshot(admin: redis.Redis) -> Dump:
    """Every key of ``admin``'s database (a RESP2 bytes client) with its type, whole value and
    PTTL, in the shape of ``tests/helpers.dump_state(db, ttl_step_ms=1)``, in three round
    trips (SCAN aside)."""
    keys: set[bytes] = set()
    cursor = 0
    while True:
        cursor, found = admin.scan(cursor, count=1000)
        keys.update(found)
        if int(cursor) == 0:
            break
    ordered = sorted(keys)
    pipe = admin.pipeline(transaction=False)
    for key in ordered:
        pipe.type(key)
        pipe.pttl(key)
    meta = pipe.execute()
    kinds = [kind.decode() for kind in meta[0::2]]
    for key, kind in zip(ordered, kinds, strict=True):
        if kind == "string":
            pipe.get(key)
        elif kind == "list":
            pipe.lrange(key, 0, -1)
        elif kind == "hash":
            pipe.hgetall(key)
        elif kind == "set":
            pipe.smembers(key)
        elif kind == "zset":
            pipe.zrange(key, 0, -1, withscores=True)
        else:
            pipe.type(key)
    values = pipe.execute()
    return {
        key: (kind, _value(kind, value), int(pttl))
        for key, kind, value, pttl in zip(ordered, kinds, values, meta[1::2], strict=True)
    }


def _value(kind: str, read: Any) -> Any:
    """A key's value as ``dump_state`` gives it, from what the pipeline read."""
    if kind == "string":
        return read
    if kind == "list":
        return list(read)
    if kind == "hash":
        return sorted(read.items())
    if kind == "set":
        return sorted(read)
    if kind == "zset":
        return [(member, float(score)) for member, score in read]
    return kind


def state(admin: redis.Redis, tokens: dict[str, int]) -> dict[bytes, Any]:
    """Every key of ``admin``'s database: its type, its whole value and its time to live."""
    found: dict[bytes, Any] = {}
    for key, (kind, value, pttl) in snapshot(admin).items():
        ttl = Near(pttl, TIME_SLACK_MS) if pttl > 0 else pttl
        found[key] = (kind, canon(value, tokens), ttl)
    return found


# Lanes ---------------------------------------------------------------------------------------


class Loop:
    """An event loop in a daemon thread, on which the asyncio lanes run their calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for it (from any other thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()


async def aclose(client: Any) -> None:
    """Close a ``redis.asyncio`` client (``aclose`` from redis-py 5.0.1, ``close`` before)."""
    closing = getattr(client, "aclose", None) or client.close
    await closing()


@dataclasses.dataclass(eq=False)
class Lane:
    """One way of reaching Redis: an API (``"sync"``, ``"asyncio"``), a path, a database.

    Attributes:
        api: ``"sync"`` or ``"asyncio"``.
        path: ``"public"``, ``"lean"`` or ``"auto"``, as given to ``transport.use``.
        functions: ``"auto"`` (calls as Redis Functions, on a server that has them) or
            ``"never"`` (as scripts), as given to ``transport.use_functions``.
        client: The client the lane's calls are made on (of the API's kind).
        admin: A plain synchronous client of the same database (RESP2, bytes), for state
            dumps and for writes that stand for another client's.
        loop: The event loop of an asyncio lane.
    """

    api: str
    path: str
    client: Any
    admin: redis.Redis
    loop: Loop | None = None
    tokens: dict[str, int] = dataclasses.field(default_factory=dict)
    functions: str = "auto"

    @property
    def name(self) -> str:
        return f"{self.api}/{self.path}" + ("/scripts" if self.functions == "never" else "")

    @property
    def lease_from(self) -> Callable[..., Any]:
        return lease_from if self.loop is None else alease_from

    @property
    def complete_and_lease_from(self) -> Callable[..., Any]:
        return complete_and_lease_from if self.loop is None else acomplete_and_lease_from

    def queue(self, prefix: str, **options: Any) -> Any:
        """A queue of this lane's API."""
        kind = WorkQueue if self.loop is None else AsyncWorkQueue
        return kind(KeyPrefix(prefix), **options)

    def await_(self, value: Any) -> Any:
        """``value``, awaited on the lane's loop if it is awaitable."""
        if inspect.isawaitable(value):
            assert self.loop is not None

            async def wait() -> Any:
                return await value

            return self.loop.run(wait())
        return value

    def do(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``call(client, *args, **kwargs)``, awaited on an asyncio lane."""
        return self.await_(call(self.client, *args, **kwargs))

    def pipeline(self, fill: Callable[[Any], None]) -> list[Any]:
        """A pipeline of the lane's client, filled by ``fill``, executed; its replies."""
        if self.loop is None:
            pipe = self.client.pipeline()
            fill(pipe)
            return list(pipe.execute())

        async def go() -> list[Any]:
            pipe = self.client.pipeline()
            fill(pipe)
            return list(await pipe.execute())

        return self.loop.run(go())

    def leased(
        self, queue: Any, body: Callable[[Item | None], None], *args: Any, **kwargs: Any
    ) -> Item | None:
        """Run ``body`` inside ``queue.leased(client, *args, **kwargs)``; the item it got."""
        if self.loop is None:
            with queue.leased(self.client, *args, **kwargs) as item:
                body(item)
            return item  # type: ignore[no-any-return]

        async def go() -> Item | None:
            async with queue.leased(self.client, *args, **kwargs) as item:
                body(item)
            return item  # type: ignore[no-any-return]

        return self.loop.run(go())

    def later(self, delay: float, call: Callable[..., Any], *args: Any) -> Later:
        """Make ``call(client, *args)`` on this lane in ``delay`` seconds, from another thread."""
        return Later(delay, lambda: self.do(call, *args))

    def close(self) -> None:
        self.admin.close()
        if self.loop is None:
            self.client.close()
        else:
            self.loop.run(aclose(self.client))


class Later:
    """A call made after a delay in a thread of its own; :meth:`result` waits for its reply."""

    def __init__(self, delay: float, call: Callable[[], Any]) -> None:
        self._outcome: list[Any] = []

        def body() -> None:
            threading.Event().wait(delay)
            try:
                self._outcome.append(call())
            except BaseException as err:  # handed to the caller of result()
                self._outcome.append(err)

        self._thread = threading.Thread(target=body, daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join(timeout=STEP_SECS)
        assert self._outcome, "the delayed call did not end"
        if isinstance(self._outcome[0], BaseException):
            raise self._outcome[0]
        return self._outcome[0]


def lean_available(api: str, server: Proc, options: dict[str, Any], loop: Loop) -> bool:
    """Whether a plain client of ``api`` with ``options`` takes the lean path."""
    if api == "sync":
        client = redis.Redis(host=server.host, port=server.port, **options)
        try:
            return transport.lean_available(client)
        finally:
            client.close()

    async def probe() -> bool:
        client = redis.asyncio.Redis(host=server.host, port=server.port, **options)
        try:
            return transport.lean_available(client)
        finally:
            await aclose(client)

    return loop.run(probe())


def make_lanes(
    server: Proc,
    options: dict[str, Any],
    loop: Loop,
    apis: tuple[str, ...] = ("sync", "asyncio"),
) -> list[Lane]:
    """A lane per API and path, the synchronous public lane first, each on its own database.

    Every API gets a ``"public"`` and an ``"auto"`` lane, and a ``"lean"`` lane where the lean
    path takes its clients, each calling Redis Functions; then the public and lean lanes again
    calling scripts (``transport.use_functions(client, "never")``). The databases are emptied,
    and the server's script cache and functions too (so that every path meets NOSCRIPT and
    falls back to EVAL once, or loads the library).
    """
    lanes: list[Lane] = []
    for api in apis:
        paths = ["public", "auto"]
        if lean_available(api, server, options, loop):
            paths.append("lean")
        ways = [(path, "auto") for path in paths]
        ways += [(path, "never") for path in paths if path != "auto"]
        for path, functions in ways:
            index = len(lanes)
            admin = redis.Redis(host=server.host, port=server.port, db=index)
            admin.flushdb()
            if api == "sync":
                client = redis.Redis(host=server.host, port=server.port, db=index, **options)
                lanes.append(Lane(api, path, client, admin))
            else:

                async def make(index: int = index) -> Any:
                    return redis.asyncio.Redis(
                        host=server.host, port=server.port, db=index, **options
                    )

                lanes.append(Lane(api, path, loop.run(make()), admin, loop))
            lanes[-1].functions = functions
            transport.use(lanes[-1].client, path)  # type: ignore[arg-type]
            transport.use_functions(lanes[-1].client, functions)  # type: ignore[arg-type]
    lanes[0].admin.script_flush()
    lanes[0].admin.function_flush()
    return lanes


# Running a scenario in lockstep ----------------------------------------------------------------


@dataclasses.dataclass
class Record:
    """One step of one lane: its label, reply and state, comparable between lanes."""

    label: str
    reply: Any
    state: dict[bytes, Any]


class Check:
    """A lane's recorder: each call records a step, checks its expectation and waits for the
    other lanes (see :func:`run_lanes`)."""

    def __init__(self, lane: Lane, barrier: threading.Barrier) -> None:
        self.lane = lane
        self.records: list[Record] = []
        self._barrier = barrier

    def __call__(self, label: str, reply: T, expect: Any = ..., keys: Any = None) -> T:
        """Record ``reply`` and the lane's state as step ``label``.

        Args:
            label: The step's name, for the failure message.
            reply: The reply to record.
            expect: What the reply must be: a value (compared with ``==``) or a function of it
                that returns a true value. ``...``: no expectation beyond the other lanes.
            keys: A function of the lane's state (key -> (type, value, ttl), as dumped by
                :func:`snapshot`) that returns a true value.
        """
        self._expect(label, reply, expect)
        if keys is not None:
            dumped = snapshot(self.lane.admin)
            assert keys(dumped), f"{self.lane.name}: step {label!r}: unexpected keys {dumped!r}"
        tokens = self.lane.tokens
        self.records.append(Record(label, canon(reply, tokens), state(self.lane.admin, tokens)))
        self._barrier.wait(STEP_SECS)
        return reply

    def raises(self, label: str, kind: type[BaseException], call: Callable[[], Any]) -> None:
        """Record step ``label``, whose call must raise ``kind``."""
        try:
            got = call()
        except kind as err:
            self(label, err)
            return
        raise AssertionError(f"{self.lane.name}: step {label!r} returned {got!r}, not {kind}")

    def _expect(self, label: str, reply: Any, expect: Any) -> None:
        if expect is ...:
            return
        where = f"{self.lane.name}: step {label!r}"
        if callable(expect) and not isinstance(expect, type):
            assert expect(reply), f"{where}: unexpected reply {reply!r}"
        else:
            assert reply == expect, f"{where}: replied {reply!r}, expected {expect!r}"


Scenario = Callable[[Lane, Check], None]


def run_lanes(lanes: list[Lane], scenario: Scenario) -> list[list[Record]]:
    """Run ``scenario`` in every lane at once, in lockstep; compare every step with the first
    lane's and return the records.

    A lane whose scenario fails stops the others; its error is raised, naming the lane.
    """
    barrier = threading.Barrier(len(lanes))
    checks = [Check(lane, barrier) for lane in lanes]
    errors: list[tuple[Lane, BaseException]] = []

    def body(lane: Lane, check: Check) -> None:
        try:
            scenario(lane, check)
        except threading.BrokenBarrierError:
            pass  # another lane failed: its error is the one reported
        except BaseException as err:  # reported by the test's thread
            errors.append((lane, err))
            barrier.abort()

    threads = [
        threading.Thread(target=body, args=(lane, check), name=f"lane-{lane.name}", daemon=True)
        for lane, check in zip(lanes, checks, strict=True)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=STEP_SECS * 5)
    assert not any(t.is_alive() for t in threads), "a lane did not finish"
    if errors:
        lane, err = errors[0]
        raise AssertionError(f"lane {lane.name} failed: {type(err).__name__}: {err}") from err
    first = checks[0]
    for check in checks[1:]:
        assert [r.label for r in check.records] == [r.label for r in first.records]
        for mine, theirs in zip(check.records, first.records, strict=True):
            where = f"step {theirs.label!r}: {check.lane.name} against {first.lane.name}"
            assert mine.reply == theirs.reply, f"{where}: the replies differ"
            differ = {
                key: (mine.state.get(key, "no key"), theirs.state.get(key, "no key"))
                for key in sorted(mine.state.keys() | theirs.state.keys())
                if mine.state.get(key) != theirs.state.get(key)
            }
            assert not differ, f"{where}: these keys differ (its value, then the first lane's)"
    return [check.records for check in checks]


# Which path a call took ---------------------------------------------------------------------------


def lean_by_flavour() -> dict[tuple[str, str], bool]:
    """Whether the lean path takes a plain client of each API and flavour (no connection)."""
    return {
        (api, flavour): transport.lean_available(kind(**options))
        for api, kind in (("sync", redis.Redis), ("asyncio", redis.asyncio.Redis))
        for flavour, options in FLAVOURS.items()
    }


class ScriptRoutes:
    """Counts the script calls (FCALL, EVALSHA, EVAL) each client sent through redis-py's public
    command layer, ``Redis.execute_command`` (sync and asyncio).

    The counting wraps that method on redis-py's client classes; the lean path must take the
    same clients with the wrapper as without it (checked here), or the lean lanes would be left
    out unseen.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        before = lean_by_flavour()
        self.counts: Counter[int] = Counter()
        counts = self.counts
        sync_send = redis.Redis.execute_command
        async_send = redis.asyncio.Redis.execute_command

        def spy(client: Any, *args: Any, **options: Any) -> Any:
            if args and args[0] in _SCRIPT_COMMANDS:
                counts[id(client)] += 1
            return sync_send(client, *args, **options)

        async def aspy(client: Any, *args: Any, **options: Any) -> Any:
            if args and args[0] in _SCRIPT_COMMANDS:
                counts[id(client)] += 1
            return await async_send(client, *args, **options)

        monkeypatch.setattr(redis.Redis, "execute_command", spy)
        monkeypatch.setattr(redis.asyncio.Redis, "execute_command", aspy)
        after = lean_by_flavour()
        assert after == before, (
            f"counting calls changed the clients the lean path takes: {before} -> {after}"
        )

    def expect(self, name: str, client: Any, path: str) -> None:
        """``client``'s script calls took ``path``: a ``public`` client's through the command
        layer, a ``lean`` client's none; an ``auto`` client's as the lean path where it takes
        the client, else as the public one."""
        calls = self.counts[id(client)]
        if path == "lean" or (path == "auto" and transport.lean_available(client)):
            assert calls == 0, f"{name}: {calls} script calls took the public path"
        else:
            assert calls > 0, f"{name}: no script call took the public path"

    def check(self, lanes: list[Lane]) -> None:
        """Each lane's script calls took its path (see :meth:`expect`), as functions or as
        scripts as the lane asked."""
        for lane in lanes:
            self.expect(lane.name, lane.client, lane.path)
            functions = transport.uses_functions(lane.client)
            assert functions is (lane.functions != "never"), f"{lane.name}: functions {functions}"


@contextlib.contextmanager
def closing(lanes: list[Lane]) -> Iterator[list[Lane]]:
    """Yield ``lanes``, closing their clients after."""
    try:
        yield lanes
    finally:
        for lane in lanes:
            lane.close()
