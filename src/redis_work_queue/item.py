"""Item: an id and its bytes of data."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from uuid6 import uuid7

from .errors import InvalidArgumentError

ItemData = bytes | bytearray | memoryview | str


def new_id() -> str:
    """Return a fresh item id: a time-ordered UUIDv7 as 32 lowercase hex characters."""
    return uuid7().hex


def _to_bytes(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, str):
        return data.encode("utf-8")
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise InvalidArgumentError(f"item data must be bytes or str, not {type(data).__name__}")


class Item:
    """A work item: a string id and arbitrary bytes of data.

    A leased item also carries its lease token (``lease_token``: the value its lease key was
    given when this worker leased it) and its delivery count (``deliveries``: how many times it
    has been handed out, this time included).

    Args:
        data: The item's data. A ``str`` is stored as UTF-8.
        id: The item's id; a new UUIDv7 (32 hex characters) when omitted. Any non-empty string
            works, including colons, spaces, braces, glob characters and non-ASCII text.

    Raises:
        InvalidArgumentError: ``data`` is not bytes-like or str, or ``id`` is empty.
    """

    __slots__ = ("_data", "_id", "deliveries", "lease_token")

    def __init__(self, data: ItemData, id: str | None = None) -> None:
        self._data = _to_bytes(data)
        if id is None:
            id = new_id()
        elif not isinstance(id, str):
            id = str(id)
        if id == "":
            raise InvalidArgumentError("an item id must not be empty")
        self._id = id
        self.lease_token: str | None = None
        self.deliveries = 0

    @classmethod
    def handed_out(cls, id: str, data: bytes, deliveries: int, lease_token: str | None) -> Item:
        """An item as a lease hands it out (from trusted values: no checks)."""
        item = cls.__new__(cls)
        item._id = id
        item._data = data
        item.deliveries = deliveries
        item.lease_token = lease_token
        return item

    def id(self) -> str:
        """The item's id."""
        return self._id

    def data(self) -> bytes:
        """The item's data."""
        return self._data

    def data_json(self) -> Any:
        """The item's data parsed as JSON."""
        return json.loads(self._data)

    @classmethod
    def from_json_data(cls, data: Any, id: str | None = None) -> Item:
        """Make an item whose data is ``data`` serialised as compact JSON."""
        return cls(json.dumps(data, separators=(",", ":")), id=id)

    @classmethod
    def from_dict(cls, loaded: Mapping[str, Any]) -> Item:
        """Make an item from a mapping with a ``data`` key and, optionally, an ``id`` key."""
        return cls(loaded["data"], id=loaded.get("id"))

    @classmethod
    def parse(cls, text: str | bytes) -> Item:
        """Make an item from a JSON object with a ``data`` key and, optionally, an ``id`` key."""
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise InvalidArgumentError("an item's JSON must be an object with a 'data' key")
        return cls.from_dict(loaded)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Item):
            return NotImplemented
        return self._id == other._id and self._data == other._data

    def __hash__(self) -> int:
        return hash((self._id, self._data))

    def __repr__(self) -> str:
        shown = self._data if len(self._data) <= 40 else self._data[:37] + b"..."
        return f"Item(id={self._id!r}, data={shown!r})"
