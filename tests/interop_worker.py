"""A worker of this library run as a process by test_interop_node.py.

Usage: python interop_worker.py <redis url> <prefix> <lease secs> <work ms> <single|multi>

It leases (blocking, one queue; or with lease_from over the queue and a second, empty one),
sleeps ``work ms`` and completes, printing one JSON line per item, until a line (or EOF) on
stdin tells it to stop. It prints "ready" once it is about to lease for the first time.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import redis

from redis_work_queue import KeyPrefix, WorkQueue, lease_from


def main() -> None:
    url, prefix, lease_secs, work_ms, mode = sys.argv[1:6]
    db = redis.Redis.from_url(url, socket_timeout=30)
    db.client_setname("interop-python")
    queue = WorkQueue(KeyPrefix(prefix))
    other = WorkQueue(KeyPrefix(prefix + "-other"))
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), stop.set()), daemon=True).start()

    def say(value: object) -> None:
        sys.stdout.write(json.dumps(value) + "\n")
        sys.stdout.flush()

    say("ready")
    while not stop.is_set():
        if mode == "multi":
            found = lease_from(db, [queue, other], float(lease_secs), timeout=1)
            item = found[1] if found else None
        else:
            item = queue.lease(db, float(lease_secs), timeout=1)
        if item is None:
            continue
        say({"leased": item.id()})
        time.sleep(int(work_ms) / 1000)
        won = queue.complete(db, item)
        say({"done": item.id(), "data": item.data().hex(), "won": won})


if __name__ == "__main__":
    main()
