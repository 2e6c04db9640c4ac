"""The Grafana dashboard and the KEDA example query only metrics the exporter emits."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import redis
import yaml

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.metrics import families, read, render_families

DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
METRIC = re.compile(r"\brwq_[a-z_]+")


def emitted(db: redis.Redis) -> set[str]:
    """Every sample name a scrape gives (Redis up, then down)."""
    queue = WorkQueue(KeyPrefix("deploy"))
    queue.add_item(db, Item(b"x"))
    text = render_families(families(read(db, [queue]))) + render_families(families(None))
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for value in node.values() for s in strings(value)]
    if isinstance(node, list):
        return [s for value in node for s in strings(value)]
    return [node] if isinstance(node, str) else []


def test_grafana_dashboard_queries_emitted_metrics(real_db: redis.Redis) -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "redis-work-queue.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10
    queried = {name for text in strings(dashboard) for name in METRIC.findall(text)}
    names = emitted(real_db)
    assert {"rwq_work", "rwq_up", "rwq_job_duration_seconds_bucket"} <= queried
    assert queried - names == set(), f"not emitted: {queried - names}"
    # Every counter the exporter has is charted.
    counters = {n for n in names if n.startswith("rwq_items_")}
    assert counters <= queried


def test_keda_example_scales_on_the_work_gauge(real_db: redis.Redis) -> None:
    found = yaml.safe_load((DEPLOY / "keda" / "scaledobject.yaml").read_text())
    assert found["kind"] == "ScaledObject"
    [trigger] = found["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    assert METRIC.findall(query) == ["rwq_work"]
    assert "rwq_work" in emitted(real_db)
    float(trigger["metadata"]["threshold"])
