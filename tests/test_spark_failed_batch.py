"""A streaming query whose micro-batch fails gives that batch's items back, as a stopped query
does: they are leasable again within seconds (not after ``leaseSeconds``), and a restart from
the checkpoint drains every item."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import redis

from helpers import wait_for
from redis_work_queue import Item, KeyPrefix, WorkQueue
from test_spark import SPARK_WAIT, Sink, drained, stream
from test_spark import spark as _spark_session  # noqa: F401 (the session fixture)

pytestmark = [pytest.mark.spark, pytest.mark.slow]

#: How soon the items must be leasable again: far below the lease, on a loaded machine.
GIVEN_BACK_SECS = 20.0
LEASE_SECS = 120


def test_a_udf_that_raises_in_the_first_batch_gives_its_items_back(
    _spark_session: Any,  # noqa: F811 (the fixture imported above)
    redis_url: str,
    real_db: redis.Redis,
    tmp_path: Path,
) -> None:
    from pyspark.sql import functions as F  # noqa: PLC0415 (the spark extra)

    spark = _spark_session
    queue = WorkQueue(KeyPrefix("udf-fails"))
    ids = {f"u{n}" for n in range(500)}
    queue.add_items(real_db, [Item(f"job {i}", id=i) for i in sorted(ids)])
    checkpoint = str(tmp_path / "checkpoint")

    @F.udf("string")
    def broken(data):  # no type hints: Spark would read them as a pandas UDF's
        raise ValueError("the UDF fails on every row")

    def first_run(frame: Any, batch_id: int) -> None:
        frame.select("id", broken("data").alias("out")).collect()

    options = {"maxItemsPerBatch": 200, "leaseSeconds": LEASE_SECS}
    query = (
        stream(spark, redis_url, "udf-fails", **options)
        .writeStream.foreachBatch(first_run)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        with pytest.raises(Exception, match="the UDF fails on every row"):
            query.awaitTermination(SPARK_WAIT)
        failed_at = time.monotonic()
        assert not query.isActive
    finally:
        query.stop()
    # Leasable again at once: not leased, all waiting, their delivery not counted.
    wait_for(
        lambda: queue.stats(real_db).leased == 0,
        timeout=GIVEN_BACK_SECS,
        interval=0.1,
        what="the failed query to give its items back",
    )
    assert time.monotonic() - failed_at < LEASE_SECS / 4
    stats = queue.stats(real_db)
    assert (stats.queued, stats.leased, stats.expired) == (500, 0, 0), stats
    leased = queue.lease(real_db, 30, block=False)
    assert leased is not None
    queue.give_back(real_db, [leased])

    second = Sink()
    query = (
        stream(spark, redis_url, "udf-fails", **options)
        .writeStream.foreachBatch(second)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    try:
        wait_for(
            lambda: set(second.ids()) >= ids and drained(queue, real_db),
            timeout=SPARK_WAIT,
            interval=0.2,
            what="the restarted query to drain the queue",
        )
    finally:
        query.stop()
    assert set(second.ids()) == ids
    assert queue.stats(real_db).queued == 0
