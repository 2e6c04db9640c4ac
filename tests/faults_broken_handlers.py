"""A handler module that cannot be imported: it fails while loading (``rwq worker`` must say so
on one line and exit non-zero)."""

from __future__ import annotations

raise RuntimeError("this handler module fails to load")
