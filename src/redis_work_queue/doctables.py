"""Writes the tables of the docs that are made from the code, or checks that they are current.

Run from a source checkout::

    python -m redis_work_queue.doctables           # rewrite them
    python -m redis_work_queue.doctables --check   # exit 1 when one is out of date

The key table of ``docs/wire-contract.md`` is made from the layout (:mod:`.layout`), between
its two marker lines.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from . import layout
from .loader import lua_dir

#: The page that holds the key table, from the source tree's root.
KEY_PAGE = Path("docs") / "wire-contract.md"


def docs_root() -> Path:
    """The source tree's root (the directory of ``lua/`` and ``docs/``)."""
    return Path(str(lua_dir())).parent


def stale(root: Path | None = None) -> list[Path]:
    """The pages whose generated tables differ from what the code makes now.

    Raises:
        ValueError: A page lacks its table's markers.
    """
    page = (docs_root() if root is None else root) / KEY_PAGE
    text = page.read_text("utf-8")
    return [] if layout.with_table(text) == text else [page]


def write(root: Path | None = None) -> list[Path]:
    """Rewrite the generated tables; the pages that changed."""
    changed = stale(root)
    for page in changed:
        page.write_text(layout.with_table(page.read_text("utf-8")), "utf-8")
    return changed


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the docs' generated tables, or check them; the exit status (1: out of date)."""
    parser = argparse.ArgumentParser(prog="python -m redis_work_queue.doctables")
    parser.add_argument("--check", action="store_true", help="only say which are out of date")
    options = parser.parse_args(argv)
    if options.check:
        found = stale()
        for page in found:
            sys.stdout.write(f"{page}: out of date (python -m redis_work_queue.doctables)\n")
        return 1 if found else 0
    for page in write():
        sys.stdout.write(f"{page}: rewritten\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
