"""Key names: every Redis key of a queue is built here and nowhere else."""

from __future__ import annotations

import re

_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def glob_escape(text: str) -> str:
    r"""Escape the characters that Redis glob patterns (SCAN MATCH) treat specially.

    Args:
        text: A literal string, such as a key prefix.

    Returns:
        The string with ``*``, ``?``, ``[``, ``]`` and ``\\`` each preceded by a backslash.
    """
    return _GLOB_SPECIAL.sub(r"\\\1", text)


class KeyPrefix:
    """A string prefixed to a name to make a Redis key.

    Example:
        >>> KeyPrefix("cv:").of("abc")
        'cv:abc'
    """

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str):
            raise TypeError(f"a key prefix must be a str, not {type(prefix).__name__}")
        self.prefix = prefix

    def of(self, name: str) -> str:
        """Return ``name`` with this prefix in front of it."""
        return self.prefix + name

    @classmethod
    def concat(cls, prefix: KeyPrefix, name: str) -> KeyPrefix:
        """Return a new prefix: ``prefix`` followed by ``name``."""
        return cls(prefix.of(name))

    def __repr__(self) -> str:
        return f"KeyPrefix({self.prefix!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyPrefix) and other.prefix == self.prefix

    def __hash__(self) -> int:
        return hash(self.prefix)


class QueueKeys:
    """The key layout of one queue, as shared with every client of the design.

    ``<prefix>:queue`` and ``<prefix>:processing`` are lists of ids; ``<prefix>:item:<id>`` holds
    an item's data and ``<prefix>:lease:<id>`` its lease (with an expiry).
    """

    __slots__ = ("item_prefix", "lease_prefix", "prefix", "processing", "queue")

    def __init__(self, prefix: KeyPrefix) -> None:
        self.prefix = prefix.prefix
        self.queue = prefix.of(":queue")
        self.processing = prefix.of(":processing")
        self.item_prefix = prefix.of(":item:")
        self.lease_prefix = prefix.of(":lease:")

    def item(self, item_id: str) -> str:
        """The data key of ``item_id``."""
        return self.item_prefix + item_id

    def lease(self, item_id: str) -> str:
        """The lease key of ``item_id``."""
        return self.lease_prefix + item_id

    def item_pattern(self) -> str:
        """A SCAN MATCH pattern for this queue's data keys, with the prefix glob-escaped."""
        return glob_escape(self.item_prefix) + "*"
