"""The Lua loader: includes resolved recursively and once each, strict directives, errors that
name the file and line they come from, and luacheck over the scripts as Redis runs them."""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue, lualint, scripts, transport
from redis_work_queue.calls import ScriptCall
from redis_work_queue.errors import LuaSourceError, ScriptError, WrongKeyTypeError
from redis_work_queue.loader import assemble, assemble_text, locate, lua_dir, parse, script_names

REPO = Path(__file__).resolve().parents[1]


def _write(root: Path, files: dict[str, str]) -> Path:
    """A lua directory under ``root`` holding ``files`` (paths relative to it)."""
    lua = root / "lua"
    (lua / "include").mkdir(parents=True)
    for name, text in files.items():
        (lua / name).write_text(text, "utf-8")
    return lua


def read_label(label: str) -> str:
    """The text of a package Lua file named by its label (``lua/include/take.lua``)."""
    return (lua_dir().joinpath(*label.split("/")[1:])).read_text("utf-8")


def _body(name: str) -> str:
    """An include's text without its directive lines, as the loader expands it."""
    parsed = parse((lua_dir() / "include" / name).read_text("utf-8"), name)
    return "\n".join(line for _, line in parsed.lines)


# Every script of the package ----------------------------------------------------------------


def test_every_script_loads_on_a_real_server_with_each_include_once(real_db: redis.Redis) -> None:
    includes = sorted(p.name for p in (lua_dir() / "include").iterdir())
    names = script_names()
    assert "lease" in names
    assert len(names) == len(list(Path(str(lua_dir())).glob("*.lua")))
    for name in names:
        script = scripts.load(name)
        text = script.script.decode()
        assert not [line for line in text.splitlines() if line.lstrip().startswith("--#")], name
        assert real_db.script_load(text) == script.sha, name
        assembled = assemble(name)
        expanded = assembled.includes
        assert len(expanded) == len(set(expanded)), name
        for include in includes:
            # Each include's header (its first line) once; its unused definitions blanked.
            header = _body(include).split("\n", 1)[0]
            assert text.count(header) == (include in expanded), (name, include)
        sources = {label: parse(read_label(label), label).lines for label, _ in assembled.origins}
        for line, (label, number) in zip(text.split("\n"), assembled.origins, strict=False):
            assert line in ("", dict(sources[label])[number]), (name, label, number)


def test_includes_are_resolved_recursively_dependencies_first() -> None:
    # lease.lua declares delay.lua but not hold.lua: stray.lua brings it, after its own needs;
    # take.lua brings events.lua.
    assert assemble("lease").includes == (
        "queue.lua",
        "wake.lua",
        "group.lua",
        "delay.lua",
        "events.lua",
        "take.lua",
        "hold.lua",
        "stray.lua",
        "finish.lua",
        "rate.lua",
    )
    # complete.lua needs the layout and finish.lua, which needs the layout too.
    assert assemble("complete").includes == (
        "queue.lua",
        "events.lua",
        "wake.lua",
        "group.lua",
        "finish.lua",
    )
    assert assemble("renew").includes == ("cancelled.lua",)


def test_each_file_declares_its_own_includes_at_its_top() -> None:
    for path in [*Path(str(lua_dir())).glob("*.lua"), *Path(str(lua_dir())).glob("include/*")]:
        lines = path.read_text("utf-8").split("\n")
        first_code = next(i for i, line in enumerate(lines) if not line.startswith("--"))
        assert lines[0].startswith("-- "), path  # a header names the file's purpose first
        assert not [line for line in lines[first_code:] if line.startswith("--#")], path


def _header(path: Path) -> list[str]:
    lines = path.read_text("utf-8").split("\n")
    return lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]


def _in_order(header: list[str], starts: list[str]) -> bool:
    """Whether ``header`` has a line starting with each of ``starts``, in that order."""
    at = 0
    for start in starts:
        found = [i for i, line in enumerate(header) if i >= at and line.startswith(start)]
        if not found:
            return False
        at = found[0] + 1
    return True


def test_every_script_is_headed_with_purpose_keys_arguments_return_and_invariant() -> None:
    for path in sorted(Path(str(lua_dir())).glob("*.lua")):
        header = _header(path)
        assert header[0].startswith(f"-- {path.stem}: "), path
        assert _in_order(header, ["-- KEYS[", "-- ", "-- Returns", "-- Keeps: "]), path
        assert any(line.startswith(("-- arg(", "-- ARGV[")) for line in header), path


def test_every_include_is_headed_with_purpose_keys_definitions_and_invariant() -> None:
    for path in sorted(Path(str(lua_dir())).glob("include/*.lua")):
        header = _header(path)
        assert header[0].startswith(f"-- {path.stem}: "), path
        assert _in_order(header, ["-- Keys: ", "-- Defines: ", "-- Keeps: "]), path


READS = "GET|STRLEN|LLEN|HLEN|ZCARD|SCARD|EXISTS|TYPE|LPOS|LRANGE|ZRANGE|HGET|HMGET|MGET|PTTL"
BARE_READ = re.compile(rf"^\s*redis\.p?call\('({READS})'")


def test_no_read_is_made_only_to_fail_on_a_wrong_type() -> None:
    """A read whose reply is dropped is there only for its WRONGTYPE error: it must be made
    through the named helpers (check_types, check_wake), which say so."""
    for path in [*Path(str(lua_dir())).glob("*.lua"), *Path(str(lua_dir())).glob("include/*")]:
        code = [line for line in path.read_text("utf-8").split("\n") if line.strip()]
        code = [line for line in code if not line.lstrip().startswith("--")]
        for before, line in zip(["", *code], code, strict=False):
            if BARE_READ.match(line):
                # A statement of its own, not part of an expression begun on the line before.
                continued = before.rstrip().endswith(("{", ",", "(", "=", " and", " or", ".."))
                assert continued, f"{path.name}: {line.strip()}"


def test_a_script_is_assembled_once_per_process() -> None:
    assert scripts.load("lease") is scripts.load("lease")


def test_the_loader_reads_a_zipped_package(tmp_path: Path) -> None:
    archive = tmp_path / "package.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in Path(str(lua_dir())).rglob("*.lua"):
            zipped.write(path, "redis_work_queue/" + str(path.relative_to(lua_dir().parent)))
    root = zipfile.Path(archive, "redis_work_queue/lua/")
    assert script_names(root) == script_names()
    assert assemble("lease", root).text == assemble("lease").text


# Loader errors ------------------------------------------------------------------------------


def test_a_missing_include_raises_naming_the_chain(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "s.lua": "-- s\n--#include a.lua\nreturn 1\n",
            "include/a.lua": "-- a\n--#include b.lua\nlocal A = 1\n",
            "include/b.lua": "-- b\n--#include nope.lua\nlocal B = 1\n",
        },
    )
    with pytest.raises(LuaSourceError, match=r"s\.lua -> a\.lua -> b\.lua -> nope\.lua") as caught:
        assemble("s", lua)
    assert isinstance(caught.value, ScriptError)
    assert "lua/include/nope.lua does not exist" in str(caught.value)


def test_a_circular_include_raises_naming_the_chain(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "s.lua": "-- s\n--#include a.lua\nreturn 1\n",
            "include/a.lua": "-- a\n--#include b.lua\nlocal A = 1\n",
            "include/b.lua": "-- b\n--#include a.lua\nlocal B = 1\n",
        },
    )
    with pytest.raises(
        LuaSourceError, match=r"circular include: s\.lua -> a\.lua -> b\.lua -> a\.lua"
    ):
        assemble("s", lua)


def test_a_missing_script_raises(tmp_path: Path) -> None:
    lua = _write(tmp_path, {})
    with pytest.raises(LuaSourceError, match=r"no script lua/nope\.lua"):
        assemble("nope", lua)


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("--#include a.lua ", "trailing space"),
        ("--#include a.lua\r", "carriage return"),
        (" --#include a.lua", "leading space"),
        ("--#include  a.lua", "two spaces"),
        ("--#include a", "no .lua"),
        ("--#import a.lua", "unknown verb"),
        ("--#include ../a.lua", "a path"),
    ],
)
def test_a_malformed_directive_raises(tmp_path: Path, line: str, why: str) -> None:
    lua = _write(
        tmp_path,
        {"s.lua": f"-- s\n{line}\nreturn A\n", "include/a.lua": "-- a\nlocal A = 1\n"},
    )
    with pytest.raises(LuaSourceError, match=r"lua/s\.lua:2: .* is not a directive"):
        assemble("s", lua)


def test_a_malformed_directive_in_an_include_raises_naming_it(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "s.lua": "-- s\n--#include a.lua\nreturn A\n",
            "include/a.lua": "-- a\n--#include b.lua \nlocal A = 1\n",
            "include/b.lua": "-- b\nlocal B = 1\n",
        },
    )
    with pytest.raises(LuaSourceError, match=r"lua/include/a\.lua:2: '--#include b\.lua ' is not"):
        assemble("s", lua)


def test_a_directive_after_code_or_a_repeated_one_raises(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "late.lua": "-- late\nlocal x = 1\n--#include a.lua\nreturn A + x\n",
            "twice.lua": "-- twice\n--#include a.lua\n--#include a.lua\nreturn A\n",
            "include/a.lua": "-- a\nlocal A = 1\n",
        },
    )
    with pytest.raises(LuaSourceError, match=r"lua/late\.lua:3: .* comes after code"):
        assemble("late", lua)
    with pytest.raises(LuaSourceError, match=r"lua/twice\.lua:3: a\.lua is included twice"):
        assemble("twice", lua)


def test_a_shared_include_is_expanded_once_before_its_users(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "s.lua": "-- s\n--#include c.lua\n--#include b.lua\nreturn {A, B, C}\n",
            "include/a.lua": "-- a\nlocal A = 1\n",
            "include/b.lua": "-- b\n--#include a.lua\nlocal B = A + 1\n",
            "include/c.lua": "-- c\n--#include a.lua\n--#include b.lua\nlocal C = A + B\n",
        },
    )
    assembled = assemble("s", lua)
    assert assembled.includes == ("a.lua", "b.lua", "c.lua")
    assert assembled.text == (
        "-- a\nlocal A = 1\n-- b\nlocal B = A + 1\n-- c\nlocal C = A + B\n-- s\nreturn {A, B, C}\n"
    )
    assert assembled.origin(4) == "lua/include/b.lua:3"
    assert assembled.origin(8) == "lua/s.lua:4"
    assert assembled.origin(9) is None


def test_an_include_s_definitions_the_script_does_not_use_are_left_out(tmp_path: Path) -> None:
    lua = _write(
        tmp_path,
        {
            "s.lua": "-- s\n--#include a.lua\nreturn used(ARGV[1])\n",
            "include/a.lua": (
                "-- a\n"
                "local STEP = 2\n"
                "local function helper(x)\n"
                "  return x * STEP\n"
                "end\n"
                "local function used(x)\n"
                "  return helper(x) + 1 -- not unused(x)\n"
                "end\n"
                "local function unused(x)\n"
                "  return x\n"
                "end\n"
                "local CLOCK = redis.call('TIME')\n"
                "local TABLE = {\n"
                "  a = 1,\n"
                "}\n"
                "local LATE = 3\n"
            ),
        },
    )
    assembled = assemble("s", lua)
    lines = assembled.text.split("\n")
    assert lines[:8] == [
        "-- a",
        "local STEP = 2",
        "local function helper(x)",
        "  return x * STEP",
        "end",
        "local function used(x)",
        "  return helper(x) + 1 -- not unused(x)",
        "end",
    ]
    # Left out as blank lines, so every later line keeps its place and its origin.
    assert lines[8:16] == [""] * 8
    assert lines[16:18] == ["-- s", "return used(ARGV[1])"]
    assert assembled.origin(18) == "lua/s.lua:3"
    assert assemble("s", lua, keep_unused=True).text.count("local") == 7


def test_a_clean_s_clock_is_read_only_by_the_scripts_that_use_it() -> None:
    # hold.lua's clock calls TIME when it is defined: only the clean steps that size themselves
    # by it keep it; the lease script, which includes hold.lua for is_hold alone, leaves it out.
    assert "local STARTED = micros()" not in assemble("lease").text
    assert "is_hold" in assemble("lease").text
    for name in ("deep_clean", "deep_clean_walk", "light_clean"):
        assert "local STARTED = micros()" in assemble(name).text, name


def test_a_lease_reads_the_server_s_clock_once(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("loader:clock"))
    queue.add_item(real_db, Item(b"x", id="a"))

    def time_calls() -> int:
        stats: dict[str, dict[str, int]] = real_db.info("commandstats")
        return stats.get("cmdstat_time", {}).get("calls", 0)

    before = time_calls()
    assert queue.lease(real_db, 30, block=False) is not None
    assert time_calls() - before == 1


# Errors from the server name the file and line ----------------------------------------------

BOOM = {
    "fails.lua": "-- fails\n--#include boom.lua\nlocal x = tonumber(ARGV[1])\nreturn explode(x)\n",
    "include/boom.lua": (
        "-- boom: fails on purpose\n"
        "local function explode(how)\n"
        "  if how == 1 then\n"
        "    error('boom')\n"
        "  elseif how == 2 then\n"
        "    return redis.call('LLEN', KEYS[1])\n"
        "  end\n"
        "  return nope.field\n"
        "end\n"
    ),
}


@pytest.fixture
def fails(tmp_path: Path) -> Callable[[Any, list[str], list[Any]], Any]:
    """The failing script, run by ``fails(db, keys, args)``."""
    lua = _write(tmp_path, BOOM)
    script = scripts.Script("fails", assemble("fails", lua).text)
    return lambda db, keys, args: transport.execute(db, ScriptCall(script, keys, args))


def test_an_error_raised_in_an_include_names_its_file_and_line(
    db: redis.Redis, fails: Callable[[Any, list[str], list[Any]], Any]
) -> None:
    with pytest.raises(ScriptError) as caught:
        fails(db, ["k"], [1])
    message = str(caught.value)
    assert message.startswith("lua/include/boom.lua:4: "), message
    assert "boom" in message
    assert "user_script:" in message  # the server's own text is kept
    with pytest.raises(ScriptError, match=r"^lua/include/boom\.lua:8: .*global.*'nope'"):
        fails(db, ["k"], [3])


def test_a_wrong_type_in_an_include_names_its_file_and_line(
    real_db: redis.Redis, fails: Callable[[Any, list[str], list[Any]], Any]
) -> None:
    # Real Redis only: fakeredis gives an error of redis.call no position in the script.
    real_db.set("loader:string", "x")
    with pytest.raises(WrongKeyTypeError) as caught:
        fails(real_db, ["loader:string"], [2])
    assert "(lua/include/boom.lua:6: " in str(caught.value)
    assert "WRONGTYPE" in str(caught.value)
    assert "nothing was changed" in str(caught.value)


def test_an_error_of_a_package_script_names_the_include(db: redis.Redis) -> None:
    lease = scripts.load("lease")
    db.set("loader:{q}:processing", "not a list")
    with pytest.raises(WrongKeyTypeError) as caught:
        lease(db, ["loader:{q}:queue"], ["loader:{q}", 1000, "t", "0", 1, 100, 0, "", "0", 0])
    # Redis names the line that raised (in check_types); fakeredis's traceback starts with the
    # script's line that called it.
    assert re.search(r"\((lua/include/queue|lua/lease)\.lua:\d+: ", str(caught.value))
    assert "loader:{q}:processing holds a string, not a list" in str(caught.value)


def test_errors_of_the_fakeredis_form_are_located_too() -> None:
    known = assemble_text("-- t\n--#include queue.lua\nreturn 1\n", "t")
    last = len(known.text.splitlines())
    message = (
        f"Error running script (call to f_{known.sha}): @user_script:?: "
        f'[string "<python>"]:{last}: boom\nstack traceback:\n\t[string "<python>"]:{last}: in main'
    )
    assert locate(message) == f"lua/t.lua:3: {message}"


def test_locate_leaves_other_messages_alone() -> None:
    assert locate("ERR something else") == "ERR something else"
    unknown = "ERR user_script:3: boom script: " + "0" * 40 + ", on @user_script:3."
    assert locate(unknown) == unknown
    known = assemble_text("-- t\n--#include queue.lua\nreturn 1\n", "t")
    last = len(known.text.splitlines())
    past_end = f"ERR user_script:{last + 1}: x script: {known.sha}, on @user_script:{last + 1}."
    assert locate(past_end) == past_end
    inside = f"ERR x script: {known.sha}, on @user_script:{last}."
    assert locate(inside) == f"lua/t.lua:3: {inside}"
    first = f"ERR user_script:1: x script: {known.sha}, on @user_script:1."
    assert locate(first) == f"lua/include/queue.lua:1: {first}"


# luacheck -----------------------------------------------------------------------------------


def _luacheck() -> str:
    found = shutil.which("luacheck")
    if found is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("luacheck not found; CI requires Debian's lua-check", pytrace=False)
        pytest.skip("luacheck not found (Debian's lua-check package)")
    return found


def test_luacheck_finds_nothing_in_the_package() -> None:
    assert lualint.lint(config=REPO / ".luacheckrc", luacheck=_luacheck()) == []


def test_luacheck_reports_in_the_file_and_line_at_fault(tmp_path: Path) -> None:
    luacheck = _luacheck()
    lua = _write(
        tmp_path,
        {
            # b is used only through a.lua, which does not declare it: one warning, in a.lua.
            "s.lua": "-- s\n--#include b.lua\n--#include a.lua\nlocal unused = 1\nreturn A\n",
            "t.lua": "-- t\n--#include b.lua\nreturn B\n",
            "include/a.lua": "-- a\nlocal A = B + 1\nlocal function dead() end\n",
            "include/b.lua": "-- b\nlocal B = 1\n",
        },
    )
    found = [str(w) for w in lualint.lint(lua, REPO / ".luacheckrc", luacheck)]
    assert found == [
        "lua/include/a.lua:2:11: (W113) accessing undefined variable 'B': declare the include "
        "that defines it",
        "lua/include/a.lua:3:16: (W211) unused function 'dead'",
        "lua/s.lua:4:7: (W211) unused variable 'unused'",
    ]


def test_lualint_prints_a_script_as_sent(capsys: pytest.CaptureFixture[str]) -> None:
    assert lualint.main(["complete"]) == 0
    assert capsys.readouterr().out == scripts.load("complete").script.decode()
