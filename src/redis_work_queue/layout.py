"""The key layout of a queue, declared once: one row per key.

Everything else that names a queue's keys is derived from :data:`ROWS`: the attributes of
:class:`~redis_work_queue.keyprefix.QueueKeys`, :data:`RESERVED_NAMES` and :data:`PER_KEY_NAMES`
(the queue-name checks), the ``NAMES`` table of ``lua/include/queue.lua`` (the loader writes it
when it assembles a script, see :func:`lua_table`), the command line's table of key types
(:data:`KEY_TYPES`), the keys the write-check tests plant wrong types in (:func:`kinds`) and the
key table of ``docs/wire-contract.md`` (:func:`markdown_table`; a test checks that it is current).

The rows themselves are data, in ``layout.json`` beside this module (one object per key, with
the fields of :class:`KeyRow`). Adding a key is adding a row there (and, for a key named per
item, worker or batch, a method of ``QueueKeys`` that names it);
``python -m redis_work_queue.doctables`` then rewrites the table of the docs.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

from .errors import LuaSourceError

#: Which keys a row names: one key per queue, or one per item, per worker or per Spark batch.
Scope = Literal["queue", "item", "worker", "batch"]
#: Who writes a key: the queue's scripts (every operation of the API), the worker runner (its
#: heartbeat script and its light-clean turn), or the Spark data source.
Writer = Literal["scripts", "runner", "spark"]

#: The placeholder that stands for the name part of a per-key row in the docs.
PLACEHOLDERS: dict[Scope, str] = {
    "queue": "",
    "item": "<id>",
    "worker": "<worker>",
    "batch": "<batch>",
}
_SUFFIX = re.compile(r"(?::[a-z]+)+:?")


@dataclass(frozen=True)
class KeyRow:
    """One key of the layout, or one family of keys (one per item, worker or batch).

    Attributes:
        name: Its name in Python and Lua: the attribute of ``QueueKeys`` for a key of the queue,
            the method that names one key of the family for the others (``keys.item(id)``),
            and the field of the scripts' queue table (``Q.item .. id``).
        suffix: What follows the queue's prefix: ``:queue``, or ``:item:`` before an id.
        kind: The Redis type of the key: ``string``, ``list``, ``hash``, ``zset`` or ``stream``.
        scope: One key per queue, or one per item, worker or batch.
        writers: Who writes it.
        reference: Whether the reference design's layout has it (the keys every client of the
            design shares).
        description: What it holds, in one line.
        lua: Whether the scripts name it: it is then in their ``NAMES`` table (:func:`lua_table`),
            which every script call builds, so a key no script uses is left out.
    """

    name: str
    suffix: str
    kind: Literal["string", "list", "hash", "zset", "stream"]
    scope: Scope
    writers: tuple[Writer, ...]
    reference: bool
    description: str
    lua: bool = True

    def __post_init__(self) -> None:
        if _SUFFIX.fullmatch(self.suffix) is None:
            raise ValueError(f"key row {self.name}: malformed suffix {self.suffix!r}")
        if self.suffix.endswith(":") != (self.scope != "queue"):
            raise ValueError(f"key row {self.name}: a per-{self.scope} suffix ends with ':'")
        if self.scope == "queue" and self.name != self.attribute:
            raise ValueError(f"key row {self.name}: a queue's key is named for its suffix")

    @property
    def attribute(self) -> str:
        """The ``QueueKeys`` attribute holding the key (or, for a family, its prefix).

        It is the suffix's words joined by ``_``: ``spark_write``; ``dead_prefix`` for
        ``:dead:``.
        """
        words = self.suffix.strip(":").replace(":", "_")
        return words if self.scope == "queue" else f"{words}_prefix"

    @property
    def shown(self) -> str:
        """The key as the docs show it, for a queue whose prefix is ``P``."""
        return f"P{self.suffix}{PLACEHOLDERS[self.scope]}"


#: What a row of ``layout.json`` may hold, and the values it may take.
_FIELDS = {"name", "suffix", "kind", "scope", "writers", "reference", "description", "lua"}
_KINDS = ("string", "list", "hash", "zset", "stream")
_WRITERS = ("scripts", "runner", "spark")


def _row(raw: dict[str, Any]) -> KeyRow:
    """One row of ``layout.json`` as a :class:`KeyRow`, its every field checked.

    Raises:
        ValueError: A field is missing, unknown or out of its range.
    """
    if not isinstance(raw, dict) or set(raw) - _FIELDS or not _FIELDS - {"lua"} <= set(raw):
        raise ValueError(f"layout.json: a row has fields {sorted(raw)}, not {sorted(_FIELDS)}")
    writers = tuple(raw["writers"])
    texts = (raw["name"], raw["suffix"], raw["description"])
    if (
        raw["kind"] not in _KINDS
        or raw["scope"] not in PLACEHOLDERS
        or not writers
        or not set(writers) <= set(_WRITERS)
        or type(raw["reference"]) is not bool
        or type(raw.get("lua", True)) is not bool
        or not all(isinstance(text, str) for text in texts)
    ):
        raise ValueError(f"layout.json: row {raw.get('name')!r} has a value out of range")
    return KeyRow(
        raw["name"],
        raw["suffix"],
        raw["kind"],
        raw["scope"],
        writers,
        raw["reference"],
        raw["description"],
        raw.get("lua", True),
    )


#: Every key of a queue, in the order of ``QueueKeys.fixed()`` and ``QueueKeys.patterns()``:
#: the rows of ``layout.json``, which is the table to edit.
ROWS: tuple[KeyRow, ...] = tuple(
    _row(raw)
    for raw in json.loads((resources.files("redis_work_queue") / "layout.json").read_text("utf-8"))
)

#: The key the scripts are given in ``KEYS`` (every other key is named from the prefix).
MAIN = "queue"
#: The rows of one key per queue, and those of a family of keys.
FIXED: tuple[KeyRow, ...] = tuple(row for row in ROWS if row.scope == "queue")
PER_KEY: tuple[KeyRow, ...] = tuple(row for row in ROWS if row.scope != "queue")
#: The ``QueueKeys`` attributes the rows give.
ATTRIBUTES: tuple[str, ...] = tuple(row.attribute for row in ROWS)

#: The names the key layout uses after a queue's prefix: ``<prefix>:<name>`` or
#: ``<prefix>:<name>:<id>``. A queue may be named ``<prefix>:<name>`` for any name but those in
#: :data:`PER_KEY_NAMES`: its keys then never meet those of queue ``<prefix>``.
RESERVED_NAMES: tuple[str, ...] = tuple(dict.fromkeys(row.suffix.split(":")[1] for row in ROWS))
#: The names under which a queue keeps one key per item (per worker, per Spark batch), found by
#: pattern (``<prefix>:<name>:*``) by the flush and the deep clean. A queue whose name holds one
#: of them as whole segments after a colon (``x:item``, ``x:dead:y``, ``x:spark:batch``) would
#: have its keys taken for another queue's, so such names are refused.
PER_KEY_NAMES: tuple[str, ...] = tuple(row.suffix.strip(":") for row in PER_KEY)
#: The Redis type of each key of a queue that is not per item, by ``QueueKeys`` attribute.
KEY_TYPES: dict[str, str] = {row.name: row.kind for row in FIXED}


def kinds(writer: Writer) -> dict[str, str]:
    """The Redis type of each key (or family) that ``writer`` writes, by row name."""
    return {row.name: row.kind for row in ROWS if writer in row.writers}


def lua_table() -> str:
    """The scripts' ``NAMES`` table, as one Lua table constructor on one line.

    It maps the name of each row the scripts use to its suffix, but for the main queue's: that
    key is ``KEYS[i]``.
    """
    rows = (row for row in ROWS if row.lua and row.name != MAIN)
    fields = ", ".join(f"{row.name} = '{row.suffix}'" for row in rows)
    return "{" + fields + "}"


def lua_suffix(name: str, where: str) -> str:
    """The suffix of row ``name`` as a Lua string literal.

    Raises:
        LuaSourceError: No row has that name (``where`` names the line that asked).
    """
    for row in ROWS:
        if row.name == name:
            return f"'{row.suffix}'"
    raise LuaSourceError(f"{where}: the key layout has no row {name!r} (see layout.py)")


#: The lines around the generated table in the docs.
TABLE_START = "<!-- key table: made by python -m redis_work_queue.doctables -->"
TABLE_END = "<!-- end of the key table -->"


def markdown_table() -> str:
    """The key table of the docs, one row per key (or family), from :data:`ROWS`."""
    lines = [
        "| key | type | one per | written by | reference layout | holds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in ROWS:
        writers = ", ".join(row.writers)
        reference = "yes" if row.reference else ""
        lines.append(
            f"| `{row.shown}` | {row.kind} | {row.scope} | {writers} | {reference} | "
            f"{row.description} |"
        )
    return "\n".join(lines)


def with_table(text: str) -> str:
    """``text`` (a Markdown page) with the block between its table markers replaced.

    Raises:
        ValueError: The page lacks the markers.
    """
    start, end = text.find(TABLE_START), text.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the page has no key table markers: {TABLE_START} ... {TABLE_END}")
    head = text[: start + len(TABLE_START)]
    return f"{head}\n{markdown_table()}\n{text[end:]}"
