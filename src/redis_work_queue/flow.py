"""Flow control: a queue's rate limit, kept in Redis and enforced by every lease of the fleet.

See ``docs/flow-control.md``.
"""

from __future__ import annotations

import math
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


def parse_rate(reply: list[bytes | str | bool | None]) -> RateLimit | None:
    """The limit of ``HMGET <prefix>:rate count per_ms burst``; None when the queue has none."""
    count, per_ms, burst = (_number(raw) for raw in reply)
    if not count or count <= 0 or per_ms is None or burst is None:
        return None
    try:
        return RateLimit(int(count) if count.is_integer() else count, per_ms / 1000, int(burst))
    except InvalidArgumentError:
        return None
