"""``rwq dashboard`` in a real headless Chromium: the page, its refresh, actions, auth, outages.

Each test saves a screenshot under ``test-output/screenshots/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from dashboard_support import (
    Dashboard,
    new_driver,
    quit_driver,
    screenshot,
    start_dashboard,
    wait_for,
)
from redis_work_queue import Item, KeyPrefix, WorkQueue
from servers import Proc

pytest.importorskip("starlette", reason="needs the dashboard extra")
pytest.importorskip("selenium", reason="needs selenium (the test extra)")

pytestmark = pytest.mark.browser

WAIT = 20.0
COUNTS = ("queued", "leased", "expired", "delayed", "dead")


@pytest.fixture
def dashboards(tmp_path: Path) -> Iterator[Callable[..., Dashboard]]:
    """Start ``rwq dashboard`` processes; stopped after the browser's final screenshot."""
    started: list[Dashboard] = []

    def start(redis_url: str, *args: str) -> Dashboard:
        dashboard = start_dashboard(redis_url, *args, workdir=tmp_path)
        started.append(dashboard)
        return dashboard

    try:
        yield start
    finally:
        for dashboard in started:
            dashboard.stop()


@pytest.fixture
def driver(request: pytest.FixtureRequest, dashboards: Callable[..., Dashboard]) -> Iterator[Any]:
    chromium = new_driver()
    try:
        yield chromium
    finally:
        try:
            screenshot(chromium, request.node.name)
        finally:
            quit_driver(chromium)


def by_css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return driver.find_element(By.CSS_SELECTOR, selector)


def all_css(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By  # noqa: PLC0415

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def shown_counts(driver: Any, name: str) -> dict[str, int] | None:
    """The counts the page shows for queue ``name`` (None until its row is drawn).

    Read in one script run: the page redraws its rows on every refresh.
    """
    found: dict[str, int] | None = driver.execute_script(
        """
        const row = Array.from(document.querySelectorAll("#queues tbody tr"))
          .find((r) => r.dataset.queue === arguments[0]);
        if (!row) return null;
        const counts = {};
        for (const cell of row.querySelectorAll("td[data-count]")) {
          counts[cell.dataset.count] = Number(cell.textContent);
        }
        return counts;
        """,
        name,
    )
    return found


def text_of(driver: Any, selector: str) -> str | None:
    """The visible text of the first element matching ``selector`` (one script run)."""
    found: str | None = driver.execute_script(
        "const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
        selector,
    )
    return found


def click(driver: Any, selector: str) -> None:
    """A real click on ``selector``, tried again when a redraw replaced the element."""

    def clicked() -> bool:
        by_css(driver, selector).click()
        return True

    wait_for(clicked, WAIT, f"a click on {selector}")


def make_dead(db: redis.Redis, queue: WorkQueue, item_id: str, reason: str) -> None:
    queue.add_item(db, Item(b"payload of " + item_id.encode(), id=item_id))
    leased = queue.lease(db, 30, block=False)
    assert leased is not None and leased.id() == item_id
    queue.release(db, leased, reason=reason)
    assert any(d.id == item_id for d in queue.dead_letters(db))


def test_page_loads_and_counts_match_stats(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    jobs = WorkQueue(KeyPrefix("jobs:mail"), max_deliveries=1)
    other = WorkQueue(KeyPrefix("jobs:sms"))
    make_dead(real_db, jobs, "broken", "ValueError: no\nTraceback (most recent call last):\n  x")
    for n in range(5):
        jobs.add_item(real_db, Item(f"mail {n}".encode()))
    jobs.lease(real_db, 60, block=False)
    jobs.add_item(real_db, Item(b"later"), delay=600)
    other.add_item(real_db, Item(b"<b>not bold</b>"))
    WorkQueue(KeyPrefix("elsewhere")).add_item(real_db, Item(b"hidden"))

    dash = dashboards(redis_url, "--match", "jobs:*")
    driver.get(dash.url)
    assert driver.title == "rwq dashboard"
    for queue in (jobs, other):
        expected = {k: getattr(queue.stats(real_db), k) for k in COUNTS}
        wait_for(
            lambda q=queue, e=expected: shown_counts(driver, q.name.prefix) == e,
            WAIT,
            f"the counts of {queue.name.prefix}",
        )
    assert shown_counts(driver, "elsewhere") is None
    assert by_css(driver, "#mode").text == "read-only"
    # Read-only: no action controls at all.
    assert all_css(driver, "#queue-actions, #dead-actions, button.requeue-one") == []
    # The first queue's dead letters (its tab, named in the URL): the reason and traceback.
    driver.get(dash.url + "?queue=jobs:mail&tab=dead")
    wait_for(lambda: by_css(driver, "#dead tbody tr[data-id='broken']"), WAIT, "dead row")
    row = by_css(driver, "#dead tbody tr[data-id='broken']")
    assert "ValueError: no" in row.text
    assert by_css(driver, "#dead details pre").get_attribute("textContent").startswith("Traceback")
    # Item data is shown as text, never as markup.
    click(driver, "#queues tbody tr:nth-child(2)")
    wait_for(lambda: "<b>not bold</b>" in by_css(driver, "#waiting").text, WAIT, "preview")
    assert all_css(driver, "#waiting b") == []
    wait_for(lambda: len(all_css(driver, "#chart polyline")) == 3, WAIT, "the chart")
    assert "Error" not in by_css(driver, "#banner").get_attribute("textContent")


def test_counts_refresh_without_reload(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    queue = WorkQueue(KeyPrefix("live"))
    queue.add_item(real_db, Item(b"first"))
    dash = dashboards(redis_url, "live")
    driver.get(dash.url)
    wait_for(lambda: (shown_counts(driver, "live") or {}).get("queued") == 1, WAIT, "1")
    driver.execute_script("window.sameDocument = 'yes';")
    for n in range(7):
        queue.add_item(real_db, Item(f"more {n}".encode()))
    assert queue.stats(real_db).queued == 8
    wait_for(lambda: (shown_counts(driver, "live") or {}).get("queued") == 8, WAIT, "8")
    assert driver.execute_script("return window.sameDocument") == "yes"
    # A queue without events has no stream to follow: the page polls.
    assert driver.execute_script("return document.body.dataset.live") == "off"
    wait_for(lambda: len(all_css(driver, "#waiting tbody tr")) == 8, WAIT, "8 rows")


def test_live_updates_from_the_event_stream(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    """On a queue made with events=True the page follows its event stream and redraws as items
    change: the dashboard polls every 10 minutes here, so every update below comes from the
    stream, without a reload."""
    queue = WorkQueue(KeyPrefix("evlive"), events=True, keep_results=60)
    queue.add_item(real_db, Item(b"first", id="job-1"))
    dash = dashboards(redis_url, "evlive", "--refresh-secs", "600")
    driver.get(dash.url + "?queue=evlive&job=job-1")

    def body(key: str) -> Any:
        return driver.execute_script(f"return document.body.dataset.{key}")

    wait_for(lambda: body("jobState") == "queued", WAIT, "the job page")
    wait_for(lambda: body("live") == "on", WAIT, "the page to follow the stream")
    assert by_css(driver, "#live").is_displayed()
    driver.execute_script("window.sameDocument = 'yes';")
    item = queue.lease(real_db, 60, block=False)
    assert item is not None
    wait_for(lambda: body("jobState") == "leased", WAIT, "the lease, live")
    assert queue.report_progress(real_db, item, {"step": 3, "of": 4})
    queue.add_item(real_db, Item(b"other", id="job-2"))  # an event: the page redraws
    wait_for(
        lambda: '"step":3' in (text_of(driver, "dd[data-fact=progress]") or ""),
        WAIT,
        "the progress, drawn with the next event",
    )
    screenshot(driver, "dashboard-live-job-leased")
    assert queue.complete(real_db, item, result=b"the answer")
    wait_for(lambda: body("jobState") == "completed", WAIT, "the completion, live")
    assert "the answer" in (text_of(driver, "#job-result") or "")
    kinds = [row.get_attribute("data-event") for row in all_css(driver, "#job-events tbody tr")]
    assert kinds == ["added", "leased", "completed"]
    screenshot(driver, "dashboard-live-job")
    # The queue's view: its counts follow the stream too.
    driver.get(dash.url + "?queue=evlive")
    wait_for(lambda: body("live") == "on", WAIT, "the queue view to follow the stream")
    wait_for(lambda: (shown_counts(driver, "evlive") or {}).get("queued") == 1, WAIT, "1")
    driver.execute_script("window.sameDocument = 'yes';")
    queue.add_items(real_db, [Item(f"more {n}".encode()) for n in range(5)])
    wait_for(lambda: (shown_counts(driver, "evlive") or {}).get("queued") == 6, WAIT, "6, live")
    wait_for(lambda: len(all_css(driver, "#waiting tbody tr")) == 6, WAIT, "6 rows, live")
    assert driver.execute_script("return window.sameDocument") == "yes"


def test_dead_letter_requeued_from_the_page(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    queue = WorkQueue(KeyPrefix("work"), max_deliveries=1)
    make_dead(real_db, queue, "d1", "RuntimeError: once")
    make_dead(real_db, queue, "d2", "RuntimeError: twice")
    dash = dashboards(redis_url, "work", "--allow-actions")
    driver.get(dash.url + "?queue=work&tab=dead")
    assert by_css(driver, "#mode").text == "actions enabled"
    click(driver, "#dead tr[data-id='d1'] button.requeue-one")
    wait_for(lambda: queue.stats(real_db).dead == 1, WAIT, "the requeue")
    assert [d.id for d in queue.dead_letters(real_db)] == ["d2"]
    assert [q.id for q in queue.peek(real_db)] == ["d1"]
    wait_for(lambda: "requeued 1 dead letter" in (text_of(driver, "#notice") or ""), WAIT, "m")
    wait_for(lambda: (shown_counts(driver, "work") or {}).get("dead") == 1, WAIT, "1 dead")
    # Selected: tick d2 and purge it.
    wait_for(lambda: text_of(driver, "#dead tr[data-id='d1']") is None, WAIT, "d1 gone")
    click(driver, "#dead tr[data-id='d2'] input.pick")
    wait_for(
        lambda: driver.execute_script(
            "return document.querySelector(\"#dead tr[data-id='d2'] input.pick\").checked"
        ),
        WAIT,
        "d2 ticked",
    )
    click(driver, "#purge-selected")
    wait_for(lambda: queue.stats(real_db).dead == 0, WAIT, "the purge")
    assert queue.stats(real_db).queued == 1


def test_flush_needs_the_typed_queue_name(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    queue = WorkQueue(KeyPrefix("doomed"))
    keep = WorkQueue(KeyPrefix("doomed2"))
    queue.add_item(real_db, Item(b"x"))
    keep.add_item(real_db, Item(b"y"))
    dash = dashboards(redis_url, "doomed", "doomed2", "--allow-actions")
    driver.get(dash.url)
    wait_for(lambda: text_of(driver, "#detail-name") == "doomed", WAIT, "the detail")
    button = by_css(driver, "#flush")
    assert not button.is_enabled()
    by_css(driver, "#flush-confirm").send_keys("doomed2")
    assert not button.is_enabled()
    by_css(driver, "#flush-confirm").clear()
    by_css(driver, "#flush-confirm").send_keys("doomed")
    wait_for(button.is_enabled, WAIT, "the flush button")
    button.click()
    wait_for(lambda: queue.stats(real_db).queued == 0, WAIT, "the flush")
    wait_for(lambda: "deleted" in by_css(driver, "#notice").text, WAIT, "the message")
    assert keep.stats(real_db).queued == 1


def test_basic_auth_refuses_a_wrong_password(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    WorkQueue(KeyPrefix("guarded")).add_item(real_db, Item(b"z"))
    dash = dashboards(redis_url, "guarded", "--auth", "admin:s3cret-pw")
    base = dash.url.removeprefix("http://")
    driver.get(f"http://admin:wrong@{base}")
    # Refused: Chromium is left at the 401 (its login prompt), never the page.
    assert all_css(driver, "#queues") == []
    assert driver.title != "rwq dashboard"
    driver.get(f"http://admin:s3cret-pw@{base}")
    wait_for(lambda: (shown_counts(driver, "guarded") or {}).get("queued") == 1, WAIT, "1")
    assert "s3cret-pw" not in dash.output()
    assert "basic auth on" in dash.output()


def test_outage_shows_a_banner_and_recovers(
    server: Proc, driver: Any, dashboards: Callable[..., Dashboard]
) -> None:
    db = server.client()
    queue = WorkQueue(KeyPrefix("flaky"))
    queue.add_item(db, Item(b"1"))
    dash = dashboards(server.url, "flaky")
    driver.get(dash.url)
    wait_for(lambda: (shown_counts(driver, "flaky") or {}).get("queued") == 1, WAIT, "1")
    server.kill()
    wait_for(lambda: by_css(driver, "#banner").is_displayed(), WAIT, "the banner")
    assert "unreachable" in by_css(driver, "#banner").text
    screenshot(driver, "test_outage_banner_shown")
    assert dash.process.poll() is None
    server.launch()  # same port, empty (no persistence)
    queue.add_item(server.client(), Item(b"after"))
    wait_for(lambda: not by_css(driver, "#banner").is_displayed(), WAIT, "recovery")
    wait_for(lambda: (shown_counts(driver, "flaky") or {}).get("queued") == 1, WAIT, "1")
    assert dash.output().count("Redis unreachable") == 1


def test_live_worker_and_its_failure_traceback(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    import signal  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from runner_handlers import job  # noqa: PLC0415

    queue = WorkQueue(KeyPrefix("wq"), max_deliveries=1)
    queue.add_item(real_db, Item(job(redis_url, "t1", fail=True), id="fails"))
    tests_dir = Path(__file__).resolve().parent
    command = [sys.executable, "-m", "redis_work_queue.cli", "--url", redis_url, "worker"]
    command += ["runner_handlers:record", "wq", "--max-deliveries", "1", "--heartbeat-secs", "0.5"]
    worker = subprocess.Popen(
        command,
        cwd=tests_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        dash = dashboards(redis_url, "wq")
        driver.get(dash.url + "?view=workers")
        wait_for(
            lambda: str(worker.pid) in (text_of(driver, "#workers tbody") or ""),
            WAIT,
            "the worker's row",
        )
        driver.get(dash.url + "?queue=wq&tab=dead")
        wait_for(lambda: "boom" in (text_of(driver, "#dead tr[data-id='fails']") or ""), WAIT, "x")
        traceback = driver.execute_script(
            "return document.querySelector(\"#dead tr[data-id='fails'] pre\").textContent"
        )
        assert "_explode" in traceback
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=5)


def test_a_big_item_shows_a_bounded_preview_and_downloads_whole(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    queue = WorkQueue(KeyPrefix("bulk"), max_deliveries=1)
    make_dead(real_db, queue, "dead-big", "ValueError: too big")
    real_db.hset(queue.keys.dead_item("dead-big"), "data", b"d" * 300_000)
    queue.add_item(real_db, Item(b"x" * 2_000_000, id="big"))
    queue.add_item(real_db, Item(b"small one", id="small"))
    dash = dashboards(redis_url, "bulk")
    driver.get(dash.url)
    wait_for(lambda: text_of(driver, "#waiting tbody tr[data-id='big']"), WAIT, "the big row")
    shown = text_of(driver, "#waiting tr[data-id='big'] .data") or ""
    assert shown.startswith("x" * 256) and shown.endswith("\u2026") and len(shown) < 300
    assert "2,000,000 bytes" in (text_of(driver, "#waiting tr[data-id='big'] a.download") or "")
    assert (text_of(driver, "#waiting tr[data-id='small'] .data") or "") == "small one"

    def downloaded(selector: str) -> int:
        size: int = driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            const link = document.querySelector(arguments[0]);
            fetch(link.href, { credentials: "same-origin" })
              .then((r) => r.arrayBuffer())
              .then((b) => done(b.byteLength), () => done(-1));
            """,
            selector,
        )
        return size

    driver.set_script_timeout(30)
    assert downloaded("#waiting tr[data-id='big'] a.download") == 2_000_000
    name = by_css(driver, "#waiting tr[data-id='big'] a.download").get_attribute("download")
    assert name == "big.bin"
    driver.get(dash.url + "?queue=bulk&tab=dead")
    wait_for(lambda: text_of(driver, "#dead tr[data-id='dead-big'] a.download"), WAIT, "dead")
    assert downloaded("#dead tr[data-id='dead-big'] a.download") == 300_000


def test_a_key_of_another_program_is_one_broken_row(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    real_db.set("app:settings:queue", "dark mode")
    jobs = WorkQueue(KeyPrefix("app:jobs"))
    jobs.add_item(real_db, Item(b"one"))
    jobs.add_item(real_db, Item(b"two"))
    dash = dashboards(redis_url, "--match", "app:*")
    driver.get(dash.url)
    expected = {k: getattr(jobs.stats(real_db), k) for k in COUNTS}
    wait_for(lambda: shown_counts(driver, "app:jobs") == expected, WAIT, "the counts")
    row = "#queues tr[data-queue='app:settings']"
    wait_for(lambda: text_of(driver, row), WAIT, "the broken row")
    text = text_of(driver, row) or ""
    assert "app:settings:queue" in text and "string" in text
    assert "broken" in (by_css(driver, row).get_attribute("class") or "")
    assert not by_css(driver, "#banner").is_displayed()
    assert text_of(driver, "#detail-name") == "app:jobs"  # the first queue that works
    click(driver, row)
    wait_for(lambda: "app:settings:queue" in (text_of(driver, "#broken") or ""), WAIT, "detail")
    assert not by_css(driver, "#banner").is_displayed()


def test_a_worker_registration_with_unreadable_numbers_is_shown_as_such(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    from redis_work_queue.ops.health import heartbeat_steps  # noqa: PLC0415
    from redis_work_queue.transport import run  # noqa: PLC0415

    queue = WorkQueue(KeyPrefix("reg"))
    queue.add_item(real_db, Item(b"x"))
    fields = {"host": "box", "pid": 5, "queues": "reg", "started": 1.0, "completed": 4}
    run(real_db, heartbeat_steps(queue.keys, "box:5:ok", 60_000, fields))
    run(real_db, heartbeat_steps(queue.keys, "box:6:odd", 60_000, fields))
    real_db.hset(
        queue.keys.worker("box:6:odd"), mapping={"pid": "inf", "completed": "1e400", "beat": "nan"}
    )
    dash = dashboards(redis_url, "reg")
    driver.get(dash.url + "?view=workers")
    wait_for(lambda: "box:6:odd" in (text_of(driver, "#workers tbody") or ""), WAIT, "the row")
    rows = {
        cells[0]: cells
        for cells in driver.execute_script(
            """
            return Array.from(document.querySelectorAll("#workers tbody tr")).map(
              (r) => Array.from(r.cells).map((c) => c.textContent));
            """
        )
    }
    odd = rows["box:6:odd"]
    assert (odd[2], odd[4], odd[6]) == ("?", "?", "0")
    assert odd[9] == "unreadable: beat, completed, pid"
    assert rows["box:5:ok"][2] == "5" and rows["box:5:ok"][6] == "4" and rows["box:5:ok"][9] == ""
    assert not by_css(driver, "#banner").is_displayed()


def group_rows(driver: Any) -> dict[str, list[str]] | None:
    """The Groups table as the page shows it: each group's cells' text, by name (one script
    run); None while the section is hidden."""
    found: dict[str, list[str]] | None = driver.execute_script(
        """
        if (document.getElementById("groups-box").hidden) return null;
        const rows = {};
        for (const r of document.querySelectorAll("#groups tbody tr[data-group]")) {
          rows[r.dataset.group] = Array.from(r.cells).map((c) => c.textContent);
        }
        return rows;
        """
    )
    return found


def test_a_queues_groups_shown_live_and_paused_from_the_page(
    driver: Any, real_db: redis.Redis, redis_url: str, dashboards: Callable[..., Dashboard]
) -> None:
    """A queue with fair groups shows its groups by backlog, each with its counts, the cap and
    its state, redrawn as they change; pause and resume act from the page. A queue without
    groups shows no Groups section."""
    queue = WorkQueue(KeyPrefix("tenants"), group_concurrency=2)
    markup = "<b>initech</b>"
    for group, size in (("acme", 6), ("globex", 3), (markup, 1)):
        queue.add_items(real_db, [Item(f"{group} {n}".encode()) for n in range(size)], group=group)
    held = [queue.lease(real_db, 60, block=False) for _ in range(3)]  # acme, globex, initech
    assert all(held)
    WorkQueue(KeyPrefix("plain")).add_item(real_db, Item(b"no group"))
    dash = dashboards(redis_url, "tenants", "plain", "--allow-actions")
    driver.get(dash.url + "?queue=tenants")
    wait_for(lambda: "acme" in (group_rows(driver) or {}), WAIT, "the groups")
    rows = group_rows(driver)
    assert rows is not None and list(rows) == ["acme", "globex"]  # initech has none waiting
    assert rows["acme"][:5] == ["acme", "5", "1", "2", "active"]
    assert rows["globex"][:5] == ["globex", "2", "1", "2", "active"]
    assert text_of(driver, "#groups-count") == "(2 with items waiting)"
    assert "7 items waiting" in (text_of(driver, "#groups-summary") or "")
    assert "group concurrency: 2" in (text_of(driver, "#groups-summary") or "")
    driver.execute_script("window.sameDocument = 'yes';")

    # Live: a group that gets items is drawn without a reload, its name as text.
    queue.add_items(real_db, [Item(b"more") for _ in range(8)], group=markup)
    wait_for(lambda: markup in (group_rows(driver) or {}), WAIT, "the new group, live")
    assert list(group_rows(driver) or {}) == [markup, "acme", "globex"]  # most waiting first
    assert all_css(driver, "#groups b") == []  # shown as text, never as markup
    screenshot(driver, "dashboard-groups")

    # Pause acme from its row: the queue holds its items back, the row says so.
    click(driver, "#groups tr[data-group='acme'] button.group-pause")
    wait_for(lambda: queue.stats(real_db, groups=["acme"]).groups["acme"].paused, WAIT, "pause")
    wait_for(lambda: (group_rows(driver) or {})["acme"][4] == "paused", WAIT, "paused, drawn")
    wait_for(lambda: "paused group acme" in (text_of(driver, "#notice") or ""), WAIT, "message")
    # Globex and initech each take one more (then both are at the cap of 2); acme gives none.
    leased = [queue.lease(real_db, 60, block=False) for _ in range(4)]
    got = sorted(i.data().split()[0] for i in leased if i is not None)
    assert got == [b"globex", b"more"]
    screenshot(driver, "dashboard-groups-paused")
    click(driver, "#groups tr[data-group='acme'] button.group-resume")
    wait_for(lambda: not queue.stats(real_db, groups=["acme"]).groups["acme"].paused, WAIT, "go")
    wait_for(lambda: (group_rows(driver) or {})["acme"][4] == "active", WAIT, "active, drawn")

    # A group by name (not listed: nothing waiting) is paused from the form.
    button = by_css(driver, "#group-pause")
    assert not button.is_enabled()
    by_css(driver, "#group-name").send_keys("hooli")
    wait_for(button.is_enabled, WAIT, "the pause button")
    button.click()
    wait_for(lambda: queue.stats(real_db, groups=["hooli"]).groups["hooli"].paused, WAIT, "hooli")
    assert driver.execute_script("return window.sameDocument") == "yes"
    assert not by_css(driver, "#banner").is_displayed()

    # A queue without groups shows no Groups section.
    driver.get(dash.url + "?queue=plain")
    wait_for(lambda: text_of(driver, "#detail-name") == "plain", WAIT, "the plain queue")
    wait_for(lambda: (shown_counts(driver, "plain") or {}).get("queued") == 1, WAIT, "drawn")
    assert group_rows(driver) is None
    assert not by_css(driver, "#groups-box").is_displayed()
