"""Job durations: a fixed-bucket histogram per queue, kept by the runners and flushed to Redis.

A worker measures each handler call and counts it in one of :data:`BUCKETS` (upper bounds in
seconds, plus ``+Inf``), by outcome (``completed``: the handler returned; ``failed``: it raised
or ran past its timeout). The counts since the last heartbeat travel with the heartbeat
(``lua/heartbeat.lua`` adds them with HINCRBY into the hash ``<P>:durations``), so no job costs
an extra round trip and any process can export the fleet's histogram. The hash holds, per
outcome, one field per bucket (``completed:0.005`` ... ``completed:+Inf``, counts of the jobs
in that bucket only, not cumulative) and ``<outcome>:sum_us``, the total duration in
microseconds. A worker flushes what is left when it stops; the counts of a worker killed with
SIGKILL since its last heartbeat are lost.
"""

from __future__ import annotations

import bisect
import threading
from bisect import bisect_left
from collections.abc import Mapping

#: Bucket upper bounds, in seconds (the last bucket, ``+Inf``, takes the rest).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The outcomes a duration is counted under.
OUTCOMES = ("completed", "failed")
#: The bound names used in the hash's fields and in the exported ``le`` labels.
BOUNDS = (*(format(b, "g") for b in BUCKETS), "+Inf")


def bucket_field(outcome: str, bound: str) -> str:
    """The hash field counting ``outcome``'s jobs of the bucket ``bound`` (from BOUNDS)."""
    return f"{outcome}:{bound}"


def sum_field(outcome: str) -> str:
    """The hash field summing ``outcome``'s durations, in microseconds."""
    return f"{outcome}:sum_us"


def bucket_of(seconds: float) -> str:
    """The bound of the bucket ``seconds`` falls in (bounds are inclusive, as Prometheus's)."""
    # The first bound >= seconds; past the last one, "+Inf" (the last of BOUNDS).
    return BOUNDS[bisect.bisect_left(BUCKETS, seconds)]


#: The field names of every outcome and bucket, and of every outcome's sum, made once.
_FIELDS = {(o, b): bucket_field(o, b) for o in OUTCOMES for b in BOUNDS}
_SUMS = {o: sum_field(o) for o in OUTCOMES}


class DurationRecorder:
    """Durations observed since the last flush, per queue (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = {}

    def observe(self, queue: str, seconds: float, outcome: str) -> None:
        """Count one job of ``queue`` (its prefix) that took ``seconds``, by ``outcome``."""
        seconds = max(seconds, 0.0)
        bound = BOUNDS[bisect_left(BUCKETS, seconds)]
        bucket = _FIELDS.get((outcome, bound)) or bucket_field(outcome, bound)
        total = _SUMS.get(outcome) or sum_field(outcome)
        micros = round(seconds * 1_000_000)
        with self._lock:
            mine = self._pending.get(queue)
            if mine is None:
                mine = self._pending[queue] = {}
            mine[bucket] = mine.get(bucket, 0) + 1
            mine[total] = mine.get(total, 0) + micros

    def add(self, queue: str, deltas: Mapping[str, int]) -> None:
        """Add counts (from :meth:`take` or another process's recorder) to ``queue``'s."""
        with self._lock:
            mine = self._pending.setdefault(queue, {})
            for name, value in deltas.items():
                mine[name] = mine.get(name, 0) + int(value)

    def take(self, queue: str) -> dict[str, int]:
        """Remove and return ``queue``'s counts since the last take (empty if none)."""
        with self._lock:
            return self._pending.pop(queue, {})

    def take_all(self) -> dict[str, dict[str, int]]:
        """Remove and return every queue's counts."""
        with self._lock:
            taken, self._pending = self._pending, {}
            return taken
