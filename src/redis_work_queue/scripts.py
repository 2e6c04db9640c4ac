"""Finds the Lua scripts shipped with the package and runs them with one round trip each.

Each script in ``lua/`` is assembled with the shared pieces of ``lua/include/`` it declares
(``--#include name.lua``) by :mod:`.loader`, once per process, when it is first loaded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from typing import Any, cast

from redis.client import NEVER_DECODE
from redis.exceptions import NoScriptError, OutOfMemoryError, ResponseError

from . import loader, wire
from .errors import ScriptError, WrongKeyTypeError

Arg = bytes | str | int | float


def raw_command(client: Any, *args: Arg, **options: Any) -> Any:
    """Send one command whose reply must not be decoded (ids and data are bytes).

    Raises:
        WrongKeyTypeError: A key holds the wrong Redis type.
        redis.exceptions.OutOfMemoryError: The server refused a write for lack of memory.
    """
    try:
        return client.execute_command(*args, **options, **{NEVER_DECODE: True})
    except NoScriptError:
        raise
    except ResponseError as err:
        raise translate_error(err) from err


async def araw_command(client: Any, *args: Arg, **options: Any) -> Any:
    """Asynchronous :func:`raw_command`, for a ``redis.asyncio`` client."""
    try:
        return await client.execute_command(*args, **options, **{NEVER_DECODE: True})
    except NoScriptError:
        raise
    except ResponseError as err:
        raise translate_error(err) from err


def translate_error(err: ResponseError) -> Exception:
    """Turn a server error raised by a script into the exception the caller gets.

    A script refused because the server is out of memory (``maxmemory`` with the
    ``noeviction`` policy) stays redis-py's :class:`redis.exceptions.OutOfMemoryError`: Redis
    refuses a script only at its first write, so nothing was changed, and the caller may retry
    once memory is freed. A key of the wrong type gives :class:`WrongKeyTypeError`, anything
    else :class:`ScriptError`; their message starts with the file and line of ``lua/`` the
    error comes from, when the server names one (see :func:`.loader.locate`).
    """
    message = str(err)
    if isinstance(err, OutOfMemoryError) or message.startswith("OOM "):
        return OutOfMemoryError(message)
    message = loader.locate(message)
    if "WRONGTYPE" in message:
        return WrongKeyTypeError(
            "a key of this queue holds a value of the wrong Redis type; nothing was changed "
            f"({message})"
        )
    return ScriptError(message)


class Script:
    """One Lua script of the package, run through EVALSHA with a fallback to EVAL.

    Replies are never decoded by the client, so item data stays binary even on a connection with
    ``decode_responses=True``.
    """

    __slots__ = ("_heads", "name", "script", "sha")

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.script = source.encode("utf-8")
        self.sha = hashlib.sha1(self.script).hexdigest()
        self._heads = wire.Heads(self.sha, self.script)

    def __call__(self, client: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script on a synchronous Redis client.

        A stock client sends it on a connection of its pool, the command prefix packed once
        (see :mod:`.wire`); any other goes through redis-py's command layer.

        Raises:
            WrongKeyTypeError: A key of the queue holds the wrong Redis type.
            redis.exceptions.OutOfMemoryError: The server refused the script for lack of memory
                (``maxmemory`` with ``noeviction``); nothing was changed.
            ScriptError: Any other error raised by the script.
        """
        pool = wire.lean_pool(client)
        packed = None if pool is None else self._heads.packed(True, keys, args)
        if packed is None:
            params = self.params(keys, args)
            try:
                return raw_command(client, "EVALSHA", self.sha, *params)
            except NoScriptError:
                return raw_command(client, "EVAL", self.script, *params)
        try:
            try:
                return wire.send(pool, packed)
            except NoScriptError:
                return wire.send(pool, cast(list[bytes], self._heads.packed(False, keys, args)))
        except ResponseError as err:
            raise translate_error(err) from err

    async def acall(self, client: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script on a ``redis.asyncio`` client; as :meth:`__call__`."""
        pool = wire.alean_pool(client)
        packed = None if pool is None else self._heads.packed(True, keys, args)
        if packed is None:
            params = self.params(keys, args)
            try:
                return await araw_command(client, "EVALSHA", self.sha, *params)
            except NoScriptError:
                return await araw_command(client, "EVAL", self.script, *params)
        try:
            try:
                return await wire.asend(pool, packed)
            except NoScriptError:
                eval_packed = cast(list[bytes], self._heads.packed(False, keys, args))
                return await wire.asend(pool, eval_packed)
        except ResponseError as err:
            raise translate_error(err) from err

    def queue_on(self, pipeline: Any, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue the script on a pipeline (sync or asyncio); it is loaded before it runs.

        A cluster pipeline cannot load scripts ahead, so it gets the source (EVAL).
        """
        params = self.params(keys, args)
        if hasattr(pipeline, "scripts"):
            pipeline.scripts.add(cast(Any, self))
            pipeline.execute_command("EVALSHA", self.sha, *params, **{NEVER_DECODE: True})
        else:
            pipeline.execute_command("EVAL", self.script, *params, **{NEVER_DECODE: True})

    @staticmethod
    def params(keys: Sequence[str], args: Sequence[Arg]) -> list[Arg]:
        """EVAL's arguments after the script: the number of keys, the keys, then ``args``."""
        # Text is encoded here (surrogateescape: ids read back from Redis round-trip as bytes).
        return [
            len(keys),
            *[k.encode("utf-8", "surrogateescape") for k in keys],
            *[a.encode("utf-8", "surrogateescape") if type(a) is str else a for a in args],
        ]

    def __repr__(self) -> str:
        return f"Script({self.name!r}, sha={self.sha[:12]})"


@cache
def load(name: str) -> Script:
    """Return the script ``lua/<name>.lua``, assembled with its includes once per process.

    Raises:
        LuaSourceError: The script or one of its includes is missing, or an include is circular
            or malformed (see :mod:`.loader`).
    """
    return Script(name, loader.assemble(name).text)


def preload(client: Any) -> None:
    """Load every script of the package into the server's script cache (SCRIPT LOAD).

    Not needed in general (a missing script is sent once with EVAL), but useful to warm up a
    server, or with a server that closes the connection on a NOSCRIPT reply (the embedded
    fakeredis TCP server does).
    """
    for name in loader.script_names():
        client.script_load(load(name).script)
