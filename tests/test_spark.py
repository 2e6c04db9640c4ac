"""The Spark data source, on local Spark (one session for the whole run) against real Redis.

Marked ``spark``: ``-m "not spark"`` deselects them where there is no Java. Without PySpark or
Java they skip, saying why, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import wait_for
from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.errors import InvalidArgumentError, WrongKeyTypeError
from redis_work_queue.ops import QueueStats
from redis_work_queue.transport import run
from servers import Cluster, SentinelSetup, TlsServer

try:
    from pyspark.java_gateway import ensure_callback_server_started
    from pyspark.sql import SparkSession
    from pyspark.sql.functions import col, udf
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
    from pyspark.sql.types import (
        BinaryType,
        DoubleType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    from redis_work_queue.ops.spark import complete_held
    from redis_work_queue.spark import last_write, register
    from redis_work_queue.spark import stream as spark_stream
    from redis_work_queue.spark.calls import connect
    from redis_work_queue.spark.options import (
        Options,
        QueueOptions,
        ReadOptions,
        StreamOptions,
        WriteOptions,
        check_read,
    )
    from redis_work_queue.spark.stream import QueueStreamReader
except ImportError:  # the tests that need them skip (under CI=true: fail) in require()
    pass

NAME = "redis-work-queue"
SPARK_WAIT = 90.0  # seconds a streaming query may take to get somewhere

spark_test = pytest.mark.spark

# py4j's callback server (foreachBatch calls back into this process through it) select()s on its
# listening socket, which fails for a descriptor number of 1024 or more. Earlier tests of a full
# run can leave that many descriptors open, so a few low ones are held from collection time and
# handed to the callback server when the Spark session starts.
_LOW_FDS = [os.open(os.devnull, os.O_RDONLY) for _ in range(4)]


def test_core_does_not_import_spark() -> None:
    code = (
        "import sys, redis_work_queue, redis_work_queue.cli, redis_work_queue.worker\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'py4j')"
        " or m.startswith('redis_work_queue.spark'))\n"
        "print(bad)\n"
        "sys.exit(1 if bad else 0)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"the core imported {done.stdout.strip()} {done.stderr}"


# Fixtures ---------------------------------------------------------------------------------------


def require(java: bool = True) -> None:
    """Skip the test when PySpark (or Java) is missing; under CI=true, fail it."""
    missing = [name for name in ("pyspark", "pyarrow") if importlib.util.find_spec(name) is None]
    java_home = os.environ.get("JAVA_HOME")
    has_java = shutil.which("java") or (java_home and Path(java_home, "bin", "java").exists())
    if java and not has_java:
        missing.append("java")
    if missing:
        extra = "pip install 'redis-work-queue-lua[spark]'"
        hint = "a Java runtime" if missing == ["java"] else extra
        why = f"the Spark tests need {', '.join(missing)} ({hint})"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; CI runs them", pytrace=False)
        pytest.skip(why)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The session's one local Spark (2 cores; a failed task is tried once more)."""
    require()
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("redis-work-queue tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.execution.pythonUDF.arrow.enabled", "false")
        .config("spark.sql.streaming.stopTimeout", "60s")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    while _LOW_FDS:
        os.close(_LOW_FDS.pop())
    ensure_callback_server_started(session.sparkContext._gateway)
    register(session)
    try:
        yield session
    finally:
        session.stop()


def queue_ids(db: redis.Redis, queue: str) -> list[str]:
    return [raw.decode() for raw in db.lrange(f"{queue}:queue", 0, -1)]


# Batch write ------------------------------------------------------------------------------------


@spark_test
def test_batch_write_lands_every_row_once_and_a_rerun_adds_none(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    df = spark.range(10_000, numPartitions=2).selectExpr("concat('job-', id) AS job_id", "id AS n")

    def write() -> None:
        (
            df.write.format(NAME)
            .mode("append")
            .option("url", redis_url)
            .option("queue", "jobs")
            .option("idColumn", "job_id")
            .save()
        )

    write()
    report = last_write(real_db, "jobs")
    assert (report.added, report.existing, report.tasks, report.batch_id) == (10_000, 0, 2, None)
    ids = queue_ids(real_db, "jobs")
    assert len(ids) == 10_000
    assert set(ids) == {f"job-{n}" for n in range(10_000)}
    # No data column: the whole row as compact JSON.
    assert real_db.get("jobs:item:job-42") == b'{"job_id":"job-42","n":42}'

    write()
    report = last_write(real_db, "jobs")
    assert (report.added, report.existing) == (0, 10_000)
    assert len(queue_ids(real_db, "jobs")) == 10_000


@spark_test
def test_a_task_that_fails_once_and_is_retried_adds_each_row_once(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    marker = str(tmp_path / "failed-once")

    def job_id(n):  # no type hints: Spark would read them as a pandas UDF's
        # The first attempt at row 7000 gives it no id, so the task of partition 1 fails while
        # it checks its rows, before it adds any; the retry gives the id.
        if n == 7000 and not os.path.exists(marker):
            Path(marker).touch()
            return None
        return f"job-{n}"

    ids = udf(job_id, "string").asNondeterministic()
    df = spark.range(10_000, numPartitions=2).select(ids("id").alias("job_id"), col("id"))
    (
        df.write.format(NAME)
        .mode("append")
        .option("url", redis_url)
        .option("queue", "retry")
        .option("idColumn", "job_id")
        .option("chunkSize", 100)
        .save()
    )
    assert os.path.exists(marker), "the injected failure did not happen"
    report = last_write(real_db, "retry")
    # The failed attempt added nothing: the retry found none of its rows there already.
    assert (report.added, report.existing, report.skipped) == (10_000, 0, 0), report
    queued = queue_ids(real_db, "retry")
    assert len(queued) == 10_000
    assert set(queued) == {f"job-{n}" for n in range(10_000)}


# Options ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "typo", "meant"),
    [
        ("write", "idColum", "idColumn"),
        ("write", "dataColum", "dataColumn"),
        ("write", "delaySecond", "delaySeconds"),
        ("read", "partitionSise", "partitionSize"),
        ("stream", "maxItemsPerBach", "maxItemsPerBatch"),
        ("stream", "maxOffsetsPerTrigger", "maxItemsPerBatch"),
        ("load", "leaseSecond", "leaseSeconds"),
    ],
)
def test_an_unknown_option_is_refused_with_the_closest_name(
    kind: str, typo: str, meant: str
) -> None:
    require(java=False)
    parse = {
        "write": WriteOptions.parse,
        "read": ReadOptions.parse,
        "stream": StreamOptions.parse,
        "load": check_read,
    }[kind]
    given = {"url": "redis://127.0.0.1:1/0", "queue": "q", typo: "7"}
    with pytest.raises(
        InvalidArgumentError, match=rf"no option '{typo.lower()}'; did you mean '{meant}'"
    ):
        parse(Options(given))
    # The right name passes, as does what Spark adds itself.
    parse(Options({"url": given["url"], "queue": "q", meant: "7", "checkpointLocation": "/c"}))


def test_options_of_a_streaming_read_are_checked_as_a_whole() -> None:
    require(java=False)
    base = {"url": "redis://127.0.0.1:1/0", "queue": "q"}
    for bad, message in [
        ({"leaseSeconds": "0"}, "'leaseSeconds' must be at least"),
        ({"leaseSeconds": "10", "renewSeconds": "10"}, "'renewSeconds' must be below"),
        ({"queue": ""}, "'queue' is required"),
        ({"idColumn": "k"}, "a read has no option 'idcolumn'"),
        ({"path": "other"}, "name different queues"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            check_read(Options({**base, **bad}))
    # A batch read refuses a streaming read's option, and the other way round.
    with pytest.raises(InvalidArgumentError, match="a batch read has no option 'leaseseconds'"):
        ReadOptions.parse(Options({**base, "leaseSeconds": "5"}))
    with pytest.raises(InvalidArgumentError, match="a streaming read has no option"):
        StreamOptions.parse(Options({**base, "partitionSize": "5"}))
    # The path names the queue: load("jobs").
    assert StreamOptions.parse(Options({"url": base["url"], "path": "jobs"})).where.queue == "jobs"


@spark_test
def test_bad_options_fail_save_and_load_before_any_query_starts(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    df = spark.createDataFrame([("a", "x")], "k string, v string")
    with pytest.raises(Exception, match="did you mean 'idColumn'"):
        df.write.format(NAME).mode("append").option("url", redis_url).option(
            "queue", "typo"
        ).option("idColum", "k").save()
    assert real_db.exists("typo:queue") == 0
    stream = spark.readStream.format(NAME).option("url", redis_url)
    with pytest.raises(Exception, match="'leaseSeconds' must be at least"):
        stream.option("queue", "q").option("leaseSeconds", 0).load()
    with pytest.raises(Exception, match="'renewSeconds' must be below"):
        stream.option("queue", "q").option("leaseSeconds", 5).option("renewSeconds", 5).load()
    with pytest.raises(Exception, match="'queue' is required"):
        spark.readStream.format(NAME).option("url", redis_url).load()
    with pytest.raises(Exception, match="did you mean 'maxItemsPerBatch'"):
        spark.readStream.format(NAME).option("url", redis_url).option("queue", "q").option(
            "maxOffsetsPerTrigger", 10
        ).load()
    # load("queue") names the queue.
    WorkQueue(KeyPrefix("bypath")).add_item(real_db, Item(b"x", id="one"))
    rows = spark.read.format(NAME).option("url", redis_url).load("bypath").collect()
    assert [row.id for row in rows] == ["one"]


# Bad rows ---------------------------------------------------------------------------------------


@spark_test
def test_a_null_id_or_data_fails_the_task_before_it_adds_anything(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    secret = "s3cret-payload"
    for rows, options, column in [
        ([("a", secret), (None, secret), ("b", secret)], {"idColumn": "k"}, "idColumn 'k'"),
        ([("a", secret), ("", secret), ("b", secret)], {"idColumn": "k"}, "idColumn 'k'"),
        (
            [("a", secret), ("n", None), ("b", secret)],
            {"idColumn": "k", "dataColumn": "v"},
            "dataColumn 'v'",
        ),
    ]:
        df = spark.createDataFrame(rows, "k string, v string").coalesce(1)
        write = df.write.format(NAME).mode("append").option("url", redis_url).option("queue", "nul")
        with pytest.raises(
            Exception, match=f"row 1 of this task's partition has .*{column}"
        ) as err:
            write.options(**options).save()
        assert secret not in str(err.value)
        assert real_db.exists("nul:queue", "nul:item:a") == 0

    df = spark.createDataFrame(
        [("a", "1"), (None, "2"), ("b", None), ("c", "3")], "k string, v string"
    ).coalesce(1)
    df.write.format(NAME).mode("append").option("url", redis_url).option("queue", "skip").option(
        "idColumn", "k"
    ).option("dataColumn", "v").option("badRows", "skip").save()
    report = last_write(real_db, "skip")
    assert (report.added, report.skipped, report.duplicates) == (2, 2, 0)
    assert sorted(queue_ids(real_db, "skip")) == ["a", "c"]
    with pytest.raises(Exception, match="'badRows' is 'fail'"):
        df.write.format(NAME).mode("append").option("url", redis_url).option(
            "queue", "skip"
        ).option("badRows", "ignore").save()


@spark_test
def test_duplicate_ids_of_one_task_are_counted_and_the_first_row_wins(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    rows = [("a", "first"), ("b", "only"), ("a", "second"), ("a", "third")]
    df = spark.createDataFrame(rows, "k string, v string").coalesce(1)
    df.write.format(NAME).mode("append").option("url", redis_url).option("queue", "dup").option(
        "idColumn", "k"
    ).option("dataColumn", "v").save()
    report = last_write(real_db, "dup")
    assert (report.added, report.existing, report.duplicates) == (2, 0, 2)
    assert real_db.get("dup:item:a") == b"first"
    assert sorted(queue_ids(real_db, "dup")) == ["a", "b"]


@spark_test
def test_write_options_data_column_delay_and_errors(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    rows = [("a", b"\x00\xffbinary"), ("b", b"two")]
    df = spark.createDataFrame(rows, "key string, payload binary")
    (
        df.write.format(NAME)
        .mode("append")
        .option("url", redis_url)
        .option("queue", "opts")
        .option("idColumn", "key")
        .option("dataColumn", "payload")
        .option("delaySeconds", 600)
        .option("ttlSeconds", 3600)
        .save()
    )
    queue = WorkQueue(KeyPrefix("opts"))
    stats = queue.stats(real_db)
    assert (stats.queued, stats.delayed) == (0, 2)
    assert real_db.get("opts:item:a") == b"\x00\xffbinary"
    assert 3500_000 < real_db.pttl("opts:item:a") <= 3600_000

    # No id column: fresh ids; a string data column is stored as UTF-8.
    spark.createDataFrame([("héllo",)], "text string").write.format(NAME).mode("append").option(
        "url", redis_url
    ).option("queue", "fresh").option("dataColumn", "text").save()
    (fresh,) = queue_ids(real_db, "fresh")
    assert len(fresh) == 32
    assert real_db.get(f"fresh:item:{fresh}") == "héllo".encode()

    with pytest.raises(Exception, match=r"(?i)overwrite|append"):
        df.write.format(NAME).mode("overwrite").option("url", redis_url).option(
            "queue", "opts"
        ).save()
    with pytest.raises(Exception, match="idColumn 'nope' is not a column"):
        df.write.format(NAME).mode("append").option("url", redis_url).option(
            "queue", "opts"
        ).option("idColumn", "nope").save()
    with pytest.raises(Exception, match="'queue' is required"):
        spark.read.format(NAME).option("url", redis_url).load().collect()


# Streaming write --------------------------------------------------------------------------------


@spark_test
def test_streaming_write_from_a_rate_source_lands_every_row(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    checkpoint = str(tmp_path / "checkpoint")
    for attempt in range(2):  # each availableNow run writes one more micro-batch of 1000 rows
        query = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", 1000)
            .option("numPartitions", 2)
            .load()
            .select(col("value").cast("string").alias("id"), col("value"))
            .writeStream.format(NAME)
            .option("url", redis_url)
            .option("queue", "rates")
            .option("idColumn", "id")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        assert query.awaitTermination(SPARK_WAIT), "the availableNow query did not end"
        assert query.exception() is None
        report = last_write(real_db, "rates")
        assert (report.batch_id, report.added, report.existing) == (attempt, 1000, 0)
    ids = queue_ids(real_db, "rates")
    assert sorted(int(i) for i in ids) == list(range(2000))
    assert json.loads(real_db.get("rates:item:1999") or b"") == {"id": "1999", "value": 1999}


# Batch read -------------------------------------------------------------------------------------


@spark_test
def test_batch_read_agrees_with_inspection_and_stats(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    queue = WorkQueue(KeyPrefix("audit"))
    once = WorkQueue(KeyPrefix("audit"), max_deliveries=1)
    queue.add_items(real_db, [Item(f"dead {n}", id=f"d{n}") for n in range(3)])
    for item in once.lease_many(real_db, 60, 3, block=False):
        assert once.release(real_db, item, reason="boom")
    queue.add_items(real_db, [Item(f"again {n}", id=f"r{n}") for n in range(2)])
    for item in queue.lease_many(real_db, 60, 2, block=False):
        assert queue.release(real_db, item, reason="retry")
    queue.add_items(real_db, [Item(f"data {n}", id=f"q{n}") for n in range(40)])
    leased = queue.lease_many(real_db, 300, 10, block=False)  # r0, r1, q0..q7
    short = queue.lease_many(real_db, 0.05, 5, block=False)
    queue.add_items(real_db, [Item(f"later {n}", id=f"t{n}") for n in range(4)], delay=600)
    time.sleep(0.1)  # the short leases run out: expired, awaiting a light clean

    rows = (
        spark.read.format(NAME)
        .option("url", redis_url)
        .option("queue", "audit")
        .option("partitionSize", 7)  # several Spark partitions per part
        .option("chunkSize", 3)
        .option("chunkBytes", 10)  # and pages cut short by their bytes
        .load()
        .collect()
    )
    by_state = Counter(row.state for row in rows)
    stats = queue.stats(real_db)
    assert by_state == {
        "queued": stats.queued,
        "leased": stats.leased,
        "expired": stats.expired,
        "delayed": stats.delayed,
        "dead": stats.dead,
    }
    assert dict(by_state) == {"queued": 27, "leased": 10, "expired": 5, "delayed": 4, "dead": 3}
    seen = {row.id: row for row in rows}
    assert len(seen) == len(rows)

    peeked = queue.peek(real_db, 0, 100)
    assert {(p.id, p.data) for p in peeked} == {
        (r.id, bytes(r.data)) for r in rows if r.state == "queued"
    }
    pending = queue.pending(real_db, 0, 100)
    assert {p.id for p in pending if not p.expired} == {i.id() for i in leased}
    assert {p.id for p in pending if p.expired} == {i.id() for i in short}
    for p in pending:
        row = seen[p.id]
        assert row.deliveries == p.deliveries
        if p.lease_left is None:
            assert row.state == "expired" and row.lease_left is None
        else:
            assert row.state == "leased" and abs(row.lease_left - p.lease_left) < 5
    dead = {d.id: d for d in queue.dead_letters(real_db, 0, 100)}
    assert {r.id for r in rows if r.state == "dead"} == set(dead)
    for item_id, letter in dead.items():
        row = seen[item_id]
        assert (bytes(row.data), row.deliveries, row.reason) == (letter.data, 1, "boom")
    delayed = {raw.decode() for raw in real_db.zrange("audit:delayed", 0, -1)}
    assert {r.id for r in rows if r.state == "delayed"} == delayed == {f"t{n}" for n in range(4)}
    assert all(r.lease_left is None for r in rows if r.state in ("queued", "delayed", "dead"))
    # Released items come back with their count and reason; they were leased again here.
    assert (seen["r0"].deliveries, seen["r0"].reason) == (2, "retry")

    # A read may ask for fewer columns; an empty queue reads as no rows.
    narrow = (
        spark.read.format(NAME)
        .schema("id string, state string")
        .option("url", redis_url)
        .option("queue", "audit")
        .load()
    )
    assert narrow.where("state = 'delayed'").count() == 4
    empty = spark.read.format(NAME).option("url", redis_url).option("queue", "none").load()
    assert empty.count() == 0


def formatted_plan(frame: Any) -> str:
    """What ``frame.explain("formatted")`` prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        frame.explain("formatted")
    return out.getvalue()


@spark_test
def test_batch_read_pushes_state_and_id_filters_down_and_declares_non_null_columns(
    spark: Any, redis_url: str, real_db: redis.Redis
) -> None:
    queue = WorkQueue(KeyPrefix("push"))
    queue.add_items(real_db, [Item(f"q{n}", id=f"q{n}") for n in range(5)])
    queue.lease_many(real_db, 300, 2, block=False)
    queue.add_items(real_db, [Item("later", id="t0")], delay=600)
    frame = spark.read.format(NAME).option("url", redis_url).option("queue", "push").load()
    fields = {f.name: f.nullable for f in frame.schema.fields}
    assert fields == {
        "id": False,
        "data": False,
        "state": False,
        "deliveries": False,
        "lease_left": True,
        "reason": True,
    }

    leased = frame.where("state = 'leased'")
    assert "PushedFilters: [EqualTo(state,leased)]" in formatted_plan(leased)
    assert sorted(r.id for r in leased.collect()) == ["q0", "q1"]
    some = frame.where(col("id").isin("q3", "t0", "nope") & col("state").isin("queued", "dead"))
    plan = formatted_plan(some)
    assert "PushedFilters: [In(id, [nope,q3,t0]), In(state, [dead,queued])]" in plan, plan
    assert "Filter" not in plan.split("PushedFilters")[0], plan
    assert [(r.id, r.state) for r in some.collect()] == [("q3", "queued")]

    # Column names in any case; data decoded as text or as JSON into the schema asked for.
    WorkQueue(KeyPrefix("typed")).add_items(
        real_db,
        [
            Item(json.dumps({"name": "é", "n": 1}), id="a"),
            Item(b"\xff not json", id="b"),
        ],
    )
    typed = (
        spark.read.format(NAME)
        .schema("ID string, Data struct<name: string, n: int>")
        .option("url", redis_url)
        .option("queue", "typed")
        .load()
    )
    got = {r.ID: r.Data for r in typed.collect()}
    assert got["a"].asDict() == {"name": "é", "n": 1} and got["b"] is None
    text = (
        spark.read.format(NAME)
        .schema("id string, data string")
        .option("url", redis_url)
        .option("queue", "typed")
        .load()
        .where("id = 'a'")
        .collect()
    )
    assert json.loads(text[0].data) == {"name": "é", "n": 1}


@spark_test
def test_binary_unicode_and_json_data_round_trip_byte_exact(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    payloads = {
        "bin": bytes(range(256)) * 3,
        "zero": b"",
        "uni": "żółw 🐢 \u0000 κόσμε".encode(),
        "json": json.dumps({"a": [1, 2.5, None], "é": {"x": True}}, ensure_ascii=False).encode(),
    }
    df = spark.createDataFrame(list(payloads.items()), "k string, v binary").repartition(2)
    df.write.format(NAME).mode("append").option("url", redis_url).option("queue", "exact").option(
        "idColumn", "k"
    ).option("dataColumn", "v").save()
    for key, payload in payloads.items():
        assert real_db.get(f"exact:item:{key}") == payload
    rows = spark.read.format(NAME).option("url", redis_url).option("queue", "exact").load()
    assert {r.id: bytes(r.data) for r in rows.collect()} == payloads

    sink = Sink()
    query = (
        stream(spark, redis_url, "exact", leaseSeconds=30)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT)
    got = {r.id: bytes(r.data) for rows in sink.batches.values() for r in rows}
    assert got == payloads
    assert drained(WorkQueue(KeyPrefix("exact")), real_db)


# Deployments ------------------------------------------------------------------------------------


@spark_test
def test_a_cluster_backed_queue_is_written_read_and_drained(
    spark: Any, cluster: Cluster, cluster_db: Any, tmp_path: Path
) -> None:
    url = f"redis://127.0.0.1:{cluster.primaries()[0].port}/0"
    with pytest.raises(Exception, match=r"hash tag.*\{jobs\}"):
        spark.read.format(NAME).option("url", url).option("cluster", "true").load("jobs")
    queue_name = "{spark-jobs}"
    df = spark.range(60, numPartitions=2).selectExpr("concat('c', id) AS id", "id AS n")
    df.write.format(NAME).mode("append").option("url", url).option("cluster", "true").option(
        "queue", queue_name
    ).option("idColumn", "id").save()
    queue = WorkQueue(KeyPrefix(queue_name))
    assert queue.queue_len(cluster_db) == 60
    report = last_write(cluster_db, queue_name)
    assert (report.added, report.existing) == (60, 0)
    snapshot = (
        spark.read.format(NAME)
        .option("url", url)
        .option("cluster", "true")
        .load(queue_name)
        .where("state = 'queued'")
    )
    assert snapshot.count() == 60
    sink = Sink()
    query = (
        stream(spark, url, queue_name, cluster="true", maxItemsPerBatch=25)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT)
    assert query.exception() is None
    assert sorted(sink.ids()) == sorted(f"c{n}" for n in range(60))
    stats = queue.stats(cluster_db)
    assert stats.queued == stats.leased == stats.expired == 0


def test_renew_many_and_give_back_on_redis_cluster(cluster_db: Any) -> None:
    # The streaming read's driver renews and gives back many leases at once on any deployment.
    queue = WorkQueue(KeyPrefix("{renew}"))
    queue.add_items(cluster_db, [Item(str(n), id=f"r{n}") for n in range(5)])
    items = queue.lease_many(cluster_db, 1, 5, block=False)
    assert queue.renew_many(cluster_db, items, 30) == [True] * 5
    assert cluster_db.pttl("{renew}:lease:r0") > 29_000
    assert queue.give_back(cluster_db, items[:3]) == [True] * 3
    stats = queue.stats(cluster_db)
    assert (stats.queued, stats.leased) == (3, 2)


@spark_test
def test_sentinel_and_password_options_reach_the_server(
    sentinel_setup: SentinelSetup, redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    primary = sentinel_setup.pair.primary
    host, port = sentinel_setup.address
    where = QueueOptions.parse(
        Options({"sentinels": f"{host}:{port}", "sentinelMaster": "mymaster", "queue": "s"})
    )
    db = connect(where)
    try:
        db.set("s:probe", "1")
        assert primary.admin().get("s:probe") in (b"1", "1")
    finally:
        db.close()

    real_db.execute_command("ACL", "SETUSER", "sparkuser", "on", ">s3cret", "~*", "+@all")
    try:
        bare = redis_url  # no credentials in it: they come from the options
        where = QueueOptions.parse(
            Options({"url": bare, "queue": "p", "username": "sparkuser", "password": "s3cret"})
        )
        db = connect(where)
        try:
            assert db.acl_whoami() in (b"sparkuser", "sparkuser")
        finally:
            db.close()
        assert "s3cret" not in repr(where)
        with pytest.raises(redis.AuthenticationError):
            connect(
                QueueOptions.parse(
                    Options(
                        {
                            **{"url": bare, "queue": "p"},
                            "username": "sparkuser",
                            "password": "wrong",
                        }
                    )
                )
            ).ping()
    finally:
        real_db.execute_command("ACL", "DELUSER", "sparkuser")

    tls = connect(
        QueueOptions.parse(
            Options({"url": "rediss://127.0.0.1:1/0", "queue": "t", "tlsCaCerts": "/ca.pem"})
        )
    )
    kwargs = tls.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/ca.pem"
    assert tls.connection_pool.connection_class.__name__ == "SSLConnection"
    for bad, message in [
        ({"cluster": "yes"}, "'cluster' is 'true' or 'false'"),
        ({"sentinels": "nohost"}, "list of host:port"),
        ({"cluster": "true", "sentinels": "h:1"}, "not both"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            QueueOptions.parse(Options({"url": "redis://h:1/0", "queue": "{q}", **bad}))


@spark_test
def test_a_tls_server_is_written_and_drained_with_the_ca_option(
    spark: Any, tls_server: TlsServer, tmp_path: Path
) -> None:
    proc, url, ca = tls_server.proc, tls_server.url, tls_server.ca
    frame = spark.range(40, numPartitions=2).selectExpr("concat('t', id) AS id", "id AS n")
    frame.write.format(NAME).mode("append").option("url", url).option("tlsCaCerts", str(ca)).option(
        "queue", "tls"
    ).option("idColumn", "id").save()
    plain = proc.client()  # the server's plain port
    queue = WorkQueue(KeyPrefix("tls"))
    assert queue.queue_len(plain) == 40
    sink = Sink()
    query = (
        stream(spark, url, "tls", tlsCaCerts=str(ca), maxItemsPerBatch=15)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT)
    assert query.exception() is None
    assert sorted(sink.ids()) == sorted(f"t{n}" for n in range(40))
    assert drained(queue, plain)
    # Without the CA, the server's certificate is refused.
    with pytest.raises(Exception, match=r"(?i)certificate verify failed"):
        spark.read.format(NAME).option("url", url).load("tls").count()


@spark_test
def test_a_queue_behind_sentinel_is_written_and_drained(
    spark: Any, sentinel_setup: SentinelSetup, tmp_path: Path
) -> None:
    host, port = sentinel_setup.address
    where = {"sentinels": f"{host}:{port}", "sentinelMaster": "mymaster"}
    frame = spark.range(30, numPartitions=2).selectExpr("concat('s', id) AS id", "id AS n")
    writer = frame.write.format(NAME).mode("append").option("queue", "sent")
    for name, value in where.items():
        writer = writer.option(name, value)
    writer.option("idColumn", "id").save()
    primary = sentinel_setup.pair.primary.client()
    queue = WorkQueue(KeyPrefix("sent"))
    assert queue.queue_len(primary) == 30
    sink = Sink()
    reader = spark.readStream.format(NAME).option("queue", "sent")
    for name, value in where.items():
        reader = reader.option(name, value)
    query = (
        reader.option("maxItemsPerBatch", 12)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT)
    assert query.exception() is None
    assert sorted(sink.ids()) == sorted(f"s{n}" for n in range(30))
    assert drained(queue, primary)


# Streaming read ---------------------------------------------------------------------------------


class Sink:
    """A foreachBatch sink that keeps every row it is given, by micro-batch."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Any]] = {}
        self.lock = threading.Lock()

    def __call__(self, frame: Any, batch_id: int) -> None:
        rows = frame.collect()
        with self.lock:
            self.batches.setdefault(batch_id, []).extend(rows)

    def ids(self) -> list[str]:
        with self.lock:
            return [row.id for rows in self.batches.values() for row in rows]


def stream(spark: Any, url: str, queue: str, **options: Any) -> Any:
    reader = spark.readStream.format(NAME).option("url", url).option("queue", queue)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def drained(queue: WorkQueue, db: redis.Redis) -> bool:
    stats = queue.stats(db)
    return stats.queued == stats.leased == stats.expired == 0


@spark_test
def test_streaming_read_drains_a_queue_exactly_once(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    queue = WorkQueue(KeyPrefix("drain"))
    items = [Item(f"payload {n}", id=f"i{n}") for n in range(2000)]
    queue.add_items(real_db, items)
    sink = Sink()
    query = (
        stream(spark, redis_url, "drain", maxItemsPerBatch=300, numPartitions=2)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    try:
        wait_for(
            lambda: len(sink.ids()) >= 2000 and drained(queue, real_db),
            timeout=SPARK_WAIT,
            interval=0.2,
            what="the query to drain the queue",
        )
    finally:
        query.stop()
    assert query.exception() is None
    counts = Counter(sink.ids())
    assert set(counts) == {item.id() for item in items}
    assert set(counts.values()) == {1}, "an item was delivered twice"
    assert all(len(rows) <= 300 for rows in sink.batches.values())
    rows = [row for batch in sink.batches.values() for row in batch]
    assert all(bytes(row.data) == f"payload {row.id[1:]}".encode() for row in rows)
    assert {(row.deliveries, row.state) for row in rows} == {(1, "leased")}
    assert not real_db.keys("drain:spark:*"), "batch records were left behind"
    assert queue.stats(real_db).dead == 0


@spark_test
def test_streaming_read_available_now_drains_what_was_queued_then_ends(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    if spark_stream.SupportsTriggerAvailableNow is object:
        pytest.skip("Trigger.AvailableNow for Python data sources needs Spark 4.2 or later")
    queue = WorkQueue(KeyPrefix("now"))
    queue.add_items(real_db, [Item(f"d{n}", id=f"n{n}") for n in range(1000)])
    sink = Sink()

    def store(frame: Any, batch_id: int) -> None:
        sink(frame, batch_id)
        if batch_id == 0:
            queue.add_item(real_db, Item("late", id="late"))  # after the start: left for later

    query = (
        spark.readStream.format(NAME)
        .schema("id string, data binary, deliveries int")
        .option("url", redis_url)
        .option("queue", "now")
        .option("maxItemsPerBatch", 300)
        .load()
        .writeStream.foreachBatch(store)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT), "the availableNow query did not end"
    assert query.exception() is None
    assert sorted(sink.ids()) == sorted(f"n{n}" for n in range(1000))
    assert all(len(rows[0]) == 3 for rows in sink.batches.values() if rows)
    # Its last batch was completed before it ended; the late item waits.
    assert queue.stats(real_db) == QueueStats(1, 0, 0, 0, 0)
    assert queue_ids(real_db, "now") == ["late"]


@spark_test
def test_streaming_read_stopped_mid_batch_loses_nothing_after_a_restart(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    queue = WorkQueue(KeyPrefix("crash"))
    all_ids = {f"c{n}" for n in range(600)}
    queue.add_items(real_db, [Item(f"job {i}", id=i) for i in sorted(all_ids)])
    checkpoint = str(tmp_path / "checkpoint")
    written: list[str] = []  # what the sink wrote, in both runs
    entered, release = threading.Event(), threading.Event()
    interrupted: list[str] = []

    def first_run(frame: Any, batch_id: int) -> None:
        ids = [row.id for row in frame.collect()]
        if batch_id < 2:
            written.extend(ids)
            return
        # Batch 2 is written half-way when the query is stopped.
        interrupted.extend(ids)
        written.extend(ids[: len(ids) // 2])
        entered.set()
        release.wait(SPARK_WAIT)
        raise RuntimeError("stopped in the middle of writing batch 2")

    options = {"maxItemsPerBatch": 100, "leaseSeconds": 60}
    query = (
        stream(spark, redis_url, "crash", **options)
        .writeStream.foreachBatch(first_run)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        assert entered.wait(SPARK_WAIT), "the query never reached batch 2"
        stopper = threading.Thread(target=query.stop)
        stopper.start()
        # stop() marks the query terminated before it waits for the batch: only then may the
        # batch end (with an error), or the error rather than the stop would end the query.
        wait_for(lambda: not query.isActive, timeout=SPARK_WAIT, interval=0.05, what="stop")
    finally:
        release.set()
    stopper.join(SPARK_WAIT)
    assert not query.isActive
    # The stop gave the interrupted batch's items back at once (not after leaseSeconds),
    # first in line and their delivery not counted. Nothing completed them, nothing lost them.
    # Well before the 60 s lease: on a loaded machine Spark may take a while to end the source.
    wait_for(
        lambda: queue.stats(real_db).leased == 0,
        timeout=40,
        interval=0.1,
        what="the stopped query to give its items back",
    )
    stats = queue.stats(real_db)
    assert (stats.leased, stats.queued) == (0, 400), stats
    assert set(queue_ids(real_db, "crash")[-100:]) == set(interrupted)  # the leasing end
    assert {int(n) for n in real_db.hmget("crash:deliveries", interrupted) if n} <= {0}

    second = Sink()
    query = (
        stream(spark, redis_url, "crash", **options)
        .writeStream.foreachBatch(second)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        wait_for(
            lambda: len(second.ids()) >= 400 and drained(queue, real_db),
            timeout=SPARK_WAIT,
            interval=0.2,
            what="the restarted query to drain the queue",
        )
    finally:
        query.stop()
    assert query.exception() is None
    # Spark replayed batch 2 from the checkpoint: the same items, leased again.
    assert {row.id for row in second.batches[2]} == set(interrupted)
    assert {row.deliveries for row in second.batches[2]} == {1}
    written.extend(second.ids())
    counts = Counter(written)
    assert set(counts) == all_ids, f"lost: {sorted(all_ids - set(counts))[:10]}"
    twice = {i for i, n in counts.items() if n > 1}
    assert twice <= set(interrupted[: len(interrupted) // 2])
    assert max(counts.values()) == 2
    assert not real_db.keys("crash:spark:*")


@spark_test
def test_streaming_progress_shows_the_backlog_and_trigger_once_is_refused(
    spark: Any, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    queue = WorkQueue(KeyPrefix("progress"))
    queue.add_items(real_db, [Item(str(n), id=f"p{n}") for n in range(30)])
    queue.add_items(real_db, [Item("later", id="later")], delay=600)
    query = (
        stream(spark, redis_url, "progress", maxItemsPerBatch=10)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(SPARK_WAIT)
    assert query.exception() is None
    progress = query.recentProgress
    assert [p["numInputRows"] for p in progress if p["numInputRows"]] == [10, 10, 10]
    source = progress[-1]["sources"][0]
    end, backlog = (
        json.loads(value) if isinstance(value, str) else value
        for value in (source["endOffset"], source["latestOffset"])
    )
    assert (end["queue"], end["leased"]) == ("progress", 30)
    assert (backlog["queued"], backlog["delayed"], backlog["dead"]) == (0, 1, 0)
    assert drained(queue, real_db)

    queue.add_items(real_db, [Item("x", id="once")])
    once = (
        stream(spark, redis_url, "progress")
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "once"))
        .trigger(once=True)
        .start()
    )
    with pytest.raises(Exception, match="availableNow"):
        once.awaitTermination(SPARK_WAIT)
    assert queue.stats(real_db).queued == 1  # nothing was leased


# The stream reader's contract, driven directly (no Spark engine) --------------------------------


def stream_reader(url: str, queue: str, schema: Any = None, **options: Any) -> Any:
    given = {"url": url, "queue": queue, **{k: str(v) for k, v in options.items()}}
    schema = schema or StructType(
        [
            StructField("id", StringType(), False),
            StructField("data", BinaryType(), False),
            StructField("deliveries", IntegerType(), False),
        ]
    )
    return QueueStreamReader(StreamOptions.parse(Options(given)), schema)


def read_rows(reader: Any, parts: Any) -> list[tuple[Any, ...]]:
    """What the tasks of ``parts`` emit, each run on a pickled copy of the reader."""
    task = pickle.loads(pickle.dumps(reader))
    assert task._lessee is None  # the driver's state never travels
    return [
        tuple(row.values())
        for part in parts
        for batch in task.read(pickle.loads(pickle.dumps(part)))
        for row in batch.to_pylist()
    ]


@spark_test
def test_stream_reader_leases_on_the_driver_and_completes_what_spark_has_written(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("unit"))
    queue.add_items(real_db, [Item(f"x{n}", id=f"u{n:02}") for n in range(25)])
    options = {"maxItemsPerBatch": 10, "leaseSeconds": 0.6, "renewSeconds": 0.1}
    reader = stream_reader(redis_url, "unit", numPartitions=3, **options)
    replay = stream_reader(redis_url, "unit", **options)
    try:
        start = reader.initialOffset()
        assert start == {"queue": "unit", "batch": "", "items": 0, "leased": 0}
        end = reader.latestOffset(start, None)
        assert end["items"] == 10
        assert json.loads(json.dumps(end)) == end
        assert queue.stats(real_db).leased == 10
        parts = reader.partitions(start, end)
        assert len(parts) == 3
        # Tasks get a pickled copy of the reader, without the driver's state.
        rows = read_rows(reader, parts)
        assert rows == [(f"u{n:02}", f"x{n}".encode(), 1) for n in range(10)]

        time.sleep(1.5)  # well past the lease: the driver renews it
        assert queue.stats(real_db).leased == 10
        # A driver that restarts replays the batch from its record in Redis.
        replayed = replay.partitions(start, end)
        assert [i for part in replayed for i in part.ids] == [r[0] for r in rows]
        assert read_rows(replay, replayed) == rows  # read again from Redis

        # Spark asks for the next offset once it has written the batch: it is completed.
        after = reader.latestOffset(end, None)
        assert after["items"] == 10 and after["batch"] != end["batch"]
        reader.lessee().settle()  # the completion runs beside the next lease
        assert real_db.get("unit:item:u00") is None
        stats = queue.stats(real_db)
        assert (stats.queued, stats.leased) == (5, 10)
        # Committing it again, from any reader, changes nothing, even for an id added again.
        queue.add_item(real_db, Item("again", id="u00"))
        reader.commit(end)
        replay.commit(end)
        assert real_db.get("unit:item:u00") == b"again"
        assert not real_db.exists(f"unit:spark:batch:{end['batch']}")
    finally:
        reader.stop()
        replay.stop()


@spark_test
def test_stream_batches_carry_every_column_with_their_data_and_stop_at_the_byte_limit(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("cols"))
    queue.add_items(real_db, [Item(f"r{n}", id=f"r{n}") for n in range(2)])
    for item in queue.lease_many(real_db, 60, 2, block=False):
        assert queue.release(real_db, item, reason=f"failed {item.id()}")
    queue.add_items(real_db, [Item(b"\xff" * 100, id=f"c{n:02}") for n in range(20)])
    schema = StructType(
        [
            StructField("ID", StringType(), False),
            StructField("data", BinaryType(), False),
            StructField("state", StringType(), False),
            StructField("deliveries", IntegerType(), False),
            StructField("lease_left", DoubleType(), True),
            StructField("reason", StringType(), True),
        ]
    )
    # The batch stops once it holds 250 bytes of data: the two 2-byte items, then about
    # 250 / 100 more (each step is sized from the mean size so far).
    reader = stream_reader(
        redis_url, "cols", schema=schema, maxBytesPerBatch=250, leaseSeconds=30, cleanSeconds=0
    )
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        assert 3 <= end["items"] <= 6
        parts = reader.partitions(start, end)
        assert all(part.data is not None and part.reasons is not None for part in parts)
        rows = read_rows(reader, parts)  # from the partitions: no read from Redis
        assert rows[:2] == [
            ("r0", b"r0", "leased", 2, 30.0, "failed r0"),
            ("r1", b"r1", "leased", 2, 30.0, "failed r1"),
        ]
        assert rows[2:] == [
            (f"c{n:02}", b"\xff" * 100, "leased", 1, 30.0, None) for n in range(len(rows) - 2)
        ]
        real_db.hset("cols:reasons", "c00", "not read")  # the rows came with the partitions
        assert read_rows(reader, parts) == rows
    finally:
        reader.stop()


@spark_test
def test_a_failed_background_completion_fails_the_query_and_a_restart_completes_the_batch(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("fails"))
    queue.add_items(real_db, [Item(f"d{n}", id=f"f{n}") for n in range(6)])
    reader = stream_reader(redis_url, "fails", maxItemsPerBatch=3, cleanSeconds=0)
    try:
        start = reader.initialOffset()
        end = reader.latestOffset(start, None)
        real_db.set("fails:counts", "not a hash")  # the completion's type check fails
        nxt = reader.latestOffset(end, None)  # completes `end` in the background
        assert nxt["items"] == 3 and nxt["completing"] == end["batch"]
        # Spark plans and writes `nxt`, and records it as written, before its next call to the
        # source (commit, or latestOffset): that call fails.
        assert len(read_rows(reader, reader.partitions(end, nxt))) == 3
        with pytest.raises(WrongKeyTypeError, match="fails:counts"):
            reader.commit(nxt)
        real_db.delete("fails:counts")
    finally:
        reader.stop()
    stats = queue.stats(real_db)
    assert (stats.leased, stats.queued) == (3, 3)  # `end` still leased; `nxt` given back
    assert real_db.exists(f"fails:spark:batch:{end['batch']}")
    again = stream_reader(redis_url, "fails", maxItemsPerBatch=3, cleanSeconds=0)
    try:
        # Restarted from the last offset Spark recorded as written, which names the batch whose
        # completion failed: both batches are completed from their records.
        assert again.latestOffset(nxt, None) == nxt  # nothing new to lease
        assert queue.stats(real_db) == QueueStats(0, 0, 0, 0, 0)
        assert not real_db.exists(f"fails:spark:batch:{end['batch']}")
    finally:
        again.stop()


@spark_test
def test_the_last_batch_s_failed_completion_fails_the_call_that_leases_nothing(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("last"))
    queue.add_items(real_db, [Item(f"d{n}", id=f"l{n}") for n in range(2)])
    reader = stream_reader(redis_url, "last", cleanSeconds=0)
    try:
        end = reader.latestOffset(reader.initialOffset(), None)
        real_db.set("last:counts", "not a hash")
        # Nothing more to lease (availableNow's last call, or an idle query): the call waits for
        # the completion and fails with it.
        with pytest.raises(WrongKeyTypeError, match="last:counts"):
            reader.latestOffset(end, None)
        real_db.delete("last:counts")
    finally:
        reader.stop()


@spark_test
def test_stream_reader_without_a_start_offset_and_with_lost_leases(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    # Spark 4.0 and 4.1 call latestOffset() with no start offset.
    queue = WorkQueue(KeyPrefix("old"))
    reader = stream_reader(redis_url, "old", leaseSeconds=0.3, renewSeconds=0.1, cleanSeconds=0)
    try:
        first = reader.latestOffset()  # a fresh reader: an empty batch, so Spark commits its last
        assert first["items"] == 0 and first["batch"]
        assert reader.latestOffset() == first  # nothing new
        queue.add_items(real_db, [Item(str(n), id=f"o{n}") for n in range(3)])
        batch = reader.latestOffset()
        assert batch["items"] == 3
        assert reader.latestOffset() == batch  # batch written: completed, nothing new
        reader.lessee().settle()
        assert queue.stats(real_db) == QueueStats(0, 0, 0, 0, 0)

        # A batch whose leases ran out before Spark wrote it is not completed: delivered again.
        queue.add_items(real_db, [Item(str(n), id=f"l{n}") for n in range(4)])
        lost = reader.latestOffset()
        assert lost["items"] == 4
        reader.lessee().stopping.set()  # no more renewals, as if the driver had hung
        time.sleep(0.5)
        reader.latestOffset()
        reader.lessee().settle()
        assert queue.light_clean(real_db).requeued == 4
        assert sorted(queue_ids(real_db, "old")) == [f"l{n}" for n in range(4)]
    finally:
        reader.stop()


@spark_test
def test_stream_reader_honours_read_limits_reports_backlog_and_refuses_trigger_once(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("steer"))
    queue.add_items(real_db, [Item(str(n), id=f"s{n:02}") for n in range(20)])
    queue.add_items(real_db, [Item("later", id="later")], delay=600)
    reader = stream_reader(redis_url, "steer", maxItemsPerBatch=8, cleanSeconds=0)
    try:
        assert reader.getDefaultReadLimit() == ReadMaxRows(8)
        start = reader.initialOffset()
        end = reader.latestOffset(start, ReadMaxRows(3))  # Spark may admit fewer
        assert (end["queue"], end["items"], end["leased"]) == ("steer", 3, 3)
        backlog = reader.reportLatestOffset()
        assert {k: backlog[k] for k in ("queue", "queued", "leased", "delayed", "dead")} == {
            "queue": "steer",
            "queued": 17,
            "leased": 3,
            "delayed": 1,
            "dead": 0,
        }
        assert backlog["in_batches"] == 3 and "oldest_queued_secs" not in backlog
        nxt = reader.latestOffset(end, reader.getDefaultReadLimit())
        assert (nxt["items"], nxt["leased"]) == (8, 11)
        # Trigger.Once asks for everything without preparing for availableNow: refused.
        with pytest.raises(InvalidArgumentError, match=r"availableNow"):
            reader.latestOffset(nxt, ReadAllAvailable())
    finally:
        reader.stop()
    # Fresh ids are UUIDv7: their age is reported.
    aged = WorkQueue(KeyPrefix("aged"))
    aged.add_item(real_db, Item("x"))
    reader = stream_reader(redis_url, "aged")
    try:
        assert 0 <= reader.reportLatestOffset()["oldest_queued_secs"] < 60
    finally:
        reader.stop()


@spark_test
def test_a_stopped_stream_reader_gives_its_items_back_and_a_restart_replays_them(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("back"))
    queue.add_items(real_db, [Item(f"d{n}", id=f"b{n}") for n in range(10)])
    reader = stream_reader(redis_url, "back", maxItemsPerBatch=4, cleanSeconds=0)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    first = read_rows(reader, reader.partitions(start, end))
    reader.stop()  # a clean stop before Spark committed the batch
    stats = queue.stats(real_db)
    assert (stats.queued, stats.leased) == (10, 0)
    assert {deliveries for _, _, deliveries in first} == {1}
    assert real_db.exists(f"back:spark:batch:{end['batch']}")  # kept for the replay

    again = stream_reader(redis_url, "back", maxItemsPerBatch=4, cleanSeconds=0)
    try:
        replayed = read_rows(again, again.partitions(start, end))
        assert replayed == first  # the same items, delivered once as far as the queue knows
        assert queue.stats(real_db).leased == 4
        after = again.latestOffset(end, None)  # Spark wrote the replay: it is completed
        assert after["items"] == 4
        remaining = {i.decode() for i in real_db.lrange("back:queue", 0, -1)}
        assert remaining.isdisjoint(r[0] for r in first)
    finally:
        again.stop()
    assert queue.stats(real_db).queued == 6  # the second batch was given back too


@spark_test
def test_a_batch_written_before_a_stop_gave_it_back_is_completed_on_restart(
    redis_url: str, real_db: redis.Redis
) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("wrote"))
    queue.add_items(real_db, [Item(f"d{n}", id=f"w{n}") for n in range(6)])
    reader = stream_reader(redis_url, "wrote", maxItemsPerBatch=4, cleanSeconds=0)
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert len(read_rows(reader, reader.partitions(start, end))) == 4  # the sink wrote it...
    reader.stop()  # ... and the query stopped before Spark told the source so
    assert queue.stats(real_db).queued == 6
    record = json.loads(real_db.get(f"wrote:spark:batch:{end['batch']}") or "null")
    assert record["given_back"] is True and len(record["held"]) == 4

    again = stream_reader(redis_url, "wrote", maxItemsPerBatch=4, cleanSeconds=0)
    try:
        # Restarted, Spark finds the batch in its commit log and asks for the next offset:
        # the batch's items are taken back and completed, not delivered a second time.
        after = again.latestOffset(end, None)
        assert after["items"] == 2
        rows = read_rows(again, again.partitions(end, after))
        assert [r[0] for r in rows] == ["w4", "w5"]
        for n in range(4):
            assert real_db.get(f"wrote:item:w{n}") is None
        assert not real_db.exists(f"wrote:spark:batch:{end['batch']}")
    finally:
        again.stop()


@spark_test
def test_complete_held_removes_only_items_whose_lease_is_still_held(real_db: redis.Redis) -> None:
    require(java=False)
    queue = WorkQueue(KeyPrefix("held"))
    queue.add_items(real_db, [Item("a", id="a"), Item("b", id="b")])
    a, b = queue.lease_many(real_db, 60, 2, block=False)
    assert a.lease_token and b.lease_token
    assert run(real_db, complete_held(queue.ops, [("a", "someone else@1")])) == 0
    assert run(real_db, complete_held(queue.ops, [("a", a.lease_token), ("b", b.lease_token)])) == 2
    assert queue.stats(real_db).leased == 0 and not real_db.hlen("held:deliveries")
    queue.add_item(real_db, Item("a again", id="a"))
    assert run(real_db, complete_held(queue.ops, [("a", a.lease_token)])) == 0
    assert real_db.get("held:item:a") == b"a again"
