"""Metrics: ``rwq metrics`` prints the Prometheus text format, and ``QueueCollector`` serves the
same gauges to ``prometheus_client``; both read the values ``stats()`` reports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.metrics import QueueCollector

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

GAUGES = ("queued", "leased", "expired", "delayed", "dead", "grouped")
#: Queue names a label must escape: a quote, a backslash, a newline; and a plain one.
ODD = 'we"ird\\name'
NEWLINE = "two\nlines"
PLAIN = "jobs"


def fill(db: redis.Redis) -> dict[str, WorkQueue]:
    """Queues with items in every state: different counts in each queue."""
    queues = {name: WorkQueue(KeyPrefix(name), max_deliveries=1) for name in (PLAIN, ODD, NEWLINE)}
    for n, q in enumerate(queues.values()):
        q.add_items(db, [Item(b"", id=f"q{i}") for i in range(5 + n)])  # queued
        q.lease(db, 30, block=False)  # leased
        q.lease(db, 0.001, block=False)  # expired, awaiting a light clean
        for i in range(n + 1):
            q.add_item(db, Item(b"", id=f"later{i}"), delay=60)  # delayed
        dead = q.lease(db, 30, block=False)
        assert dead is not None
        q.release(db, dead, reason="broken")  # the last delivery: dead
    time.sleep(0.01)
    return queues


def rwq_command() -> list[str]:
    script = Path(sys.executable).parent / "rwq"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "redis_work_queue.cli"]


def expected_values(db: redis.Redis, queues: dict[str, WorkQueue]) -> dict[tuple[str, str], int]:
    return {
        (f"rwq_{gauge}", name): value
        for name, q in queues.items()
        for gauge, value in asdict(q.stats(db)).items()
        # The rate limits and the cap are gauges of their own or none; groups are per name, and
        # the number of groups waiting is no count of items.
        if gauge
        not in (
            "rate_limit",
            "group_concurrency",
            "group_rate_limit",
            "groups",
            "top_groups",
            "groups_waiting",
        )
    }


def state_samples(text: str) -> dict[tuple[str, str], float]:
    """The samples of the five state gauges: ``{(metric, queue): value}``."""
    return {
        (s.name, s.labels["queue"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.removeprefix("rwq_") in GAUGES
    }


def test_cli_prints_the_prometheus_text_format(real_db: redis.Redis, redis_url: str) -> None:
    queues = fill(real_db)
    expected = expected_values(real_db, queues)
    assert expected[("rwq_queued", PLAIN)] == 2
    assert expected[("rwq_leased", PLAIN)] == 1
    assert expected[("rwq_expired", PLAIN)] == 1
    assert expected[("rwq_delayed", ODD)] == 2
    assert expected[("rwq_dead", NEWLINE)] == 1
    done = subprocess.run(
        [*rwq_command(), "--url", redis_url, "metrics", PLAIN, ODD, NEWLINE],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for gauge in GAUGES:
        assert f"# HELP rwq_{gauge} " in out
        assert f"# TYPE rwq_{gauge} gauge" in out
    # The label values are escaped as the format says.
    assert f'rwq_queued{{queue="{PLAIN}"}} 2\n' in out
    assert 'rwq_delayed{queue="we\\"ird\\\\name"} 2\n' in out
    assert 'rwq_dead{queue="two\\nlines"} 1\n' in out
    # Parsed back, every sample is there with its value, for every queue and gauge.
    assert state_samples(out) == expected
    assert {f.type for f in text_string_to_metric_families(out)} == {
        "gauge",
        "counter",
        "histogram",
    }


def test_cli_metrics_of_an_empty_queue(real_db: redis.Redis, redis_url: str) -> None:
    done = subprocess.run(
        [*rwq_command(), "--url", redis_url, "metrics", "nothing-here"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for gauge in GAUGES:
        assert f'rwq_{gauge}{{queue="nothing-here"}} 0\n' in done.stdout
    assert real_db.dbsize() == 0  # reading metrics writes nothing


def test_collector_serves_the_same_values(real_db: redis.Redis) -> None:
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415

    queues = fill(real_db)
    registry = CollectorRegistry()
    registry.register(QueueCollector(real_db, list(queues.values())))
    for (metric, name), value in expected_values(real_db, queues).items():
        assert registry.get_sample_value(metric, {"queue": name}) == value, (metric, name)
    text = generate_latest(registry).decode()
    for gauge in GAUGES:
        assert f"# TYPE rwq_{gauge} gauge" in text
    assert state_samples(text) == expected_values(real_db, queues)
    # Values are read at each scrape.
    queues[PLAIN].add_item(real_db, Item(b"", id="more"))
    assert registry.get_sample_value("rwq_queued", {"queue": PLAIN}) == 3
    assert queues[PLAIN].light_clean(real_db).dead == 1  # its last delivery expired
    assert registry.get_sample_value("rwq_expired", {"queue": PLAIN}) == 0
    assert registry.get_sample_value("rwq_dead", {"queue": PLAIN}) == 2


def test_cli_and_collector_agree(real_db: redis.Redis, redis_url: str) -> None:
    from prometheus_client import CollectorRegistry, generate_latest  # noqa: PLC0415

    queues = fill(real_db)
    registry = CollectorRegistry()
    registry.register(QueueCollector(real_db, list(queues.values())))
    done = subprocess.run(
        [*rwq_command(), "--url", redis_url, "metrics", *queues],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr

    def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if not s.name.endswith("_created") and "seconds" not in s.name
        }

    assert samples(done.stdout) == samples(generate_latest(registry).decode())
