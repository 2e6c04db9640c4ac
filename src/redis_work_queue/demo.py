"""``rwq demo``: a producer, worker processes (one of which dies mid-job) and a cleaner.

Without a Redis URL the demo starts an embedded server (fakeredis over TCP, from the
``embedded`` extra) so that it runs on a machine with no Redis at all.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import redis

from .extras import extra_needed
from .item import Item
from .keyprefix import KeyPrefix
from .ops import decode
from .scripts import preload
from .workqueue import WorkQueue

QUEUE = KeyPrefix("rwq-demo:{jobs}")
RESULTS = "rwq-demo:results"
STOP = "rwq-demo:stop"
LEASE_SECS = 2.0
DEADLINE_SECS = 120.0


@contextmanager
def embedded_server() -> Iterator[str]:
    """Serve an in-memory Redis (fakeredis with Lua) on a free local port; yield its URL.

    Raises:
        MissingExtraError: fakeredis or lupa is not installed.
    """
    with extra_needed("the embedded server (used when no --url is given)", "embedded"):
        from fakeredis import TcpFakeServer  # noqa: PLC0415 (an optional dependency)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = TcpFakeServer(("127.0.0.1", port), server_type="redis", server_version=(7, 0))
    thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.shutdown()
        server.server_close()


def square(item: Item) -> int:
    """The demo's job: square the number in the item."""
    value: int = item.data_json()["n"]
    return value * value


def worker(url: str, number: int, crash: bool) -> None:
    """A worker process: lease, work, store the result, complete, until told to stop.

    A crashing worker leases one item and exits without completing it, as a killed process
    would; its item comes back after the lease expires, through the light clean.
    """
    db = redis.Redis.from_url(url)
    queue = WorkQueue(QUEUE)
    while not db.exists(STOP):
        item = queue.lease(db, LEASE_SECS, timeout=1)
        if item is None:
            continue
        if crash:
            os._exit(1)
        result = square(item)
        db.hset(RESULTS, item.id(), result)
        if queue.complete(db, item):
            db.hincrby(RESULTS + ":by-worker", str(number), 1)


def run_demo(
    url: str | None, items: int, workers: int, out: Callable[[str], None] = lambda _: None
) -> int:
    """Run the demo and return 0 when every item was completed exactly once.

    Args:
        url: Redis URL; None starts the embedded server.
        items: How many items the producer adds.
        workers: How many worker processes to start (one more that crashes is added).
        out: Where progress lines go (the CLI passes ``print``).
    """
    if url:
        return _run(url, items, workers, out)
    with embedded_server() as embedded:
        out(f"embedded Redis (fakeredis) at {embedded}")
        preload(redis.Redis.from_url(embedded))
        return _run(embedded, items, workers, out)


def _run(url: str, items: int, workers: int, out: Callable[[str], None]) -> int:
    db = redis.Redis.from_url(url)
    queue = WorkQueue(QUEUE)
    db.delete(RESULTS, RESULTS + ":by-worker", STOP, queue.keys.queue, queue.keys.processing)

    batch = [Item.from_json_data({"n": n}) for n in range(items)]
    pipe = db.pipeline(transaction=False)
    for item in batch:
        queue.add_unique_item_to_pipeline(pipe, item)
    pipe.execute()
    again = sum(queue.add_item(db, item) for item in batch[:10])
    out(f"producer: queued {queue.queue_len(db)} items ({again} of 10 re-adds accepted)")

    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(url, 0, True), name="crasher")]
    procs += [ctx.Process(target=worker, args=(url, n, False)) for n in range(1, workers + 1)]
    for proc in procs:
        proc.start()
    out(f"started {workers} workers and one that dies holding a lease")

    deadline = time.monotonic() + DEADLINE_SECS
    requeued = 0
    while db.hlen(RESULTS) < items and time.monotonic() < deadline:
        report = queue.light_clean(db)
        requeued += report.requeued
        if report.requeued:
            out(f"cleaner: requeued {report.requeued} item(s) whose lease expired")
        time.sleep(LEASE_SECS / 4)
    db.set(STOP, 1)
    for proc in procs:
        proc.join(timeout=2 * LEASE_SECS + 5)
        if proc.is_alive():
            proc.kill()
    deep = queue.deep_clean(db)

    done = db.hlen(RESULTS)
    counts = db.hgetall(RESULTS + ":by-worker")
    per_worker = {decode(k): int(v) for k, v in counts.items()}
    completions = sum(per_worker.values())
    left = queue.queue_len(db) + queue.processing(db)
    out(f"workers completed {completions} items: {dict(sorted(per_worker.items()))}")
    out(f"cleaner requeued {requeued}; deep clean examined {deep.examined} leftover item keys")
    ok = done == items and completions == items and left == 0
    out(f"{'OK' if ok else 'FAILED'}: {done}/{items} results, {left} ids left in the queue")
    flushed = queue.flush(db)
    removed = flushed.keys + db.delete(RESULTS, RESULTS + ":by-worker", STOP)
    out(f"removed the demo's {removed} keys (rwq-demo:*)")
    return 0 if ok else 1
