"""Lints the package's Lua with luacheck, as Redis runs it; or prints one script as sent.

Run from a source checkout (``make lint`` does)::

    python -m redis_work_queue.lualint          # lint every script and include
    python -m redis_work_queue.lualint lease    # print lua/lease.lua as sent to Redis

luacheck is Debian's ``lua-check`` package (or luarocks' ``luacheck``); the configuration is the
tree's ``.luacheckrc``.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .errors import LuaSourceError
from .loader import LuaFile, assemble, lua_dir, parse, read, script_names

if sys.version_info >= (3, 11):
    from importlib.resources.abc import Traversable
else:  # pragma: no cover - Python 3.10
    from importlib.abc import Traversable

#: The names an include defines for the files that include it: its top-level locals.
_DEFINED = re.compile(r"^local (?:function ([A-Za-z_]\w*)|([A-Za-z_][\w, ]*?)\s*(?:=|$))")


_WARNING = re.compile(
    r"^(?P<file>[^:]*):(?P<line>\d+):(?P<col>\d+): \((?P<code>\w+)\) (?P<text>.*)$"
)
#: luacheck's codes for a name that is no local of the file nor a known global.
_UNDEFINED = ("W111", "W112", "W113")


@dataclass(frozen=True, order=True)
class LintWarning:
    """One luacheck warning, placed in the file and line it is about."""

    label: str
    line: int
    col: int
    code: str
    text: str

    def __str__(self) -> str:
        return f"{self.label}:{self.line}:{self.col}: ({self.code}) {self.text}"


def defined_names(file: LuaFile) -> set[str]:
    """The names an include defines for the files that include it: its top-level locals."""
    names: set[str] = set()
    for _, line in file.lines:
        match = _DEFINED.match(line)
        if match:
            names.update(n.strip() for n in (match[1] or match[2]).split(","))
    return names


def _luacheck(
    text: str, label: str, luacheck: str, config: Path | None, read_globals: Sequence[str] = ()
) -> list[LintWarning]:
    args = [luacheck, "-", "--formatter", "plain", "--codes", "--no-color", "--filename", label]
    args += ["--config", str(config)] if config is not None else ["--no-config"]
    if read_globals:
        args += ["--read-globals", *sorted(read_globals)]
    done = subprocess.run(args, input=text, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode > 2:
        raise RuntimeError(f"luacheck failed on {label}: {done.stderr or done.stdout}")
    found = []
    for line in done.stdout.splitlines():
        match = _WARNING.match(line)
        if match:
            found.append(
                LintWarning(
                    match["file"],
                    int(match["line"]),
                    int(match["col"]),
                    match["code"],
                    match["text"],
                )
            )
    return found


def lint(
    root: Traversable | None = None, config: Path | None = None, luacheck: str = "luacheck"
) -> list[LintWarning]:
    """Lint the Lua of ``root`` (the package's ``lua`` directory by default) with luacheck.

    Two passes. Every script is linted as assembled (the text Redis runs, with its includes'
    definitions it does not use kept in), each warning placed
    in the file and line it is about; an unused name in an include counts only when no script
    that includes it uses it. Then every file is linted alone, knowing only the names its own
    includes define: a name it uses from an include it does not declare is reported.

    Args:
        root: The directory of the scripts (with ``include/`` in it).
        config: A luacheck configuration file (``.luacheckrc``); None for luacheck's defaults.
        luacheck: The luacheck command.

    Returns:
        The warnings, sorted by file and line; empty when the Lua is clean.

    Raises:
        LuaSourceError: A script cannot be assembled (see :func:`.loader.assemble`).
        RuntimeError: luacheck itself failed.
    """
    root = lua_dir() if root is None else root
    names = script_names(root)
    assembled = [assemble(name, root, keep_unused=True) for name in names]
    labels = [f"{root.name}/{n}.lua" for n in names]
    files = [(root / f"{n}.lua", label) for n, label in zip(names, labels, strict=True)]
    includes = sorted(p.name for p in (root / "include").iterdir() if p.name.endswith(".lua"))
    files += [(root / "include" / n, f"{root.name}/include/{n}") for n in includes]
    alone: list[tuple[str, str, list[str]]] = []
    for file, label in files:
        text = read(file)
        declared: set[str] = set()
        for include in parse(text, label).includes:
            inner = root / "include" / include
            if not inner.is_file():
                raise LuaSourceError(f"missing include: {label} -> {include}")
            declared |= defined_names(parse(read(inner), include))
        alone.append((text, label, sorted(declared)))
    with ThreadPoolExecutor(max_workers=4) as pool:
        as_run = list(
            pool.map(lambda a: _luacheck(a.text, f"{a.name}.lua", luacheck, config), assembled)
        )
        by_file = list(pool.map(lambda f: _luacheck(f[0], f[1], luacheck, config, f[2]), alone))
    warnings: set[LintWarning] = set()
    # An include's own warnings, by the scripts that report each, and the scripts that use it.
    reported: dict[LintWarning, set[str]] = {}
    users: dict[str, set[str]] = {}
    for script, label, found_in in zip(assembled, labels, as_run, strict=True):
        for include in script.includes:
            users.setdefault(f"{root.name}/include/{include}", set()).add(script.name)
        for found in found_in:
            origin, line = script.origins[found.line - 1]
            placed = LintWarning(origin, line, found.col, found.code, found.text)
            if origin == label:
                warnings.add(placed)
            else:
                reported.setdefault(placed, set()).add(script.name)
    for placed, users_reporting in reported.items():
        # An include defines names for others: unused (W2xx) only if unused by every user.
        if not placed.code.startswith("W2") or users_reporting >= users[placed.label]:
            warnings.add(placed)
    for (_, label, _), found_in in zip(alone, by_file, strict=True):
        for found in found_in:
            if found.code in _UNDEFINED:
                hint = f"{found.text}: declare the include that defines it"
                warnings.add(LintWarning(label, found.line, found.col, found.code, hint))
    return sorted(warnings)


def main(argv: Sequence[str] | None = None) -> int:
    """Lint every script, or print one as sent to Redis; the exit status (1: warnings)."""
    parser = argparse.ArgumentParser(
        prog="python -m redis_work_queue.lualint",
        description="Lint the package's Lua with luacheck, or print one script as sent to Redis.",
    )
    parser.add_argument("script", nargs="?", help="print this script (lease, add, ...) instead")
    parser.add_argument("--lua-dir", type=Path, help="the scripts' directory (default: ours)")
    parser.add_argument(
        "--config", type=Path, help="luacheck's configuration (default: the tree's .luacheckrc)"
    )
    parser.add_argument("--luacheck", default="luacheck", help="the luacheck command")
    options = parser.parse_args(argv)
    root: Traversable = lua_dir() if options.lua_dir is None else options.lua_dir
    if options.script:
        sys.stdout.write(assemble(options.script, root).text)
        return 0
    if shutil.which(options.luacheck) is None:
        sys.stderr.write(
            f"{options.luacheck} not found: install Debian's lua-check package "
            "(apt-get install lua-check) or luarocks' luacheck\n"
        )
        return 2
    config = options.config
    if config is None:
        config = Path(str(root)).parent / ".luacheckrc"
    if not config.is_file():
        sys.stderr.write(f"no luacheck configuration at {config}: give --config\n")
        return 2
    found = lint(root, config, options.luacheck)
    for warning in found:
        sys.stdout.write(f"{warning}\n")
    count = len(script_names(root))
    sys.stdout.write(f"luacheck: {len(found)} warnings in {count} scripts and their includes\n")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
