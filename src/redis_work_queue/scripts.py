"""The package's Lua scripts as values: each assembled once per process from ``lua/``.

Each script in ``lua/`` is assembled with the shared pieces of ``lua/include/`` it declares
(``--#include name.lua``) by :mod:`.loader`, once per process, when it is first loaded. A
:class:`Script` only names and holds the source; the senders (:mod:`.senders`, :mod:`.lean`)
run it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from functools import cache
from typing import Any

from redis.exceptions import OutOfMemoryError, ResponseError

from . import loader
from .errors import ScriptError, WrongKeyTypeError

Arg = bytes | str | int | float


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
    if "@user_function:" in message:
        from . import functions  # noqa: PLC0415 - it imports this module's loader

        message = functions.locate(message)
    else:
        message = loader.locate(message)
    if "WRONGTYPE" in message:
        return WrongKeyTypeError(
            "a key of this queue holds a value of the wrong Redis type; nothing was changed "
            f"({message})"
        )
    return ScriptError(message)


class Script:
    """One Lua script of the package: its name, source (``script``, bytes) and SHA1.

    ``script`` and ``sha`` are the attributes redis-py's pipelines load a script by.
    ``packaged`` is True for a script of ``lua/`` as :func:`load` assembles it: a function of
    the package's library (:mod:`.functions`) runs it where the server takes functions.
    """

    __slots__ = ("name", "packaged", "script", "sha")

    def __init__(self, name: str, source: str, *, packaged: bool = False) -> None:
        self.name = name
        self.script = source.encode("utf-8")
        self.sha = hashlib.sha1(self.script).hexdigest()
        self.packaged = packaged

    def __call__(self, db: Any, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run the script on a client (sync, or awaitable on asyncio) and return its reply.

        A convenience for code outside the operations (tools, tests): it is
        :func:`~.transport.execute` of one :class:`~.calls.ScriptCall`, so it takes the same
        path as every call on that client.
        """
        from . import calls, transport  # noqa: PLC0415 - they import this module

        call = calls.ScriptCall(self, keys, args)
        if "asyncio" in type(db).__module__:
            return transport.aexecute(db, call)
        return transport.execute(db, call)

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
    return Script(name, loader.assemble(name).text, packaged=True)


def preload(client: Any) -> None:
    """Load every script of the package into the server's script cache (SCRIPT LOAD).

    Not needed in general (a missing script is sent once with EVAL), but useful to warm up a
    server, or with a server that closes the connection on a NOSCRIPT reply (the embedded
    fakeredis TCP server does).
    """
    for name in loader.script_names():
        client.script_load(load(name).script)
