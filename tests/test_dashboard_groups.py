"""A queue's fair groups on the dashboard's JSON endpoints: the top groups by backlog (a bounded
read, whatever the number of groups), none for a queue without groups, and pausing and resuming a
group behind the same guards as every other action (``--allow-actions``, the page's CSRF token,
a JSON body)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from helpers import dump_state
from redis_work_queue import GroupStats, Item, KeyPrefix, WorkQueue

pytest.importorskip("starlette", reason="needs the dashboard extra")
pytest.importorskip("httpx", reason="needs httpx (the test extra)")

from starlette.testclient import TestClient

from redis_work_queue.dashboard import DashboardSettings, create_app
from redis_work_queue.dashboard import data as dash_data


def client_for(url: str, **options: Any) -> TestClient:
    return TestClient(create_app(DashboardSettings(url=url, **options)))


@pytest.fixture
def dash(redis_url: str) -> Iterator[TestClient]:
    with client_for(redis_url, queues=("t", "plain"), allow_actions=True) as client:
        yield client


def csrf_of(client: TestClient) -> str:
    found = re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text)
    assert found is not None
    return found.group(1)


def groups_of(client: TestClient, name: str = "t") -> Any:
    reply = client.get("/api/queue", params={"name": name, "tab": "waiting"})
    assert reply.status_code == 200, reply.text
    return reply.json()["groups"]


def add_groups(db: redis.Redis, queue: WorkQueue, sizes: dict[str, int]) -> None:
    items, groups = [], []
    for group, size in sizes.items():
        items += [Item(b"d") for _ in range(size)]
        groups += [group] * size
    assert all(queue.add_items(db, items, group=groups))


def test_a_queue_without_groups_shows_none(dash: TestClient, real_db: redis.Redis) -> None:
    WorkQueue(KeyPrefix("plain")).add_items(real_db, [Item(b"x"), Item(b"y")])
    assert groups_of(dash, "plain") is None
    # An empty queue with a group concurrency set has groups to show (none waiting yet).
    WorkQueue(KeyPrefix("t")).set_group_concurrency(real_db, 2)
    assert groups_of(dash) == {"total": 0, "rest": 0, "grouped": 0, "cap": 2, "rows": []}


def test_the_waiting_tab_has_no_row_for_a_wake_up_entry(
    dash: TestClient, real_db: redis.Redis
) -> None:
    """A grouped item added to an empty queue pushes a wake-up entry (an empty id) onto the main
    queue: the waiting tab neither lists nor counts it."""
    queue = WorkQueue(KeyPrefix("t"))
    assert queue.add_item(real_db, Item(b"g", id="g"), group="A")
    assert queue.add_item(real_db, Item(b"w", id="w"))
    assert queue.queue_len(real_db) == 2  # the wake-up entry and w
    reply = dash.get("/api/queue", params={"name": "t", "tab": "waiting"}).json()
    assert [row["id"] for row in reply["rows"]] == ["w"]
    assert reply["total"] == 1


def test_the_top_groups_by_backlog_with_their_counts(
    dash: TestClient, real_db: redis.Redis
) -> None:
    queue = WorkQueue(KeyPrefix("t"), group_concurrency=2)
    shown = dash_data.GROUPS_SHOWN
    # Groups g00..g24 with 1..25 items each, and one whose name is markup.
    sizes = {f"g{k:02d}": k + 1 for k in range(shown + 5)}
    sizes["<img src=x onerror=alert(1)>"] = 30
    add_groups(real_db, queue, sizes)
    leased = [queue.lease(real_db, 60, block=False) for _ in range(3)]
    assert all(leased)
    queue.pause_group(real_db, "g24")
    groups = groups_of(dash)
    # The three leases took one item each of g00, g01 and g02 in turn: g00 has none left.
    assert groups["total"] == shown + 5 == queue.stats(real_db).groups_waiting
    assert groups["rest"] == 5
    assert groups["cap"] == 2 and groups["grouped"] == sum(sizes.values()) - 3
    rows = groups["rows"]
    assert len(rows) == shown
    readies = [r["ready"] for r in rows]
    assert readies == sorted(readies, reverse=True)
    by_name = {r["name"]: r for r in rows}
    in_flight = queue.stats(real_db, groups=list(by_name)).groups
    for name, row in by_name.items():
        assert GroupStats(row["ready"], row["in_flight"], row["paused"]) == in_flight[name]
    assert by_name["g24"]["paused"] is True and by_name["g23"]["paused"] is False
    assert rows[0]["name"] == "<img src=x onerror=alert(1)>"  # as text, for textContent
    assert sum(r["in_flight"] for r in rows) <= 3
    # The overview's counts are not weighed down with the groups.
    assert (
        "top_groups"
        not in dash.get("/api/queue", params={"name": "t", "tab": "dead"}).json()["counts"]
    )


def test_a_refresh_reads_the_top_groups_only_whatever_their_number(
    dash: TestClient, real_db: redis.Redis
) -> None:
    """2,000 groups: one refresh of the queue's page reads the counts of the 20 shown (LLEN of
    each group's list), never every group, and scans nothing."""
    queue = WorkQueue(KeyPrefix("t"))
    add_groups(real_db, queue, {f"tenant-{k:04d}": 1 + k % 3 for k in range(2000)})
    real_db.config_resetstat()
    assert dash.get("/api/overview", params={"history": "t"}).status_code == 200
    groups = groups_of(dash)
    stats = real_db.info("commandstats")
    assert groups["total"] == 2000 and len(groups["rows"]) == dash_data.GROUPS_SHOWN
    assert groups["rest"] == 2000 - dash_data.GROUPS_SHOWN
    assert all(r["ready"] == 3 for r in groups["rows"])
    llen = stats.get("cmdstat_llen", {}).get("calls", 0)
    assert llen <= dash_data.GROUPS_SHOWN + 10, llen
    for command in ("scan", "hscan", "zscan", "keys", "hkeys", "hvals", "zrange"):
        assert f"cmdstat_{command}" not in stats, command
    assert stats["cmdstat_zrevrange"]["calls"] == 1


def test_pause_and_resume_a_group(dash: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("t"))
    add_groups(real_db, queue, {"acme": 2, "globex": 1})
    token = csrf_of(dash)

    def act(**body: Any) -> str:
        reply = dash.post(
            "/api/action", json={"queue": "t", **body}, headers={"X-CSRF-Token": token}
        )
        assert reply.status_code == 200, reply.text
        message: str = reply.json()["message"]
        return message

    assert act(action="pause-group", group="acme").startswith("t: paused group acme")
    assert queue.stats(real_db, groups=["acme"]).groups["acme"].paused
    assert act(action="pause-group", group="acme") == "t: group acme was paused already"
    assert [r["paused"] for r in groups_of(dash)["rows"]] == [True, False]
    leased = queue.lease(real_db, 60, block=False)
    assert leased is not None and queue.lease(real_db, 60, block=False) is None  # globex's only
    assert act(action="resume-group", group="acme") == "t: resumed group acme"
    assert act(action="resume-group", group="acme") == "t: group acme was not paused"
    assert queue.lease(real_db, 60, block=False) is not None
    # A group not listed (nothing waiting) is paused by name all the same.
    assert act(action="pause-group", group="initech").startswith("t: paused group initech")
    assert queue.stats(real_db, groups=["initech"]).groups["initech"].paused


def test_group_actions_are_guarded_as_every_action(
    dash: TestClient, real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix("t"))
    add_groups(real_db, queue, {"acme": 1})
    before = dump_state(real_db)
    body = {"queue": "t", "action": "pause-group", "group": "acme"}
    assert dash.post("/api/action", json=body).status_code == 403  # no token
    wrong = dash.post("/api/action", json=body, headers={"X-CSRF-Token": "guess"})
    assert wrong.status_code == 403 and "CSRF" in wrong.json()["error"]
    token = csrf_of(dash)
    form = dash.post(
        "/api/action",
        content="queue=t&action=pause-group&group=acme",
        headers={"X-CSRF-Token": token, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415
    for bad, words in (
        (None, "must be a str"),
        ("", "must not be empty"),
        ("x" * 257, "at most 256 bytes"),
        (["acme"], "must be a str"),
    ):
        reply = dash.post(
            "/api/action",
            json={"queue": "t", "action": "resume-group", "group": bad},
            headers={"X-CSRF-Token": token},
        )
        assert reply.status_code == 400 and words in reply.json()["error"], reply.text
    other = {"queue": "elsewhere", "action": "pause-group", "group": "acme"}
    assert dash.post("/api/action", json=other, headers={"X-CSRF-Token": token}).status_code == 404
    assert dump_state(real_db) == before
    # Read-only (no --allow-actions): refused, and the page offers no group actions.
    with client_for(redis_url, queues=("t",)) as client:
        refused = client.post("/api/action", json=body, headers={"X-CSRF-Token": csrf_of(client)})
        assert refused.status_code == 403 and "--allow-actions" in refused.json()["error"]
        assert 'id="group-actions"' not in client.get("/").text
        assert groups_of(client)["rows"][0]["name"] == "acme"
    assert 'id="group-actions"' in dash.get("/").text
    assert dump_state(real_db) == before
