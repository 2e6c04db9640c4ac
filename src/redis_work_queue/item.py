"""Item: an id and its bytes of data, as a ``dict`` with the keys ``data`` and ``id``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from uuid6 import uuid7

from .errors import InvalidArgumentError, InvalidArgumentTypeError

ItemData = bytes | bytearray | memoryview | str


def new_id() -> str:
    """Return a fresh item id: a time-ordered UUIDv7 as 32 lowercase hex characters."""
    return uuid7().hex


def _to_bytes(data: object) -> bytes:
    """Bytes of ``data``: a str as UTF-8, anything else as ``bytes(data)`` does it.

    ``bytes(data)`` takes any buffer (bytearray, memoryview, array, numpy array) and any iterable
    of ints in range(256). An int (``bytes(5)`` is five zero bytes), a bool and a mapping (only
    its keys would be kept) are refused: each would silently lose the value given.
    """
    if isinstance(data, bytes):
        return bytes(data) if type(data) is not bytes else data
    if isinstance(data, str):
        return data.encode("utf-8")
    expected = "item data must be bytes or str, a buffer, or an iterable of ints in range(256)"
    if isinstance(data, int | Mapping) or data is None:
        raise InvalidArgumentTypeError(f"{expected}, not {type(data).__name__}")
    try:
        return bytes(data)  # type: ignore[call-overload,no-any-return]
    except TypeError as err:
        raise InvalidArgumentTypeError(f"{expected}, not {type(data).__name__} ({err})") from None
    except ValueError as err:
        raise InvalidArgumentError(f"{expected} ({err})") from None


def id_problem(item_id: str) -> str | None:
    r"""Why ``item_id`` cannot name an item, or None when it can.

    An id is stored as its UTF-8 bytes, with a lone surrogate from U+DC80 to U+DCFF standing
    for one byte that is not UTF-8 (``surrogateescape``, which is how an id read back from
    Redis keeps bytes that are not UTF-8). An id must come back the same from its bytes: any
    other lone surrogate has no bytes at all, and surrogates that spell valid UTF-8 (as
    ``"\udcc3\udca9"`` spells ``"é"``) would name another id's keys.
    """
    if item_id.isascii():  # the common case: ASCII always comes back the same
        return None
    try:
        stored = item_id.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError as err:
        return (
            f"item id {item_id!r} holds a lone surrogate ({item_id[err.start]!r}) that has no "
            "UTF-8 bytes: pass text that encodes as UTF-8"
        )
    if stored.decode("utf-8", "surrogateescape") != item_id:
        return (
            f"item id {item_id!r} would be stored as the bytes of "
            f"{stored.decode('utf-8', 'surrogateescape')!r} and name that id's keys: pass "
            "the text itself"
        )
    return None


def _to_id(id: object) -> str:
    """An item id from what ``Item`` was given (bytes as ids are read back from Redis)."""
    if isinstance(id, bytes | bytearray):
        text = bytes(id).decode("utf-8", "surrogateescape")
    else:
        text = id if isinstance(id, str) else str(id)
    problem = "an item id must not be empty" if text == "" else id_problem(text)
    if problem is not None:
        raise InvalidArgumentError(problem)
    return text


class Item(dict[str, Any]):
    """A work item: a string id and arbitrary bytes of data.

    An item is a ``dict`` with two keys, ``"data"`` (bytes) and ``"id"`` (str), as in the
    reference Python client, so ``item["id"]``, ``item["data"]``, ``dict(item)`` and comparison
    with a plain dict work; :meth:`id` and :meth:`data` read the same two keys.

    A leased item also carries its lease token (``lease_token``: the value its lease key was
    given when this worker leased it) and its delivery count (``deliveries``: how many times it
    has been handed out, this time included).

    Args:
        data: The item's data. A ``str`` is stored as UTF-8; any other value is converted as
            ``bytes(data)`` converts it (a buffer, or an iterable of ints in range(256)).
        id: The item's id; a new UUIDv7 (32 hex characters) when omitted; bytes are decoded
            as UTF-8 (a byte that is not UTF-8 kept as a surrogate, as ids are read back from
            Redis); any other non-str id is converted with ``str``. Any non-empty string that
            has UTF-8 bytes works, including colons, spaces, braces, glob characters and
            non-ASCII text.

    Raises:
        InvalidArgumentTypeError: ``data`` cannot be converted to bytes without losing its
            value (None, an int, a mapping, a float...); it is also a ``TypeError``, as the
            reference client's ``bytes(data)`` raises.
        InvalidArgumentError: ``data`` holds an int outside range(256), or ``id`` is empty or
            holds a lone surrogate that has no UTF-8 bytes of its own (see :func:`id_problem`).
    """

    __slots__ = ("deliveries", "lease_token")

    def __init__(self, data: ItemData | Any, id: str | None = None) -> None:
        converted = _to_bytes(data)
        id = new_id() if id is None else _to_id(id)
        dict.__init__(self, data=converted, id=id)
        self.lease_token: str | None = None
        self.deliveries = 0

    @classmethod
    def handed_out(cls, id: str, data: bytes, deliveries: int, lease_token: str | None) -> Item:
        """An item as a lease hands it out (from trusted values: no checks)."""
        item = cls.__new__(cls)
        item["data"] = data  # item assignment: the fastest way to fill a new dict subclass
        item["id"] = id
        item.deliveries = deliveries
        item.lease_token = lease_token
        return item

    def id(self) -> str:
        """The item's id."""
        return self["id"]  # type: ignore[no-any-return]

    def data(self) -> bytes:
        """The item's data."""
        return self["data"]  # type: ignore[no-any-return]

    def data_json(self) -> Any:
        """The item's data parsed as JSON."""
        return json.loads(self.data())

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

    def __hash__(self) -> int:  # type: ignore[override]
        return hash((self.get("id"), self.get("data")))

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self.get("id"), self.get("data"), self.deliveries, self.lease_token))

    def __copy__(self) -> Item:
        return _rebuild(self.get("id"), self.get("data"), self.deliveries, self.lease_token)

    def __repr__(self) -> str:
        data = self.get("data")
        if isinstance(data, bytes) and len(data) > 40:
            data = data[:37] + b"..."
        return f"Item(id={self.get('id')!r}, data={data!r})"


def _rebuild(id: Any, data: Any, deliveries: int, lease_token: str | None) -> Item:
    """Unpickle an item (its lease token and delivery count included)."""
    item = Item.__new__(Item)
    item["data"] = data
    item["id"] = id
    item.deliveries = deliveries
    item.lease_token = lease_token
    return item
