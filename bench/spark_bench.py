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
ratios are what matter. Needs ``pip install 'redis-work-queue-lua[spark]'`` and Java.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import redis
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.spark import register

sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from servers import MissingTool, Spawn, exit_on_sigterm, start_server

NAME = "redis-work-queue"


@contextmanager
def redis_server() -> Iterator[str]:
    """A throw-away redis-server (no persistence) on a free port; yields its URL."""
    exit_on_sigterm()
    with tempfile.TemporaryDirectory(prefix="rwq-spark-bench-") as base:
        try:
            server = start_server(Path(base), spawn=Spawn(die_with_parent=True))
        except MissingTool as err:
            sys.exit(str(err))
        try:
            yield server.url
        finally:
            server.stop()


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
) -> tuple[float, list[tuple[int, int]]]:
    """Drain ``queue`` with a streaming read; the time, and each batch's duration (ms) and rows."""
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
                (int(p["durationMs"]["triggerExecution"]), int(p["numInputRows"]))
                for p in query.recentProgress
                if p["numInputRows"]
            ]
        finally:
            query.stop()
        return elapsed, durations
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


class EmptySource(DataSource):
    """A Python streaming source with nothing behind it: one row a micro-batch, no Redis.

    Its micro-batches cost what Spark itself costs a Python source (offset and commit logs,
    planning, the source process's round trips, one task and its Python worker).
    """

    @classmethod
    def name(cls) -> str:
        return "bench-empty"

    def schema(self) -> str:
        return "n long"

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return EmptyReader()


class EmptyReader(DataSourceStreamReader):
    def __init__(self) -> None:
        self.next = 0

    def initialOffset(self) -> dict[str, int]:
        return {"n": 0}

    def latestOffset(self) -> dict[str, int]:
        self.next += 1
        return {"n": self.next}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition(end["n"])]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        yield (int(partition.value),)


def batch_times(spark: Any, reader: Any, batches: int) -> list[int]:
    """Run a query of ``reader`` into a no-op sink; each micro-batch's duration (ms)."""
    checkpoint = tempfile.mkdtemp(prefix="rwq-spark-bench-checkpoint-")
    try:
        query = (
            reader.load()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .start()
        )
        try:
            deadline = time.monotonic() + 300
            while len([p for p in query.recentProgress if p["numInputRows"]]) < batches:
                if query.exception() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the query failed: {query.exception()}")
                time.sleep(0.05)
            return [
                int(p["durationMs"]["triggerExecution"])
                for p in query.recentProgress
                if p["numInputRows"]
            ]
        finally:
            query.stop()
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
    parser.add_argument("--batch", type=int, default=100_000, help="maxItemsPerBatch to try")
    parser.add_argument("--chunk", type=int, default=20_000, help="chunkSize of a write to try")
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions (and cores)")
    parser.add_argument("--no-write", action="store_true", help="measure drains only")
    args = parser.parse_args()
    rows, parts = args.rows, args.partitions
    table: list[tuple[str, float, float]] = []
    overheads: list[tuple[str, float, int]] = []

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
                if args.no_write:
                    break
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
                drain_spark, batches = spark_drain(spark, db, url, spark_queue, batch, parts)
                assert spark_queue.stats(db).dead == 0
                table.append((f"drain, {label} items/s", drain_spark, drain_plain))
                # What a batch costs beyond what the loop needs for the same items.
                extra = [ms / 1000 - drain_plain * n / rows for ms, n in batches]
                overheads.append((label, statistics.median(extra), len(batches)))
                db.flushdb()
            small = WorkQueue(KeyPrefix("small"))
            plain_write(db, small, 12)
            _, one_item = spark_drain(spark, db, url, small, 1, parts)
            ours = statistics.median(ms for ms, _ in one_item[2:] or one_item)
            spark.dataSource.register(EmptySource)
            empty = batch_times(spark, spark.readStream.format("bench-empty"), 12)
            fixed = statistics.median(empty[2:])
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
    for label, extra_secs, count in overheads:
        print(
            f"batch overhead, {label:<28} {extra_secs * 1000:>6.0f} ms a batch "
            f"(median of {count} batches)"
        )
    print(f"one-item micro-batch, this source (median):  {ours:>6.0f} ms")
    print(f"one-row micro-batch, an empty Python source: {fixed:>6.0f} ms (Spark's own cost)")
    print(
        "one process: add_items (500 a script call); lease_many(1000) + complete_many. "
        "The Spark drain includes starting the query."
    )


if __name__ == "__main__":
    main()
