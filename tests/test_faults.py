"""The worker runtime under real faults: Redis SIGKILLed and restarted from its append-only
file, connections cut by a proxy at random, a Sentinel failover, a cluster primary SIGKILLed,
Redis out of memory, a paused server, fatal errors, and handlers that misbehave in every way.

Items are numbered; each handler call and each acknowledged completion is recorded, in order,
on a results server no fault touches (``faults_handlers``). After each fault the workers must
still run and drain the queue (items added after the fault too), no acknowledged add may be
lost, no item whose ``complete`` returned True may be leased again, and a stop must end cleanly
(``rwq worker`` exits 0 on SIGTERM). Every wait is a poll with a deadline; every process started
here is killed on the way out. ``-m faults`` runs this file alone, ``-m "not faults"`` skips it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

import faults_handlers
import misbehaving_handlers
from faults import (
    OomServer,
    WorkerCommand,
    add_numbered,
    at_rest,
    handled,
    judge,
    read_events,
    worker_command,
)
from plugins.servers import tools
from redis_work_queue import AsyncWorkQueue, InvalidArgumentError, Item, KeyPrefix, WorkQueue
from redis_work_queue.aioworker import AsyncWorker
from redis_work_queue.worker import Worker
from servers import (
    MASTER_NAME,
    Cluster,
    Proc,
    Proxy,
    SentinelSetup,
    free_port,
    info,
    poll,
    start_server,
    wait_in_sync,
)

pytestmark = [pytest.mark.faults, pytest.mark.slow]

#: Lease time of the workers under test: short, so that a lease lost in a fault expires soon.
LEASE = "2"
#: How long the workers may take to start, and to drain once the fault is over.
START_SECS = 20.0
DRAIN_SECS = 45.0
#: How long a stopped worker may take to exit.
STOP_SECS = 20.0
#: How long an outage lasts (the workers must still be running at its end).
OUTAGE_SECS = 1.5


@pytest.fixture
def results(results_server: Proc, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """The emptied results server; handlers run in this process record there too (and record
    acknowledged completions while the test runs)."""
    db = results_server.client(socket_timeout=10)
    db.flushall()
    monkeypatch.setenv(faults_handlers.RESULTS_ENV, results_server.url)
    faults_handlers.install()
    try:
        yield db
    finally:
        faults_handlers.uninstall()


def results_url(results: redis.Redis) -> str:
    kwargs = results.connection_pool.connection_kwargs
    return f"redis://{kwargs['host']}:{kwargs['port']}/0"


def drained(db: Any, queue: Any, results: redis.Redis, acked: list[str]) -> Callable[[], bool]:
    """The handlers have seen every acknowledged add and nothing is left in the queue."""
    return lambda: handled(results).issuperset(acked) and at_rest(db, queue)


def describe(db: Any, queue: Any, results: redis.Redis, acked: list[str]) -> Callable[[], str]:
    def told() -> str:
        missing = sorted(set(acked) - handled(results))
        try:
            stats: object = queue.stats(db)
        except redis.RedisError as err:
            stats = err
        return f"the queue to drain ({len(missing)} unseen: {missing[:5]}; {stats})"

    return told


def check_record(results: redis.Redis, acked: list[str], forgive: str | None = None) -> None:
    verdict = judge(read_events(results), acked, forgive)
    assert verdict.ok(), verdict.summary()
    assert len(verdict.calls) >= len(acked)
    # Completions are recorded (a reply lost to a fault may hide a few, never most).
    assert len(verdict.done & set(acked)) >= len(acked) // 2, verdict.summary()


def produce_while_cutting(db: redis.Redis, queue: WorkQueue, proxy: Proxy, seed: int) -> list[str]:
    """Add 300 numbered items through ``proxy`` in 15 bursts while it cuts at random (every
    0.15-0.5 s, seed ``seed``); return the acknowledged ids. The cuts stop at the end.

    ``db`` must not retry: a retried add whose first reply was lost runs again, and adds the
    item anew if a worker completed it in between (a second life the runtime cannot know of).
    """
    proxy.cut_randomly(seed, 0.15, 0.5)
    acked: list[str] = []
    try:
        for burst in range(15):
            acked += add_numbered(db, queue, f"s{seed}-{burst:02d}", 20)
            time.sleep(0.2)  # pacing: the bursts spread over the cuts
        poll(lambda: proxy.cut_rounds >= 6, 10, "six rounds of cuts")
    finally:
        proxy.stop_cutting()
    assert proxy.cuts > 0, "no connection was cut"
    assert len(acked) >= 200, f"only {len(acked)} of 300 adds acknowledged"
    return acked


@contextlib.contextmanager
def running(run: Callable[[], Any], stop: Callable[[], None]) -> Iterator[dict[str, Any]]:
    """Call ``run`` in a thread; on the way out call ``stop`` and wait for it (bounded).

    ``out["stats"]`` is what it returned, ``out["error"]`` what it raised.
    """
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["stats"] = run()
        except BaseException as err:  # reported by the test
            out["error"] = err

    thread = threading.Thread(target=target, name="faults-worker", daemon=True)
    thread.start()
    out["thread"] = thread
    try:
        yield out
    finally:
        stop()
        thread.join(timeout=STOP_SECS)
    assert not thread.is_alive(), "the worker did not stop"
    if "error" in out:
        raise out["error"]


@contextlib.contextmanager
def running_async(url: str, name: str) -> Iterator[dict[str, Any]]:
    """An AsyncWorker (3 tasks, ``faults_handlers.arecord``) on queue ``name`` at ``url``, run
    on its own event loop in a thread; stopped on the way out."""
    box: dict[str, Any] = {}
    started = threading.Event()

    async def main() -> Any:
        worker = AsyncWorker(
            url,
            [AsyncWorkQueue(KeyPrefix(name))],
            faults_handlers.arecord,
            lease_secs=float(LEASE),
            concurrency=3,
            poll_secs=0.5,
        )
        box["worker"], box["loop"] = worker, asyncio.get_running_loop()
        started.set()
        return await worker.run(signals=())

    def stop() -> None:
        if started.wait(5):
            box["loop"].call_soon_threadsafe(box["worker"].stop)

    with running(lambda: asyncio.run(main()), stop) as out:
        assert started.wait(START_SECS), "the event loop did not start"
        yield out


def still_running(out: dict[str, Any]) -> None:
    assert out["thread"].is_alive(), f"the worker returned early: {out}"


# The faults themselves ------------------------------------------------------------------------


def no_retry(port: int, **kwargs: Any) -> redis.Redis:
    """A client that reports the first connection error instead of retrying it."""
    return redis.Redis(port=port, retry=Retry(NoBackoff(), 0), **kwargs)


def test_proxy_cuts_pauses_and_resumes(
    redis_server_factory: Callable[[], Any], proxy_factory: Callable[[int], Proxy]
) -> None:
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    client = no_retry(proxy.port, socket_timeout=5)
    admin = server.client(socket_timeout=5)
    assert client.set("k", "v")
    seen: list[BaseException] = []

    def blocked() -> None:
        try:
            client.blpop(["nothing"], timeout=4)
        except redis.RedisError as err:
            seen.append(err)

    waiter = threading.Thread(target=blocked, daemon=True)
    waiter.start()
    poll(lambda: int(admin.info("clients")["blocked_clients"]) == 1, 5, "the BLPOP")
    assert proxy.cut() == 1
    waiter.join(timeout=5)
    assert [type(err) for err in seen] == [redis.ConnectionError]
    assert client.get("k") == b"v"  # a new connection goes through
    assert proxy.cuts == 1
    client = no_retry(proxy.port, socket_timeout=0.5)
    proxy.pause()
    with pytest.raises(redis.TimeoutError):
        client.get("k")
    late = no_retry(proxy.port, socket_timeout=0.5, socket_connect_timeout=0.5)
    with pytest.raises(redis.TimeoutError):
        late.ping()  # accepted, never answered
    proxy.resume()
    assert late.ping()
    client.close()
    late.close()


def test_proxy_cuts_at_random_a_bounded_number_of_times(
    redis_server_factory: Callable[[], Any], proxy_factory: Callable[[int], Proxy]
) -> None:
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    client = redis.Redis(port=proxy.port, socket_timeout=2)
    proxy.cut_randomly(seed=1, min_gap=0.01, max_gap=0.05, limit=4)
    poll(lambda: not proxy.cutting(), 10, "the cutter to stop after four rounds")
    assert proxy.cut_rounds == 4
    assert client.ping()  # retried on a new connection
    with pytest.raises(ValueError):
        proxy.cut_randomly(seed=1, min_gap=0.5, max_gap=0.1)
    client.close()


def test_restartable_server_keeps_acknowledged_writes(aof_server: Proc) -> None:
    db = aof_server.client(socket_timeout=2)
    db.rpush("list", *range(100))
    port = aof_server.port
    aof_server.kill()
    assert not aof_server.alive()
    with pytest.raises(redis.ConnectionError):
        no_retry(port, socket_connect_timeout=0.5).ping()
    aof_server.restart()
    assert aof_server.port == port
    assert db.llen("list") == 100


def test_oom_server_refuses_writes_until_relieved(oom_server: OomServer) -> None:
    db = oom_server.client(socket_timeout=2)
    oom_server.exhaust()
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        db.set("k", "v")
    assert db.get("missing") is None  # reads still work
    oom_server.relieve()
    assert db.set("k", "v")


def test_judge_finds_loss_and_leases_after_completion() -> None:
    events = [
        ("call", "a"),
        ("done", "a"),
        ("call", "b"),
        ("done", "b"),
        ("mark", "failover"),
        ("call", "b"),  # completed before the mark: forgiven
        ("call", "c"),
        ("done", "c"),
        ("call", "c"),  # completed after the mark: a failure
        ("done", "c"),
        ("done", "c"),  # acknowledged twice
    ]
    verdict = judge(events, ["a", "b", "c", "d"], forgive="failover")
    assert verdict.lost == ["d"]
    assert verdict.forgiven == ["b"]
    assert verdict.relet == ["c"]
    assert verdict.done_twice == ["c"]
    assert not verdict.ok()
    assert judge(events[:4], ["a", "b"]).ok()


# Redis SIGKILLed and restarted --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_rwq_worker_outlives_a_restart(
    mode: str, aof_server: Proc, results: redis.Redis, tmp_path: Path
) -> None:
    db = aof_server.client(socket_timeout=5, socket_connect_timeout=1)
    queue = WorkQueue(KeyPrefix("restart"))
    acked = add_numbered(db, queue, "before", 150)
    assert len(acked) == 150
    options = ["--concurrency", "2", "--lease-secs", LEASE]
    if mode == "processes":
        options.append("--processes")
    url = results_url(results)
    with worker_command(aof_server.url, url, ["restart"], tmp_path, *options, sleep=0.01) as w:
        poll(lambda: len(handled(results)) >= 20, START_SECS, lambda: f"a start: {w.tail()}")
        if mode == "processes":
            assert len(w.children()) == 2, w.tail()
        aof_server.kill()
        faults_handlers.note("mark killed")
        time.sleep(OUTAGE_SECS)  # the outage; the workers meet it and must stay
        assert w.alive(), f"rwq worker exited during the outage: {w.tail()}"
        aof_server.restart()
        poll(db.ping, START_SECS, "the restarted server")
        after = add_numbered(db, queue, "after", 100)
        assert len(after) == 100
        acked += after
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        assert w.alive(), w.tail()
        if mode == "processes":
            assert len(w.children()) == 2, f"worker processes gone: {w.tail()}"
        code = w.terminate(STOP_SECS)
    assert code == 0, w.tail()
    check_record(results, acked)
    # One outage: each process says so once, not once per retry or per thread.
    said = outage_lines(w.stderr())
    assert said, f"the outage was not logged: {w.tail()}"
    assert all(len(lines) == 1 for lines in said.values()), said


def test_async_worker_outlives_a_restart(aof_server: Proc, results: redis.Redis) -> None:
    db = aof_server.client(socket_timeout=5, socket_connect_timeout=1)
    queue = WorkQueue(KeyPrefix("restart-asyncio"))
    acked = add_numbered(db, queue, "before", 150)
    assert len(acked) == 150
    with running_async(aof_server.url, "restart-asyncio") as out:
        poll(lambda: len(handled(results)) >= 20, START_SECS, "the worker to get going")
        aof_server.kill()
        time.sleep(OUTAGE_SECS)  # the outage; the worker meets it and must stay
        still_running(out)
        aof_server.restart()
        poll(db.ping, START_SECS, "the restarted server")
        after = add_numbered(db, queue, "after", 100)
        assert len(after) == 100
        acked += after
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        still_running(out)
    check_record(results, acked)


def outage_lines(text: str) -> dict[str, list[str]]:
    """The log lines that say Redis is unavailable, by process (``main`` or its name)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "unavailable" not in line.lower():
            continue
        words = line.split()
        level = next((n for n, w in enumerate(words) if w in {"WARNING", "ERROR"}), None)
        name = words[level + 1] if level is not None and level + 1 < len(words) else "main"
        out.setdefault("main" if name.startswith("redis_work_queue") else name, []).append(line)
    return out


# Connections cut at random --------------------------------------------------------------------


def test_thread_worker_through_random_cuts(
    redis_server_factory: Callable[[], Any],
    proxy_factory: Callable[[int], Proxy],
    results: redis.Redis,
) -> None:
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    db = server.client(socket_timeout=5)
    through = no_retry(proxy.port, socket_timeout=5, socket_connect_timeout=1)
    queue = WorkQueue(KeyPrefix("cuts-threads"))
    worker = Worker(
        proxy.url,
        [queue],
        faults_handlers.record,
        lease_secs=float(LEASE),
        concurrency=3,
        poll_secs=0.5,
    )
    with running(lambda: worker.run(signals=()), worker.stop) as out:
        acked = produce_while_cutting(through, queue, proxy, seed=11)
        still_running(out)
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        still_running(out)
    through.close()
    check_record(results, acked)


def test_async_worker_through_random_cuts(
    redis_server_factory: Callable[[], Any],
    proxy_factory: Callable[[int], Proxy],
    results: redis.Redis,
) -> None:
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    db = server.client(socket_timeout=5)
    through = no_retry(proxy.port, socket_timeout=5, socket_connect_timeout=1)
    queue = WorkQueue(KeyPrefix("cuts-asyncio"))
    with running_async(proxy.url, "cuts-asyncio") as out:
        acked = produce_while_cutting(through, queue, proxy, seed=12)
        still_running(out)
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        still_running(out)
    through.close()
    check_record(results, acked)


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_rwq_worker_through_random_cuts(
    mode: str,
    redis_server_factory: Callable[[], Any],
    proxy_factory: Callable[[int], Proxy],
    results: redis.Redis,
    tmp_path: Path,
) -> None:
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    db = server.client(socket_timeout=5)
    through = no_retry(proxy.port, socket_timeout=5, socket_connect_timeout=1)
    queue = WorkQueue(KeyPrefix("cuts-rwq"))
    options = ["--concurrency", "3", "--lease-secs", LEASE]
    if mode == "processes":
        options.append("--processes")
    url = results_url(results)
    with worker_command(proxy.url, url, ["cuts-rwq"], tmp_path, *options) as w:
        poll(lambda: proxy.open_links() > 0, START_SECS, lambda: f"a connection: {w.tail()}")
        acked = produce_while_cutting(through, queue, proxy, seed=13 if mode == "threads" else 14)
        assert w.alive(), w.tail()
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        assert w.alive(), w.tail()
        code = w.terminate(STOP_SECS)
    through.close()
    assert code == 0, w.tail()
    check_record(results, acked)


def test_rwq_worker_through_a_stall_then_cuts(
    redis_server_factory: Callable[[], Any],
    proxy_factory: Callable[[int], Proxy],
    results: redis.Redis,
    tmp_path: Path,
) -> None:
    """The server stops answering (the proxy holds every byte) while items wait; then every
    connection is cut, and it answers again."""
    server = redis_server_factory()
    proxy = proxy_factory(server.port)
    db = server.client(socket_timeout=5)
    queue = WorkQueue(KeyPrefix("stall"))
    options = ("--concurrency", "2", "--lease-secs", LEASE)
    url = results_url(results)
    with worker_command(proxy.url, url, ["stall"], tmp_path, *options, sleep=0.01) as w:
        acked = add_numbered(db, queue, "before", 100)
        poll(lambda: len(handled(results)) >= 20, START_SECS, lambda: f"a start: {w.tail()}")
        proxy.pause()
        acked += add_numbered(db, queue, "stalled", 50)
        time.sleep(OUTAGE_SECS)  # the stall
        assert w.alive(), f"rwq worker exited during the stall: {w.tail()}"
        assert proxy.cut() > 0
        proxy.resume()
        acked += add_numbered(db, queue, "after", 50)
        assert len(acked) == 200
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        assert w.alive(), w.tail()
        code = w.terminate(STOP_SECS)
    assert code == 0, w.tail()
    check_record(results, acked)


# Failovers ------------------------------------------------------------------------------------


def test_thread_worker_follows_a_sentinel_failover(
    sentinel_setup: SentinelSetup, results: redis.Redis
) -> None:
    """The primary is SIGKILLed; the sentinel promotes the replica; the worker follows.

    The adds before the failover wait for the replica (``replicas=1``), so none may be lost.
    Completions are not waited for: one acknowledged by the old primary just before it died may
    not have reached the replica, and that item is leased again (counted, forgiven).
    """
    setup = sentinel_setup
    sentinel = Sentinel([setup.address], socket_timeout=2, socket_connect_timeout=1)
    db = sentinel.master_for(MASTER_NAME, socket_timeout=2, socket_connect_timeout=1)
    db.flushall()
    wait_in_sync(setup.pair.primary, setup.pair.replica)
    queue = WorkQueue(KeyPrefix("sentinel"))
    waited = WorkQueue(KeyPrefix("sentinel"), replicas=1, replica_timeout=5)
    acked = add_numbered(db, waited, "before", 150)
    # An add the replica did not acknowledge in time raises: it is not counted.
    assert len(acked) >= 140, f"{len(acked)} of 150 adds acknowledged by the replica"
    old_port = setup.master_port()
    old = setup.by_port(old_port)
    worker = Worker(
        db, [queue], faults_handlers.record, lease_secs=float(LEASE), concurrency=2, poll_secs=0.5
    )
    with running(lambda: worker.run(signals=()), worker.stop) as out:
        poll(lambda: len(handled(results)) >= 20, START_SECS, "the worker to get going")
        faults_handlers.note("mark failover")
        old.kill()
        poll(lambda: setup.master_port() != old_port, 20, "the sentinel to switch", 0.05)
        poll(lambda: db.set("probe", 1), START_SECS, "the new primary to take writes")
        still_running(out)
        after = add_numbered(db, queue, "after", 100)
        assert len(after) >= 90, f"{len(after)} of 100 adds acknowledged after the failover"
        acked += after
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        still_running(out)
    check_record(results, acked, forgive="failover")


def test_thread_worker_outlives_a_cluster_failover(cluster: Cluster, results: redis.Redis) -> None:
    """The primary owning the queue's slot is SIGKILLed; its replica takes over; the worker
    follows (what the killed primary had not replicated is forgiven, as for Sentinel)."""
    cluster.wait_healthy()
    cluster.flushall()
    tag = "{faults}"
    db = cluster.client()
    queue = WorkQueue(KeyPrefix(f"{tag}:q"))
    waited = WorkQueue(KeyPrefix(f"{tag}:q"), replicas=1, replica_timeout=5)
    primary = cluster.primary_for(tag)
    replica = cluster.replica_of(primary)
    try:
        acked = add_numbered(db, waited, "before", 150)
        assert len(acked) >= 140, f"{len(acked)} of 150 adds acknowledged by the replica"
        worker = Worker(
            db,  # type: ignore[arg-type]
            [queue],
            faults_handlers.record,
            lease_secs=float(LEASE),
            concurrency=2,
            poll_secs=0.5,
        )
        with running(lambda: worker.run(signals=()), worker.stop) as out:
            poll(lambda: len(handled(results)) >= 20, START_SECS, "the worker to get going")
            faults_handlers.note("mark failover")
            primary.kill()
            poll(
                lambda: info(replica, "replication").get("role") == "master",
                20,
                "the replica to be promoted",
                0.05,
            )
            poll(lambda: db.exists(queue.keys.queue) >= 0, START_SECS, "the slot to answer")
            still_running(out)
            after = add_numbered(db, queue, "after", 100)
            assert len(after) >= 90, f"{len(after)} of 100 adds acknowledged after the failover"
            acked += after
            told = describe(db, queue, results, acked)
            poll(drained(db, queue, results, acked), DRAIN_SECS, told)
            still_running(out)
    finally:
        if not primary.alive():
            primary.launch()
        cluster.wait_healthy(timeout=30)
    check_record(results, acked, forgive="failover")


# Out of memory --------------------------------------------------------------------------------


def oom_errors(admin: redis.Redis) -> int:
    """How many commands the server has refused with OOM."""
    stat = admin.info("errorstats").get("errorstat_OOM", {})
    return int(stat.get("count", 0)) if isinstance(stat, dict) else 0


def test_idle_rwq_worker_waits_out_oom(
    oom_server: OomServer, results: redis.Redis, tmp_path: Path
) -> None:
    """Idle workers meet OOM (their lease script registers them as waiting: a write) and keep
    waiting; once memory is freed they work."""
    db = oom_server.client(socket_timeout=5)
    admin = oom_server.proc.admin()
    queue = WorkQueue(KeyPrefix("oom"))
    url = results_url(results)
    options = ("--concurrency", "2", "--lease-secs", LEASE)
    with worker_command(oom_server.url, url, ["oom"], tmp_path, *options) as w:
        # Its two threads lease together: one of them blocks in Redis for both.
        poll(
            lambda: int(admin.info("clients")["blocked_clients"]) >= 1,
            START_SECS,
            lambda: f"the workers to wait: {w.tail()}",
        )
        oom_server.exhaust()
        assert oom_server.out_of_memory()
        with pytest.raises(Exception, match="maxmemory"):
            queue.add_item(db, Item(b"refused"))
        # The workers' next looks (every poll_secs) fail with OOM; they must stay.
        refused = oom_errors(admin)
        poll(lambda: oom_errors(admin) >= refused + 2, START_SECS, "the workers to meet OOM")
        time.sleep(OUTAGE_SECS)
        assert w.alive(), f"rwq worker exited on OOM: {w.tail()}"
        oom_server.relieve()
        acked = add_numbered(db, queue, "after", 60)
        assert len(acked) == 60
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        assert w.alive(), w.tail()
        code = w.terminate(STOP_SECS)
    assert code == 0, w.tail()
    check_record(results, acked)


# Fatal errors ---------------------------------------------------------------------------------


def one_line_error(command: WorkerCommand) -> str:
    """The command's error is one line on stderr, without a traceback; return it.

    The worker's log lines (timestamped: its start line, its stop line) are not errors.
    """
    text = command.stderr()
    logged = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
    lines = [line for line in text.splitlines() if line.strip() and not logged.match(line)]
    assert "Traceback" not in text, text
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("mode", ["threads", "processes"])
def test_rwq_worker_exits_on_a_wrong_type_queue_key(
    mode: str, redis_server_factory: Callable[[], Any], results: redis.Redis, tmp_path: Path
) -> None:
    server = redis_server_factory()
    db = server.client()
    queue = WorkQueue(KeyPrefix("mistyped"))
    db.set(queue.keys.queue, "not a list")
    url = results_url(results)
    options = ["--concurrency", "2"] + (["--processes"] if mode == "processes" else [])
    with worker_command(server.url, url, ["mistyped"], tmp_path, *options) as w:
        code = w.wait(STOP_SECS)
    assert code == 1, w.tail()
    line = one_line_error(w)
    assert "type" in line.lower(), line
    assert db.get(queue.keys.queue) == b"not a list"


@pytest.mark.parametrize(
    "handler", ["faults_no_such_module:record", "faults_broken_handlers:record"]
)
def test_rwq_worker_exits_on_a_handler_that_fails_to_import(
    handler: str, redis_server_factory: Callable[[], Any], results: redis.Redis, tmp_path: Path
) -> None:
    server = redis_server_factory()
    url = results_url(results)
    with worker_command(server.url, url, ["q"], tmp_path, handler=handler) as w:
        code = w.wait(STOP_SECS)
    assert code in (1, 2), w.tail()
    line = one_line_error(w)
    assert handler in line, line


def test_rwq_worker_exits_3_when_redis_is_unreachable_at_start(
    results: redis.Redis, tmp_path: Path
) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    with worker_command(nobody, results_url(results), ["q"], tmp_path) as w:
        code = w.wait(STOP_SECS)
    assert code == 3, w.tail()
    one_line_error(w)


# Handlers that misbehave --------------------------------------------------------------------------

#: How long one row of the table may take to fail its item and run the next.
ROW_SECS = 20.0
#: The failures every runner meets: (what the handler does, the head of the reason kept).
EVERY_RUNNER = [
    ("system-exit", "SystemExit: 3"),
    ("keyboard-interrupt", "KeyboardInterrupt"),
    ("generator-exit", "GeneratorExit"),
    ("unencodable", "ValueError: \\ud800 in the message"),
    ("bad-str", "StrBroken: StrBroken('hidden')"),
]
#: (runner, what the handler does, the head of the reason kept); ``rwq`` is the command.
MISBEHAVING = [
    *[
        (runner, how, head)
        for runner in ("threads", "processes", "asyncio", "rwq", "rwq-processes")
        for how, head in EVERY_RUNNER
    ],
    ("asyncio", "cancelled", "CancelledError"),
    ("processes", "exit", "crash: the worker process running the handler ended unexpectedly"),
    ("rwq-processes", "exit", "crash: the worker process running the handler ended unexpectedly"),
]
MISBEHAVING_TAG = "misbehaving-record"


def ran(db: redis.Redis) -> list[str]:
    """The ids whose handler was called, once per call."""
    return [v.decode() for v in db.lrange(f"{MISBEHAVING_TAG}:ran", 0, -1)]


def returned(db: redis.Redis) -> list[str]:
    """The ids whose handler returned."""
    return [v.decode() for v in db.lrange(f"{MISBEHAVING_TAG}:done", 0, -1)]


def misbehaving_worker(runner: str, url: str, name: str) -> tuple[Any, Callable[[], Any]]:
    """A worker of ``runner`` over queue ``name`` (max_deliveries 1), and what runs it."""
    options: dict[str, Any] = {"lease_secs": float(LEASE), "poll_secs": 0.2, "backoff": 0.05}
    if runner == "asyncio":
        queue = AsyncWorkQueue(KeyPrefix(name), max_deliveries=1)
        aworker = AsyncWorker(url, [queue], misbehaving_handlers.amisbehave, **options)
        return aworker, lambda: asyncio.run(aworker.run(signals=()))
    processes = runner == "processes"
    queues = [WorkQueue(KeyPrefix(name), max_deliveries=1)]
    worker = Worker(url, queues, misbehaving_handlers.misbehave, processes=processes, **options)
    return worker, lambda: worker.run(signals=())


@pytest.mark.parametrize(("runner", "how", "head"), MISBEHAVING)
def test_a_misbehaving_handler_fails_its_item_once_and_the_worker_goes_on(
    runner: str,
    how: str,
    head: str,
    redis_server_factory: Callable[[], Any],
    tmp_path: Path,
) -> None:
    """Whatever the handler raises, or if its process dies: the item is recorded as failed once
    (buried with its reason: max_deliveries=1), the worker still runs (it runs the next item),
    and only what ran is completed."""
    server = redis_server_factory()
    db = server.client()
    name = "misbehaving"
    queue = WorkQueue(KeyPrefix(name), max_deliveries=1)
    for item_id, what in (("bad", how), ("after", "ok")):
        data = misbehaving_handlers.job(server.url, MISBEHAVING_TAG, what)
        assert queue.add_item(db, Item(data, id=item_id))

    def settled() -> bool:
        return queue.dead_count(db) == 1 and returned(db) == ["after"]

    if runner.startswith("rwq"):
        options = ["--max-deliveries", "1", "--lease-secs", LEASE, "--backoff", "0.05"]
        if runner == "rwq-processes":
            options.append("--processes")
        handler = "misbehaving_handlers:misbehave"
        with worker_command(server.url, None, [name], tmp_path, *options, handler=handler) as w:
            poll(settled, ROW_SECS, lambda: f"the failure and the next item: {w.tail()}")
            assert w.alive(), w.tail()
            code = w.terminate(STOP_SECS)
        assert code == 0, w.tail()
        assert "completed 1, failed 1, lost 0" in w.stdout(), w.tail()
    else:
        worker, run = misbehaving_worker(runner, server.url, name)
        with running(run, worker.stop) as out:
            poll(settled, ROW_SECS, "the failure and the next item")
            still_running(out)
        stats = out["stats"]
        assert (stats.completed, stats.failed, stats.lost) == (1, 1, 0)
    [dead] = queue.dead_letters(db)
    assert dead.id == "bad" and dead.reason is not None and dead.reason.startswith(head), dead
    counts = queue.counts(db)
    assert (counts.completed, counts.failed, counts.dead) == (1, 1, 1)
    assert ran(db) == ["bad", "after"]  # each handled once; completed: the one that returned


@pytest.mark.parametrize("runner", ["threads", "processes", "rwq"])
def test_an_async_handler_is_refused_by_the_synchronous_runner(
    runner: str, redis_server_factory: Callable[[], Any], tmp_path: Path
) -> None:
    """It would never run (a call only makes a coroutine): refused before anything starts."""
    server = redis_server_factory()
    db = server.client()
    name = "misbehaving"
    queue = WorkQueue(KeyPrefix(name))
    data = misbehaving_handlers.job(server.url, MISBEHAVING_TAG, "ok")
    assert queue.add_item(db, Item(data, id="never"))
    if runner == "rwq":
        handler = "misbehaving_handlers:amisbehave"
        with worker_command(server.url, None, [name], tmp_path, handler=handler) as w:
            code = w.wait(STOP_SECS)
        assert code == 2, w.tail()
        assert "AsyncWorker" in one_line_error(w)
    else:
        with pytest.raises(InvalidArgumentError, match="AsyncWorker"):
            Worker(
                server.url,
                [queue],
                misbehaving_handlers.amisbehave,
                processes=runner == "processes",
            )
    assert queue.stats(db).queued == 1 and queue.counts(db).completed == 0
    assert ran(db) == []


# A paused server ----------------------------------------------------------------------------------


@pytest.fixture
def debug_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proc]:
    """A redis-server that takes DEBUG SLEEP from a local client."""
    with tools():
        proc = start_server(tmp_path_factory.mktemp("debug"), "--enable-debug-command", "local")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.mark.parametrize("kind", ["threads", "asyncio"])
def test_a_paused_server_makes_no_false_lost_leases(
    kind: str,
    debug_server: Proc,
    results: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server sleeps 3 s (DEBUG SLEEP) under running handlers of 1.5 s: their completions
    and the renewals sent after them wait, and reach it in that order. No lease ran out (6 s,
    renewed every 2 s): none may be said lost."""
    caplog.set_level(logging.INFO, logger="redis_work_queue")
    monkeypatch.setenv(faults_handlers.SLEEP_ENV, "1.5")
    db = debug_server.client(socket_timeout=10)
    sleeper = debug_server.client(socket_timeout=10)
    name = "paused"
    queue = WorkQueue(KeyPrefix(name))
    acked = add_numbered(db, queue, "before", 16)
    options: dict[str, Any] = {"lease_secs": 6.0, "concurrency": 4, "poll_secs": 0.5}
    worker: Any
    if kind == "asyncio":
        aqueues = [AsyncWorkQueue(KeyPrefix(name))]
        worker = AsyncWorker(debug_server.url, aqueues, faults_handlers.arecord, **options)

        def run() -> Any:
            return asyncio.run(worker.run(signals=()))
    else:
        worker = Worker(debug_server.url, [queue], faults_handlers.record, **options)

        def run() -> Any:
            return worker.run(signals=())

    with running(run, worker.stop) as out:
        poll(lambda: len(handled(results)) >= 4, START_SECS, "the worker to get going")
        for pause in range(2):
            time.sleep(0.7 + pause)  # handlers in mid-run: they return during the pause
            sleeper.execute_command("DEBUG", "SLEEP", "3")
        poll(drained(db, queue, results, acked), DRAIN_SECS, describe(db, queue, results, acked))
        still_running(out)
    stats = out["stats"]
    assert (stats.completed, stats.lost) == (16, 0)
    check_record(results, acked)
    assert [r.getMessage() for r in caplog.records if "lost the lease" in r.getMessage()] == []
