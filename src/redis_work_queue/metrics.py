"""Queue metrics for Prometheus: the text exposition format and a ``prometheus_client`` collector.

Each queue gives five gauges, labelled ``queue``: items queued, leased (live leases), expired
(leases gone, awaiting a light clean), delayed and dead. The main queue is a plain Redis list,
so autoscalers that read a list's length (such as KEDA's Redis list scaler on
``<prefix>:queue``) work without these.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict
from typing import Any

from redis import Redis

from .workqueue import WorkQueue

#: Metric name suffix -> help text, in QueueStats field order.
METRICS = {
    "queued": "Items waiting in the main queue.",
    "leased": "Items handed out whose lease is live.",
    "expired": "Items whose lease expired, awaiting a light clean.",
    "delayed": "Items held back until a due time.",
    "dead": "Items in the dead-letter store.",
}
PREFIX = "rwq_"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def collect(db: Redis, queues: Sequence[WorkQueue]) -> dict[str, dict[str, int]]:
    """Every metric of every queue: ``{metric: {queue name: value}}``."""
    values: dict[str, dict[str, int]] = {name: {} for name in METRICS}
    for queue in queues:
        for name, value in asdict(queue.stats(db)).items():
            values[name][queue.name.prefix] = value
    return values


def render(db: Redis, queues: Sequence[WorkQueue]) -> str:
    """The Prometheus text exposition format of the queues' metrics."""
    lines = []
    for name, by_queue in collect(db, queues).items():
        metric = PREFIX + name
        lines += [f"# HELP {metric} {METRICS[name]}", f"# TYPE {metric} gauge"]
        lines += [f'{metric}{{queue="{_label(q)}"}} {v}' for q, v in by_queue.items()]
    return "\n".join(lines) + "\n"


class QueueCollector:
    """A ``prometheus_client`` collector of the queues' metrics, read at each scrape.

    Example:
        >>> from prometheus_client import REGISTRY  # doctest: +SKIP
        >>> REGISTRY.register(QueueCollector(db, [WorkQueue(KeyPrefix("jobs"))]))  # doctest: +SKIP

    Args:
        db: The Redis client.
        queues: The queues to report.
    """

    def __init__(self, db: Redis, queues: Sequence[WorkQueue]) -> None:
        self.db = db
        self.queues = list(queues)

    def collect(self) -> Iterator[Any]:
        """Yield one gauge family per metric (called by ``prometheus_client`` at each scrape)."""
        from prometheus_client.core import GaugeMetricFamily  # noqa: PLC0415 (optional)

        for name, by_queue in collect(self.db, self.queues).items():
            family = GaugeMetricFamily(PREFIX + name, METRICS[name], labels=["queue"])
            for queue, value in by_queue.items():
                family.add_metric([queue], value)
            yield family

    def describe(self) -> list[Any]:
        """Nothing to describe ahead of a scrape (metrics are read live)."""
        return []
