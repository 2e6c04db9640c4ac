"""Operations as plain generators of Redis calls, so the logic exists once for every driver.

An operation (see :mod:`redis_work_queue.ops`) is a generator that yields the calls it needs,
one at a time, receives each reply, and finally returns its result. It does no I/O itself: a
driver sends the calls: :func:`run` on a synchronous client, :func:`arun` on a ``redis.asyncio``
one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from redis import exceptions as rex

from . import cluster, replicated, scripts, wire
from .errors import OutcomeUnknownError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScriptCall:
    """Run one of the package's scripts.

    With ``wait`` set to (replicas, timeout in ms), the script is followed by WAIT on the same
    connection (one pipeline, one round trip) and the reply is the pair (script reply, number
    of replicas that acknowledged).
    """

    script: scripts.Script
    keys: Sequence[str]
    args: Sequence[scripts.Arg]
    wait: tuple[int, int] | None = None
    #: Keys the script touches without declaring them, which must share the declared keys' slot.
    slot_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Command:
    """Send one plain command; its reply is not decoded.

    ``route`` names a key of the queue for a command that has none (SCAN): on Redis Cluster it
    goes to the node that owns that key's slot.
    """

    args: tuple[scripts.Arg, ...]
    route: str | None = None
    #: Keys that must share ``route``'s slot on Redis Cluster (checked before sending).
    slot_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait locally (no Redis call); the reply is None."""

    seconds: float


Call = ScriptCall | Command | Sleep
Steps = Generator[Call, Any, T]


def _wait_steps(db: Any, call: ScriptCall, clustered: bool) -> wire.Steps[Any]:
    """A script then WAIT on the same connection, sent once (see :mod:`.replicated`), as steps.

    The steps are ``("start",)`` (an asyncio cluster client sets itself up), ``("send", node)``
    (the script and its WAIT on a client of ``node``) and ``("refresh",)`` (the cluster's slot
    map is read again); :func:`_with_wait` and :func:`_awith_wait` perform them.

    On Redis Cluster the pair goes to a client of the node that owns the slot. A MOVED or ASK
    reply (the slot moved, or a failover promoted a replica) refreshes the slot map and sends
    it once more: the script did not run. A lost connection refreshes it too, then raises
    :class:`~redis_work_queue.errors.OutcomeUnknownError`: whether the script ran is unknown.
    """
    if clustered:
        yield ("start",)
    for attempt in (1, 2):
        node = cluster.node_client(db, call.keys[0]) if clustered else db
        try:
            return (yield ("send", node))
        except (rex.MovedError, rex.AskError):
            if not clustered or attempt == 2:
                raise
            cluster.forget_nodes(db)
            yield ("refresh",)
            continue
        except (rex.ConnectionError, rex.TimeoutError):
            if clustered:
                cluster.forget_nodes(db)
                yield ("refresh",)
            raise
        except rex.ResponseError as err:
            raise scripts.translate_error(err) from err
    raise AssertionError("unreachable")


def _with_wait(db: Any, call: ScriptCall, clustered: bool) -> Any:
    """Run a script then WAIT on the same connection, sent once; see :func:`_wait_steps`."""
    assert call.wait is not None
    wait = call.wait

    def perform(step: tuple[Any, ...]) -> Any:
        if step[0] == "send":
            return replicated.script_and_wait(step[1], call.script, call.keys, call.args, wait)
        if step[0] == "refresh":
            return db.nodes_manager.initialize()
        return None  # "start": a synchronous cluster client is set up when it is made

    return wire.drive(_wait_steps(db, call, clustered), perform)


async def _awith_wait(db: Any, call: ScriptCall, clustered: bool) -> Any:
    """Asynchronous :func:`_with_wait`."""
    assert call.wait is not None
    wait = call.wait

    def perform(step: tuple[Any, ...]) -> Awaitable[Any]:
        if step[0] == "send":
            return replicated.ascript_and_wait(step[1], call.script, call.keys, call.args, wait)
        if step[0] == "refresh":
            return cast(Awaitable[Any], db.nodes_manager.initialize())
        return cast(Awaitable[Any], db.initialize())

    return await wire.adrive(_wait_steps(db, call, clustered), perform)


def execute(db: Any, call: Call) -> Any:
    """Send one call on a synchronous client and return its reply."""
    if isinstance(call, ScriptCall):
        clustered = cluster.is_cluster(db)
        if clustered:
            cluster.slot_of((*call.keys, *call.slot_keys))
        if call.wait is None:
            return call.script(db, call.keys, call.args)
        return _with_wait(db, call, clustered)
    if isinstance(call, Sleep):
        time.sleep(call.seconds)
        return None
    if call.route is not None and cluster.is_cluster(db):
        cluster.slot_of((call.route, *call.slot_keys))
        return scripts.raw_command(db, *call.args, **cluster.target(db, call.route))
    return scripts.raw_command(db, *call.args)


def run(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a synchronous client.

    A write whose outcome is unknown is thrown into the operation, which may add what it knows
    (the chunks written before) and re-raises it.
    """
    try:
        call = next(steps)
        while True:
            try:
                reply = execute(db, call)
            except OutcomeUnknownError as err:
                call = steps.throw(err)
                continue
            call = steps.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result


async def aexecute(db: Any, call: Call) -> Any:
    """Send one call on a ``redis.asyncio`` client and return its reply."""
    if isinstance(call, ScriptCall):
        clustered = cluster.is_cluster(db)
        if clustered:
            cluster.slot_of((*call.keys, *call.slot_keys))
        if call.wait is None:
            return await call.script.acall(db, call.keys, call.args)
        return await _awith_wait(db, call, clustered)
    if isinstance(call, Sleep):
        await asyncio.sleep(call.seconds)
        return None
    if call.route is not None and cluster.is_cluster(db):
        cluster.slot_of((call.route, *call.slot_keys))
        return await scripts.araw_command(db, *call.args, **cluster.target(db, call.route))
    return await scripts.araw_command(db, *call.args)


async def arun(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a ``redis.asyncio`` client; as :func:`run`."""
    try:
        call = next(steps)
        while True:
            try:
                reply = await aexecute(db, call)
            except OutcomeUnknownError as err:
                call = steps.throw(err)
                continue
            call = steps.send(reply)
    except StopIteration as done:
        result: T = done.value
        return result
