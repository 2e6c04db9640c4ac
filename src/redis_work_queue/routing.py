"""Routing on Redis Cluster: slot checks, commands without keys, and writes that wait.

A queue lives in one slot when its prefix holds a ``{hash tag}``: every script call then names
keys of that slot only (checked before it is sent), and redis-py routes it. What redis-py cannot
route by itself goes to the node that owns the queue's slot: SCAN (the deep clean, flush), and
a write followed by WAIT, which must be sent once on one connection (see :mod:`.senders`): it
goes to a plain client of that node; a MOVED or ASK reply (the slot moved, or a failover
promoted a replica) refreshes the slot map and sends it once more (the script did not run); a
lost connection refreshes it too, then raises
:class:`~redis_work_queue.errors.OutcomeUnknownError`. Pipelined adds are checked for the slot
before they are queued. :class:`ClusterSender` is the sender of every cluster client.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Generator, Sequence
from functools import lru_cache
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.cluster import ClusterPipeline as AsyncClusterPipeline
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.client import NEVER_DECODE
from redis.cluster import ClusterPipeline, RedisCluster
from redis.crc import key_slot
from redis.exceptions import ResponseError
from redis.retry import Retry

from . import functions
from .calls import Ask, Command, ScriptCall, adrive, drive
from .errors import CrossSlotError
from .scripts import Arg, translate_error
from .senders import Sender

logger = logging.getLogger("redis_work_queue.server")
#: Replies are not decoded (item data stays binary).
_RAW = {NEVER_DECODE: True}

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


def _command_options(db: Any, call: Command) -> dict[str, Any]:
    """Where a plain command goes: every primary, or the node of its route's slot."""
    if call.every_primary:
        return {"target_nodes": db.get_primaries()}
    if call.route is None:
        return {}
    slot_of((call.route, *call.slot_keys))
    return {"target_nodes": db.get_node_from_key(call.route)}


#: Errors after which redis-py has read the slot map again; a call sent to a node of the
#: caller's choice is not sent again by redis-py itself.
_UNROUTED = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.ClusterDownError,
    redis.exceptions.SlotNotCoveredError,
)


def _retries(db: Any) -> int:
    """How many times the cluster client sends a command again after a lost connection."""
    retry = getattr(db, "retry", None)
    return int(retry.get_retries()) if retry is not None else 0


class ClusterSender(Sender):
    """The sender of a Redis Cluster client (sync or asyncio): redis-py's public path, routed.

    It keeps plain clients of the nodes it sent writes that wait to (by address), each with
    its own sender (which knows the scripts loaded on that node), dropped after a failover or
    a slot move.

    Its calls go as functions (FCALL) where the servers take them, as on one server: each is
    sent to the primary that owns its keys' slot (redis-py itself would ask a node for an
    FCALL's keys on every call, a round trip more). A primary without the library (a new
    node, a failover to a replica that never had it, FUNCTION FLUSH) answers that the function
    does not exist; the library is then loaded on every primary (FUNCTION LOAD, where it is
    missing) and the call sent again. A MOVED or ASK reply is followed by redis-py (with a
    look at the keys, once). After a lost connection or a cluster that is down, redis-py has
    read the slot map again and the call is sent as a script (EVALSHA), which redis-py routes
    and sends again as many times as its ``retry`` allows, as it does for every script call;
    with no retries configured, the error is raised.
    """

    __slots__ = ("nodes",)

    def __init__(self) -> None:
        super().__init__()
        self.nodes: dict[tuple[str, int], tuple[Any, Sender]] = {}

    def check(self, db: Any, call: ScriptCall) -> None:
        """The call's keys (declared, and those it names from them) share one slot."""
        slot_of((*call.keys, *call.slot_keys))

    def route(self, db: Any, call: ScriptCall) -> dict[str, Any]:
        """Send a pipelined call to the node of its slot, named here.

        Else redis-py's cluster pipeline asks a server for the keys of each script call
        (COMMAND GETKEYS, with the script's source): one round trip per call before the
        pipeline is sent. A redirected call is sent again by redis-py, routed by its keys.
        """
        if not call.keys:
            return {}
        return {"target_nodes": db.get_node_from_key(call.keys[0])}

    def script(self, db: Any, call: ScriptCall) -> Any:
        """As :meth:`Sender.script`, its keys checked for one slot first, routed by slot."""
        slot_of((*call.keys, *call.slot_keys))
        params = call.script.params(call.keys, call.args)
        if self.functions is False or not call.script.packaged or not call.keys:
            return self.evalsha(db, call, params)
        try:
            return self._by_function(db, call, params)
        except _UNROUTED:
            if not _retries(db):
                raise
            return self.evalsha(db, call, params)

    def _by_function(self, db: Any, call: ScriptCall, params: list[Arg]) -> Any:
        name = functions.library().function(call.script.name)
        key = call.keys[0]
        return self.by_function(db, call, params, lambda: self._fcall(db, key, name, params))

    @staticmethod
    def _fcall(db: Any, key: str, name: str, params: list[Arg]) -> Any:
        node = db.get_node_from_key(key)
        return db.execute_command("FCALL", name, *params, target_nodes=node, **_RAW)

    def load(self, db: Any) -> bool:
        """Load the library on every primary that lacks it; whether to call the function now."""
        text = functions.library().text
        return drive(
            self._loads(db),
            lambda node: db.execute_command("FUNCTION", "LOAD", text, target_nodes=node, **_RAW),
        )

    def _loads(self, db: Any) -> Generator[Any, Any, bool]:
        """The loads of :meth:`load`, as steps: each primary, to send FUNCTION LOAD to."""
        for node in db.get_primaries():
            try:
                yield node
            except ResponseError as err:
                if not self.load_error(err):
                    return False
            else:
                logger.info(
                    "loaded the function library %s on %s:%s",
                    functions.library().name,
                    node.host,
                    node.port,
                )
        return True

    async def ascript(self, db: Any, call: ScriptCall) -> Any:
        """Asynchronous :meth:`script`."""
        slot_of((*call.keys, *call.slot_keys))
        params = call.script.params(call.keys, call.args)
        if self.functions is False or not call.script.packaged or not call.keys:
            return await self.aevalsha(db, call, params)
        await db.initialize()  # a new client reads the slot map on first use
        try:
            return await self._aby_function(db, call, params)
        except _UNROUTED:
            if not _retries(db):
                raise
            return await self.aevalsha(db, call, params)

    async def _aby_function(self, db: Any, call: ScriptCall, params: list[Arg]) -> Any:
        name = functions.library().function(call.script.name)
        key = call.keys[0]
        return await self.aby_function(
            db, call, params, lambda: self._afcall(db, key, name, params)
        )

    @staticmethod
    async def _afcall(db: Any, key: str, name: str, params: list[Arg]) -> Any:
        node = db.get_node_from_key(key)
        return await db.execute_command("FCALL", name, *params, target_nodes=node, **_RAW)

    async def aload(self, db: Any) -> bool:
        """Asynchronous :meth:`load`."""
        text = functions.library().text
        loaded: bool = await adrive(
            self._loads(db),
            lambda node: db.execute_command("FUNCTION", "LOAD", text, target_nodes=node, **_RAW),
        )
        return loaded

    def command(self, db: Any, call: Command) -> Any:
        """As :meth:`Sender.command`, sent to the node of its route (or every primary)."""
        return self.send(db, *call.args, **_command_options(db, call))

    async def acommand(self, db: Any, call: Command) -> Any:
        """Asynchronous :meth:`command`."""
        if call.every_primary or call.route is not None:
            await db.initialize()  # a new client reads the slot map on first use
        return await self.asend(db, *call.args, **_command_options(db, call))

    def answer(self, db: Any, ask: Ask) -> Any:
        """As :meth:`Sender.answer`: keys are named together when they share a slot."""
        if ask.fact == "max_block":
            return super().answer(db, ask)
        return ask.fact == "cluster" or same_slot(ask.keys)

    async def aanswer(self, db: Any, ask: Ask) -> Any:
        """Asynchronous :meth:`answer`."""
        if ask.fact != "max_block":
            await db.initialize()
        return self.answer(db, ask)

    def script_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """As :meth:`Sender.script_and_wait`, on a client of the node that owns the slot."""
        slot_of((*call.keys, *call.slot_keys))

        def perform(step: tuple[Any, ...]) -> Any:
            if step[0] == "send":
                node, sender = step[1]
                return sender.script_and_wait(node, call)
            if step[0] == "refresh":
                return db.nodes_manager.initialize()
            return None  # "start": a synchronous cluster client is set up when it is made

        return drive(self._waits(db, call), perform)

    async def ascript_and_wait(self, db: Any, call: ScriptCall) -> tuple[Any, int]:
        """Asynchronous :meth:`script_and_wait`."""
        slot_of((*call.keys, *call.slot_keys))

        async def perform(step: tuple[Any, ...]) -> Any:
            if step[0] == "send":
                node, sender = step[1]
                return await sender.ascript_and_wait(node, call)
            if step[0] == "refresh":
                return await db.nodes_manager.initialize()
            return await db.initialize()

        waited: tuple[Any, int] = await adrive(self._waits(db, call), perform)
        return waited

    def _waits(self, db: Any, call: ScriptCall) -> Generator[tuple[Any, ...], Any, tuple[Any, int]]:
        """The tries of a write that waits, as steps.

        The steps are ``("start",)`` (an asyncio cluster client sets itself up), ``("send",
        (node client, its sender))`` and ``("refresh",)`` (the slot map is read again).
        """
        yield ("start",)
        for attempt in (1, 2):
            node = self._node_client(db, call.keys[0])
            try:
                waited: tuple[Any, int] = yield ("send", node)
            except (redis.exceptions.MovedError, redis.exceptions.AskError):
                if attempt == 2:
                    raise
                self._forget_nodes()
                yield ("refresh",)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                self._forget_nodes()
                yield ("refresh",)
                raise
            except redis.exceptions.ResponseError as err:
                raise translate_error(err) from err
            else:
                return waited
        raise AssertionError("unreachable")

    def _node_client(self, db: Any, key: str) -> tuple[Any, Sender]:
        """A plain client (sync or asyncio, like ``db``) of the slot's primary, and its sender."""
        node = db.get_node_from_key(key)
        clients = self.nodes
        found = clients.get((node.host, node.port))
        if found is None:
            kind = redis.asyncio.Redis if isinstance(db, AsyncRedisCluster) else redis.Redis
            accepted = set(inspect.signature(kind.__init__).parameters) - {"self", "host", "port"}
            settings = getattr(db.nodes_manager, "connection_kwargs", None) or getattr(
                db, "connection_kwargs", {}
            )
            kwargs = {k: v for k, v in settings.items() if k in accepted and k != "retry"}
            # No automatic retry: a write followed by WAIT must not run twice when the reply of
            # the first run was lost (it is sent on a connection of this client).
            if isinstance(db, AsyncRedisCluster):
                client: Any = redis.asyncio.Redis(
                    host=node.host, port=node.port, retry=AsyncRetry(NoBackoff(), 0), **kwargs
                )
            else:
                client = redis.Redis(
                    host=node.host, port=node.port, retry=Retry(NoBackoff(), 0), **kwargs
                )
            found = clients[(node.host, node.port)] = (client, Sender("never"))
        return found

    def _forget_nodes(self) -> None:
        """Drop the cached node clients (after a failover or a slot move).

        Synchronous clients are closed; asyncio ones are left to be collected.
        """
        clients = self.nodes
        for client, _ in clients.values():
            if isinstance(client, redis.Redis):
                with contextlib.suppress(redis.RedisError, OSError):  # the node may be gone
                    client.close()
        clients.clear()
