"""Job control by id under races, each run many times at once while a monitor checks atomic
snapshots of the queue: cancel against leases, completions and the light and deep cleans; result
waits against completions and against items going dead; promote against the lease's own
promotion of due items. Items are numbered, and every outcome is accounted for."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from plugins.backends import Backend
from redis_work_queue import Cancelled, Item, ItemDeadError, KeyPrefix, WorkQueue
from redis_work_queue.ops import jobs
from test_clean_races import MONITOR

pytestmark = pytest.mark.slow

PREFIX = "jrace"
LEASE_SECS = 0.3
DEADLINE_SECS = 60.0
#: Each race runs this many times, with other seeds.
ROUNDS = (0, 1, 2)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Run:
    """Threads that share a stop flag; an error in one stops all and is reported."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.snapshots = 0
        self.twice: list[list[str]] = []
        self.leased_and_queued: list[list[str]] = []

    def start(self, targets: list[Callable[[], None]]) -> list[threading.Thread]:
        def guard(target: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    target()
                except BaseException as err:  # reported by the test
                    self.errors.append(err)
                    self.stop.set()

            return run

        threads = [threading.Thread(target=guard(t), daemon=True) for t in targets]
        for thread in threads:
            thread.start()
        return threads

    def monitor(self) -> None:
        db = self.backend.client()
        check = db.register_script(MONITOR)
        while not self.stop.is_set():
            twice, leased = check(keys=[f"{PREFIX}:queue"], args=[f"{PREFIX}:lease:"])
            self.snapshots += 1
            if twice:
                self.twice.append([_text(i) for i in twice])
            if leased:
                self.leased_and_queued.append([_text(i) for i in leased])
            time.sleep(0.002)

    def finish(self, threads: list[threading.Thread], done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + DEADLINE_SECS
        while not done() and not self.stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.stop.set()
        for thread in threads:
            thread.join(timeout=30)
        assert not self.errors, self.errors
        assert done(), "the run did not account for every item in time"
        assert self.snapshots > 10
        assert self.twice == [] and self.leased_and_queued == []


@pytest.mark.parametrize("round_no", ROUNDS)
def test_cancel_against_leases_completions_and_cleans(
    bytes_backend: Backend, round_no: int
) -> None:
    """No cancelled item is handed out after its cancel returned; every item ends completed
    once or cancelled, never both; the event stream (events on) says so once per item."""
    total = 600
    run = Run(bytes_backend)
    queue = WorkQueue(KeyPrefix(PREFIX), events=True, events_maxlen=100_000)
    db = bytes_backend.client()
    ids = [str(i) for i in range(total)]
    queue.add_items(db, [Item(b"x", id=i) for i in ids[: total // 2]], unique=True)
    queue.add_items(db, [Item(b"x", id=i) for i in ids[total // 2 :]], unique=True, delay=0.2)
    completed: Counter[str] = Counter()
    cancelled: dict[str, float] = {}  # id -> when its cancel returned (it acted)
    late: list[str] = []

    def worker(seed: int) -> None:
        conn, rng = bytes_backend.client(), random.Random(seed)
        while not run.stop.is_set():
            asked = time.monotonic()
            item = queue.lease(conn, LEASE_SECS, block=True, timeout=0.05)
            if item is None:
                continue
            with run.lock:
                if item.id() in cancelled and cancelled[item.id()] < asked:
                    late.append(item.id())
            if rng.random() < 0.1:
                continue  # abandoned: its lease runs out, a clean requeues it
            time.sleep(rng.random() * 0.01)
            if queue.complete(conn, item):
                with run.lock:
                    completed[item.id()] += 1

    def canceller(seed: int) -> None:
        conn, rng = bytes_backend.client(), random.Random(seed)
        while not run.stop.is_set():
            item_id = rng.choice(ids)
            if queue.cancel(conn, item_id) != Cancelled.NOT_FOUND:
                with run.lock:
                    assert item_id not in cancelled, f"{item_id} cancelled twice"
                    cancelled[item_id] = time.monotonic()
            time.sleep(0.005)

    def cleaner() -> None:
        conn = bytes_backend.client()
        while not run.stop.is_set():
            queue.light_clean(conn)
            queue.deep_clean(conn)
            time.sleep(0.05)

    def accounted() -> bool:
        with run.lock:
            return len(set(completed) | set(cancelled)) == total

    seed = 10 * round_no
    workers = [lambda s=s: worker(seed + s) for s in range(3)]
    cancellers = [lambda s=s: canceller(seed + s) for s in (7, 8)]
    threads = run.start([*workers, *cancellers, cleaner, run.monitor])
    run.finish(threads, accounted)
    assert late == []
    assert set(completed) & set(cancelled) == set()
    assert all(n == 1 for n in completed.values())
    assert queue.counts(db).cancelled == len(cancelled)
    assert db.keys(f"{PREFIX}:item:*") == []
    ends: Counter[tuple[str, str]] = Counter(
        (e.kind, e.id) for e in queue.events(db) if e.kind in ("completed", "cancelled")
    )
    assert ends == Counter(
        [("completed", i) for i in completed] + [("cancelled", i) for i in cancelled]
    )


@pytest.mark.parametrize("round_no", ROUNDS)
def test_result_waits_against_completions_and_deaths(
    bytes_backend: Backend, monkeypatch: pytest.MonkeyPatch, round_no: int
) -> None:
    """Each waiter gets its item's result, or ItemDeadError for one that died (released, or
    abandoned and buried by a light clean as its lease ran out), woken by the completing or the
    dead-lettering script (a slice of the wait outlasts the run)."""
    monkeypatch.setattr(jobs, "RESULT_SLICE_SECS", 120.0)
    total = 120
    run = Run(bytes_backend)
    queue = WorkQueue(KeyPrefix(PREFIX), max_deliveries=1, keep_results=60)
    db = bytes_backend.client()
    ids = [str(i) for i in range(total)]
    outcomes: dict[str, Any] = {}
    fates: dict[str, str] = {}

    def waiter(item_id: str) -> None:
        conn = bytes_backend.client()
        try:
            outcomes[item_id] = queue.result(conn, item_id, timeout=30)
        except ItemDeadError as err:
            outcomes[item_id] = err

    def worker(seed: int) -> None:
        conn, rng = bytes_backend.client(), random.Random(seed)
        while not run.stop.is_set():
            item = queue.lease(conn, LEASE_SECS, block=True, timeout=0.05)
            if item is None:
                continue
            pick = rng.random()
            if pick < 0.15:
                fates[item.id()] = "expired"  # abandoned: the light clean buries it
            elif pick < 0.4:
                released = queue.release(conn, item, reason=f"no {item.id()}")
                fates[item.id()] = "dead" if released else "expired"  # its lease ran out first
            else:
                # (A completion does not need the lease: it lands unless a clean buried it.)
                done = queue.complete(conn, item, result=f"r{item.id()}".encode())
                fates[item.id()] = "done" if done else "expired"

    def cleaner() -> None:
        conn = bytes_backend.client()
        while not run.stop.is_set():
            queue.light_clean(conn)
            time.sleep(0.05)

    waiters = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in ids]
    for thread in waiters[: total // 2]:  # half wait before the item exists
        thread.start()
    queue.add_items(db, [Item(b"x", id=i) for i in ids], unique=True)
    seed = 10 * round_no
    workers = [lambda s=s: worker(seed + s) for s in range(3)]
    threads = run.start([*workers, cleaner, run.monitor])
    for thread in waiters[total // 2 :]:
        thread.start()
    for thread in waiters:
        thread.join(timeout=DEADLINE_SECS)
    run.finish(threads, lambda: len(outcomes) == total)
    for item_id in ids:
        got = outcomes[item_id]
        if fates[item_id] == "done":
            assert got == f"r{item_id}".encode()
        elif fates[item_id] == "dead":
            assert isinstance(got, ItemDeadError) and got.reason == f"no {item_id}"
        else:
            assert isinstance(got, ItemDeadError) and got.reason == "lease expired"
    assert "expired" in fates.values(), "control: some leases ran out"


@pytest.mark.parametrize("round_no", ROUNDS)
def test_promote_against_the_lease_s_own_promotion(bytes_backend: Backend, round_no: int) -> None:
    """Items falling due while a promoter promotes them by id: each is handed out and
    completed once, never queued twice."""
    total = 400
    run = Run(bytes_backend)
    queue = WorkQueue(KeyPrefix(PREFIX))
    db = bytes_backend.client()
    ids = [str(i) for i in range(total)]
    rng = random.Random(3 + round_no)
    for item_id in ids:
        queue.add_item(db, Item(b"x", id=item_id), delay=rng.uniform(0.01, 0.5))
    completed: Counter[str] = Counter()
    promoted: list[str] = []

    def worker() -> None:
        conn = bytes_backend.client()
        while not run.stop.is_set():
            item = queue.lease(conn, 30, block=True, timeout=0.05)
            if item is not None and queue.complete(conn, item):
                with run.lock:
                    completed[item.id()] += 1

    def promoter(seed: int) -> None:
        conn, pick = bytes_backend.client(), random.Random(seed)
        while not run.stop.is_set():
            item_id = pick.choice(ids)
            if queue.promote(conn, item_id):
                promoted.append(item_id)

    seed = 10 * round_no
    promoters = [lambda: promoter(seed + 1), lambda: promoter(seed + 2)]
    threads = run.start([worker, worker, *promoters, run.monitor])
    run.finish(threads, lambda: len(completed) == total)
    assert all(n == 1 for n in completed.values())
    assert promoted, "control: the promoter acted"
    assert queue.queue_len(db) == 0 and db.zcard(f"{PREFIX}:delayed") == 0
