"""The dashboard as an operator's console, over plain HTTP: a queue's tabs paged with bounded
reads, a page per job, the workers of every queue, the counters for the charts; and, on a queue
of 100,000 waiting, 5,000 leased, 1,000 delayed and 2,000 dead items, every view's time and the
bytes it reads from Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.ops.health import heartbeat_steps
from redis_work_queue.transport import run

pytest.importorskip("starlette", reason="needs the dashboard extra")
pytest.importorskip("httpx", reason="needs httpx (the test extra)")

from starlette.testclient import TestClient

from redis_work_queue.dashboard import DashboardSettings, create_app
from redis_work_queue.dashboard import data as dash_data


def client_for(url: str, **options: Any) -> TestClient:
    return TestClient(create_app(DashboardSettings(url=url, **options)))


@pytest.fixture
def console(redis_url: str) -> Iterator[TestClient]:
    with client_for(redis_url, queues=("q",), allow_actions=True) as client:
        yield client


def get(client: TestClient, path: str, **params: Any) -> dict[str, Any]:
    reply = client.get(path, params=params)
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


def bury(db: redis.Redis, queue: WorkQueue, item_id: str, reason: str, data: bytes) -> None:
    queue.add_item(db, Item(data, id=item_id))
    leased = queue.lease(db, 30, block=False)
    assert leased is not None and leased.id() == item_id
    queue.release(db, leased, reason=reason)


def test_page_bounds() -> None:
    assert dash_data.page_bounds(1, 0) == (1, 0, 0)
    assert dash_data.page_bounds(2, 1532) == (2, 21, 40)
    assert dash_data.page_bounds(77, 1532) == (77, 1521, 1532)
    assert dash_data.page_bounds(500, 1532) == (77, 1521, 1532)  # past the end: the last page
    assert dash_data.page_bounds(0, 5) == (1, 1, 5)


def test_each_tab_pages_with_its_range_and_total(console: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    for n in range(3):
        bury(real_db, queue, f"d{n}", f"Error {n}\nTraceback (most recent call last):\n  x", b"{}")
    queue.add_items(real_db, [Item(f"w{n}".encode(), id=f"w{n:03}") for n in range(45)])
    leased = queue.lease_many(real_db, 60, 22, block=False)
    assert len(leased) == 22
    for n in range(25):
        queue.add_item(real_db, Item(b"later", id=f"l{n:02}"), delay=100 + n)

    waiting = get(console, "/api/queue", name="q", tab="waiting", page=1)
    assert (waiting["first"], waiting["last"], waiting["total"], waiting["pages"]) == (1, 20, 23, 2)
    assert [r["id"] for r in waiting["rows"]][:2] == ["w022", "w023"]
    second = get(console, "/api/queue", name="q", tab="waiting", page=2)
    assert (second["first"], second["last"], second["page"]) == (21, 23, 2)
    assert [r["position"] for r in second["rows"]] == [20, 21, 22]

    leases = get(console, "/api/queue", name="q", tab="leased", page=2)
    assert (leases["first"], leases["last"], leases["total"]) == (21, 22, 22)
    assert all(r["lease_left"] > 50 and r["deliveries"] == 1 for r in leases["rows"])

    delayed = get(console, "/api/queue", name="q", tab="delayed", page=2)
    assert [r["id"] for r in delayed["rows"]] == ["l20", "l21", "l22", "l23", "l24"]
    assert delayed["rows"][0]["due_at"] > time.time() + 100

    dead = get(console, "/api/queue", name="q", tab="dead")
    assert [r["id"] for r in dead["rows"]] == ["d0", "d1", "d2"]
    assert dead["rows"][0]["traceback"].startswith("Traceback")
    assert dead["counts"]["dead"] == 3

    assert console.get("/api/queue", params={"name": "q", "tab": "nope"}).status_code == 400
    assert (
        console.get("/api/queue", params={"name": "q", "tab": "dead", "page": "x"}).status_code
        == 400
    )


def test_a_job_page_in_every_state(console: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    reason = "Boom: no\nTraceback (most recent call last):\n  f()"
    bury(real_db, queue, "dies", reason, b"x" * 100_000)
    queue.add_item(real_db, Item.from_json_data({"b": [1, 2], "a": "x"}, id="json"))
    assert queue.lease(real_db, 60, block=False) is not None
    queue.add_item(real_db, Item(b"\x00\x01" * 10_000, id="binary"), delay=600)
    queue.add_item(real_db, Item(b"hold", id="held"))

    leased = get(console, "/api/job", name="q", id="json")
    assert leased["state"] == "leased" and 50 < leased["lease_left"] <= 60
    assert leased["json"] == json.dumps({"b": [1, 2], "a": "x"}, indent=2)
    assert leased["deliveries"] == 1

    delayed = get(console, "/api/job", name="q", id="binary")
    assert delayed["state"] == "delayed" and delayed["due_at"] > time.time() + 500
    assert delayed["data"]["kind"] == "hex" and delayed["data"]["size"] == 20_000
    assert delayed["data"]["truncated"] is True and delayed["json"] is None

    waiting = get(console, "/api/job", name="q", id="held")
    assert waiting["state"] == "queued" and waiting["data"]["text"] == "hold"

    dead = get(console, "/api/job", name="q", id="dies")
    assert dead["state"] == "dead" and dead["found"] is True and dead["has_data"] is False
    assert dead["dead"]["reason"] == "Boom: no" and dead["dead"]["deliveries"] == 1
    assert abs(dead["dead"]["died_at"] - time.time()) < 60
    assert dead["dead"]["traceback"].startswith("Traceback")
    assert dead["dead"]["data"] == {
        "kind": "hidden",
        "text": "",
        "size": 100_000,
        "truncated": True,
    }

    missing = get(console, "/api/job", name="q", id="nothing-here")
    assert missing["found"] is False and missing["state"] == "gone" and missing["dead"] is None
    assert console.get("/api/job", params={"name": "elsewhere", "id": "x"}).status_code == 404


def test_the_workers_page_lists_each_worker_once_and_the_job_durations(
    redis_url: str, real_db: redis.Redis
) -> None:
    for name in ("a", "b"):
        WorkQueue(KeyPrefix(name)).add_item(real_db, Item(b"x"))
        keys = WorkQueue(KeyPrefix(name)).keys
        fields = {"host": "box", "pid": "41", "queues": "a\nb", "started": "1"}
        # Queue a timed 10 jobs: 9 within 0.1 s, 1 within 2.5 s, 4 s in all; b none.
        timed = {"completed:0.1": 9, "completed:2.5": 1, "completed:sum_us": 4_000_000}
        run(
            real_db,
            heartbeat_steps(keys, "box:41:aa", 60_000, fields, timed if name == "a" else {}),
        )
    with client_for(redis_url, queues=("a", "b")) as client:
        body = get(client, "/api/workers")
    (worker,) = body["workers"]
    assert worker["id"] == "box:41:aa" and worker["seen_in"] == ["a", "b"]
    assert worker["queues"] == ["a", "b"]
    assert worker["beat_age"] is not None and worker["beat_age"] < 30
    assert body["durations"] == [
        {"queue": "a", "outcome": "completed", "jobs": 10, "mean": 0.4, "p50": "0.1", "p95": "2.5"}
    ]


def test_the_overview_samples_the_counters_for_the_rates(
    console: TestClient, real_db: redis.Redis
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_items(real_db, [Item(b"x") for _ in range(4)])
    item = queue.lease(real_db, 30, block=False)
    assert item is not None and queue.complete(real_db, item)
    body = get(console, "/api/overview", history="q")
    (row,) = body["queues"]
    assert row["counters"] == {"added": 4, "completed": 1, "failed": 0}
    assert {"added", "completed", "failed"} <= set(row["history"][-1])


def test_all_dead_letters_only_with_the_queue_name_typed(
    console: TestClient, real_db: redis.Redis
) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    bury(real_db, queue, "d", "r", b"x")
    page = console.get("/").text
    token = page.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]
    for body in ({"all": True}, {"all": True, "confirm": "other"}):
        reply = console.post(
            "/api/action",
            json={"queue": "q", "action": "purge", **body},
            headers={"X-CSRF-Token": token},
        )
        assert reply.status_code == 400 and "type the queue's name" in reply.json()["error"]
    assert queue.dead_count(real_db) == 1


# A big queue: every view fast and bounded --------------------------------------------------------

WAITING, LEASED, DELAYED, DEAD = 100_000, 5_000, 1_000, 2_000
#: Bytes a view may read from Redis per refresh (the page's API calls), whatever the sizes.
BYTES_PER_REFRESH = 64 * 1024
VIEW_SECS = 0.3


def fill_big_queue(db: redis.Redis, name: str) -> WorkQueue:
    """Fill a queue quickly with items of 100 bytes: adds of 5,000 items in one call each,
    then leased and buried by the library's own calls (every key as the scripts keep it)."""
    queue = WorkQueue(KeyPrefix(name), max_deliveries=1)
    body = b"d" * 100
    total = WAITING + LEASED + DEAD
    for start in range(0, total, 5000):
        queue.add_items(
            db, [Item(body, id=f"i{n:06}") for n in range(start, min(start + 5000, total))]
        )
    # The oldest first: DEAD to bury, then LEASED to hold.
    for _ in range(DEAD // 500):
        for item in queue.lease_many(db, 600, 500, block=False):
            queue.release(db, item, reason="Boom\nTraceback (most recent call last):\n  f()")
    for _ in range(LEASED // 1000):
        assert len(queue.lease_many(db, 600, 1000, block=False)) == 1000
    queue.add_items(db, [Item(body, id=f"later{n:05}") for n in range(DELAYED)], delay=3600)
    return queue


def make_viewed_items_big(db: redis.Redis, queue: WorkQueue, size: int) -> None:
    """Give every item the views show (each tab's page, the job) ``size`` bytes of data."""
    big = b"B" * size
    keys = queue.keys
    ids = [q.id for q in queue.peek(db, 0, 20, preview_bytes=0)]
    ids += [q.id for q in queue.peek(db, 39_980, 20, preview_bytes=0)]
    ids += [p.id for p in queue.pending(db, 1980, 20)]
    ids += [d.id for d in queue.delayed(db, 40, 20, preview_bytes=0)]
    ids += ["i050000"]
    pipe = db.pipeline(transaction=False)
    for item_id in ids:
        pipe.set(keys.item(item_id), big)
    for d in queue.dead_letters(db, 980, 20, preview_bytes=0):
        pipe.hset(keys.dead_item(d.id), "data", big)
    pipe.execute()


def net_out(db: redis.Redis) -> int:
    return int(db.info("stats")["total_net_output_bytes"])


@pytest.mark.slow
@pytest.mark.parametrize("size", [100, 1_000_000])
def test_every_view_of_a_big_queue_is_fast_and_reads_a_bounded_number_of_bytes(
    redis_url: str, real_db: redis.Redis, size: int
) -> None:
    started = time.monotonic()
    queue = fill_big_queue(real_db, "big")
    fill_secs = time.monotonic() - started
    if size > 100:
        make_viewed_items_big(real_db, queue, size)
    stats = queue.stats(real_db)
    assert (stats.queued, stats.leased, stats.delayed, stats.dead) == (
        WAITING,
        LEASED,
        DELAYED,
        DEAD,
    )
    views = {
        "overview": ("/api/overview", {"history": "big"}),
        "waiting, page 1": ("/api/queue", {"name": "big", "tab": "waiting", "page": 1}),
        "waiting, page 2,000": ("/api/queue", {"name": "big", "tab": "waiting", "page": 2000}),
        "leased, page 100": ("/api/queue", {"name": "big", "tab": "leased", "page": 100}),
        "delayed, page 3": ("/api/queue", {"name": "big", "tab": "delayed", "page": 3}),
        "dead, page 50": ("/api/queue", {"name": "big", "tab": "dead", "page": 50}),
        "job": ("/api/job", {"name": "big", "id": "i050000"}),
        "workers": ("/api/workers", {}),
    }
    figures = {}
    with client_for(redis_url, queues=("big",)) as client:
        get(client, "/api/overview")  # warm: scripts loaded, connections made
        for what, (path, params) in views.items():
            best = float("inf")
            for _ in range(3):
                before = net_out(real_db)
                t0 = time.perf_counter()
                body = get(client, path, **params)
                took = time.perf_counter() - t0
                read = net_out(real_db) - before
                best = min(best, took)
                assert read < BYTES_PER_REFRESH, f"{what}: {read} bytes read from Redis"
            figures[what] = (round(best * 1000, 1), read)
            assert best < VIEW_SECS, f"{what}: {best * 1000:.0f} ms"
            if path == "/api/queue":
                assert len(body["rows"]) == 20
    first = get_page(redis_url, "dead", 50)
    assert (first["first"], first["last"], first["total"]) == (981, 1000, DEAD)
    print(f"\nfill {fill_secs:.1f} s; item size {size}: (ms, bytes read) {figures}")
    assert fill_secs < 120


def get_page(url: str, tab: str, page: int) -> dict[str, Any]:
    with client_for(url, queues=("big",)) as client:
        return get(client, "/api/queue", name="big", tab=tab, page=page)


def test_job_actions_cancel_promote_and_retry(console: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    bury(real_db, queue, "dead", "r", b"x")
    queue.add_item(real_db, Item(b"later", id="later"), delay=600)
    queue.add_item(real_db, Item(b"now", id="now"))
    token = console.get("/").text.split('name="csrf-token" content="', 1)[1].split('"', 1)[0]

    def act(action: str, item_id: object) -> tuple[int, str]:
        reply = console.post(
            "/api/action",
            json={"queue": "q", "action": action, "id": item_id},
            headers={"X-CSRF-Token": token},
        )
        body = reply.json()
        return reply.status_code, body.get("message") or body["error"]

    assert act("promote", "later") == (200, "q: promoted later: it is the next to be leased")
    assert queue.state(real_db, "later").state == "queued"
    assert act("promote", "later") == (200, "q: later is not delayed")
    assert act("cancel", "now") == (200, "q: cancelled now")
    assert queue.state(real_db, "now").state == "gone"
    assert act("cancel", "now") == (200, "q: now: nothing to cancel")
    assert act("retry", "dead") == (200, "q: dead is queued again")
    assert queue.state(real_db, "dead").state == "queued"
    assert act("retry", "dead")[1].endswith("is not a dead letter (or its id is in use again)")
    status, error = act("cancel", None)
    assert status == 400 and 'name the job to cancel in "id"' in error
