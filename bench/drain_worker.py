"""One process of the multi-process row: drains one queue with lease+complete, on a plain
Redis server or on a Redis Cluster.

Run by ``run.py``, three at a time, as
``python bench/drain_worker.py --port P --prefix NAME --n N [--cluster]``. It fills its queue
with ``N`` items (plus a warm-up), drains the warm-up, prints ``ready`` and waits for a line
``go`` on its standard input; then it times the drain of its ``N`` items (non-blocking
``lease`` then ``complete``, one item at a time), checks that the queue is empty and prints one
line of JSON: ``{"start": ..., "end": ..., "n": ...}``, in ``time.monotonic()`` seconds (one
clock for every process of the machine), so ``run.py`` works out the rate of all of them
together.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import redis
from redis.cluster import RedisCluster

from ours_worker import _import_ours
from workloads import DATA, WARMUP, BenchError, _expect

FILL_CHUNK = 1000


def main() -> None:
    parser = argparse.ArgumentParser(description="drain one queue, timed (see run.py)")
    parser.add_argument("--port", type=int, required=True, help="a server (or a cluster node)")
    parser.add_argument("--prefix", required=True, help="the queue's key prefix")
    parser.add_argument("--n", type=int, required=True, help="items timed")
    parser.add_argument("--cluster", action="store_true", help="connect as a cluster client")
    args = parser.parse_args()
    rwq = _import_ours()
    db: redis.Redis | RedisCluster
    if args.cluster:
        db = RedisCluster(host="127.0.0.1", port=args.port)
    else:
        db = redis.Redis(host="127.0.0.1", port=args.port)
    queue = rwq.WorkQueue(rwq.KeyPrefix(args.prefix))
    total = args.n + WARMUP
    for start in range(0, total, FILL_CHUNK):
        items = [rwq.Item(DATA) for _ in range(min(FILL_CHUNK, total - start))]
        queue.add_items(db, items, unique=True)
    lease, complete = queue.lease, queue.complete

    def drain(k: int) -> None:
        for _ in range(k):
            item = lease(db, 30, block=False)
            if item is None:
                raise BenchError("the queue ran dry")
            complete(db, item)

    drain(WARMUP)
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("no go")
    start = time.monotonic()
    drain(args.n)
    end = time.monotonic()
    _expect("queue length after the drain", queue.queue_len(db), 0)
    _expect("processing list after the drain", queue.processing(db), 0)
    db.close()
    print(json.dumps({"start": start, "end": end, "n": args.n}), flush=True)


if __name__ == "__main__":
    main()
