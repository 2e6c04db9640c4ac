"""The package's scripts as one Redis Functions library (Redis 7 and later), built from ``lua/``.

Every script of ``lua/`` becomes a function of one library, generated when it is first needed
from the same files the scripts are assembled from (:mod:`.loader`), so the library and the
scripts cannot differ. What a script sent with EVAL runs on every call, the library runs once,
when the server loads it:

- each top-level ``local function`` of the includes is defined once for the whole library;
- each constant of the includes (a string, a number, or a table no code changes) likewise,
  and each table marked ``--#kept`` (a cache of values derived from a call's arguments alone,
  such as a queue's key names: it is kept from call to call, where a script has none);
- every other top-level value of the includes (``local NQ = #KEYS``, ``local SIZES = {}``, a
  ``TIME`` read) is declared once and set again at the start of each call of a function that
  uses it, in its file's order, so each call starts from the values an EVAL would have;
- ``KEYS`` and ``ARGV`` are the library's own two upvalues, set from the call's keys and
  arguments first (Redis runs one call at a time, so no call sees another's).

An include whose top level holds code other than definitions, a name defined by two includes,
and whatever depends on them, stay inside each function as they are in the script (run on each
call), so the library behaves as the scripts do whatever the includes hold. The script's own
text follows unchanged inside its function.

The library is versioned: its name and its functions' names carry the first 12 hex digits of
the SHA1 of its text (``rwq_<version>``, ``rwq_<version>_lease``), so that clients of two
releases of the package (a rolling upgrade) each call their own library on one server, and a
library, once loaded, never changes. The senders (:mod:`.senders`, :mod:`.lean`,
:mod:`.routing`) load it on a server that does not have it (``FUNCTION LOAD``, again after a
``FUNCTION FLUSH``, a restart without persistence or a failover to a node without it) and call
it with ``FCALL``; :func:`install` and :func:`status` are ``rwq functions install|status``.

Functions of the scripts that never write (by the operations registry, :mod:`.ops.registry`)
are flagged ``no-writes``: they run on replicas and on a server out of memory, as those scripts
do. Every other function is refused as a whole on a server out of memory (scripts are refused
at their first write): nothing is written either way.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from . import loader

#: The prefix of the library's name and its functions'.
PREFIX = "rwq"
#: A name in Lua code (not a field after ``.`` or ``:``).
_NAME = re.compile(r"(?<![\w.:])[A-Za-z_]\w*")
#: A value that needs nothing but the text of the library to be made once.
_LITERAL = re.compile(r"""\s*(?:-?\d+(?:\.\d+)?|'[^'\\]*'|"[^"\\]*"|true|false|nil)\s*""")
#: A call or a read of the call's keys in a table's text (``function(`` taken out first).
_CALL = re.compile(r"[\w\]\)'\"]\s*\(|\bredis\.|\bKEYS\b|\bARGV\b")
_FUNCTION = re.compile(r"\bfunction\s*\(")
#: Where Redis says a function's error happened: ``script: rwq_<version>_<name>, on
#: @user_function:<line>.``
_POSITION = re.compile(r"script: (" + PREFIX + r"_[0-9a-f]{12})_\w+, on @user_function:(\d+)")


@dataclass(frozen=True)
class Library:
    """The library as loaded: its name, text, functions and where each line comes from.

    Attributes:
        name: ``rwq_<version>``.
        version: The first 12 hex digits of the SHA1 of :attr:`text`'s code.
        text: The text sent by ``FUNCTION LOAD`` (its first line is ``#!lua name=<name>``).
        functions: Each script's function name, by script name.
        read_only: The scripts whose functions are flagged ``no-writes``.
        origins: For line ``n`` of :attr:`text`, ``origins[n - 1]`` is (file label, line).
    """

    name: str
    version: str
    text: str
    functions: dict[str, str] = field(hash=False)
    read_only: frozenset[str]
    origins: tuple[tuple[str, int], ...]

    def function(self, script: str) -> str:
        """The name of the function of ``lua/<script>.lua``."""
        return self.functions[script]

    def origin(self, line: int) -> str | None:
        """``file:line`` for line ``line`` (from 1) of :attr:`text`; None if there is none."""
        if 1 <= line <= len(self.origins):
            label, number = self.origins[line - 1]
            return f"{label}:{number}" if number else None
        return None


@dataclass
class _Definition:
    """One top-level definition of an include: how the library makes it."""

    name: str
    label: str
    lines: list[tuple[int, str]]
    #: 'function', 'constant' (made once), 'value' (set on each call) or 'inline' (kept as it is
    #: inside each function that uses it).
    kind: str
    uses: set[str]


def _names(text: str) -> set[str]:
    return set(_NAME.findall(loader._COMMENT.sub("", text)))


def _changed(name: str, texts: Iterable[str]) -> bool:
    """Whether any of ``texts`` assigns ``name`` or a field of it, or hands it to ``table.*``."""
    pattern = re.compile(
        rf"(?<![\w.:]){re.escape(name)}\s*(?:\[[^\]]*\]|\.\w+)*\s*=(?!=)"
        rf"|(?:table\.\w+|rawset)\(\s*{re.escape(name)}\b"
    )
    return any(pattern.search(loader._COMMENT.sub("", text)) for text in texts)


def _classify(parts: list[loader.LuaFile], scripts: Sequence[loader.LuaFile]) -> list[_Definition]:
    """Every include's definitions, in the library's order, each with its kind."""
    found: list[_Definition] = []
    defined: dict[str, int] = {}
    inline: set[str] = set()
    for part in parts:
        spans = loader._definitions(part)
        inside = {j for _, first, end in spans for j in range(first, end)}
        stray = [
            line
            for j, (_, line) in enumerate(part.lines)
            if j not in inside and line.strip() and not line.lstrip().startswith("--")
        ]
        for name, first, end in spans:
            lines = list(part.lines[first:end])
            defined[name] = defined.get(name, 0) + 1
            found.append(_Definition(name, part.label, lines, "value", set()))
            if stray:
                inline.add(name)
        if stray:  # top-level code that is no definition: the whole file stays per call
            found.append(_Definition("", part.label, list(part.lines), "inline", set()))
            inline |= _names("\n".join(stray))
    inline |= {name for name, times in defined.items() if times > 1}
    names = set(defined)
    texts = [line for part in (*parts, *scripts) for _, line in part.lines]
    for each in found:
        text = "\n".join(line for _, line in each.lines)
        each.uses = (_names(text) & names) - {each.name}
        if each.kind == "inline":
            continue
        head = each.lines[0][1]
        if head.startswith("local function "):
            each.kind = "function"
            continue
        kept = loader.KEPT_PARSED.fullmatch(head)
        if kept is not None:  # a cache, made once and kept from call to call
            each.kind = "constant"
            each.lines = [(each.lines[0][0], kept[1] + "{} --#kept")]
            continue
        value = text.split("=", 1)[1]
        own = {line for _, line in each.lines}
        others = [t for t in texts if t not in own]
        made_once = _LITERAL.fullmatch(value) or (
            value.lstrip().startswith("{") and not _CALL.search(_FUNCTION.sub("", value))
        )
        if made_once and not _changed(each.name, others):
            each.kind = "constant"
    # What depends on a name kept inline is kept inline too; a constant made of a value set on
    # each call is such a value too.
    grew = True
    while grew:
        grew = False
        for each in found:
            if each.kind in ("function", "constant", "value") and each.uses & inline:
                each.kind = "inline"
                inline.add(each.name)
                grew = True
            elif each.kind == "constant" and any(
                other.kind in ("value", "inline") for other in found if other.name in each.uses
            ):
                each.kind = "value"
                grew = True
    return found


def _read_only() -> frozenset[str]:
    """The scripts no writing operation runs, by the operations registry."""
    from .ops import registry  # noqa: PLC0415 - the registry imports the operations

    ops = registry.operations().values()
    writing = {script for op in ops if op.writes for script in op.scripts}
    return frozenset(script for op in ops if not op.writes for script in op.scripts) - writing


def build(
    root: Any = None, names: Sequence[str] | None = None, read_only: Iterable[str] | None = None
) -> Library:
    """Build the library of the scripts ``names`` of ``root`` (by default every script of ``lua/``).

    Raises:
        LuaSourceError: A script or include is missing, circular or malformed.
    """
    root = loader.lua_dir() if root is None else root
    names = loader.script_names(root) if names is None else names
    quiet = _read_only() if read_only is None else frozenset(read_only)
    resolved = {
        name: loader.resolve(loader.read(root / f"{name}.lua"), name, root) for name in names
    }
    parts: list[loader.LuaFile] = []
    for script_parts, _ in resolved.values():
        for part in script_parts:
            if all(part.label != seen.label for seen in parts):
                parts.append(part)
    definitions = _classify(parts, [script for _, script in resolved.values()])
    lines: list[str] = []
    origins: list[tuple[str, int]] = []

    def emit(text: str, label: str = "", number: int = 0) -> None:
        lines.append(text)
        origins.append((label, number))

    emit("local KEYS, ARGV")
    declared = [d.name for d in definitions if d.kind == "value"]
    for start in range(0, len(declared), 50):
        emit("local " + ", ".join(declared[start : start + 50]))
    for each in definitions:
        if each.kind in ("function", "constant"):
            for number, line in each.lines:
                emit(line, each.label, number)
    functions: dict[str, str] = {}
    bodies: list[tuple[str, list[tuple[str, str, int]]]] = []
    for name, (script_parts, script) in resolved.items():
        unused = loader._unused(script_parts, script)
        kept = {
            (part.label, number)
            for k, part in enumerate(script_parts)
            for j, (number, _) in enumerate(part.lines)
            if (k, j) not in unused
        }
        labels = {part.label for part in script_parts}
        body: list[tuple[str, str, int]] = []
        for each in definitions:
            if each.label not in labels or each.kind in ("function", "constant"):
                continue
            used = [(n, line) for n, line in each.lines if (each.label, n) in kept]
            if each.kind == "value" and used:
                first, rest = used[0], used[1:]
                body.append((first[1].replace("local ", "", 1), each.label, first[0]))
                body += ((line, each.label, n) for n, line in rest)
            elif each.kind == "inline":
                body += ((line, each.label, n) for n, line in used)
        body += ((line, script.label, n) for n, line in script.lines)
        bodies.append((name, body))
    code = "\n".join(lines) + "".join(line for _, body in bodies for line, _, _ in body)
    version = hashlib.sha1(
        (code + "".join(sorted(quiet & set(names)))).encode("utf-8")
    ).hexdigest()[:12]
    library = f"{PREFIX}_{version}"
    for name, body in bodies:
        function = functions[name] = f"{library}_{name}"
        flags = ", flags = {'no-writes'}" if name in quiet else ""
        emit(f"redis.register_function{{function_name = '{function}'{flags}, callback = ")
        emit("function(keys, args)")
        emit("KEYS, ARGV = keys, args")
        for line, label, number in body:
            emit(line, label, number)
        emit("end}")
    text = f"#!lua name={library}\n" + "\n".join(lines) + "\n"
    return Library(
        library,
        version,
        text,
        functions,
        quiet & frozenset(names),
        (("", 0), *origins),
    )


@cache
def library() -> Library:
    """The library of every script of ``lua/``, built once per process."""
    built = build()
    _LIBRARIES[built.name] = built
    return built


#: Every library built in this process, by name, for :func:`locate`.
_LIBRARIES: dict[str, Library] = {}


def locate(message: str) -> str:
    """Prefix a function's error from the server with the file and line it comes from.

    As :func:`.loader.locate`, for ``... script: rwq_<version>_<name>, on @user_function:<n>.``
    """
    found = _POSITION.search(message)
    if found is None:
        return message
    built = _LIBRARIES.get(found[1])
    where = built.origin(int(found[2])) if built is not None else None
    return message if where is None else f"{where}: {message}"


# What the server said ----------------------------------------------------------------------------


def missing(err: BaseException) -> bool:
    """Whether a server error says the function called does not exist there (it did not run)."""
    return "Function not found" in str(err) or "function not found" in str(err)


def refused(err: BaseException) -> bool:
    """Whether a server error refuses Redis Functions altogether.

    Redis 6, or an emulation without FUNCTION or FCALL, or an ACL user not allowed them.
    """
    text = str(err).lower()
    return (
        text.startswith("noperm")
        or "unknown command" in text
        or "unknown subcommand" in text
        or "no permissions" in text
    )


def already_loaded(err: BaseException) -> bool:
    """Whether FUNCTION LOAD failed only because the library is there already (a race)."""
    return "already exists" in str(err)


# Operators: loading ahead, and what a server holds -----------------------------------------------


@dataclass(frozen=True)
class NodeStatus:
    """The package's libraries on one server.

    Attributes:
        node: The server, ``host:port`` (``redis`` for a client of one server).
        loaded: Whether this release's library (:func:`library`) is there.
        libraries: Every library of the package there (``rwq_<version>``), this one included.
    """

    node: str
    loaded: bool
    libraries: tuple[str, ...]


def _nodes(db: Any) -> list[tuple[str, Any]]:
    """``(name, target)`` of each server to act on: every primary of a cluster, else ``db``."""
    from . import routing  # noqa: PLC0415 - routing imports the senders, which import this

    if routing.is_cluster(db):
        return [(f"{node.host}:{node.port}", node) for node in db.get_primaries()]
    return [("redis", None)]


def _on(db: Any, target: Any, *args: Any) -> Any:
    if target is None:
        return db.execute_command(*args)
    return db.execute_command(*args, target_nodes=target)


def install(db: Any) -> list[NodeStatus]:
    """Load this release's library on the server (every primary of a cluster): FUNCTION LOAD.

    A server that has it already is left as it is. Libraries of other releases stay (clients
    of those releases call them); ``FUNCTION DELETE rwq_<version>`` removes one that no client
    calls any more.

    Raises:
        redis.exceptions.ResponseError: A server refused FUNCTION LOAD (Redis 6, an ACL).
    """
    from redis.exceptions import ResponseError  # noqa: PLC0415

    built = library()
    for _, target in _nodes(db):
        try:
            _on(db, target, "FUNCTION", "LOAD", built.text)
        except ResponseError as err:
            if not already_loaded(err):
                raise
    return status(db)


def status(db: Any) -> list[NodeStatus]:
    """The package's libraries on the server (on every primary of a cluster)."""
    built = library()
    out = []
    for name, target in _nodes(db):
        reply = _on(db, target, "FUNCTION", "LIST", "LIBRARYNAME", f"{PREFIX}_*")
        names = sorted(found for found in (_library_name(entry) for entry in reply or ()) if found)
        out.append(NodeStatus(name, built.name in names, tuple(names)))
    return out


def _library_name(entry: Any) -> str | None:
    """A library's name from one entry of FUNCTION LIST (RESP2: a flat list; RESP3: a map)."""
    if isinstance(entry, dict):
        pairs = list(entry.items())
    else:
        pairs = list(zip(entry[::2], entry[1::2], strict=False))
    for raw, value in pairs:
        key = raw.decode() if isinstance(raw, bytes) else raw
        if key == "library_name":
            name = value.decode() if isinstance(value, bytes) else str(value)
            return name if re.fullmatch(PREFIX + r"_[0-9a-f]{12}", name) else None
    return None
