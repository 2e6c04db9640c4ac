"""The key layout is declared once (``layout.ROWS``) and everything that names keys agrees with
it: ``QueueKeys``, the queue-name checks, the scripts' ``NAMES`` (written in by the loader), the
command line's type table, the write-check table and the key table of the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import redis

from redis_work_queue import KeyPrefix, cli, doctables, layout, loader, scripts
from redis_work_queue.errors import LuaSourceError
from redis_work_queue.keyprefix import PER_KEY_NAMES, RESERVED_NAMES, QueueKeys
from redis_work_queue.layout import KeyRow
from test_write_checks import LAYOUT

ROOT = Path(__file__).resolve().parents[1]
KEYS = QueueKeys(KeyPrefix("p{t}"))


def test_queue_keys_has_one_attribute_per_row_holding_prefix_and_suffix() -> None:
    for row in layout.ROWS:
        assert getattr(KEYS, row.attribute) == "p{t}" + row.suffix, row.name
    own = {"prefix", "script_keys", "script_args", "slot_keys"}
    assert set(QueueKeys.__annotations__) == set(layout.ATTRIBUTES) | own
    assert set(QueueKeys.__slots__) == set(layout.ATTRIBUTES) | own
    assert (KEYS.prefix, KEYS.script_keys, KEYS.script_args) == ("p{t}", ("p{t}:queue",), ("p{t}",))


def test_a_family_of_keys_is_named_by_the_method_of_its_row() -> None:
    for row in layout.PER_KEY:
        assert getattr(KEYS, row.name)("x") == f"p{{t}}{row.suffix}x", row.name
    assert KEYS.dead_item("x") == "p{t}:dead:x"  # the row's name, not its suffix's


def test_fixed_keys_and_patterns_follow_the_rows() -> None:
    assert KEYS.fixed() == tuple("p{t}" + row.suffix for row in layout.FIXED)
    assert KEYS.fixed() == KEYS.slot_keys
    assert KEYS.patterns() == tuple("p{t}" + row.suffix + "*" for row in layout.PER_KEY)
    assert QueueKeys(KeyPrefix("a*")).patterns()[0] == "a\\*:item:*"
    assert [row.name for row in layout.FIXED][:2] == ["queue", "processing"]


def test_reserved_names_come_from_the_suffixes() -> None:
    assert set(RESERVED_NAMES) == {row.suffix.split(":")[1] for row in layout.ROWS}
    assert PER_KEY_NAMES == (
        "item",
        "lease",
        "dead",
        "spark:batch",
        "worker",
        "result",
        "progress",
        "group",
    )
    assert len(RESERVED_NAMES) == len(set(RESERVED_NAMES))


def test_the_reference_layout_is_the_four_keys_of_the_design() -> None:
    shared = [row.shown for row in layout.ROWS if row.reference]
    assert shared == ["P:queue", "P:processing", "P:item:<id>", "P:lease:<id>"]


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (("x", ":x:", "string", "queue", ("scripts",), False, "-"), "per-queue"),
        (("x", ":x", "string", "item", ("scripts",), False, "-"), "per-item"),
        (("x", ":Y", "string", "queue", ("scripts",), False, "-"), "malformed"),
        (("x", ":y", "string", "queue", ("scripts",), False, "-"), "named for its suffix"),
    ],
)
def test_a_malformed_row_is_refused(row: tuple[object, ...], why: str) -> None:
    with pytest.raises(ValueError, match=r"key row x"):
        KeyRow(*row)  # type: ignore[arg-type]


def test_the_tables_made_from_the_rows() -> None:
    assert {row.name: row.kind for row in layout.FIXED} == cli.KEY_TYPES
    assert {row.name: row.kind for row in layout.ROWS if "scripts" in row.writers} == LAYOUT
    assert set(LAYOUT) >= {"queue", "processing", "item", "lease", "dead_item", "counts"}


#: The fields of a script's queue table that are no key of the layout (see queue.lua, wake.lua).
QUEUE_FIELDS = {"index", "prefix", "waiting_pttl", "event_cap", "keep"}


def test_the_scripts_name_exactly_the_rows_marked_for_them() -> None:
    """Every key a script names (``q.name``, ``Q.name``) is a row marked ``lua``, and every row
    so marked is named by a script: NAMES, which every call builds, holds nothing unused."""
    used: set[str] = set()
    for path in Path(str(loader.lua_dir())).rglob("*.lua"):
        used |= set(re.findall(r"\b[qQ]\.([a-z_]+)", path.read_text("utf-8")))
    marked = {row.name for row in layout.ROWS if row.lua}
    assert used - QUEUE_FIELDS == marked
    assert re.findall(r"(\w+) = ", layout.lua_table()) == [
        row.name for row in layout.ROWS if row.lua and row.name != layout.MAIN
    ]


def test_the_scripts_get_the_names_of_every_row(bytes_db: redis.Redis) -> None:
    """The loader writes the rows into queue.lua's NAMES: the scripts name every key of the
    layout they use as QueueKeys does."""
    names = [row.name for row in layout.ROWS if row.lua]
    fields = ", ".join(f"q.{name}" for name in names)
    text = f"-- names\n--#include queue.lua\nlocal q = queue_at(1)\nreturn {{{fields}}}\n"
    script = scripts.Script("names", loader.assemble_text(text, "names").text)
    keys = QueueKeys(KeyPrefix("é{t}"))
    reply = script(bytes_db, keys.script_keys, keys.script_args)
    assert [bytes(r).decode() for r in reply] == [
        getattr(keys, row.attribute) for row in layout.ROWS if row.lua
    ]


def test_the_layout_directive_keeps_every_line_in_its_place() -> None:
    source = (loader.lua_dir() / "include" / "queue.lua").read_text("utf-8")
    assert "local NAMES = {} --#layout\n" in source
    parsed = loader.parse(source, "lua/include/queue.lua")
    assert len(parsed.lines) == len(source.rstrip("\n").split("\n")) - len(parsed.includes)
    line = next(text for _, text in parsed.lines if text.startswith("local NAMES = "))
    assert line == f"local NAMES = {layout.lua_table()} -- luacheck: no max line length"
    assert "queue = " not in layout.lua_table()  # KEYS[i] names the main queue
    for row in layout.ROWS[1:]:
        assert (f"{row.name} = '{row.suffix}'" in line) == row.lua, row.name


def test_a_key_s_suffix_is_written_in_from_its_row() -> None:
    parsed = loader.parse("-- s\nlocal LEASE = '' --#layout lease\nreturn LEASE\n", "lua/s.lua")
    assert parsed.lines[1] == (2, "local LEASE = ':lease:'")
    renew = loader.assemble("renew")
    assert renew.includes == ("cancelled.lua",)  # one name: the mark of a cancelled lease
    assert "local LEASE = ':lease:'" in renew.text.split("\n")
    with pytest.raises(LuaSourceError, match=r"lua/s\.lua:2: the key layout has no row 'nope'"):
        loader.parse("-- s\nlocal X = '' --#layout nope\nreturn X\n", "lua/s.lua")


@pytest.mark.parametrize(
    "line",
    ["local NAMES = {} --#layout ", "local NAMES = {a = 1} --#layout", "return 1 --#layout",
     "local x = 1 --#include a.lua", "local L = '' --#layout", "local L = {} --#layout lease"],
)  # fmt: skip
def test_any_other_directive_after_code_is_refused(line: str) -> None:
    with pytest.raises(LuaSourceError, match=r"lua/s\.lua:2: .* holds '--#' after code"):
        loader.parse(f"-- s\n{line}\nreturn 1\n", "lua/s.lua")


def test_the_key_table_of_the_docs_is_current() -> None:
    assert doctables.stale() == [], "run: python -m redis_work_queue.doctables"
    page = (ROOT / "docs" / "wire-contract.md").read_text("utf-8")
    table = page.split(layout.TABLE_START, 1)[1].split(layout.TABLE_END, 1)[0]
    for row in layout.ROWS:
        assert f"| `{row.shown}` | {row.kind} |" in table, row.name


def test_a_stale_key_table_is_found_and_rewritten(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "wire-contract.md"
    page.parent.mkdir()
    page.write_text(f"# t\n\n{layout.TABLE_START}\n| old |\n{layout.TABLE_END}\n\nafter\n")
    assert doctables.stale(tmp_path) == [page]
    assert doctables.write(tmp_path) == [page]
    assert doctables.stale(tmp_path) == []
    text = page.read_text("utf-8")
    assert "| old |" not in text and text.endswith(f"{layout.TABLE_END}\n\nafter\n")
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match="no key table markers"):
        doctables.stale(tmp_path)


def test_the_docs_name_every_reserved_name() -> None:
    page = (ROOT / "docs" / "wire-contract.md").read_text("utf-8")
    reserved = page.split("The names the layout uses after `P:` are reserved", 1)[1]
    reserved = reserved.split("\n\n", 1)[0]
    for name in RESERVED_NAMES:
        assert f"`{name}`" in reserved, name
    for name in PER_KEY_NAMES:
        assert f"`P:{name}:*`" in reserved, name
    refused = re.search(
        r"refused with `InvalidArgumentError`: one holding (.*?) as", reserved, re.S
    )
    assert refused is not None
    assert re.findall(r"`([a-z:]+)`", refused[1]) == list(PER_KEY_NAMES)
