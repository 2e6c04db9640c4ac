"""How a call reaches Redis: :func:`run` and :func:`arun` send an operation's calls on a client.

An operation is a generator of calls (:mod:`.calls`); :func:`run` (a synchronous client) and
:func:`arun` (a ``redis.asyncio`` one) drive it with :func:`~.calls.drive` and
:func:`~.calls.adrive`, performing each call with :func:`execute` or :func:`aexecute`. Those
hand the call to the client's sender, chosen once per client:

- :class:`~.routing.ClusterSender` for a Redis Cluster client (slot checks, routing, writes
  that wait sent to the node that owns the slot);
- :class:`~.lean.LeanSender` for a client the lean path takes (:func:`.lean.takes`);
- :class:`~.senders.Sender`, redis-py's public command layer, for every other client.

The choice is kept here, by client, for as long as the client lives: nothing is stored on the
client object. :func:`use` overrides it. Each sender calls the package's scripts as Redis
Functions where the server takes them (:mod:`.functions`); :func:`use_functions` chooses.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from typing import Any, Literal, TypeVar

from . import lean, routing, senders
from .calls import Ask, Call, Command, Pipelined, ScriptCall, Sleep, Steps, adrive, drive
from .errors import InvalidArgumentError
from .ops.server import eviction_message, may_evict, policy_steps

logger = logging.getLogger("redis_work_queue.server")

T = TypeVar("T")
Path = Literal["auto", "public", "lean"]

#: Each client's sender, by ``id(client)``; an entry goes when its client is collected.
_SENDERS: dict[int, senders.Sender] = {}


def sender_of(db: Any) -> senders.Sender:
    """The sender of ``db``, chosen on its first call (see the module's description)."""
    found = _SENDERS.get(id(db))
    return found if found is not None else _choose(db, "auto")


def _choose(db: Any, path: Path) -> senders.Sender:
    sender: senders.Sender
    if routing.is_cluster(db):
        sender = routing.ClusterSender()
    elif path != "public" and lean.takes(db):
        sender = lean.LeanSender(db.connection_pool)
    elif path == "lean":
        raise InvalidArgumentError(
            f"the lean path does not take this client ({type(db).__name__}, redis-py "
            f"{lean.redis_version()}): use 'auto' or 'public'"
        )
    else:
        sender = senders.Sender()
    old = _SENDERS.get(id(db))
    if old is not None:  # a path chosen again keeps the mode
        sender.mode, sender.functions = old.mode, old.functions
    elif sender.mode == "auto" and _emulated(db):
        sender.functions = False  # an emulation (fakeredis) runs the scripts themselves
    key = id(db)
    if key not in _SENDERS:
        weakref.finalize(db, _SENDERS.pop, key, None)
    _SENDERS[key] = sender
    return sender


def use(db: Any, path: Path) -> None:
    """Choose how calls are sent on ``db``.

    ``"public"`` sends them through redis-py's command layer; ``"lean"`` takes the lean path,
    for the clients it was tested with; ``"auto"`` (the default) takes the lean path where it
    applies, else the public one. A Redis Cluster client always takes the public path, routed.

    Raises:
        InvalidArgumentError: ``path`` is none of those, or ``"lean"`` was asked for a client the
            lean path does not take.
    """
    if path not in ("auto", "public", "lean"):
        raise InvalidArgumentError(f"path must be 'auto', 'public' or 'lean', not {path!r}")
    _choose(db, path)


def _emulated(db: Any) -> bool:
    """Whether ``db`` talks to an emulation of Redis rather than a server (fakeredis)."""
    pool = getattr(db, "connection_pool", None)
    kind = getattr(pool, "connection_class", None)
    return "fakeredis" in getattr(kind, "__module__", "") or "fakeredis" in type(db).__module__


Mode = Literal["auto", "always", "never"]


def use_functions(db: Any, mode: Mode) -> None:
    """Choose whether the package's scripts run as Redis Functions on ``db``.

    ``"auto"`` (the default, or the ``RWQ_FUNCTIONS`` environment variable): calls go with
    FCALL to the package's function library, loaded on the server when it does not have it,
    where the server takes functions (Redis 7 and later, with FUNCTION and FCALL allowed);
    else with EVALSHA. ``"always"``: functions only (a server that refuses them raises
    :class:`~redis_work_queue.errors.ScriptError`). ``"never"``: scripts only. On a Redis
    Cluster client each FCALL goes to the primary that owns its keys' slot, and the library is
    loaded on every primary that lacks it. Pipelines and writes that wait for replicas are
    always scripts; so are calls on fakeredis under ``"auto"``. Replies and the keys written
    are the same either way.

    Raises:
        InvalidArgumentError: ``mode`` is none of those.
    """
    if mode not in senders.FUNCTION_MODES:
        raise InvalidArgumentError(f"mode must be 'auto', 'always' or 'never', not {mode!r}")
    sender = sender_of(db)
    sender.mode = mode
    sender.functions = False if mode == "never" or (mode == "auto" and _emulated(db)) else None


def uses_functions(db: Any) -> bool | None:
    """Whether calls on ``db`` go as functions: None until the server has first answered."""
    return sender_of(db).functions


def lean_available(db: Any) -> bool:
    """Whether the lean path would take ``db`` (:func:`use` it with ``"lean"``)."""
    return not routing.is_cluster(db) and lean.takes(db)


def execute(db: Any, call: Call) -> Any:
    """Send one call on a synchronous client and return its reply."""
    sender = _SENDERS.get(id(db)) or _choose(db, "auto")
    if type(call) is ScriptCall:
        if not sender.checked:
            _check_eviction(db, sender)
        if call.wait is None:
            return sender.script(db, call)
        return sender.script_and_wait(db, call)
    if type(call) is Command:
        return sender.command(db, call)
    if type(call) is Ask:
        return sender.answer(db, call)
    if type(call) is Pipelined:
        return sender.pipelined(db, call)
    assert isinstance(call, Sleep)
    time.sleep(call.seconds)
    return None


async def aexecute(db: Any, call: Call) -> Any:
    """Send one call on a ``redis.asyncio`` client and return its reply."""
    sender = _SENDERS.get(id(db)) or _choose(db, "auto")
    if type(call) is ScriptCall:
        if not sender.checked:
            await _acheck_eviction(db, sender)
        if call.wait is None:
            return await sender.ascript(db, call)
        return await sender.ascript_and_wait(db, call)
    if type(call) is Command:
        return await sender.acommand(db, call)
    if type(call) is Ask:
        return await sender.aanswer(db, call)
    if type(call) is Pipelined:
        return await sender.apipelined(db, call)
    assert isinstance(call, Sleep)
    await asyncio.sleep(call.seconds)
    return None


def _check_eviction(db: Any, sender: senders.Sender) -> None:
    """On a client's first script call: warn once when its server may evict queue keys.

    A producer that only adds (a web app) hears of it too, not only workers and ``rwq``. Where
    the policy cannot be read (CONFIG and INFO refused), or the read fails, nothing is said.
    """
    sender.checked = True
    try:
        policy = drive(policy_steps(), lambda call: sender.command(db, call))
    except Exception as err:  # a warning must never stop a write
        logger.debug("could not read the eviction policy: %s", err)
        return
    _warn(policy, sender)


async def _acheck_eviction(db: Any, sender: senders.Sender) -> None:
    """Asynchronous :func:`_check_eviction`."""
    sender.checked = True
    try:
        policy = await adrive(policy_steps(), lambda call: sender.acommand(db, call))
    except Exception as err:
        logger.debug("could not read the eviction policy: %s", err)
        return
    _warn(policy, sender)


def _warn(policy: str | None, sender: senders.Sender) -> None:
    if policy is not None and may_evict(policy) and not sender.warned:
        sender.warned = True
        logger.warning("%s", eviction_message(policy))


def run(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a synchronous client."""
    return drive(steps, lambda call: execute(db, call))


async def arun(db: Any, steps: Steps[T]) -> T:
    """Drive an operation to its end on a ``redis.asyncio`` client; as :func:`run`."""
    return await adrive(steps, lambda call: aexecute(db, call))


def queue_on(pipeline: Any, call: ScriptCall, *after: Command) -> None:
    """Queue a script call, then plain commands, on a caller's pipeline (sync or asyncio).

    Raises:
        CrossSlotError: On a Redis Cluster pipeline, the call's keys are not in one slot
            (nothing has been queued).
    """
    routing.check_pipeline(pipeline, (*call.keys, *call.slot_keys))
    senders.queue_on(pipeline, call)
    for command in after:
        pipeline.execute_command(*command.args)
