"""Benchmark of the Spark data source: Spark against one plain process, in the same run.

Usage: python bench/spark_bench.py [--rows N] [--batch N] [--chunk N] [--partitions N]

Starts its own redis-server on a free port (and stops it), and a local Spark with as many cores
as partitions. Measures:

* enqueue: a Spark batch write of N rows in 2 partitions, with an id column (so every add checks
  its id), against one process calling ``add_items`` with the same ids and data, each twice
  (alternately) and the best time of each; at the default ``chunkSize`` and at ``--chunk``;
* drain by a running query: a streaming query started on the empty queue and warmed up, then
  N stored items made leasable at once (their ids' list renamed onto the queue), timed until
  they are all leased, emitted to a no-op sink and completed; against one process looping over
  ``lease_many`` and ``complete_many`` (1,000 a call) on the same items, made leasable the same
  way; at the default ``maxItemsPerBatch`` and at ``--batch``;
* drain by a query started on the full queue (the time includes starting the query);
* cost per micro-batch: the median time of a one-item micro-batch, against a one-row micro-batch
  of an empty Python streaming source (what Spark itself costs any Python source), and the time
  to start a query.

Ratios are what matter: the machine's load moves the absolute figures. Needs
``pip install 'redis-work-queue-lua[spark]'`` and Java.
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


def plain_write(db: redis.Redis, queue: WorkQueue, rows: int, first: int = 0) -> float:
    start = time.perf_counter()
    items = (
        Item(json.dumps({"id": f"job-{n}", "n": n}, separators=(",", ":")), id=f"job-{n}")
        for n in range(first, first + rows)
    )
    added = queue.add_items(db, items)
    elapsed = time.perf_counter() - start
    assert sum(added) == rows
    return elapsed


def drained(db: redis.Redis, queue: WorkQueue) -> bool:
    stats = queue.stats(db)
    return stats.queued == stats.leased == stats.expired == 0


def start_drain(
    spark: Any, url: str, queue: WorkQueue, batch: int | None, partitions: int, checkpoint: str
) -> Any:
    """Start a streaming read of ``queue`` into a no-op sink (``batch``: maxItemsPerBatch)."""
    reader = (
        spark.readStream.format(NAME)
        .option("url", url)
        .option("queue", queue.name.prefix)
        .option("numPartitions", partitions)
    )
    if batch is not None:
        reader = reader.option("maxItemsPerBatch", batch)
    return reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint).start()


def spark_drain(
    spark: Any, db: redis.Redis, url: str, queue: WorkQueue, batch: int | None, partitions: int
) -> tuple[float, list[tuple[int, int]]]:
    """Drain ``queue`` with a streaming read; the time, and each batch's duration (ms) and rows."""
    checkpoint = tempfile.mkdtemp(prefix="rwq-spark-bench-checkpoint-")
    try:
        start = time.perf_counter()
        query = start_drain(spark, url, queue, batch, partitions, checkpoint)
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


def stage(db: redis.Redis, queue: WorkQueue, rows: int) -> str:
    """Store ``rows`` items of ``queue`` (as :func:`plain_write` does) with their ids on a
    separate list; :func:`release_staged` makes them all leasable at once.

    The items are written as the wire layout has them (``P:item:<id>``, then the id pushed on a
    list), as any client of the layout may write them.
    """
    staging = f"{queue.name.prefix}:staging"
    pipe = db.pipeline(transaction=False)
    for start in range(0, rows, 1000):
        ids = [f"job-{n}" for n in range(start, min(rows, start + 1000))]
        for n, item_id in enumerate(ids, start):
            data = json.dumps({"id": item_id, "n": n}, separators=(",", ":"))
            pipe.set(f"{queue.name.prefix}:item:{item_id}", data)
        pipe.lpush(staging, *ids)
        pipe.execute()
    return staging


def staged_loop(db: redis.Redis, queue: WorkQueue, rows: int) -> float:
    """Stage ``rows`` items, release them, and time the loop's drain from the release."""
    staging = stage(db, queue, rows)
    return plain_drain(db, queue, release_staged(db, queue, staging))


def release_staged(db: redis.Redis, queue: WorkQueue, staging: str) -> float:
    """Make the staged items leasable in one step (RENAME onto the empty main queue)."""
    assert queue.queue_len(db) == 0
    db.rename(staging, queue.keys.queue)
    return time.perf_counter()


def running_drain(
    spark: Any,
    db: redis.Redis,
    url: str,
    queue: WorkQueue,
    rows: int,
    batch: int | None,
    partitions: int,
) -> tuple[float, float]:
    """Time a running query's drain of ``rows`` items; and the time to start it.

    The query is started on the empty queue and warmed up with a few thousand items (its tasks'
    Python workers started), then the items are made leasable at once and the drain is timed
    from then until nothing is queued or leased: a long-running query's throughput, as the
    loop's.
    """
    checkpoint = tempfile.mkdtemp(prefix="rwq-spark-bench-checkpoint-")
    try:
        begun = time.perf_counter()
        query = start_drain(spark, url, queue, batch, partitions, checkpoint)
        try:
            started = None
            for warm in range(3):
                plain_write(db, queue, 2000, first=-2000 * (warm + 1))
                wait_drained(db, queue, query)
                if started is None:
                    started = time.perf_counter() - begun
            staging = stage(db, queue, rows)
            start = release_staged(db, queue, staging)
            wait_drained(db, queue, query)
            return time.perf_counter() - start, started or 0.0
        finally:
            query.stop()
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def wait_drained(db: redis.Redis, queue: WorkQueue, query: Any) -> None:
    while not drained(db, queue):
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        time.sleep(0.01)


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


def plain_drain(
    db: redis.Redis, queue: WorkQueue, start: float | None = None, batch: int = 1000
) -> float:
    """Drain ``queue`` with a lease_many/complete_many loop; the time since ``start`` (or now)."""
    start = time.perf_counter() if start is None else start
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
    parser.add_argument("--batch", type=int, default=20_000, help="maxItemsPerBatch to try")
    parser.add_argument("--chunk", type=int, default=20_000, help="chunkSize of a write to try")
    parser.add_argument("--partitions", type=int, default=2, help="Spark partitions (and cores)")
    parser.add_argument("--no-write", action="store_true", help="measure drains only")
    args = parser.parse_args()
    rows, parts = args.rows, args.partitions
    table: list[tuple[str, float, float]] = []
    starts: list[float] = []

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
                # Each side twice, alternately, and the best time of each: a change in the
                # machine's load during the row weighs on both sides alike.
                plain_times, spark_times = [], []
                for _ in range(2):
                    plain_times.append(plain_write(db, WorkQueue(KeyPrefix("plain")), rows))
                    spark_times.append(spark_write(spark, url, "spark", rows, parts, chunk))
                    assert WorkQueue(KeyPrefix("spark")).queue_len(db) == rows
                    db.flushdb()
                table.append((f"enqueue, {label} rows/s", min(spark_times), min(plain_times)))
            plain_queue, spark_queue = WorkQueue(KeyPrefix("plain")), WorkQueue(KeyPrefix("spark"))
            for label, batch in (
                ("default maxItemsPerBatch", None),
                (f"maxItemsPerBatch {args.batch:,}", args.batch),
            ):
                drain_plain = staged_loop(db, plain_queue, rows)
                drain_spark, started = running_drain(
                    spark, db, url, spark_queue, rows, batch, parts
                )
                assert spark_queue.stats(db).dead == 0
                # The loop again after the query: the mean of both is the baseline, so that a
                # change in the machine's load during the row weighs on both sides alike.
                drain_plain = (drain_plain + staged_loop(db, plain_queue, rows)) / 2
                table.append((f"drain, running query, {label}", drain_spark, drain_plain))
                starts.append(started)
                db.flushdb()
            plain_write(db, plain_queue, rows)
            plain_write(db, spark_queue, rows)
            drain_plain = plain_drain(db, plain_queue)
            drain_spark, _ = spark_drain(spark, db, url, spark_queue, None, parts)
            table.append(("drain, query started on the full queue", drain_spark, drain_plain))
            db.flushdb()
            small = WorkQueue(KeyPrefix("small"))
            spark.dataSource.register(EmptySource)
            ours_ms: list[int] = []
            empty_ms: list[int] = []
            for round_ in range(2):  # alternately, so that both see the machine's load alike
                plain_write(db, small, 14, first=100 * round_)
                _, one_item = spark_drain(spark, db, url, small, 1, parts)
                ours_ms += [ms for ms, _ in one_item[2:]]
                empty_ms += batch_times(spark, spark.readStream.format("bench-empty"), 14)[2:]
            ours, fixed = statistics.median(ours_ms), statistics.median(empty_ms)
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
    print(
        f"one-item micro-batch: this source {ours:.0f} ms, an empty Python source {fixed:.0f} ms "
        f"(Spark's own cost); this source's own cost a batch: {ours - fixed:.0f} ms"
    )
    print(f"starting a query until its first batch is drained: {statistics.median(starts):.1f} s")
    print(
        "one process: add_items (500 a script call); lease_many(1000) + complete_many. A "
        "running query and the loop are timed from making the stored items leasable at once "
        "until all are completed; the last row includes starting the query."
    )


if __name__ == "__main__":
    main()
