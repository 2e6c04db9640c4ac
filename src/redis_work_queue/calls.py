"""The calls an operation makes, as plain values: the one vocabulary between operations and Redis.

An operation (see :mod:`redis_work_queue.ops`) is a generator that yields calls, one at a time,
receives each reply, and finally returns its result. It does no I/O and never sees a client: a
driver of :mod:`.transport` sends each call (:func:`~.transport.run` on a synchronous client,
:func:`~.transport.arun` on a ``redis.asyncio`` one) and answers the questions an operation asks
about the client it runs on (:class:`Ask`).

:func:`drive` and :func:`adrive` are the package's one pair of drivers: they run any generator of
steps to its end, each step performed by a function given to them. Every loop of the package
that alternates between deciding and doing (an operation, the worker runner's loops, an
exchange on one connection) is driven by them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from . import scripts
from .keyprefix import QueueKeys

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

    @classmethod
    def on(
        cls, keys: QueueKeys, name: str, *args: scripts.Arg, wait: tuple[int, int] | None = None
    ) -> ScriptCall:
        """Script ``name`` of ``lua/`` on one queue: the queue's KEYS and ARGV, then ``args``."""
        return cls(
            scripts.load(name), keys.script_keys, (*keys.script_args, *args), wait, keys.slot_keys
        )


@dataclass(frozen=True, slots=True)
class Command:
    """Send one plain command; its reply is not decoded.

    ``route`` names a key of the queue for a command that has none (SCAN): on Redis Cluster it
    goes to the node that owns that key's slot. ``every_primary`` sends it to every primary of
    a cluster instead (the reply is then a dict, node name -> reply).
    """

    args: tuple[scripts.Arg, ...]
    route: str | None = None
    #: Keys that must share ``route``'s slot on Redis Cluster (checked before sending).
    slot_keys: tuple[str, ...] = ()
    every_primary: bool = False


@dataclass(frozen=True, slots=True)
class Sleep:
    """Wait locally (no Redis call); the reply is None."""

    seconds: float


#: What an operation may ask about the client it runs on:
#: ``"max_block"``: the longest single blocking command that fits in the client's socket
#: timeout, in seconds (a float);
#: ``"together"``: whether ``keys`` can be named in one script call (always on one server; on
#: Redis Cluster when they share a slot), a bool;
#: ``"cluster"``: whether the client is a Redis Cluster client, a bool.
Fact = Literal["max_block", "together", "cluster"]


@dataclass(frozen=True, slots=True)
class Ask:
    """Ask the driver a fact about its client (see :data:`Fact`); the reply is the answer."""

    fact: Fact
    keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Pipelined:
    """Send independent script calls together, in one round trip (not a transaction).

    The reply is the list of their replies, in order. Each call is checked for its cluster slot
    before anything is sent.
    """

    calls: tuple[ScriptCall, ...]


Call = ScriptCall | Command | Sleep | Ask | Pipelined
#: An operation: yields calls, receives their replies, returns its result.
Steps = Generator[Call, Any, T]


async def _loop(steps: Generator[Any, Any, T], perform: Callable[[Any], Any], wait: bool) -> T:
    """The package's one loop of steps, behind :func:`drive` and :func:`adrive`.

    It runs ``steps`` to their end, each performed by ``perform`` (its result awaited when
    ``wait``), and returns what they return. The result of a step is sent back into the steps;
    its exception is thrown in, where the steps may handle it or clean up (such as
    disconnecting) before they re-raise it.
    """
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            result: T = done.value
            return result
        try:
            reply = perform(step)
            if wait:
                reply = await reply
            error = None
        except BaseException as err:  # handed back to the steps, which re-raise it
            reply, error = None, err


def drive(steps: Generator[Any, Any, T], perform: Callable[[Any], Any]) -> T:
    """Run ``steps`` to their end in this thread, each step performed by ``perform``.

    The loop is :func:`adrive`'s; nothing in it waits, so one ``send`` runs it to its end.
    """
    loop = _loop(steps, perform, False)
    try:
        loop.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    loop.close()
    raise RuntimeError("a step of a synchronous driver waited")  # pragma: no cover


async def adrive(steps: Generator[Any, Any, T], perform: Callable[[Any], Awaitable[Any]]) -> T:
    """Run ``steps`` to their end on an event loop, awaiting ``perform`` for each step."""
    return await _loop(steps, perform, True)
