"""Assembles the package's Lua scripts from their files, and maps server errors back to them.

A script (``lua/<name>.lua``) and each shared piece (``lua/include/<name>.lua``) declares the
pieces it uses itself, in its leading comment block, one per line::

    --#include queue.lua

One more directive completes a line of code from the key layout (:mod:`.layout`)::

    local NAMES = {} --#layout
    local LEASE = '' --#layout lease

become ``local NAMES = {processing = ':processing', ...}`` (every row's suffix, by name) and
``local LEASE = ':lease:'`` (one row's), one line still, so that every line keeps its number:
the scripts name a queue's keys as ``QueueKeys`` does, from one table.

The loader resolves these includes recursively and expands each piece once, its own includes
first, ahead of the script's text, so a script lists only what it uses directly. It raises
:class:`~redis_work_queue.errors.LuaSourceError` when a script is loaded, before anything is
sent to Redis, for a missing or circular include (naming the chain that leads to it), and for
any line starting with ``--#`` that is not exactly such a directive: a trailing space or
carriage return, another verb, or a directive after the file's first line of code.

A script runs every line of its includes on each call, so an include's top-level definitions
(``local function name(...)`` and ``local NAME = ...``, each from its column-0 line through its
indented lines and closing ``end``/``}``) that the script does not use, directly or through
another definition it uses, are blanked out of the text sent: a script defines only what it
uses (a ``TIME`` call made to set a constant no longer runs where that constant is unused). An
include's top-level definitions must therefore have no effect but defining their name.

The assembled text keeps a map from each of its lines to a file and line, so that an error raised
by the server (``user_script:123``) also names where it comes from (``lua/include/take.lua:17``):
see :func:`locate`.

``python -m redis_work_queue.lualint`` lints every script with luacheck, and ``python -m
redis_work_queue.lualint lease`` prints the lease script as it is sent (see :mod:`.lualint`).
"""

from __future__ import annotations

import hashlib
import re
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from . import layout
from .errors import LuaSourceError

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

#: How every directive line starts; any line that starts so must be a valid directive.
DIRECTIVE = "--#"
_INCLUDE = re.compile(r"--#include ([A-Za-z0-9_]+\.lua)")
#: The one directive that ends a line of code: the key layout's names fill its table, or one
#: row's suffix its string.
_LAYOUT = re.compile(r"(local [A-Za-z_][A-Za-z0-9_]* = )(?:\{\} --#layout|'' --#layout ([a-z_]+))")
#: The directive that keeps a cache from call to call where the state lives on (see
#: :mod:`.functions`): ``local NAME = {} --#kept``.
KEPT = re.compile(r"(local [A-Za-z_][A-Za-z0-9_]* = )\{\} --#kept")
#: The same line as parsed: a script has no such cache (``false``); the library makes the table.
KEPT_PARSED = re.compile(r"(local [A-Za-z_][A-Za-z0-9_]* = )false --#kept")
#: luacheck's leave to the one long line the layout directive makes.
_LONG_LINE = " -- luacheck: no max line length"
#: Where the server says a script error happened, and which script it was: Redis writes
#: ``user_script:12: ... script: <sha1>, on @user_script:12.``; fakeredis writes ``(call to
#: f_<sha1>): @user_script:?: [string "<python>"]:12: ...``.
_POSITION = re.compile(r'(?:@?user_script|\[string "[^"]*"\]):(\d+)')
_SHA = re.compile(r"(?:script: |call to f_)([0-9a-f]{40})")


def lua_dir() -> Traversable:
    """The ``lua`` directory: inside the installed package, else at the source tree's root.

    An installed package may be a directory or a zip (shipped to Spark with ``--py-files``).
    """
    packaged = resources.files("redis_work_queue") / "lua"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "lua"


def script_names(root: Traversable | None = None) -> list[str]:
    """The names of the scripts in ``root`` (the package's ``lua`` directory by default)."""
    root = lua_dir() if root is None else root
    return sorted(p.name[: -len(".lua")] for p in root.iterdir() if p.name.endswith(".lua"))


def read(file: Traversable) -> str:
    """A file's text exactly as stored: carriage returns are kept, so a directive with one fails."""
    return file.read_bytes().decode("utf-8")


@dataclass(frozen=True)
class LuaFile:
    """One Lua file as read: the includes it declares, and its other lines.

    Attributes:
        label: The file's path from the ``lua`` directory's parent (``lua/include/take.lua``).
        includes: The include files it declares, in its order.
        lines: Each of its other lines, with its line number (trailing blank lines dropped).
    """

    label: str
    includes: tuple[str, ...]
    lines: tuple[tuple[int, str], ...]


def parse(text: str, label: str) -> LuaFile:
    """Split one file's text into its include directives and its other lines.

    A line of code ending in ``{} --#layout`` gets the key layout's names in its table, one
    ending in ``'' --#layout <row>`` that row's suffix in its string. A line
    ``local NAME = {} --#kept`` becomes ``local NAME = false --#kept``: a script has no such
    cache, while a function library makes the table once and keeps it from call to call
    (:mod:`.functions`), for values derived from the call's arguments alone.

    Raises:
        LuaSourceError: A line starting with ``--#`` is not exactly ``--#include <name>.lua``, a
            directive follows the first line of code, a file is included twice, or a line of
            code holds ``--#`` but is not ``local NAME = {} --#layout``,
            ``local NAME = '' --#layout <row>`` for a row of the layout, or
            ``local NAME = {} --#kept``.
    """
    includes: list[str] = []
    lines: list[tuple[int, str]] = []
    header = True
    for number, read_line in enumerate(text.split("\n"), 1):
        line = read_line
        code = not line.lstrip().startswith("--")
        kept = KEPT.fullmatch(line) if code else None
        if kept is not None:
            line = kept[1] + "false --#kept"
        elif code and DIRECTIVE in line:
            found = _LAYOUT.fullmatch(line)
            if found is None:
                raise LuaSourceError(
                    f"{label}:{number}: {line!r} holds '--#' after code: the one directive "
                    "there is 'local NAME = {} --#layout' or 'local NAME = '' --#layout <row>' "
                    "(nothing after it)"
                )
            if found[2] is None:
                line = found[1] + layout.lua_table() + _LONG_LINE
            else:
                line = found[1] + layout.lua_suffix(found[2], f"{label}:{number}")
        if line.lstrip().startswith(DIRECTIVE):
            match = _INCLUDE.fullmatch(line)
            if match is None:
                raise LuaSourceError(
                    f"{label}:{number}: {line!r} is not a directive: write exactly "
                    "'--#include <name>.lua' (no space around it, no carriage return)"
                )
            if not header:
                raise LuaSourceError(
                    f"{label}:{number}: {line!r} comes after code: declare includes in the "
                    "file's leading comments"
                )
            if match[1] in includes:
                raise LuaSourceError(f"{label}:{number}: {match[1]} is included twice")
            includes.append(match[1])
            continue
        if header and line.strip() and not line.lstrip().startswith("--"):
            header = False
        lines.append((number, line))
    while lines and not lines[-1][1].strip():
        lines.pop()
    return LuaFile(label, tuple(includes), tuple(lines))


@dataclass(frozen=True)
class Assembled:
    """A script as sent to Redis, with the file and line each of its lines comes from.

    Attributes:
        name: The script's name (``lease`` for ``lua/lease.lua``).
        text: The text sent: each include once, dependencies first, then the script.
        origins: For line ``n`` of ``text``, ``origins[n - 1]`` is (file label, line number).
        includes: The include files expanded, in their order in ``text``.
        sha: The SHA1 of ``text``, which the server names in its errors.
    """

    name: str
    text: str
    origins: tuple[tuple[str, int], ...]
    includes: tuple[str, ...]
    sha: str

    def origin(self, line: int) -> str | None:
        """``file:line`` for line ``line`` (from 1) of :attr:`text`; None if there is none."""
        if 1 <= line <= len(self.origins):
            label, number = self.origins[line - 1]
            return f"{label}:{number}"
        return None


#: Every script assembled in this process, by SHA1, for :func:`locate`.
_ASSEMBLED: dict[str, Assembled] = {}


def assemble(name: str, root: Traversable | None = None, *, keep_unused: bool = False) -> Assembled:
    """Assemble the script ``<root>/<name>.lua`` (``root``: the package's ``lua`` directory).

    ``keep_unused`` keeps the includes' definitions the script does not use (the linter reads
    them so; the text sent leaves them out).

    Raises:
        LuaSourceError: The script does not exist, or an include of it (at any depth) is
            missing, circular or malformed.
    """
    root = lua_dir() if root is None else root
    file = root / f"{name}.lua"
    if not file.is_file():
        raise LuaSourceError(f"no script {root.name}/{name}.lua")
    return assemble_text(read(file), name, root, keep_unused=keep_unused)


def assemble_text(
    text: str, name: str, root: Traversable | None = None, *, keep_unused: bool = False
) -> Assembled:
    """Assemble a script given as text, as if it were ``<root>/<name>.lua``.

    Raises:
        LuaSourceError: As :func:`assemble`.
    """
    root = lua_dir() if root is None else root
    parts, script = resolve(text, name, root)
    unused = set() if keep_unused else _unused(parts, script)
    lines: list[str] = []
    origins: list[tuple[str, int]] = []
    for k, part in enumerate((*parts, script)):
        for j, (number, line) in enumerate(part.lines):
            lines.append("" if (k, j) in unused else line)
            origins.append((part.label, number))
    body = "\n".join(lines) + "\n"
    sha = hashlib.sha1(body.encode("utf-8")).hexdigest()
    includes = tuple(p.label.rsplit("/", 1)[-1] for p in parts)
    assembled = Assembled(name, body, tuple(origins), includes, sha)
    _ASSEMBLED[sha] = assembled
    return assembled


def resolve(text: str, name: str, root: Traversable | None = None) -> tuple[list[LuaFile], LuaFile]:
    """A script given as text, parsed, and its includes at every depth, dependencies first.

    Raises:
        LuaSourceError: As :func:`assemble`.
    """
    root = lua_dir() if root is None else root
    script = parse(text, f"{root.name}/{name}.lua")
    parts: list[LuaFile] = []
    done: set[str] = set()

    def visit(include: str, chain: tuple[str, ...]) -> None:
        path = " -> ".join((f"{name}.lua", *chain, include))
        if include in chain:
            raise LuaSourceError(f"circular include: {path}")
        if include in done:
            return
        label = f"{root.name}/include/{include}"
        file = root / "include" / include
        if not file.is_file():
            raise LuaSourceError(f"missing include: {path} ({label} does not exist)")
        parsed = parse(read(file), label)
        for inner in parsed.includes:
            visit(inner, (*chain, include))
        done.add(include)
        parts.append(parsed)

    for include in script.includes:
        visit(include, ())
    return parts, script


#: A top-level definition that may be left out when unused: its name.
_DEFINITION = re.compile(r"local (?:function )?([A-Za-z_][A-Za-z0-9_]*)\s*(?:=|\()")
#: A line that closes the top-level statement above it.
_CLOSER = re.compile(r"(?:end|\}|\))[),]*\s*$")
#: A Lua comment to the end of its line (our scripts keep no ``--`` inside strings).
_COMMENT = re.compile(r"--.*$", re.MULTILINE)


def _definitions(part: LuaFile) -> list[tuple[str, int, int]]:
    """Each single-name top-level definition of ``part``: (name, first, end) line indexes."""
    found: list[tuple[str, int, int]] = []
    lines = part.lines
    i = 0
    while i < len(lines):
        match = _DEFINITION.match(lines[i][1])
        if match is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines):
            line = lines[end][1]
            if line[:1] in (" ", "\t"):
                end += 1
            elif _CLOSER.match(line):
                end += 1
                break
            else:
                break
        found.append((match[1], i, end))
        i = end
    return found


def _unused(parts: list[LuaFile], script: LuaFile) -> set[tuple[int, int]]:
    """The (part index, line index) pairs of the includes' definitions the script never uses."""
    defs = {
        (k, first): (name, range(first, end))
        for k, part in enumerate(parts)
        for name, first, end in _definitions(part)
    }
    inside = {(k, j) for (k, _), (_, span) in defs.items() for j in span}

    def names_in(text: str) -> set[str]:
        return set(re.findall(r"(?<![\w.:])[A-Za-z_]\w*", _COMMENT.sub("", text)))

    # What the script and the includes' other top-level code use, then what those definitions use.
    used = names_in("\n".join(line for _, line in script.lines))
    for k, part in enumerate(parts):
        used |= names_in(
            "\n".join(line for j, (_, line) in enumerate(part.lines) if (k, j) not in inside)
        )
    kept: set[tuple[int, int]] = set()
    grew = True
    while grew:
        grew = False
        for key, (name, span) in defs.items():
            if key not in kept and name in used:
                kept.add(key)
                part = parts[key[0]]
                used |= names_in("\n".join(part.lines[j][1] for j in span)) - {name}
                grew = True
    return {(key[0], j) for key, (_, span) in defs.items() if key not in kept for j in span}


def locate(message: str) -> str:
    """Prefix a script error from the server with the file and line it comes from.

    ``message`` is the server's text (``ERR user_script:40: ... script: <sha1>, on
    @user_script:40.``); when it names a script assembled in this process and a line of it,
    the result starts with that line's origin (``lua/include/take.lua:17: ERR ...``), the
    original text following unchanged. Any other message is returned as it is.
    """
    sha, position = _SHA.search(message), _POSITION.search(message)
    if sha is None or position is None:
        return message
    assembled = _ASSEMBLED.get(sha[1])
    where = assembled.origin(int(position[1])) if assembled is not None else None
    return message if where is None else f"{where}: {message}"
