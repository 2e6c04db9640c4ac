"""Benchmark of the Spark data source: Spark against one plain process, in the same run.

Usage: python bench/spark_bench.py [--rows N] [--batch N] [--chunk N] [--partitions N]

Starts its own redis-server on a free port (and stops it), and a local Spark with as many cores
as partitions. Measures:

* enqueue: a Spark batch write of N rows in 2 partitions, with an id column (so every add checks
  its id), against one process calling ``add_items`` with the same ids and data; at the default
  ``chunkSize`` and at ``--chunk``;
* drain: a streaming read that leases the N items, emits them to a no-op sink and completes
  them, against one process looping over ``lease_many`` and ``complete_many`` (1,000 a call);
  at the default ``maxItemsPerBatch`` and at ``--batch``;
* batch overhead: the median time Spark takes for a micro-batch of one item.

The Spark figures include Spark's own overheads (task start-up, the query's first batch); the
ratios are what matter. Needs ``pip install 'redis-work-queue[spark]'`` and Java.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import redis
from pyspark.sql import SparkSession

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.spark import register

NAME = "redis-work-queue"


@contextmanager
def redis_server() -> Iterator[str]:
    """A throw-away redis-server (no persistence) on a free port; yields its URL."""
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server is not on PATH")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="rwq-spark-bench-")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            workdir,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        client = redis.Redis.from_url(url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.02)
        client.close()
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(workdir, ignore_errors=True)


def spark_session(cores: int) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("redis-work-queue spark bench")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    return session


def spark_write(
    spark: Any, url: str, queue: str, rows: int, partitions: int, chunk: int | None = None
) -> float:
    frame = spark.range(rows, numPartitions=partitions).selectExpr(
        "concat('job-', id) AS id", "id AS n"
    )
    writer = (
        frame.write.format(NAME)
        .mode("append")
        .option("url", url)
        .option("queue", queue)
        .option("idColumn", "id")
    )
    if chunk is not None:
        writer = writer.option("chunkSize", chunk)
    start = time.perf_counter()
    writer.save()
    return time.perf_counter() - start


def plain_write(db: redis.Redis, queue: WorkQueue, rows: int) -> float:
    start = time.perf_counter()
    items = (
        Item(json.dumps({"id": f"job-{n}", "n": n}, separators=(",", ":")), id=f"job-{n}")
        for n in range(rows)
    )
    added = queue.add_items(db, items)
    elapsed = time.perf_counter() - start
    assert sum(added) == rows
    return elapsed


def drained(db: redis.Redis, queue: WorkQueue) -> bool:
    stats = queue.stats(db)
    return stats.queued == stats.leased == stats.expired == 0


def spark_drain(
    spark: Any, db: redis.Redis, url: str, queue: WorkQueue, batch: int | None, partitions: int
) -> tuple[float, list[int]]:
    """Drain ``queue`` with a streaming read; the time and each batch's duration (ms)."""
    checkpoint = tempfile.mkdtemp(prefix="rwq-spark-bench-checkpoint-")
    try:
        start = time.perf_counter()
        reader = (
            spark.readStream.format(NAME)
            .option("url", url)
            .option("queue", queue.name.prefix)
            .option("numPartitions", partitions)
        )
        if batch is not None:
            reader = reader.option("maxItemsPerBatch", batch)
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            while not drained(db, queue):
                if query.exception() is not None:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                time.sleep(0.01)
            elapsed = time.perf_counter() - start
            durations = [
                int(p["durationMs"]["triggerExecution"])
                for p in query.recentProgress
                if p["numInputRows"]
            ]
        finally:
            query.stop()
        return elapsed, durations
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def plain_drain(db: redis.Redis, queue: WorkQueue, batch: int = 1000) -> float:
    start = time.perf_counter()
    while True:
        items = queue.lease_many(db, 60, batch, block=False)
        if not items:
            break
        queue.complete_many(db, items)
    return time.perf_counter() - start


def rate(n: int, secs: float) -> str:
    return f"{n / secs:,.0f}/s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows written and drained")
    parser.add_argument("--batch", type=int, default=50_000, help="maxItemsPerBatch to try")
    parser.add_argument("--chunk", type=int, default=20_000, help="chunkSize of a write to try")
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions (and cores)")
    args = parser.parse_args()
    rows, parts = args.rows, args.partitions
    table: list[tuple[str, float, float]] = []

    with redis_server() as url:
        db = redis.Redis.from_url(url)
        spark = spark_session(parts)
        try:
            # Warm up both sides (JVM, Python workers, script cache) on a throw-away queue.
            spark_write(spark, url, "warmup", 10_000, parts)
            plain_write(db, WorkQueue(KeyPrefix("warmup-plain")), 10_000)
            db.flushdb()

            for label, chunk in (
                ("default chunkSize", None),
                (f"chunkSize {args.chunk:,}", args.chunk),
            ):
                plain_queue, spark_queue = (
                    WorkQueue(KeyPrefix("plain")),
                    WorkQueue(KeyPrefix("spark")),
                )
                enqueue_plain = plain_write(db, plain_queue, rows)
                enqueue_spark = spark_write(spark, url, "spark", rows, parts, chunk)
                assert spark_queue.queue_len(db) == rows
                table.append((f"enqueue, {label} rows/s", enqueue_spark, enqueue_plain))
                db.flushdb()
            for label, batch in (
                ("default maxItemsPerBatch", None),
                (f"maxItemsPerBatch {args.batch:,}", args.batch),
            ):
                plain_queue, spark_queue = (
                    WorkQueue(KeyPrefix("plain")),
                    WorkQueue(KeyPrefix("spark")),
                )
                plain_write(db, plain_queue, rows)
                plain_write(db, spark_queue, rows)
                drain_plain = plain_drain(db, plain_queue)
                drain_spark, _ = spark_drain(spark, db, url, spark_queue, batch, parts)
                assert spark_queue.stats(db).dead == 0
                table.append((f"drain, {label} items/s", drain_spark, drain_plain))
                db.flushdb()
            small = WorkQueue(KeyPrefix("small"))
            plain_write(db, small, 12)
            _, durations = spark_drain(spark, db, url, small, 1, parts)
            overhead = statistics.median(durations[2:] or durations)
        finally:
            spark.stop()
            db.close()

    print(f"redis-work-queue Spark data source, {rows:,} rows, {parts} partitions/cores")
    print(f"{'workload':<44} {'Spark':>12} {'one process':>12} {'ratio':>7}")
    for label, spark_secs, plain_secs in table:
        ratio = plain_secs / spark_secs
        print(
            f"{label:<44} {rate(rows, spark_secs):>12} {rate(rows, plain_secs):>12} {ratio:>6.2f}x"
        )
    print(f"micro-batch overhead (median, 1-item batches): {overhead:.0f} ms")
    print(
        "one process: add_items (500 a script call); lease_many(1000) + complete_many. "
        "The Spark drain includes starting the query."
    )


if __name__ == "__main__":
    main()
