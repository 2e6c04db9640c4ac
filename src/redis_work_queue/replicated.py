"""Writes that wait for replicas: the script and its WAIT, sent once on one pooled connection.

redis-py re-sends a command whose reply was lost (its ``retry`` and ``retry_on_timeout``
settings, and a pipeline's retry). For a write that waits for replicas that would run the
script a second time: an ``add_item`` would then return False for the item it added. So these
writes bypass redis-py's command layer: they take a connection from the client's pool, send
the script and WAIT in one round trip, and read both replies. A connection lost once the
script was sent raises :class:`~redis_work_queue.errors.OutcomeUnknownError`; it is never
re-sent. Connecting (before anything is sent) is left to the connection, with its own retry.

The script is loaded (SCRIPT LOAD) before its first use through a client, then sent as
EVALSHA; when the server answers NOSCRIPT all the same (the script did not run), it is sent
again as EVAL.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Generator, Sequence
from typing import Any

from redis import exceptions as rex
from redis.exceptions import NoScriptError, ResponseError

from . import scripts, wire
from .errors import OutcomeUnknownError

#: Added to the WAIT timeout when reading its reply, so that a client whose socket timeout is
#: shorter than the replica timeout still gets WAIT's answer rather than a lost reply.
WAIT_MARGIN_SECS = 1.0

_LOADED = "_rwq_loaded_scripts"
_LOST = (rex.ConnectionError, rex.TimeoutError, OSError)


_TAKES_TIMEOUT: dict[type, bool] = {}


def _takes_timeout(conn: Any) -> bool:
    """Whether this connection's ``read_response`` accepts ``timeout`` (newer redis-py)."""
    kind = type(conn)
    found = _TAKES_TIMEOUT.get(kind)
    if found is None:
        params = inspect.signature(conn.read_response).parameters
        found = _TAKES_TIMEOUT[kind] = "timeout" in params
    return found


def _wait_read_options(conn: Any, wait: tuple[int, int]) -> dict[str, Any]:
    """The read options for WAIT's reply: long enough for WAIT to answer by itself."""
    socket_timeout = getattr(conn, "socket_timeout", None)
    if socket_timeout is None or not _takes_timeout(conn):
        return {}
    return {"timeout": max(float(socket_timeout), wait[1] / 1000 + WAIT_MARGIN_SECS)}


def _commands(
    script: scripts.Script, keys: Sequence[str], args: Sequence[scripts.Arg], by_sha: bool
) -> tuple[scripts.Arg, ...]:
    params = script.params(keys, args)
    if by_sha:
        return ("EVALSHA", script.sha, *params)
    return ("EVAL", script.script, *params)


def _settle(first: BaseException | None, reply: Any, acked: Any) -> tuple[Any, int]:
    """Raise the script's error, else WAIT's, once both replies are read."""
    if first is not None:
        raise first
    if isinstance(acked, ResponseError):
        raise acked
    return reply, int(acked)


def _lost(call_name: str, first: BaseException | None, err: BaseException) -> BaseException:
    """The error for a connection lost after sending: unknown outcome unless the script failed."""
    if isinstance(first, ResponseError):
        # The script was refused (NOSCRIPT, MOVED, an error): it wrote nothing.
        return err
    return OutcomeUnknownError(call_name, err)


def _loaded(db: Any) -> set[str]:
    """The scripts loaded on ``db``'s server through this client.

    Each is loaded (SCRIPT LOAD) before its first EVALSHA, so that a NOSCRIPT reply, which
    still lets the WAIT after it run, is rare.
    """
    found: set[str] = db.__dict__.setdefault(_LOADED, set())
    return found


def _send_once(
    db: Any,
    script: scripts.Script,
    keys: Sequence[str],
    args: Sequence[scripts.Arg],
    wait: tuple[int, int],
    by_sha: bool,
) -> tuple[Any, int]:
    with wire.borrowed(db) as conn:
        return _run(conn, _exchange_steps(conn, script, keys, args, wait, by_sha))


def _exchange_steps(
    conn: Any,
    script: scripts.Script,
    keys: Sequence[str],
    args: Sequence[scripts.Arg],
    wait: tuple[int, int],
    by_sha: bool,
) -> Generator[tuple[Any, ...], Any, tuple[Any, int]]:
    """The exchange on one connection, as steps that :func:`_run` or :func:`_arun` perform.

    Each step is ``(method name, *args)`` or ``(method name, *args, keyword dict)`` of the
    connection; an error of a step is thrown back into the generator.
    """
    yield ("connect",)  # connecting sends nothing: the connection's own retry applies
    commands = [_commands(script, keys, args, by_sha), ("WAIT", *wait)]
    first: BaseException | None = None
    reply: Any = None
    try:
        yield ("send_packed_command", conn.pack_commands(commands))
        try:
            reply = yield ("read_response", {"disable_decoding": True})
        except ResponseError as err:
            first = err
        try:
            acked = yield ("read_response", _wait_read_options(conn, wait))
        except ResponseError as err:  # WAIT refused (a replica): the script's error comes first
            acked = err
    except _LOST as err:
        yield ("disconnect",)
        raise _lost(script.name, first, err) from err
    except BaseException:
        yield ("disconnect",)
        raise
    return _settle(first, reply, acked)


def _perform(conn: Any) -> Callable[[tuple[Any, ...]], Any]:
    """How a driver performs a step on ``conn``: ``(method name, *args[, keyword dict])``."""

    def perform(step: tuple[Any, ...]) -> Any:
        name, *rest = step
        if rest and isinstance(rest[-1], dict):
            return getattr(conn, name)(*rest[:-1], **rest[-1])
        return getattr(conn, name)(*rest)

    return perform


def _run(conn: Any, steps: wire.Steps[tuple[Any, int]]) -> tuple[Any, int]:
    """Perform the steps on a synchronous connection."""
    return wire.drive(steps, _perform(conn))


async def _arun(conn: Any, steps: wire.Steps[tuple[Any, int]]) -> tuple[Any, int]:
    """Perform the steps on a ``redis.asyncio`` connection."""
    return await wire.adrive(steps, _perform(conn))


def script_and_wait(
    db: Any,
    script: scripts.Script,
    keys: Sequence[str],
    args: Sequence[scripts.Arg],
    wait: tuple[int, int],
) -> tuple[Any, int]:
    """Run ``script`` then ``WAIT *wait`` on one connection of ``db``, sent once.

    Args:
        db: A synchronous ``redis.Redis`` client (plain, Sentinel-managed, or a cluster node's).
        script: The script.
        keys: Its KEYS.
        args: Its ARGV.
        wait: WAIT's arguments: replicas, timeout in ms.

    Returns:
        The script's reply (undecoded) and the number of replicas that acknowledged.

    Raises:
        OutcomeUnknownError: The connection was lost after the script was sent.
        ResponseError: The server refused the script (such as MOVED): it did not run.
    """
    loaded = _loaded(db)
    if script.sha not in loaded:
        db.script_load(script.script)  # a plain command: running it twice is harmless
        loaded.add(script.sha)
    try:
        return _send_once(db, script, keys, args, wait, by_sha=True)
    except NoScriptError:  # the server lost its scripts (a restart, a failover, SCRIPT FLUSH)
        loaded.discard(script.sha)
        return _send_once(db, script, keys, args, wait, by_sha=False)


async def _asend_once(
    db: Any,
    script: scripts.Script,
    keys: Sequence[str],
    args: Sequence[scripts.Arg],
    wait: tuple[int, int],
    by_sha: bool,
) -> tuple[Any, int]:
    async with wire.aborrowed(db) as conn:
        return await _arun(conn, _exchange_steps(conn, script, keys, args, wait, by_sha))


async def ascript_and_wait(
    db: Any,
    script: scripts.Script,
    keys: Sequence[str],
    args: Sequence[scripts.Arg],
    wait: tuple[int, int],
) -> tuple[Any, int]:
    """Asynchronous :func:`script_and_wait`, for a ``redis.asyncio`` client."""
    loaded = _loaded(db)
    if script.sha not in loaded:
        await db.script_load(script.script)
        loaded.add(script.sha)
    try:
        return await _asend_once(db, script, keys, args, wait, by_sha=True)
    except NoScriptError:
        loaded.discard(script.sha)
        return await _asend_once(db, script, keys, args, wait, by_sha=False)
