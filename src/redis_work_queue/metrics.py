"""Queue metrics for Prometheus: the text exposition format and a ``prometheus_client`` collector.

Per queue (label ``queue``), read from Redis at each scrape, so any process can export them:

- gauges ``rwq_queued``, ``rwq_leased``, ``rwq_expired``, ``rwq_delayed``, ``rwq_dead``
  (:meth:`WorkQueue.stats`); ``rwq_delayed_due`` (delayed items whose due time has passed,
  at most :data:`DUE_CAP`); ``rwq_work``, the work to do, for autoscalers: queued (on the
  main queue and the groups' lists) + delayed due + leased + expired; ``rwq_grouped``, the
  items waiting on the groups' lists; ``rwq_groups_waiting``, the groups with items waiting;
  ``rwq_group_backlog`` (labels ``queue``, ``group``), the items waiting on each of the 10
  groups with the most;
  ``rwq_oldest_waiting_seconds``, the age of the item next to be leased, from the time in its
  id (only for UUIDv7 ids, the library's own; absent otherwise); ``rwq_delayed_overdue_seconds``,
  how long ago the earliest delayed item fell due (0 when none is due); ``rwq_workers``, live
  workers (heartbeats);
- counters ``rwq_items_<name>_total`` for each field of :class:`QueueCounts` (kept by the
  scripts in ``<prefix>:counts``);
- the histogram ``rwq_job_duration_seconds`` (labels ``queue``, ``outcome``) of handler
  durations, flushed by the workers with their heartbeats (see :mod:`.durations`);

and ``rwq_up``: 1 when Redis answered the scrape, 0 when it did not (then nothing else).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import redis

from .durations import BOUNDS
from .extras import extra_needed
from .ops.metrics import DUE_CAP, TOP_GROUPS, QueueMetrics, id_time_ms, parse_durations, read_steps
from .results import QueueCounts
from .transport import run

__all__ = [
    "DUE_CAP",
    "QueueCollector",
    "QueueMetrics",
    "collect",
    "families",
    "id_time_ms",
    "parse_durations",
    "read",
    "render",
    "serve",
]

logger = logging.getLogger(__name__)

PREFIX = "rwq_"
#: Gauge name suffix -> help text, the counts of QueueStats in its field order.
METRICS = {
    "queued": "Items waiting in the main queue.",
    "leased": "Items handed out whose lease is live.",
    "expired": "Items whose lease expired, awaiting a light clean.",
    "delayed": "Items held back until a due time.",
    "dead": "Items in the dead-letter store.",
    "grouped": "Items waiting on their groups' lists (fair groups).",
}
#: The other gauges of a queue.
GAUGES = {
    "delayed_due": "Delayed items whose due time has passed (leased next).",
    "work": "Work to do: queued (main queue and groups) + delayed due + leased + expired (for "
    "autoscalers).",
    "oldest_waiting_seconds": "Age of the item next to be leased, from its id's time (UUIDv7).",
    "delayed_overdue_seconds": "How long ago the earliest delayed item fell due (0: none due).",
    "workers": "Live workers (registrations whose heartbeat has not lapsed).",
    "groups_waiting": "Groups with items waiting on their lists (fair groups).",
    "rate_limit_per_second": "The queue's rate limit, in items leased per second (none: no limit).",
}
#: Counter name (without ``_total``) -> help text, one per QueueCounts field.
COUNTERS = {
    "items_added": "Items added to the queue.",
    "items_completed": "Items completed.",
    "items_failed": "Items released after a failure (retried or buried).",
    "items_retried": "Items put back for another delivery.",
    "items_dead": "Items moved to the dead letters.",
    "items_expired": "Leases found expired by a clean.",
    "items_requeued": "Dead letters put back in the queue.",
    "items_cancelled": "Items cancelled by id.",
}
assert [f"items_{f.name}" for f in fields(QueueCounts)] == list(COUNTERS)
HISTOGRAM = "job_duration_seconds"
HISTOGRAM_HELP = "Handler durations measured by the workers, by outcome."
SHARD_ITEMS = "shard_items"
SHARD_ITEMS_HELP = "A sharded queue's items by shard and state (stats() of each shard)."
GROUP_BACKLOG = "group_backlog"
GROUP_BACKLOG_HELP = (
    f"Items waiting on a group's list, for the groups with the most (at most {TOP_GROUPS} per "
    "queue)."
)
UP = "up"
UP_HELP = "1 when Redis answered the last scrape, else 0."


def read(db: Any, queues: Sequence[Any]) -> list[QueueMetrics]:
    """Read the metrics of ``queues`` (``WorkQueue``) from ``db``."""
    return [run(db, read_steps(queue.ops)) for queue in queues]


# A neutral model of the families, rendered as text or as prometheus_client families ----------


@dataclass
class Family:
    """One metric family: its name (without ``rwq_``), type, help and samples."""

    name: str
    kind: str  # gauge | counter | histogram
    help: str
    #: (sample name suffix, labels, value); the suffix is "" for gauges, "_total" for counters.
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def _gauge(m: QueueMetrics, name: str) -> float | None:
    values: dict[str, float | None] = {
        "delayed_due": m.delayed_due,
        "work": m.work,
        "oldest_waiting_seconds": m.oldest_waiting,
        "delayed_overdue_seconds": m.delayed_overdue,
        "workers": m.workers,
        "groups_waiting": m.stats.groups_waiting,
    }
    if name == "rate_limit_per_second":
        limit = m.stats.rate_limit
        return None if limit is None else limit.count / limit.per_secs
    return values[name]


def families(found: Sequence[QueueMetrics] | None) -> list[Family]:
    """The metric families of a scrape; ``found`` None means Redis did not answer."""
    up = Family(UP, "gauge", UP_HELP, [("", {}, 0.0 if found is None else 1.0)])
    if found is None:
        return [up]
    out: list[Family] = []
    for name, text in METRICS.items():
        fam = Family(name, "gauge", text)
        fam.samples = [("", {"queue": m.queue}, float(asdict(m.stats)[name])) for m in found]
        out.append(fam)
    for name, text in GAUGES.items():
        fam = Family(name, "gauge", text)
        for m in found:
            value = _gauge(m, name)
            if value is not None:
                fam.samples.append(("", {"queue": m.queue}, value))
        out.append(fam)
    for name, text in COUNTERS.items():
        fam = Family(name, "counter", text)
        counter = name.removeprefix("items_")
        fam.samples = [
            ("_total", {"queue": m.queue}, float(getattr(m.counts, counter))) for m in found
        ]
        out.append(fam)
    hist = Family(HISTOGRAM, "histogram", HISTOGRAM_HELP)
    for m in found:
        for outcome, (counts, total) in m.durations.items():
            labels = {"queue": m.queue, "outcome": outcome}
            running = 0
            for bound, count in zip(BOUNDS, counts, strict=True):
                running += count
                hist.samples.append(("_bucket", {**labels, "le": bound}, float(running)))
            hist.samples.append(("_count", labels, float(running)))
            hist.samples.append(("_sum", labels, total))
    out.append(hist)
    top = Family(GROUP_BACKLOG, "gauge", GROUP_BACKLOG_HELP)
    for m in found:
        for group, count in m.top_groups:
            top.samples.append(("", {"queue": m.queue, "group": group}, float(count)))
    if top.samples:
        out.append(top)
    shards = Family(SHARD_ITEMS, "gauge", SHARD_ITEMS_HELP)
    for m in found:
        for shard in m.shards:
            for state, value in asdict(shard.stats).items():
                if state not in METRICS:
                    continue  # the rate limit and the groups' fields are not counts by state
                labels = {"queue": m.queue, "shard": shard.queue, "state": state}
                shards.samples.append(("", labels, float(value)))
    if shards.samples:
        out.append(shards)
    out.append(up)
    return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() else repr(value)


def render_families(found: Sequence[Family]) -> str:
    """The Prometheus text exposition format (0.0.4) of metric families."""
    lines: list[str] = []
    for fam in found:
        metric = PREFIX + fam.name + ("_total" if fam.kind == "counter" else "")
        lines += [f"# HELP {metric} {fam.help}", f"# TYPE {metric} {fam.kind}"]
        for suffix, labels, value in fam.samples:
            name = PREFIX + fam.name + suffix
            text = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            lines.append(
                f"{name}{{{text}}} {_number(value)}" if text else f"{name} {_number(value)}"
            )
    return "\n".join(lines) + "\n"


def collect(db: Any, queues: Sequence[Any]) -> dict[str, dict[str, int]]:
    """The five state gauges of every queue: ``{metric: {queue name: value}}``."""
    values: dict[str, dict[str, int]] = {name: {} for name in METRICS}
    for queue in queues:
        stats = queue.stats(db)
        for name in METRICS:
            values[name][queue.name.prefix] = getattr(stats, name)
    return values


def render(db: Any, queues: Sequence[Any]) -> str:
    """The Prometheus text exposition format of the queues' metrics (one read)."""
    return render_families(families(read(db, queues)))


class QueueCollector:
    """A ``prometheus_client`` collector of the queues' metrics, read at each scrape.

    When Redis does not answer, a scrape gives ``rwq_up 0`` alone; the first failed scrape of
    an outage is logged as a WARNING, the recovery as INFO.

    Example:
        >>> from prometheus_client import REGISTRY  # doctest: +SKIP
        >>> REGISTRY.register(QueueCollector(db, [WorkQueue(KeyPrefix("jobs"))]))  # doctest: +SKIP

    Args:
        db: The Redis client.
        queues: The queues to report.
    """

    def __init__(self, db: Any, queues: Sequence[Any]) -> None:
        with extra_needed("QueueCollector", "prometheus"):
            import prometheus_client  # noqa: F401, PLC0415 (optional: checked up front)

        self.db = db
        self.queues = list(queues)
        self._down = False

    def read(self) -> list[QueueMetrics] | None:
        """The queues' metrics, or None (logged once per outage) when Redis did not answer."""
        try:
            found = read(self.db, self.queues)
        except (redis.ConnectionError, redis.TimeoutError, OSError) as err:
            if not self._down:
                logger.warning("cannot read the queues' metrics (rwq_up 0 until it can): %s", err)
            self._down = True
            return None
        if self._down:
            logger.info("reading the queues' metrics again")
        self._down = False
        return found

    def collect(self) -> Iterator[Any]:
        """Yield the metric families (called by ``prometheus_client`` at each scrape)."""
        from prometheus_client.core import (  # noqa: PLC0415 (optional extra)
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        for fam in families(self.read()):
            name = PREFIX + fam.name
            if fam.kind == "histogram":
                hist = HistogramMetricFamily(name, fam.help, labels=["queue", "outcome"])
                by_labels: dict[tuple[str, str], list[tuple[str, float]]] = {}
                sums: dict[tuple[str, str], float] = {}
                for suffix, labels, value in fam.samples:
                    key = (labels["queue"], labels["outcome"])
                    if suffix == "_bucket":
                        by_labels.setdefault(key, []).append((labels["le"], value))
                    elif suffix == "_sum":
                        sums[key] = value
                for key, buckets in by_labels.items():
                    hist.add_metric(list(key), buckets, sums.get(key, 0.0))
                yield hist
                continue
            label_names = sorted({k for _, labels, _ in fam.samples for k in labels})
            family: Any
            if fam.kind == "counter":
                family = CounterMetricFamily(name, fam.help, labels=label_names)
            else:
                family = GaugeMetricFamily(name, fam.help, labels=label_names)
            for _, labels, value in fam.samples:
                family.add_metric([labels[k] for k in label_names], value)
            yield family

    def describe(self) -> list[Any]:
        """Nothing to describe ahead of a scrape (metrics are read live)."""
        return []


def serve(db: Any, queues: Sequence[Any], port: int, bind: str = "127.0.0.1") -> tuple[Any, Any]:
    """Serve the queues' metrics over HTTP for Prometheus (``/metrics``, or any path).

    Redis is read at each scrape (one stats read and one script call per queue). The server
    runs in a daemon thread; the caller keeps the process alive.

    Args:
        db: The Redis client.
        queues: The queues to report.
        port: The TCP port to listen on (0: any free port).
        bind: The address to bind (default loopback only).

    Returns:
        The WSGI server (``server.server_port`` is the port bound) and its thread.

    Raises:
        ImportError: ``prometheus_client`` is missing (the ``prometheus`` extra).
    """
    from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(db, queues))
    return start_http_server(port, addr=bind, registry=registry)
