"""How a call reaches Redis: :func:`run` and :func:`arun` send an operation's calls on a client.

An operation is a generator of calls (:mod:`.calls`); :func:`run` (a synchronous client) and
:func:`arun` (a ``redis.asyncio`` one) drive it with :func:`~.calls.drive` and
:func:`~.calls.adrive`, performing each call with :func:`execute` or :func:`aexecute`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Generator
from typing import Any, Literal, TypeVar, cast

from redis import exceptions as rex

from . import cluster, replicated, scripts, wire
from .calls import Ask, Call, Command, Pipelined, ScriptCall, Sleep, Steps, adrive, drive
from .clients import max_block
from .errors import InvalidArgumentError

T = TypeVar("T")


Path = Literal["auto", "public", "lean"]


def use(db: Any, path: Path) -> None:
    """Choose how calls are sent on ``db``.

    ``"public"`` sends them through redis-py's command layer; ``"lean"`` takes the lean path,
    for the clients it was tested with; ``"auto"`` (the default) takes the lean path where it
    applies, else the public one.

    Raises:
        InvalidArgumentError: ``path`` is none of those, or ``"lean"`` was asked for a client the
            lean path does not take.
    """
    if path not in ("auto", "public", "lean"):
        raise InvalidArgumentError(f"path must be 'auto', 'public' or 'lean', not {path!r}")
    wire.FORCED.pop(db, None)
    if path == "lean" and not lean_available(db):
        raise InvalidArgumentError(
            f"the lean path does not take this client ({type(db).__name__}): use 'auto' or 'public'"
        )
    if path != "auto":
        wire.FORCED[db] = path


def lean_available(db: Any) -> bool:
    """Whether calls on ``db`` take the lean path when it is not forced off."""
    if cluster.is_cluster(db):
        return False
    pool = wire.alean_pool(db) if "asyncio" in type(db).__module__ else wire.lean_pool(db)
    return pool is not None


def answer(db: Any, ask: Ask) -> Any:
    """The answer to an operation's question about ``db``."""
    if ask.fact == "max_block":
        return max_block(db)
    clustered = cluster.is_cluster(db)
    if ask.fact == "cluster":
        return clustered
    return not clustered or cluster.same_slot(ask.keys)


def _wait_steps(db: Any, call: ScriptCall, clustered: bool) -> Generator[tuple[Any, ...], Any, Any]:
    """A script then WAIT on the same connection, sent once (see :mod:`.replicated`), as steps.

    The steps are ``("start",)`` (an asyncio cluster client sets itself up), ``("send", node)``
    (the script and its WAIT on a client of ``node``) and ``("refresh",)`` (the cluster's slot
    map is read again).

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


def execute(db: Any, call: Call) -> Any:
    """Send one call on a synchronous client and return its reply."""
    if type(call) is ScriptCall:
        clustered = cluster.is_cluster(db)
        if clustered:
            cluster.slot_of((*call.keys, *call.slot_keys))
        if call.wait is None:
            return call.script(db, call.keys, call.args)
        wait = call.wait

        def perform(step: tuple[Any, ...]) -> Any:
            if step[0] == "send":
                return replicated.script_and_wait(step[1], call.script, call.keys, call.args, wait)
            if step[0] == "refresh":
                return db.nodes_manager.initialize()
            return None  # "start": a synchronous cluster client is set up when it is made

        return drive(_wait_steps(db, call, clustered), perform)
    if type(call) is Sleep:
        time.sleep(call.seconds)
        return None
    if type(call) is Ask:
        return answer(db, call)
    if type(call) is Pipelined:
        pipe = _pipeline(db, call)
        try:
            return pipe.execute()
        except rex.ResponseError as err:
            raise scripts.translate_error(err) from err
    assert type(call) is Command
    return scripts.raw_command(db, *call.args, **_command_options(db, call))


async def aexecute(db: Any, call: Call) -> Any:
    """Send one call on a ``redis.asyncio`` client and return its reply."""
    if type(call) is ScriptCall:
        clustered = cluster.is_cluster(db)
        if clustered:
            cluster.slot_of((*call.keys, *call.slot_keys))
        if call.wait is None:
            return await call.script.acall(db, call.keys, call.args)
        wait = call.wait

        def perform(step: tuple[Any, ...]) -> Awaitable[Any]:
            if step[0] == "send":
                return replicated.ascript_and_wait(step[1], call.script, call.keys, call.args, wait)
            if step[0] == "refresh":
                return cast(Awaitable[Any], db.nodes_manager.initialize())
            return cast(Awaitable[Any], db.initialize())

        return await adrive(_wait_steps(db, call, clustered), perform)
    if type(call) is Sleep:
        await asyncio.sleep(call.seconds)
        return None
    if type(call) is Ask:
        if call.fact != "max_block" and cluster.is_cluster(db):
            await db.initialize()  # a new client reads the slot map on first use
        return answer(db, call)
    if type(call) is Pipelined:
        pipe = _pipeline(db, call)
        try:
            return await pipe.execute()
        except rex.ResponseError as err:
            raise scripts.translate_error(err) from err
    assert type(call) is Command
    if call.every_primary and cluster.is_cluster(db):
        await db.initialize()
    return await scripts.araw_command(db, *call.args, **_command_options(db, call))


def _pipeline(db: Any, call: Pipelined) -> Any:
    """A pipeline of ``db`` (sync or asyncio) with the calls queued on it, each slot checked."""
    clustered = cluster.is_cluster(db)
    pipe = db.pipeline(transaction=False)
    for each in call.calls:
        if clustered:
            cluster.slot_of((*each.keys, *each.slot_keys))
        each.script.queue_on(pipe, each.keys, each.args)
    return pipe


def _command_options(db: Any, call: Command) -> dict[str, Any]:
    """Where a plain command goes on Redis Cluster (checked for its slot first)."""
    if not cluster.is_cluster(db):
        return {}
    if call.every_primary:
        return {"target_nodes": db.get_primaries()}
    if call.route is None:
        return {}
    cluster.slot_of((call.route, *call.slot_keys))
    return cluster.target(db, call.route)


def run(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a synchronous client."""
    return drive(steps, lambda call: execute(db, call))


async def arun(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a ``redis.asyncio`` client; as :func:`run`."""
    return await adrive(steps, lambda call: aexecute(db, call))
