"""Checks and conversions of what callers pass in, done before anything is sent to Redis.

Each check raises :class:`~redis_work_queue.errors.InvalidArgumentError` naming the argument.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterable
from datetime import datetime

from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .item import Item, id_problem

#: The longest duration accepted anywhere (lease, delay, TTL): about 31 years.
MAX_SECS = 10**9
#: The bounds of the dashboard page's refresh interval, in seconds: faster polls Redis nonstop,
#: slower is no longer a live view.
MIN_REFRESH_SECS = 0.5
MAX_REFRESH_SECS = 3600.0
#: The largest position (and page size) a listing takes: Redis's list indexes are 64-bit,
#: and every integer up to 2**53 is exact in the scripts' numbers.
MAX_INDEX = 2**53


def to_ms(seconds: float, what: str, minimum: int = 1) -> int:
    """Validate a duration in seconds and convert it to whole milliseconds.

    Raises:
        InvalidArgumentError: It is not a finite number of at least ``minimum`` ms and at most
            ``MAX_SECS`` seconds.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidArgumentTypeError(
            f"{what} must be a number of seconds, not {type(seconds).__name__}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (minimum > 0 and seconds <= 0):
        kind = "positive" if minimum > 0 else "zero or positive"
        raise InvalidArgumentError(f"{what} must be {kind} and finite, got {seconds!r}")
    if seconds > MAX_SECS:
        raise InvalidArgumentError(f"{what} must be at most {MAX_SECS} seconds, got {seconds!r}")
    ms = round(seconds * 1000)
    if ms < minimum:
        raise InvalidArgumentError(f"{what} must be at least {minimum / 1000}, got {seconds!r}")
    return ms


def check_max_deliveries(value: int | None) -> int:
    """Validate ``max_deliveries``; 0 stands for no limit in the scripts.

    Raises:
        InvalidArgumentError: It is not None or a positive int.
    """
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgumentError(f"max_deliveries must be a positive int or None, got {value!r}")
    return value


def check_replicas(value: int) -> int:
    """Validate a number of replicas to wait for.

    Raises:
        InvalidArgumentError: It is not an int of at least 0.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(f"replicas must be an int >= 0, got {value!r}")
    return value


def new_token() -> str:
    """A fresh lease token: 96 random bits (unique, not secret: it names a lease).

    The ``random`` module reseeds itself in a forked child, so forked workers never share
    tokens.
    """
    return f"{random.getrandbits(96):024x}"


def decode(raw: bytes | str) -> str:
    """Decode an id or text read from Redis; bytes that are not UTF-8 survive a round trip."""
    if isinstance(raw, bytes):
        return raw.decode("utf-8", "surrogateescape")
    return raw


def check_item(item: object) -> Item:
    """Return ``item`` if it is an :class:`Item`.

    Raises:
        InvalidArgumentError: It is not.
    """
    if not isinstance(item, Item):
        raise InvalidArgumentTypeError(f"expected an Item, got {type(item).__name__}")
    # An item is a dict, so its two keys can be changed after it was made.
    item_id, data = item.get("id"), item.get("data")
    if type(item_id) is not str or not isinstance(data, bytes):
        raise InvalidArgumentTypeError(
            f"an item needs item['id'] a str and item['data'] bytes; got "
            f"{type(item_id).__name__} and {type(data).__name__} (make it with Item(data, id))"
        )
    problem = id_problem(item_id)
    if problem is not None:
        raise InvalidArgumentError(problem)
    return item


def check_ids(ids: object, what: str) -> list[str]:
    """Validate the ids given to an operation on chosen items (``ids=`` of ``requeue_dead``...).

    Every id is checked before anything is sent.

    Raises:
        InvalidArgumentError: ``ids`` is a single str or bytes (which would be taken letter by
            letter) or not iterable, or one id is not a str or cannot name an item.
    """
    return listed_ids(
        ids,
        lambda: (
            f"{what} takes a list of ids (or None for all), not a {type(ids).__name__}: pass "
            f"[{ids!r}] for one id"
        ),
        f"{what}: ",
    )


def listed_ids(
    ids: object, not_a_list: Callable[[], str], where: str = "", named: bool = True
) -> list[str]:
    """``ids`` as a list of str, each checked in turn before anything is sent.

    Args:
        ids: What the caller passed.
        not_a_list: The message when ``ids`` is a single str or bytes (which would be taken
            letter by letter) or not iterable.
        where: What the message about one id starts with (``"requeue_dead: "``).
        named: Also check that each id can name an item (see :func:`id_problem`).

    Raises:
        InvalidArgumentError: As :func:`check_ids` says.
    """
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise InvalidArgumentTypeError(not_a_list())
    checked = []
    for index, item_id in enumerate(ids):
        if not isinstance(item_id, str):
            raise InvalidArgumentTypeError(
                f"{where}ids[{index}] must be a str, not {type(item_id).__name__}"
            )
        problem = id_problem(item_id) if named else None
        if problem is not None:
            raise InvalidArgumentError(f"{where}ids[{index}]: {problem}")
        checked.append(item_id)
    return checked


def held_token(item: object) -> tuple[Item, str]:
    """Return a leased item and its lease token.

    Raises:
        InvalidArgumentError: It is not an Item, or it was not leased by this library.
    """
    item = check_item(item)
    if item.lease_token is None:
        raise InvalidArgumentError(f"item {item.id()!r} carries no lease token: it was not leased")
    return item, item.lease_token


def when_due(delay: float | datetime | None) -> tuple[int, int]:
    """Turn a delay (seconds from now, or an aware datetime) into (delay ms, due ms)."""
    if delay is None:
        return 0, 0
    if isinstance(delay, datetime):
        if delay.tzinfo is None:
            raise InvalidArgumentError("a due time must be a timezone-aware datetime")
        return 0, max(round(delay.timestamp() * 1000), 1)
    return to_ms(delay, "delay", minimum=0), 0


def check_page(start: int, count: int) -> None:
    """Validate a page of a listing: ``start`` an int (negative counts from the end).

    ``count`` must be a positive int; both at most :data:`MAX_INDEX` in size.

    Raises:
        InvalidArgumentError: Either is not.
    """
    if isinstance(start, bool) or not isinstance(start, int) or abs(start) > MAX_INDEX:
        raise InvalidArgumentError(
            f"start must be an int from -2**53 to 2**53 (negative counts from the end), got "
            f"{start!r}"
        )
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_INDEX:
        raise InvalidArgumentError(f"count must be an int from 1 to 2**53, got {count!r}")


def check_preview(preview_bytes: int | None) -> int:
    """Validate ``preview_bytes`` of a listing: None (whole data) or an int of at least 0.

    Returns:
        The bound as the scripts take it: -1 for the whole data.

    Raises:
        InvalidArgumentError: It is neither.
    """
    if preview_bytes is None:
        return -1
    if isinstance(preview_bytes, bool) or not isinstance(preview_bytes, int) or preview_bytes < 0:
        raise InvalidArgumentError(
            f"preview_bytes must be None (the whole data) or an int >= 0, got {preview_bytes!r}"
        )
    return preview_bytes


def check_item_id(item_id: object) -> str:
    """Validate an item id given alone (as to ``item_data``).

    Raises:
        InvalidArgumentError: It is not a str, or cannot name an item (see ``id_problem``).
    """
    if not isinstance(item_id, str):
        raise InvalidArgumentTypeError(f"item_id must be a str, not {type(item_id).__name__}")
    problem = id_problem(item_id)
    if problem is not None:
        raise InvalidArgumentError(problem)
    return item_id


def check_refresh_secs(value: float | str, name: str = "refresh_secs") -> float:
    """Validate how often the dashboard's page refreshes (a number, or its text).

    Args:
        value: The interval in seconds, or the text of a command-line option.
        name: The option's name, for the message.

    Returns:
        The interval, as a float.

    Raises:
        InvalidArgumentError: It is not a number of seconds from :data:`MIN_REFRESH_SECS` to
            :data:`MAX_REFRESH_SECS` (``nan`` and the infinities included).
    """
    number: object = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = math.nan
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not MIN_REFRESH_SECS <= number <= MAX_REFRESH_SECS  # also false for nan
    ):
        raise InvalidArgumentError(
            f"{name} must be a number of seconds from {MIN_REFRESH_SECS:g} to "
            f"{MAX_REFRESH_SECS:g}, not {value!r}"
        )
    return float(number)


#: The most bytes a kept result may hold, and a progress report.
MAX_RESULT_BYTES = 16 << 20
MAX_PROGRESS_BYTES = 4096


def check_result(result: object, keep_ms: int) -> bytes:
    """A result to keep, as bytes (str as UTF-8, None as empty).

    Raises:
        InvalidArgumentError: The queue keeps no results (``keep_ms`` is 0), the result is not
            bytes, str or None, or it is longer than :data:`MAX_RESULT_BYTES`.
    """
    if not keep_ms:
        raise InvalidArgumentError(
            "complete(..., result=...) needs a queue that keeps results: make it with "
            "WorkQueue(..., keep_results=seconds)"
        )
    if result is None:
        return b""
    if isinstance(result, str):
        result = result.encode("utf-8", "surrogateescape")
    if not isinstance(result, bytes):
        raise InvalidArgumentTypeError(
            f"result must be bytes or str, not {type(result).__name__} (encode it, as JSON for "
            "example)"
        )
    if len(result) > MAX_RESULT_BYTES:
        raise InvalidArgumentError(
            f"result is {len(result)} bytes, more than the limit of {MAX_RESULT_BYTES} "
            "(16 MiB): keep large results elsewhere and return their key"
        )
    return result
