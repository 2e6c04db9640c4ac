"""A deep clean that stops at its second walk of the main queue (its holds taken) and stays
there: run as ``python stalled_clean.py URL PREFIX``, it prints ``held <n>`` once its holds are
taken, then sleeps until it is killed. ``paused_at_recheck`` is the same stop for a test's own
thread: it waits for an event instead.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Generator
from typing import Any

import redis

from redis_work_queue import KeyPrefix, WorkQueue, transport
from redis_work_queue.calls import ScriptCall


def _is_recheck(step: object) -> bool:
    """Whether ``step`` is a call of the deep clean's second walk (the one with a token)."""
    return (
        isinstance(step, ScriptCall)
        and step.script.name == "deep_clean_walk"
        and str(step.args[-1]) != ""
    )


def paused_at_recheck(
    steps: Generator[Any, Any, Any], reached: threading.Event, go: threading.Event
) -> Generator[Any, Any, Any]:
    """The steps of ``steps``, stopped before the first call of the second walk until ``go``.

    Errors the driver throws in are passed on to ``steps``.
    """
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            return done.value
        if _is_recheck(step) and not reached.is_set():
            reached.set()
            go.wait(60)
        try:
            reply, error = (yield step), None
        except Exception as err:  # handed on to the clean
            reply, error = None, err


def held_count(db: redis.Redis, prefix: str) -> int:
    """How many lease keys of ``prefix`` are deep-clean holds."""
    held = 0
    for key in db.scan_iter(f"{prefix}:lease:*", count=1000):
        value = db.get(key)
        if value is not None and bytes(value).startswith(b"deep-clean:"):
            held += 1
    return held


def main(url: str, prefix: str) -> None:
    db = redis.Redis.from_url(url)
    queue = WorkQueue(KeyPrefix(prefix))
    reached, go = threading.Event(), threading.Event()
    thread = threading.Thread(
        target=transport.run,
        args=(db, paused_at_recheck(queue.ops.deep_clean(), reached, go)),
        daemon=True,
    )
    thread.start()
    if not reached.wait(60):
        sys.exit("the deep clean never reached its second walk")
    print(f"held {held_count(db, prefix)}", flush=True)
    while True:
        time.sleep(60)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
