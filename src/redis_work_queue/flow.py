"""Flow control: a queue's rate limit, kept in Redis and enforced by every lease of the fleet.

See ``docs/flow-control.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .errors import InvalidArgumentError, InvalidArgumentTypeError
from .validation import MAX_SECS

#: The fewest seconds a rate limit's window may last (the scripts count in ms).
MIN_PER_SECS = 0.001


@dataclass(frozen=True)
class RateLimit:
    """At most ``count`` items leased per ``per_secs`` seconds, across every worker of a queue.

    The limit is a token bucket kept in Redis (``<prefix>:rate``): it refills at ``count`` per
    ``per_secs`` seconds and holds at most ``burst`` tokens, and every item a lease of this
    library hands out takes one. Over any span of ``t`` seconds the whole fleet leases at most
    ``burst + t * count / per_secs`` items.

    Args:
        count: How many items per window: a positive, finite number.
        per_secs: The window, in seconds: positive and finite (at least 0.001).
        burst: The most items leased at once after an idle spell: a positive int (1, the
            default, spreads the items evenly over the window).

    Raises:
        InvalidArgumentError: An argument is out of range (InvalidArgumentTypeError when it is
            not a number).
    """

    count: float
    per_secs: float
    burst: int = 1

    def __post_init__(self) -> None:
        for name in ("count", "per_secs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidArgumentTypeError(
                    f"RateLimit {name} must be a number, not {type(value).__name__}"
                )
            if not math.isfinite(value) or value <= 0:
                raise InvalidArgumentError(
                    f"RateLimit {name} must be positive and finite, got {value!r}"
                )
        if not MIN_PER_SECS <= self.per_secs <= MAX_SECS:
            raise InvalidArgumentError(
                f"RateLimit per_secs must be between {MIN_PER_SECS} and {MAX_SECS} seconds, "
                f"got {self.per_secs!r}"
            )
        burst = self.burst
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise InvalidArgumentError(f"RateLimit burst must be a positive int, got {burst!r}")

    @property
    def per_ms(self) -> float:
        """The window in ms, as the scripts keep it."""
        return self.per_secs * 1000


def check_rate_limit(value: RateLimit | None, what: str = "rate_limit") -> RateLimit | None:
    """``value`` checked to be a :class:`RateLimit` or None.

    Raises:
        InvalidArgumentTypeError: It is something else (``what`` names the option).
    """
    if value is not None and not isinstance(value, RateLimit):
        raise InvalidArgumentTypeError(
            f"{what} must be a RateLimit(count, per_secs, burst=...) or None, not "
            f"{type(value).__name__}"
        )
    return value


def _number(raw: bytes | str | bool | None) -> float | None:
    """A number the scripts stored, or None for none (or for one that does not parse)."""
    if not raw:
        return None
    try:
        return float(raw.decode() if isinstance(raw, bytes) else raw)
    except ValueError:
        return None


def parse_cap(raw: bytes | str | bool | None) -> int | None:
    """The group concurrency kept in ``<prefix>:groups:state``; None for none."""
    value = _number(raw)
    return int(value) if value and value >= 1 else None


def parse_rate(reply: list[bytes | str | bool | None]) -> RateLimit | None:
    """The limit of ``HMGET <prefix>:rate count per_ms burst``; None when the queue has none."""
    count, per_ms, burst = (_number(raw) for raw in reply)
    if not count or count <= 0 or per_ms is None or burst is None:
        return None
    try:
        return RateLimit(int(count) if count.is_integer() else count, per_ms / 1000, int(burst))
    except InvalidArgumentError:
        return None


def rate_spec(limit: RateLimit | None) -> str:
    """A group rate limit as ``lua/include/group.lua`` keeps it: ``'count per_ms burst'``.

    None (no limit) is ``'0'``.
    """
    if limit is None:
        return "0"
    return f"{limit.count!r} {limit.per_ms!r} {limit.burst}"


def parse_rate_spec(raw: bytes | str | bool | None) -> RateLimit | None:
    """A group rate limit kept as :func:`rate_spec` makes it; None for none."""
    if not raw or not isinstance(raw, bytes | str):
        return None
    parts = (raw.decode() if isinstance(raw, bytes) else raw).split()
    if len(parts) != 3:
        return None
    return parse_rate(list(parts))


#: The longest group name, in bytes of UTF-8.
MAX_GROUP_BYTES = 256

#: The ``group`` argument of ``add_items``: one group for every item, or one per item (None for
#: an item without one), or None for none.
GroupArg = str | Sequence[str | None] | None


def check_group(group: object, what: str = "group") -> str:
    """``group`` checked to be a group name: text of 1 to :data:`MAX_GROUP_BYTES` bytes.

    Raises:
        InvalidArgumentTypeError: It is not a str.
        InvalidArgumentError: It is empty or too long.
    """
    if not isinstance(group, str):
        raise InvalidArgumentTypeError(
            f"{what} must be a str (a group name), not {type(group).__name__}"
        )
    if not group:
        raise InvalidArgumentError(f"{what} must not be empty: name the group, or pass None")
    size = len(group.encode("utf-8", "surrogatepass"))
    if size > MAX_GROUP_BYTES:
        raise InvalidArgumentError(
            f"{what} is {size} bytes long; a group name holds at most {MAX_GROUP_BYTES} bytes"
        )
    return group


def check_groups(group: object, count: int) -> list[str | None] | None:
    """The group of each of ``count`` items from ``add_items``'s ``group`` argument.

    ``group`` is None (no item has a group: None is returned), one name for every item, or a
    sequence of ``count`` entries, each a name or None.

    Raises:
        InvalidArgumentTypeError: It is of another type, or an entry is.
        InvalidArgumentError: A name is empty or too long, or the sequence's length is not
            ``count``.
    """
    if group is None:
        return None
    if isinstance(group, str):
        return [check_group(group)] * count
    if isinstance(group, bytes | bytearray) or not isinstance(group, Sequence):
        raise InvalidArgumentTypeError(
            "group must be a str, a sequence of one str or None per item, or None, not "
            f"{type(group).__name__}"
        )
    if len(group) != count:
        raise InvalidArgumentError(
            f"group holds {len(group)} entries for {count} items: give one group (or None) "
            "per item, or one str for all"
        )
    return [None if g is None else check_group(g, f"group[{k}]") for k, g in enumerate(group)]


def check_group_concurrency(value: object) -> int | None:
    """``value`` checked to be a positive int, or None (no cap).

    Raises:
        InvalidArgumentError: It is not a positive int (InvalidArgumentTypeError when it is
            not an int).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(
            f"group_concurrency must be a positive int or None, not {type(value).__name__}"
        )
    if value < 1:
        raise InvalidArgumentError(
            f"group_concurrency must be at least 1 (items of one group in flight), got {value}"
        )
    return value


@dataclass(frozen=True)
class GroupStats:
    """One group's counts, as ``stats(groups=...)`` reports them.

    Attributes:
        ready: Its items waiting to be leased (its delayed items are not among them).
        in_flight: Its items leased and not yet completed, released or requeued by a clean.
        paused: Whether it is paused (``pause_group``).
        rate_limit: The rate limit in force for it: its own (``set_group_rate_limit``), else
            that of every group (``group_rate_limit``), or None.
        rate_limited: Whether it is waiting out its rate limit: off the ring of turns until
            its pacing clock lets it hand out its next item.
    """

    ready: int
    in_flight: int
    paused: bool
    rate_limit: RateLimit | None = None
    rate_limited: bool = False
