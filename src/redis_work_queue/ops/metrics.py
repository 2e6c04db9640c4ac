"""A queue's metrics, read as one operation: its stats, then one read-only script."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from ..calls import ScriptCall, Steps
from ..durations import BOUNDS, OUTCOMES, bucket_field, sum_field
from ..keyprefix import QueueKeys
from ..results import QueueCounts, QueueStats, sum_fields
from ..validation import decode
from .queue import QueueOps, parse_counts
from .registry import builds, operation

#: ``rwq_delayed_due`` counts at most this many items (it reads their ids).
DUE_CAP = 10_000


@dataclass(frozen=True)
class QueueMetrics:
    """Everything exported of one queue, as read at one scrape.

    Attributes:
        queue: The queue's name (key prefix).
        stats: Its counts by state.
        counts: Its counters.
        durations: Its duration histogram: ``{outcome: (per-bucket counts in BOUNDS order,
            sum in seconds)}``.
        delayed_due: Delayed items whose due time has passed.
        oldest_waiting: Age in seconds of the item next to be leased (None: the queue is empty
            or that id holds no time).
        delayed_overdue: Seconds since the earliest delayed item fell due (0 when none is).
        workers: Live workers.
        shards: A sharded queue's shards' own metrics (the per-shard view).
    """

    queue: str
    stats: QueueStats
    counts: QueueCounts
    durations: dict[str, tuple[list[int], float]] = field(default_factory=dict)
    delayed_due: int = 0
    oldest_waiting: float | None = None
    delayed_overdue: float = 0.0
    workers: int = 0
    #: A sharded queue's shards, each with its own metrics (empty for an unsharded queue).
    shards: tuple[QueueMetrics, ...] = ()

    @property
    def work(self) -> int:
        """Work to do: queued + delayed due + leased + expired."""
        s = self.stats
        return s.queued + self.delayed_due + s.leased + s.expired


@builds("metrics")
def metrics_call(keys: QueueKeys, due_cap: int) -> ScriptCall:
    """``lua/metrics.lua``: what the exporter reads of a queue besides its stats."""
    return ScriptCall.on(keys, "metrics", due_cap)


def id_time_ms(item_id: str) -> int | None:
    """The Unix time in ms held by a UUIDv7 id (hex or dashed), else None."""
    try:
        parsed = uuid.UUID(item_id)
    except ValueError:
        return None
    if parsed.version != 7:
        return None
    return parsed.int >> 80


def _pairs(flat: Any) -> dict[str, str]:
    if isinstance(flat, dict):
        return {decode(k): decode(v) for k, v in flat.items()}
    return {decode(k): decode(v) for k, v in zip(flat[::2], flat[1::2], strict=True)}


def parse_durations(raw: dict[str, str]) -> dict[str, tuple[list[int], float]]:
    """The histogram of each outcome from the fields of ``<prefix>:durations``."""
    out: dict[str, tuple[list[int], float]] = {}
    for outcome in OUTCOMES:
        counts = [int(raw.get(bucket_field(outcome, bound), 0)) for bound in BOUNDS]
        out[outcome] = (counts, int(raw.get(sum_field(outcome), 0)) / 1_000_000)
    return out


@operation(scripts=("stats", "metrics"), cli="metrics", docs="operations.md#metrics")
def read_steps(ops: QueueOps) -> Steps[QueueMetrics]:
    """Read one queue's metrics: its stats, then one read-only script (``lua/metrics.lua``).

    A sharded queue's are its shards', merged: counts and histograms summed, the oldest
    waiting item and the most overdue delayed one over every shard (see :func:`merge`).
    """
    shards = getattr(ops, "shard_ops", None)
    if shards is not None:
        parts = []
        for shard in shards:
            parts.append((yield from read_steps(shard)))
        return merge(getattr(ops, "name", ops.keys.prefix), parts)
    stats = yield from ops.stats()
    keys = ops.keys
    reply = yield metrics_call(keys, DUE_CAP)
    now, counts, durations, oldest, due, first_due, workers = reply
    now_ms = int(now)
    born = id_time_ms(decode(oldest)) if oldest is not None else None
    overdue = 0.0
    if first_due is not None and float(first_due) <= now_ms:
        overdue = (now_ms - float(first_due)) / 1000
    return QueueMetrics(
        queue=keys.prefix,
        stats=stats,
        counts=parse_counts(counts),
        durations=parse_durations(_pairs(durations)),
        delayed_due=int(due),
        oldest_waiting=None if born is None else max(now_ms - born, 0) / 1000,
        delayed_overdue=overdue,
        workers=int(workers),
    )


def merge(queue: str, parts: list[QueueMetrics]) -> QueueMetrics:
    """One queue's metrics from its shards' (counts and histograms summed)."""
    durations: dict[str, tuple[list[int], float]] = {}
    for part in parts:
        for outcome, (counts, seconds) in part.durations.items():
            have, spent = durations.get(outcome, ([0] * len(counts), 0.0))
            durations[outcome] = (
                [a + b for a, b in zip(have, counts, strict=True)],
                spent + seconds,
            )
    ages = [p.oldest_waiting for p in parts if p.oldest_waiting is not None]
    return QueueMetrics(
        queue=queue,
        stats=sum_fields([p.stats for p in parts]),
        counts=sum_fields([p.counts for p in parts]),
        durations=durations,
        delayed_due=sum(p.delayed_due for p in parts),
        oldest_waiting=max(ages) if ages else None,
        delayed_overdue=max(p.delayed_overdue for p in parts),
        workers=sum(p.workers for p in parts),
        shards=tuple(parts),
    )
