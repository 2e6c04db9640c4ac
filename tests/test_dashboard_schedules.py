"""The console's queue view lists the queue's schedules: a bounded read (the first
``SCHEDULES_SHOWN``, with the total), nothing extra for a queue without schedules, and the
schedule row as a headless Chromium draws it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dashboard_support import (
    Dashboard,
    chromium_missing,
    new_driver,
    quit_driver,
    screenshot,
    start_dashboard,
    wait_for,
)
from redis_work_queue import Item, KeyPrefix, WorkQueue

pytest.importorskip("starlette", reason="needs the dashboard extra")
pytest.importorskip("httpx", reason="needs httpx (the test extra)")
pytest.importorskip("cronsim", reason="needs the schedules extra")

from redis.asyncio import Redis as AsyncRedis

from redis_work_queue.dashboard import data as dash_data
from test_dashboard import client_for


def fire(db: redis.Redis, queue: WorkQueue, name: str) -> str:
    """Make schedule ``name`` due now and add its occurrence; the id added."""
    now_ms = int(time.time() * 1000)
    db.zadd(queue.keys.schedules_due, {name: now_ms - 1000})
    (added,) = queue.run_schedules(db)
    return added


def test_the_queue_view_lists_schedules_soonest_first_with_state_and_last_id(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(real_db, Item(b"x", id="x"))
    now = time.time()
    queue.schedule(real_db, "nightly <b>", cron="0 2 * * *", tz="Europe/Paris")
    queue.schedule(real_db, "tick", every=30)
    added = fire(real_db, queue, "tick")
    queue.schedule(real_db, "held", every=60)
    queue.pause_schedule(real_db, "held")
    queue.schedule(real_db, "over", every=1, start=now - 10, end=now - 5)
    with client_for(redis_url, queues=("q",)) as client:
        body = client.get("/api/queue", params={"name": "q", "tab": "waiting"}).json()
    assert body["ok"] is True
    shown = body["schedules"]
    assert shown["total"] == 4
    rows = {r["name"]: r for r in shown["rows"]}
    # Paused first, then by next due time (tick is due within 30 s, nightly within a day),
    # then the one with none left.
    assert [r["name"] for r in shown["rows"]] == ["held", "tick", "nightly <b>", "over"]
    assert rows["held"]["state"] == "paused" and rows["held"]["next_due"] is None
    assert rows["tick"] == {
        "name": "tick",
        "cron": None,
        "every": 30.0,
        "tz": "UTC",
        "next_due": rows["tick"]["next_due"],
        "state": "active",
        "last_id": added,
    }
    assert now < rows["tick"]["next_due"] <= now + 31
    nightly = rows["nightly <b>"]
    assert nightly["cron"] == "0 2 * * *" and nightly["tz"] == "Europe/Paris"
    assert nightly["state"] == "active" and nightly["last_id"] is None
    assert time.gmtime(nightly["next_due"]).tm_hour in (0, 1)  # 02:00 in Paris, in UTC
    assert rows["over"]["state"] == "ended" and rows["over"]["next_due"] is None


def test_at_most_the_bound_is_read_with_the_total(
    real_db: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dash_data, "SCHEDULES_SHOWN", 5)
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(real_db, Item(b"x", id="x"))
    base = int(time.time() * 1000) + 60_000
    for n in range(12):
        queue.schedule(real_db, f"s{n:02d}", every=3600)
        real_db.zadd(queue.keys.schedules_due, {f"s{n:02d}": base + (11 - n) * 1000})
    with client_for(redis_url, queues=("q",)) as client:
        body = client.get("/api/queue", params={"name": "q", "tab": "waiting"}).json()
    shown = body["schedules"]
    assert shown["total"] == 12
    assert [r["name"] for r in shown["rows"]] == ["s11", "s10", "s09", "s08", "s07"]


def test_a_queue_without_schedules_costs_one_zcard(
    real_db: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    WorkQueue(KeyPrefix("q")).add_item(real_db, Item(b"x", id="x"))
    sent: list[tuple[Any, ...]] = []

    async def read() -> dict[str, Any]:
        db = AsyncRedis.from_url(redis_url)
        original = db.execute_command

        async def spy(*args: Any, **options: Any) -> Any:
            sent.append(args)
            return await original(*args, **options)

        db.execute_command = spy  # type: ignore[method-assign]
        try:
            return await dash_data.queue_schedules(db, "q")
        finally:
            await db.aclose()

    assert asyncio.run(read()) == {"total": 0, "rows": []}
    assert sent == [("ZCARD", "q:schedules:due")]
    with client_for(redis_url, queues=("q",)) as client:
        body = client.get("/api/queue", params={"name": "q", "tab": "waiting"}).json()
    assert body["schedules"] == {"total": 0, "rows": []}


@pytest.mark.browser
@pytest.mark.slow
def test_the_console_shows_the_schedule_row(
    real_db: redis.Redis, redis_url: str, tmp_path: Any
) -> None:
    pytest.importorskip("selenium", reason="needs selenium (the test extra)")

    missing = chromium_missing()
    if missing:
        pytest.skip(missing)
    queue = WorkQueue(KeyPrefix("sched"))
    queue.add_item(real_db, Item(b"x", id="x"))
    queue.schedule(real_db, "<img src=x onerror=alert(1)>", cron="30 6 * * *", tz="UTC")
    queue.schedule(real_db, "tick", every=30)
    added = fire(real_db, queue, "tick")
    # 49 more, due after the two above: the view reads the first 50 of the 51.
    later = int(time.time() * 1000) + 2 * 86_400_000
    for n in range(49):
        queue.schedule(real_db, f"later-{n:02d}", every=3600)
        real_db.zadd(queue.keys.schedules_due, {f"later-{n:02d}": later + n})
    dashboard: Dashboard = start_dashboard(redis_url, "sched", workdir=tmp_path)
    driver = new_driver()
    try:
        driver.get(dashboard.url + "?queue=sched&tab=waiting")
        ready = "document.querySelectorAll('#schedules tbody tr').length === 50"
        wait_for(lambda: driver.execute_script(f"return {ready}"), 20.0, "schedule rows")
        cells: Callable[[str], list[str]] = lambda name: driver.execute_script(  # noqa: E731
            "const r = [...document.querySelectorAll('#schedules tbody tr')]"
            ".find((row) => row.dataset.schedule === arguments[0]);"
            "return [...r.cells].map((c) => c.innerText);",
            name,
        )
        nightly = cells("<img src=x onerror=alert(1)>")
        assert nightly[0] == "<img src=x onerror=alert(1)>"  # shown as text, not markup
        assert nightly[1:3] == ["30 6 * * *", "UTC"]
        assert nightly[3].endswith(":30:00 UTC") and " 06:30:00" in nightly[3]
        assert nightly[4:] == ["active", "\u2014"]
        tick = cells("tick")
        assert tick[1] == "every 30.0 s" and tick[4] == "active" and tick[5] == added
        markup = "return document.querySelectorAll('#schedules img').length"
        assert driver.execute_script(markup) == 0
        count = "return document.getElementById('schedules-count').innerText"
        assert driver.execute_script(count) == "(50 of 51)"
        shown = (
            "return [...document.querySelectorAll('#schedules tbody tr')]"
            ".map((r) => r.dataset.schedule)"
        )
        names = driver.execute_script(shown)
        assert names[:2] == ["tick", "<img src=x onerror=alert(1)>"]  # soonest due first
        assert names[2:] == [f"later-{n:02d}" for n in range(48)]
        screenshot(driver, "console-schedules")
    finally:
        quit_driver(driver)
        dashboard.stop()
