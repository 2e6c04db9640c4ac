"""Spark integration: a PySpark data source that feeds and drains queues.

Install it with ``pip install 'redis-work-queue-lua[spark]'`` (PySpark 4 and pyarrow), then::

    from redis_work_queue.spark import NAME, register

    register(spark)
    (df.write.format(NAME).mode("append").option("url", url).option("queue", "jobs")
        .option("idColumn", "job_id").save())
    jobs = spark.readStream.format(NAME).option("url", url).option("queue", "jobs").load()

The core package never imports this one.
"""

from ..extras import extra_needed

with extra_needed("the Spark data source", "spark"):
    from .source import NAME, RedisWorkQueueDataSource, register
    from .writer import WriteReport, last_write

__all__ = ["NAME", "RedisWorkQueueDataSource", "WriteReport", "last_write", "register"]
