"""What the exporter adds to the state gauges: counters (``counts()``, sync and asyncio), oldest
waiting age, delayed due, live workers, the work gauge, ``rwq_up``; and ``rwq metrics --serve``
scraped over HTTP through a Redis outage."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from helpers import wait_for
from redis_work_queue import AsyncWorkQueue, Item, KeyPrefix, WorkQueue
from redis_work_queue.metrics import QueueCollector, families, read, render_families
from redis_work_queue.ops import QueueCounts
from redis_work_queue.ops.health import heartbeat_steps
from redis_work_queue.transport import run
from servers import Proc, start_server

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

P = "exp"
COUNTS = {"added": 9, "completed": 5, "failed": 3, "retried": 2, "dead": 1, "expired": 4}


def uuid7_at(ms: int) -> str:
    """A UUIDv7 id holding the Unix time ``ms``."""
    value = (ms << 80) | (0x7 << 76) | (random.getrandbits(12) << 64) | (0b10 << 62)
    return uuid.UUID(int=value | random.getrandbits(62)).hex


def samples(text: str) -> dict[tuple[str, str], float]:
    """Samples labelled by queue only: ``{(name, queue): value}``."""
    return {
        (s.name, s.labels["queue"]): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if set(s.labels) == {"queue"}
    }


def scrape_text(db: Any, queues: list[WorkQueue]) -> str:
    return render_families(families(read(db, queues)))


def test_counts_read_the_counters_with_zeros_for_missing_fields(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    assert queue.counts(real_db) == QueueCounts()
    real_db.hset(queue.keys.counts, mapping={**COUNTS, "unknown": 7})
    assert queue.counts(real_db) == QueueCounts(**COUNTS)

    async def read_async() -> QueueCounts:
        client = redis.asyncio.Redis.from_url(real_db_url(real_db))
        try:
            return await AsyncWorkQueue(KeyPrefix(P)).counts(client)
        finally:
            await client.aclose()

    assert asyncio.run(read_async()) == queue.counts(real_db)


def real_db_url(db: redis.Redis) -> str:
    kwargs = db.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


def test_counters_are_exported_as_counters(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    real_db.hset(queue.keys.counts, mapping=COUNTS)
    text = scrape_text(real_db, [queue])
    types = {f.name: f.type for f in text_string_to_metric_families(text)}
    found = samples(text)
    for name, value in asdict(queue.counts(real_db)).items():
        assert types[f"rwq_items_{name}"] == "counter"
        assert found[(f"rwq_items_{name}_total", P)] == value


def test_oldest_waiting_age_from_a_uuid7_id(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    now_ms = int(time.time() * 1000)
    queue.add_item(real_db, Item(b"old", id=uuid7_at(now_ms - 5000)))
    queue.add_item(real_db, Item(b"new", id=uuid7_at(now_ms)))
    age = samples(scrape_text(real_db, [queue]))[("rwq_oldest_waiting_seconds", P)]
    assert 4.5 <= age <= 60
    [found] = read(real_db, [queue])
    assert found.oldest_waiting is not None and 4.5 <= found.oldest_waiting <= 60


def test_no_age_for_an_id_without_time(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.add_item(real_db, Item(b"x", id="plain-id"))
    assert ("rwq_oldest_waiting_seconds", P) not in samples(scrape_text(real_db, [queue]))
    queue.add_item(real_db, Item(b"x"))  # the library's own ids are UUIDv7
    assert ("rwq_oldest_waiting_seconds", P) not in samples(scrape_text(real_db, [queue]))


def test_delayed_due_overdue_workers_and_work(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.add_items(real_db, [Item(b"", id=f"w{i}") for i in range(4)])  # 4 queued
    assert queue.lease(real_db, 30, block=False) is not None  # 1 leased
    assert queue.lease(real_db, 0.001, block=False) is not None  # 1 expired
    queue.add_item(real_db, Item(b"", id="soon"), delay=0.05)  # due shortly
    queue.add_item(real_db, Item(b"", id="later"), delay=600)  # not due
    run(real_db, heartbeat_steps(queue.keys, "w1", 30_000, {"host": "h"}))
    time.sleep(0.3)
    found = samples(scrape_text(real_db, [queue]))
    stats = queue.stats(real_db)
    assert (stats.queued, stats.leased, stats.expired, stats.delayed) == (2, 1, 1, 2)
    assert found[("rwq_delayed_due", P)] == 1
    assert 0.2 <= found[("rwq_delayed_overdue_seconds", P)] <= 60
    assert found[("rwq_workers", P)] == 1
    # waiting + delayed due + leased + expired: not the list length alone.
    assert found[("rwq_work", P)] == 2 + 1 + 1 + 1
    assert found[("rwq_queued", P)] == 2


def test_collector_gives_up_zero_and_logs_once_per_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    server = start_server(tmp_path)
    try:
        db = redis.Redis(host="127.0.0.1", port=server.port, socket_timeout=2)
        registry = CollectorRegistry()
        registry.register(QueueCollector(db, [WorkQueue(KeyPrefix(P))]))
        assert registry.get_sample_value("rwq_up") == 1
        server.kill()
        with caplog.at_level(logging.INFO, logger="redis_work_queue.metrics"):
            for _ in range(3):
                assert registry.get_sample_value("rwq_up") == 0
                assert registry.get_sample_value("rwq_queued", {"queue": P}) is None
            server.launch()
            assert registry.get_sample_value("rwq_up") == 1
        # The collector's own records: a thread another test left running may log meanwhile.
        ours = [r for r in caplog.records if r.name == "redis_work_queue.metrics"]
        warnings = [r for r in ours if r.levelno == logging.WARNING]
        assert len(warnings) == 1
        db.close()
    finally:
        server.stop()


# rwq metrics --serve ----------------------------------------------------------------------------


def rwq_command() -> list[str]:
    script = Path(sys.executable).parent / "rwq"
    return [str(script)] if script.exists() else [sys.executable, "-m", "redis_work_queue.cli"]


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
    return body.decode()


def test_serve_answers_scrapes_through_an_outage(tmp_path: Path) -> None:
    server: Proc = start_server(tmp_path)
    db = server.client()
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    queue.add_items(db, [Item(b"", id=f"s{i}") for i in range(3)])
    dead = queue.lease(db, 30, block=False)
    assert dead is not None
    queue.release(db, dead, reason="broken")
    db.hset(queue.keys.counts, mapping=COUNTS)
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    proc = subprocess.Popen(
        [*rwq_command(), "metrics", P, "--serve", "0", "--url", server.url, "--timeout", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = first.split(" on ")[1].split(" ")[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        found = samples(scrape(url))
        for name, value in asdict(queue.stats(db)).items():
            # The rate limit has a gauge of its own (rwq_rate_limit_per_second); the cap, the
            # groups' rate limit and the groups' counts none (the top groups' backlogs are
            # rwq_group_backlog).
            skipped = ("rate_limit", "group_concurrency", "group_rate_limit", "groups")
            if name not in (*skipped, "top_groups"):
                assert found[(f"rwq_{name}", P)] == value
        for name, value in asdict(queue.counts(db)).items():
            assert found[(f"rwq_items_{name}_total", P)] == value
        assert "rwq_up 1.0" in scrape(url)

        server.kill()
        text = scrape(url)
        assert proc.poll() is None
        up = {f.name: f for f in text_string_to_metric_families(text)}["rwq_up"]
        assert [s.value for s in up.samples] == [0]
        assert "rwq_queued" not in text
        scrape(url)  # a second scrape of the same outage

        server.launch()
        wait_for(lambda: "rwq_up 1.0" in scrape(url), timeout=30, what="rwq_up 1")
        # The restarted server is empty (no persistence): what is added now shows.
        queue.add_item(server.client(), Item(b"", id="after"))
        assert samples(scrape(url))[("rwq_queued", P)] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        server.stop()
    assert proc.returncode == 0, err
    # One warning for the outage, not one per scrape; no traceback.
    assert err.count("cannot read the queues' metrics") == 1, err
    assert "Traceback" not in err


def test_metrics_json(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.add_item(real_db, Item(b"x"))
    real_db.hset(queue.keys.counts, mapping=COUNTS)
    done = subprocess.run(
        [*rwq_command(), "metrics", P, "--json", "--url", redis_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body[P]["queued"] == 1 and body[P]["work"] == 1
    assert body[P]["counts"] == asdict(queue.counts(real_db))
    assert set(body[P]["durations"]) == {"completed", "failed"}


def test_counters_written_by_the_scripts_are_exported(real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    queue.add_items(real_db, [Item(b"", id=f"c{n}") for n in range(3)])
    done = queue.lease(real_db, 30, block=False)
    assert done is not None and queue.complete(real_db, done)
    dead = queue.lease(real_db, 30, block=False)
    assert dead is not None
    queue.release(real_db, dead, reason="broken")
    counts = queue.counts(real_db)
    assert (counts.added, counts.completed, counts.dead) == (3, 1, 1)
    found = samples(scrape_text(real_db, [queue]))
    for name, value in asdict(counts).items():
        assert found[(f"rwq_items_{name}_total", P)] == value
