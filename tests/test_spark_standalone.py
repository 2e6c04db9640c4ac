"""The Spark data source on a real Spark standalone cluster: a master, a worker, executors.

The master and the worker are started from the PySpark distribution (``spark-class``); the
executors run in their own processes, launched by the worker, whose environment has no path to
this source tree: they import ``redis_work_queue`` from a zip shipped with ``addPyFile`` (the
``--py-files`` way docs/spark.md describes). The driver runs in a subprocess, because a process
holds one SparkContext and the other Spark tests share theirs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from helpers import wait_for
from redis_work_queue import KeyPrefix, WorkQueue
from servers import free_port

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
START_SECS = 120.0


def spark_home() -> Path:
    try:
        import pyspark  # noqa: PLC0415 (only when the test runs)
    except ImportError:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("pyspark is missing; CI runs the Spark tests", pytrace=False)
        pytest.skip("the Spark tests need pip install 'redis-work-queue-lua[spark]'")
    if not shutil.which("java") and not os.environ.get("JAVA_HOME"):
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("Java is missing; CI runs the Spark tests", pytrace=False)
        pytest.skip("the Spark tests need a Java runtime")
    return Path(pyspark.__file__).parent


def package_zip(path: Path) -> Path:
    """``redis_work_queue`` as the wheel lays it out (data files and Lua scripts), as a zip for
    ``--py-files``."""
    with zipfile.ZipFile(path, "w") as archive:
        for source in (ROOT / "src" / "redis_work_queue").rglob("*"):
            if source.is_file() and "__pycache__" not in source.parts:
                archive.write(source, source.relative_to(ROOT / "src"))
        for script in (ROOT / "lua").rglob("*.lua"):
            archive.write(script, Path("redis_work_queue", "lua", script.relative_to(ROOT / "lua")))
    return path


def clean_env(home: Path, work: Path) -> dict[str, str]:
    """The environment of the master and worker (and so of the executors): no source paths."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK"))}
    env.update(
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_WORKER_DIR=str(work / "worker"),
        PYSPARK_PYTHON=sys.executable,
    )
    return env


def log_has(path: Path, text: str) -> bool:
    return path.exists() and text in path.read_text(errors="replace")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and one worker (1 core); yields the master's URL."""
    home = spark_home()
    work = tmp_path_factory.mktemp("standalone")
    env = clean_env(home, work)
    port = free_port()
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        master_log = work / "master.log"
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--webui-port",
                    str(free_port()),
                ],
                env=env,
                stdout=master_log.open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        url = f"spark://127.0.0.1:{port}"
        wait_for(
            lambda: log_has(master_log, "I have been elected leader"),
            timeout=START_SECS,
            interval=0.2,
            what="the Spark master to start",
        )
        worker_log = work / "worker.log"
        procs.append(
            subprocess.Popen(
                [
                    spark_class,
                    "org.apache.spark.deploy.worker.Worker",
                    url,
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work / "worker"),
                ],
                env=env,
                stdout=worker_log.open("wb"),
                stderr=subprocess.STDOUT,
            )
        )
        wait_for(
            lambda: log_has(worker_log, "Successfully registered with master"),
            timeout=START_SECS,
            interval=0.2,
            what="the Spark worker to register",
        )
        yield url
    finally:
        for proc in reversed(procs):
            proc.terminate()
        for proc in reversed(procs):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)


DRIVER = textwrap.dedent(
    """
    import json, sys, tempfile
    from pyspark.sql import SparkSession
    from redis_work_queue.spark import NAME, last_write, register
    import redis

    master, url, package = sys.argv[1:4]
    spark = (
        SparkSession.builder.master(master)
        .appName("redis-work-queue standalone test")
        .config("spark.ui.enabled", "false")
        .config("spark.cores.max", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.addPyFile(package)
    register(spark)
    where = spark.range(2, numPartitions=2).rdd.map(
        lambda _: __import__("redis_work_queue").__file__
    ).collect()
    df = spark.range(300, numPartitions=2).selectExpr("concat('s', id) AS id", "id AS n")
    df.write.format(NAME).mode("append").option("url", url).option("queue", "sa").option(
        "idColumn", "id"
    ).save()
    report = last_write(redis.Redis.from_url(url), "sa")
    queued = spark.read.format(NAME).option("url", url).load("sa").where("state = 'queued'").count()
    seen = []
    def sink(frame, batch_id):
        seen.extend(row.id for row in frame.collect())
    query = (
        spark.readStream.format(NAME).option("url", url).option("queue", "sa")
        .option("maxItemsPerBatch", 100).load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", tempfile.mkdtemp())
        .trigger(availableNow=True).start()
    )
    query.awaitTermination(120)
    print("RESULT " + json.dumps({
        "where": where,
        "added": report.added,
        "queued": queued,
        "drained": sorted(seen),
        "error": str(query.exception()) if query.exception() else None,
    }))
    spark.stop()
    """
)


def test_write_read_and_drain_on_a_standalone_cluster(
    standalone: str, redis_url: str, real_db: redis.Redis, tmp_path: Path
) -> None:
    package = package_zip(tmp_path / "redis_work_queue.zip")
    script = tmp_path / "driver.py"
    script.write_text(DRIVER)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    done = subprocess.run(
        [sys.executable, str(script), standalone, redis_url, str(package)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT ") :])
    # The executors imported the package from the shipped zip, not from this source tree.
    assert result["where"] and all("redis_work_queue.zip" in w for w in result["where"]), result
    assert (result["added"], result["queued"]) == (300, 300)
    assert result["error"] is None
    assert result["drained"] == sorted(f"s{n}" for n in range(300))
    stats = WorkQueue(KeyPrefix("sa")).stats(real_db)
    assert stats.queued == stats.leased == stats.expired == 0
