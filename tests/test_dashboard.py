"""The dashboard's JSON endpoints over plain HTTP (Starlette's TestClient), its helpers, the
``rwq dashboard`` command without the extra, and the files the wheel must ship."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue, cli
from redis_work_queue.ops.health import heartbeat_steps
from redis_work_queue.transport import run
from servers import Proc

pytest.importorskip("starlette", reason="needs the dashboard extra")
pytest.importorskip("httpx", reason="needs httpx (the test extra)")

from starlette.testclient import TestClient

from redis_work_queue.dashboard import DashboardSettings, create_app
from redis_work_queue.dashboard import app as dash_app
from redis_work_queue.dashboard import data as dash_data

REPO_ROOT = Path(__file__).resolve().parents[1]
COUNTS = ("queued", "leased", "expired", "delayed", "dead")


def client_for(url: str, **options: Any) -> TestClient:
    return TestClient(create_app(DashboardSettings(url=url, **options)))


@pytest.fixture
def dash(redis_url: str) -> Iterator[TestClient]:
    with client_for(redis_url, queues=("q",), allow_actions=True) as client:
        yield client


def csrf_of(client: TestClient) -> str:
    page = client.get("/")
    assert page.status_code == 200
    found = re.search(r'name="csrf-token" content="([^"]+)"', page.text)
    assert found is not None
    return found.group(1)


def bury(db: redis.Redis, queue: WorkQueue, item_id: str, reason: str) -> None:
    queue.add_item(db, Item(b"data of " + item_id.encode(), id=item_id))
    leased = queue.lease(db, 30, block=False)
    assert leased is not None and leased.id() == item_id
    queue.release(db, leased, reason=reason)


# Counts and discovery -----------------------------------------------------------------------


def test_overview_counts_match_stats(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix("jobs:a"), max_deliveries=1)
    bury(real_db, queue, "dead1", "boom")
    for n in range(4):
        queue.add_item(real_db, Item(f"{n}".encode()))
    queue.lease(real_db, 60, block=False)
    queue.add_item(real_db, Item(b"later"), delay=600)
    WorkQueue(KeyPrefix("jobs:b")).add_item(real_db, Item(b"b"))
    WorkQueue(KeyPrefix("other")).add_item(real_db, Item(b"o"))
    with client_for(redis_url, match=("jobs:*",)) as client:
        body = client.get("/api/overview", params={"history": "jobs:a"}).json()
    assert body["ok"] is True
    rows = {row["name"]: row for row in body["queues"]}
    assert sorted(rows) == ["jobs:a", "jobs:b"]
    stats = queue.stats(real_db)
    assert {k: rows["jobs:a"][k] for k in COUNTS} == {k: getattr(stats, k) for k in COUNTS}
    assert stats.queued == 3 and stats.leased == 1 and stats.delayed == 1 and stats.dead == 1
    assert 0 <= rows["jobs:a"]["oldest_age"] < 60
    assert rows["jobs:a"]["history"][-1]["queued"] == 3
    assert "history" not in rows["jobs:b"]  # samples only of the queue charted


def test_discovery_finds_every_kind_of_queue_key_and_escapes_nothing_literal(
    real_db: redis.Redis, redis_url: str
) -> None:
    only_dead = WorkQueue(KeyPrefix("m:dead-only"), max_deliveries=1)
    bury(real_db, only_dead, "x", "r")
    assert real_db.exists("m:dead-only:queue") == 0
    WorkQueue(KeyPrefix("m:delayed-only")).add_item(real_db, Item(b"d"), delay=600)
    leased = WorkQueue(KeyPrefix("m:leased-only"))
    leased.add_item(real_db, Item(b"l"))
    leased.lease(real_db, 60, block=False)
    WorkQueue(KeyPrefix("m:we*rd[1]")).add_item(real_db, Item(b"w"))
    names, truncated = _run_discover(redis_url, ["m:*"])
    assert names == ["m:dead-only", "m:delayed-only", "m:leased-only", "m:we*rd[1]"]
    assert truncated is False
    # A literal name is matched literally once glob-escaped.
    literal = "m:we\\*rd\\[1\\]"
    assert _run_discover(redis_url, [literal]) == (["m:we*rd[1]"], False)
    assert dash_data.discovery_pattern("jobs:*") == "jobs:*:[qpd]*"


def _run_discover(url: str, patterns: list[str]) -> tuple[list[str], bool]:
    import asyncio  # noqa: PLC0415

    from redis.asyncio import Redis as AsyncRedis  # noqa: PLC0415

    async def go() -> tuple[list[str], bool]:
        db = AsyncRedis.from_url(url)
        try:
            return await dash_data.discover(db, patterns)
        finally:
            await db.aclose()

    return asyncio.run(go())


def test_discovery_is_bounded(
    real_db: redis.Redis, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(30):
        WorkQueue(KeyPrefix(f"many:{n:02}")).add_item(real_db, Item(b"x"))
    monkeypatch.setattr(dash_data, "MAX_QUEUES", 5)
    names, truncated = _run_discover(redis_url, ["many:*"])
    assert truncated is True
    assert len(names) == 5
    with client_for(redis_url, match=("many:*",)) as client:
        body = client.get("/api/overview").json()
    assert body["truncated"] is True and len(body["queues"]) == 5
    monkeypatch.setattr(dash_data, "MAX_QUEUES", 100)
    monkeypatch.setattr(dash_data, "SCAN_COUNT", 1)
    monkeypatch.setattr(dash_data, "SCAN_STEPS", 3)
    names, truncated = _run_discover(redis_url, ["many:*"])
    assert truncated is True
    assert len(names) <= 3 * 5  # a step may return a little more than COUNT


def test_queue_names_that_clash_with_per_item_keys_are_not_queues() -> None:
    assert dash_data.queue_name_of("jobs:a:queue") == "jobs:a"
    assert dash_data.queue_name_of("jobs:a:dead") == "jobs:a"
    assert dash_data.queue_name_of("jobs:a:dead:queue") is None  # a dead letter's hash
    assert dash_data.queue_name_of("jobs:a:deliveries") is None
    assert dash_data.queue_name_of(":queue") is None


# Per-queue detail ---------------------------------------------------------------------------


def test_queue_detail_shows_waiting_pending_dead_and_workers(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    bury(real_db, queue, "gone", "KeyError: 'k'\nTraceback (most recent call last):\n  line")
    queue.add_item(real_db, Item(b"\x00\xffbinary", id="bin"))
    queue.add_item(real_db, Item("<script>alert(1)</script> é".encode(), id="html"))
    queue.add_item(real_db, Item(b"third", id="third"))
    held = queue.lease(real_db, 120, block=False)
    assert held is not None and held.id() == "bin"
    fields = {"host": "box", "pid": 4242, "queues": "q", "started": 1.0, "completed": 3}
    run(real_db, heartbeat_steps(queue.keys, "box:4242:ab", 30_000, fields))
    with client_for(redis_url, queues=("q",)) as client:
        body = client.get("/api/queue", params={"name": "q"}).json()
    assert body["ok"] is True
    assert [w["id"] for w in body["workers"]] == ["box:4242:ab"]
    assert body["workers"][0]["pid"] == 4242 and body["workers"][0]["completed"] == 3
    assert [(r["position"], r["id"]) for r in body["waiting"]] == [(0, "html"), (1, "third")]
    assert body["waiting"][0]["data"] == {
        "kind": "text",
        "text": "<script>alert(1)</script> é",
        "size": len("<script>alert(1)</script> é".encode()),
        "truncated": False,
    }
    (pending,) = body["pending"]
    assert pending["id"] == "bin" and pending["deliveries"] == 1 and not pending["expired"]
    assert 100 < pending["lease_left"] <= 120
    (dead,) = body["dead"]
    assert dead["id"] == "gone" and dead["reason"] == "KeyError: 'k'"
    assert dead["traceback"].startswith("Traceback")
    assert body["dead_total"] == 1


def test_detail_of_a_queue_not_shown_is_refused(real_db: redis.Redis, redis_url: str) -> None:
    WorkQueue(KeyPrefix("secret")).add_item(real_db, Item(b"s"))
    with client_for(redis_url, queues=("q",)) as client:
        reply = client.get("/api/queue", params={"name": "secret"})
    assert reply.status_code == 404
    assert "secret" in reply.json()["error"]


def test_preview_is_bounded_and_binary_is_hex() -> None:
    assert dash_data.preview(b"\x00\x01abc")["kind"] == "hex"
    assert dash_data.preview(b"\x00\x01abc")["text"] == "00 01 61 62 63"
    assert dash_data.preview(b"\x1b[31mred")["kind"] == "hex"  # terminal escapes are not text
    assert dash_data.preview(None)["kind"] == "missing"
    long = ("é" * 200).encode()  # 400 bytes: the bound cuts a character in two
    shown = dash_data.preview(long)
    assert shown["kind"] == "text" and shown["truncated"] is True and shown["size"] == 400
    assert len(shown["text"].encode()) <= dash_data.PREVIEW_BYTES
    assert dash_data.preview(b"tab\tnew\nline")["kind"] == "text"


def test_uuid7_age_only_for_uuid7_ids() -> None:
    item = Item(b"x")
    made = dash_data.uuid7_time(item.id())
    assert made is not None
    import time  # noqa: PLC0415

    assert abs(made - time.time()) < 5
    assert dash_data.uuid7_time("custom-id") is None
    assert dash_data.uuid7_time("0" * 32) is None


def test_documented_bounds() -> None:
    assert dash_data.Samples().keep == 300
    assert (dash_data.SCAN_STEPS, dash_data.SCAN_COUNT, dash_data.MAX_QUEUES) == (200, 1000, 200)
    assert dash_data.PREVIEW_BYTES == 256


def test_samples_give_rates_over_a_window() -> None:
    samples = dash_data.Samples(keep=3)
    assert samples.rates("q") == {"queued": None, "dead": None}
    for at, queued in ((0.0, 0), (10.0, 5), (20.0, 30), (30.0, 40)):
        samples.add("q", at, {"queued": queued, "leased": 0, "dead": 1})
    assert len(samples.history("q")) == 3  # bounded
    assert samples.rates("q") == {"queued": 35 / 20, "dead": 0.0}
    assert samples.rates("q", window=10.0) == {"queued": 1.0, "dead": 0.0}
    samples.add("q", 31.0, {"queued": 99, "leased": 0, "dead": 1}, min_gap=2.0)
    assert samples.history("q")[-1]["t"] == 30.0  # too soon after the last: skipped
    samples.add("q", 32.0, {"queued": 99, "leased": 0, "dead": 1}, min_gap=2.0)
    assert samples.history("q")[-1] == {"t": 32.0, "queued": 99, "leased": 0, "dead": 1}
    samples.forget_except(["other"])
    assert samples.history("q") == []


# Actions -----------------------------------------------------------------------------------


def test_actions_are_refused_without_the_flag(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    bury(real_db, queue, "d", "r")
    with client_for(redis_url, queues=("q",)) as client:
        token = csrf_of(client)
        reply = client.post(
            "/api/action",
            json={"queue": "q", "action": "requeue", "all": True},
            headers={"X-CSRF-Token": token},
        )
        assert reply.status_code == 403
        assert "--allow-actions" in reply.json()["error"]
        assert "requeue-all" not in client.get("/").text
    assert queue.stats(real_db).dead == 1


def test_actions_are_refused_without_the_csrf_token(dash: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    bury(real_db, queue, "d", "r")
    body = {"queue": "q", "action": "requeue", "ids": ["d"]}
    assert dash.post("/api/action", json=body).status_code == 403
    wrong = dash.post("/api/action", json=body, headers={"X-CSRF-Token": "guess"})
    assert wrong.status_code == 403 and "CSRF" in wrong.json()["error"]
    # A form post (what another site could make a browser send) is refused too.
    token = csrf_of(dash)
    form = dash.post(
        "/api/action",
        content="queue=q&action=requeue&all=true",
        headers={"X-CSRF-Token": token, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415
    assert queue.stats(real_db).dead == 1


def test_requeue_and_purge_one_selected_and_all(dash: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"), max_deliveries=1)
    for n in range(5):
        bury(real_db, queue, f"d{n}", "r")
    token = csrf_of(dash)

    def act(**body: Any) -> dict[str, Any]:
        reply = dash.post(
            "/api/action", json={"queue": "q", **body}, headers={"X-CSRF-Token": token}
        )
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result

    assert act(action="requeue", ids=["d0"])["message"] == "q: requeued 1 dead letter"
    assert act(action="purge", ids=["d1", "d2"])["message"] == "q: purged 2 dead letters"
    assert [d.id for d in queue.dead_letters(real_db)] == ["d3", "d4"]
    unconfirmed = dash.post(
        "/api/action",
        json={"queue": "q", "action": "requeue", "all": True},
        headers={"X-CSRF-Token": token},
    )
    assert unconfirmed.status_code == 400 and "type the queue's name" in unconfirmed.json()["error"]
    assert queue.stats(real_db).dead == 2
    assert act(action="requeue", all=True, confirm="q")["message"] == "q: requeued 2 dead letters"
    assert queue.stats(real_db).dead == 0 and queue.stats(real_db).queued == 3
    bad = dash.post(
        "/api/action", json={"queue": "q", "action": "purge"}, headers={"X-CSRF-Token": token}
    )
    assert bad.status_code == 400 and "ids" in bad.json()["error"]
    assert "examined" in act(action="light-clean")["message"]
    assert "examined" in act(action="deep-clean")["message"]


def test_flush_needs_the_queue_name_typed(dash: TestClient, real_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(real_db, Item(b"x"))
    WorkQueue(KeyPrefix("q2")).add_item(real_db, Item(b"y"))
    token = csrf_of(dash)
    for confirm in (None, "", "q2", "Q"):
        body: dict[str, Any] = {"queue": "q", "action": "flush"}
        if confirm is not None:
            body["confirm"] = confirm
        reply = dash.post("/api/action", json=body, headers={"X-CSRF-Token": token})
        assert reply.status_code == 400
        assert "type the queue's name" in reply.json()["error"]
    assert queue.stats(real_db).queued == 1
    reply = dash.post(
        "/api/action",
        json={"queue": "q", "action": "flush", "confirm": "q"},
        headers={"X-CSRF-Token": token},
    )
    assert reply.status_code == 200 and "deleted" in reply.json()["message"]
    assert queue.stats(real_db).queued == 0
    assert WorkQueue(KeyPrefix("q2")).stats(real_db).queued == 1


def test_actions_only_touch_queues_shown(dash: TestClient, real_db: redis.Redis) -> None:
    other = WorkQueue(KeyPrefix("q2"))
    other.add_item(real_db, Item(b"y"))
    reply = dash.post(
        "/api/action",
        json={"queue": "q2", "action": "flush", "confirm": "q2"},
        headers={"X-CSRF-Token": csrf_of(dash)},
    )
    assert reply.status_code == 404
    assert other.stats(real_db).queued == 1


# Security ----------------------------------------------------------------------------------


def test_basic_auth_refuses_wrong_or_missing_credentials(
    real_db: redis.Redis, redis_url: str
) -> None:
    with client_for(redis_url, queues=("q",), auth=("admin", "pw:with:colons")) as client:
        assert client.get("/api/overview").status_code == 401
        refused = client.get("/", auth=("admin", "wrong"))
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Basic")
        assert "pw:with:colons" not in refused.text
        assert client.get("/static/dashboard.js", auth=("admin", "wrong")).status_code == 401
        assert client.get("/api/overview", auth=("root", "pw:with:colons")).status_code == 401
        ok = client.get("/api/overview", auth=("admin", "pw:with:colons"))
        assert ok.status_code == 200
        assert "pw:with:colons" not in client.get("/", auth=("admin", "pw:with:colons")).text


def test_page_is_self_contained_and_locked_down(dash: TestClient) -> None:
    page = dash.get("/")
    csp = page.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    loads = [s for s in sources if not s.startswith("?")]  # the page's own links: same page
    assert loads and all(s.startswith(("/static/", "http://testserver/static/")) for s in loads)
    for source in sources:
        assert dash.get(source).status_code == 200


# Outages -----------------------------------------------------------------------------------


def test_outage_answers_503_then_recovers(server: Proc, caplog: pytest.LogCaptureFixture) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(server.client(), Item(b"1"))
    with client_for(server.url, queues=("q",)) as client:
        assert client.get("/api/overview").json()["queues"][0]["queued"] == 1
        server.kill()
        for _ in range(3):
            down = client.get("/api/overview")
            assert down.status_code == 503
            assert "unreachable" in down.json()["error"]
            assert client.get("/api/queue", params={"name": "q"}).status_code == 503
        assert client.get("/").status_code == 200  # the page itself still loads
        server.launch()
        queue.add_item(server.client(), Item(b"2"))
        queue.add_item(server.client(), Item(b"3"))
        back = client.get("/api/overview")
        assert back.status_code == 200
        assert back.json()["queues"][0]["queued"] == 2
    unreachable = [r for r in caplog.records if "Redis unreachable" in r.getMessage()]
    assert len(unreachable) == 1  # logged once per outage


# The command ---------------------------------------------------------------------------------


def test_command_without_the_extra_names_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(sys.modules):
        if name.startswith(("starlette", "uvicorn", "redis_work_queue.dashboard")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "starlette", None)
    code = cli.main(["--url", "redis://127.0.0.1:1/0", "dashboard"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert "pip install 'redis-work-queue-lua[dashboard]'" in err[0]


def test_command_refuses_a_malformed_auth(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RWQ_DASHBOARD_AUTH", "no-colon-secret")
    code = cli.main(["--url", "redis://127.0.0.1:1/0", "dashboard", "q"])
    assert code == 2
    err = capsys.readouterr().err
    assert "USER:PASSWORD" in err and "no-colon-secret" not in err


def test_command_takes_auth_from_the_environment_and_shows_every_queue_by_default(
    real_db: redis.Redis, redis_url: str, tmp_path: Path
) -> None:
    import httpx  # noqa: PLC0415

    from dashboard_support import start_dashboard  # noqa: PLC0415

    WorkQueue(KeyPrefix("any:name")).add_item(real_db, Item(b"x"))
    dashboard = start_dashboard(
        redis_url, workdir=tmp_path, env={"RWQ_DASHBOARD_AUTH": "ops:env-secret"}
    )
    try:
        assert httpx.get(dashboard.url + "api/overview", timeout=10).status_code == 401
        wrong = httpx.get(dashboard.url + "api/overview", auth=("ops", "nope"), timeout=10)
        assert wrong.status_code == 401
        body = httpx.get(dashboard.url + "api/overview", auth=("ops", "env-secret"), timeout=10)
        assert [q["name"] for q in body.json()["queues"]] == ["any:name"]
        # Bound to loopback: a request naming another host (DNS rebinding) is refused.
        rebound = httpx.get(
            dashboard.url, auth=("ops", "env-secret"), headers={"Host": "evil.example"}, timeout=10
        )
        assert rebound.status_code == 400
        by_name = f"http://localhost:{dashboard.port}/api/overview"
        assert httpx.get(by_name, auth=("ops", "env-secret"), timeout=10).status_code == 200
    finally:
        dashboard.stop()
    assert "env-secret" not in dashboard.output()
    assert "http://127.0.0.1:" in dashboard.output() and "read-only" in dashboard.output()


def test_command_binds_loopback_by_default() -> None:
    args = cli.build_parser().parse_args(["dashboard"])
    assert args.host == "127.0.0.1" and args.allow_actions is False and args.auth is None


@pytest.mark.slow
def test_wheel_ships_the_templates_and_static_files(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO_ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("redis_work_queue_lua-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    package = REPO_ROOT / "src" / "redis_work_queue" / "dashboard"
    needed = {
        f"redis_work_queue/dashboard/{p.relative_to(package).as_posix()}"
        for p in package.rglob("*")
        if p.is_file() and p.suffix in (".html", ".js", ".css", ".py")
    }
    assert "redis_work_queue/dashboard/templates/index.html" in needed
    assert "redis_work_queue/dashboard/static/dashboard.js" in needed
    assert needed - names == set()
    metadata = next(n for n in names if n.endswith("METADATA"))
    text = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Provides-Extra: dashboard" in text


def test_command_refuses_a_queue_name_that_clashes(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["--url", "redis://127.0.0.1:1/0", "dashboard", "jobs:item"])
    assert code == 2  # a queue name the library refuses is bad usage
    assert "reserved segment ':item'" in capsys.readouterr().err


def test_stopping_ends_the_sampler_even_when_its_cancellation_is_swallowed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation can come out of a read as a timeout, which the sampler takes for an
    outage; the dashboard still stops at once."""
    sampling = threading.Event()

    async def stubborn(self: Any, history: str | None = None) -> dict[str, Any]:
        sampling.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            raise TimeoutError("a read's timeout that swallowed the cancellation") from None
        return {}

    monkeypatch.setattr(dash_app.DashboardState, "overview", stubborn)

    def run_and_stop() -> None:
        with client_for(redis_url, queues=("q",)):
            assert sampling.wait(10)

    runner = threading.Thread(target=run_and_stop, daemon=True)
    runner.start()
    runner.join(20)
    assert not runner.is_alive(), "the dashboard did not stop"


# Bounded reads -------------------------------------------------------------------------------

BIG = 10_000_000


def net_output(db: redis.Redis) -> int:
    """What the server has written to its clients so far, in bytes (``INFO stats``)."""
    return int(db.info("stats")["total_net_output_bytes"])


def test_one_refresh_reads_a_bounded_number_of_bytes_from_redis(
    real_db: redis.Redis, redis_url: str
) -> None:
    """20 waiting items and 3 dead letters of 10 MB each: a refresh of the page (the page, the
    overview and the queue's detail) makes Redis send a few kB, not 230 MB."""
    queue = WorkQueue(KeyPrefix("big"), max_deliveries=1)
    for n in range(3):
        queue.add_item(real_db, Item(b"D" * BIG, id=f"dead{n}"))
        assert queue.release(real_db, queue.lease(real_db, 30, block=False), reason="too big")
    for n in range(20):
        queue.add_item(real_db, Item(bytes([65 + n]) * BIG, id=f"w{n:02}"))
    with client_for(redis_url, queues=("big",), sample_secs=3600) as client:
        before = net_output(real_db)
        assert client.get("/").status_code == 200
        overview = client.get("/api/overview", params={"history": "big"})
        detail = client.get("/api/queue", params={"name": "big"})
        cost = net_output(real_db) - before
        assert overview.status_code == 200 and detail.status_code == 200
        assert cost < 200_000, f"one refresh read {cost} bytes from Redis"
        body = detail.json()
        assert [w["id"] for w in body["waiting"]] == [f"w{n:02}" for n in range(20)]
        first = body["waiting"][0]["data"]
        assert first["size"] == BIG and first["truncated"] is True
        assert first["text"] == "A" * dash_data.PREVIEW_BYTES
        dead = body["dead"][0]["data"]
        assert dead["size"] == BIG and dead["truncated"] is True and len(dead["text"]) <= 256
        # The whole value, on demand only.
        whole = client.get("/api/data", params={"name": "big", "id": "w01"})
        assert whole.status_code == 200 and whole.content == b"B" * BIG
        assert whole.headers["content-type"] == "application/octet-stream"
        assert whole.headers["content-disposition"].startswith("attachment;")
        buried = client.get("/api/data", params={"name": "big", "id": "dead0", "dead": "1"})
        assert buried.status_code == 200 and buried.content == b"D" * BIG


def test_download_answers_404_for_what_is_not_there(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    queue.add_item(real_db, Item(b"x", id="here"))
    WorkQueue(KeyPrefix("hidden")).add_item(real_db, Item(b"s", id="here"))
    with client_for(redis_url, queues=("q",)) as client:
        assert client.get("/api/data", params={"name": "q", "id": "here"}).content == b"x"
        assert client.get("/api/data", params={"name": "q", "id": "nope"}).status_code == 404
        dead = client.get("/api/data", params={"name": "q", "id": "here", "dead": "1"})
        assert dead.status_code == 404
        hidden = client.get("/api/data", params={"name": "hidden", "id": "here"})
        assert hidden.status_code == 404 and hidden.content != b"s"
        assert client.get("/api/data", params={"name": "q"}).status_code == 400


# A key of another program ----------------------------------------------------------------------


def test_a_key_of_another_type_shows_one_broken_row(real_db: redis.Redis, redis_url: str) -> None:
    """``app:settings:queue`` is another program's string: its row says so, the rest is shown."""
    real_db.set("app:settings:queue", "dark mode")
    jobs = WorkQueue(KeyPrefix("app:jobs"))
    jobs.add_item(real_db, Item(b"j"))
    WorkQueue(KeyPrefix("app:zzz")).add_item(real_db, Item(b"z"))
    with client_for(redis_url, match=("app:*",)) as client:
        reply = client.get("/api/overview", params={"history": "app:settings"})
        assert reply.status_code == 200, reply.text
        rows = {row["name"]: row for row in reply.json()["queues"]}
        assert sorted(rows) == ["app:jobs", "app:settings", "app:zzz"]
        assert rows["app:jobs"]["queued"] == 1 and rows["app:zzz"]["queued"] == 1
        broken = rows["app:settings"]
        assert "app:settings:queue" in broken["broken"] and "string" in broken["broken"]
        assert broken["wrong_keys"] == [
            {"key": "app:settings:queue", "found": "string", "expected": "list"}
        ]
        detail = client.get("/api/queue", params={"name": "app:settings"})
        assert detail.status_code == 200
        assert "app:settings:queue" in detail.json()["broken"]
        assert client.get("/api/queue", params={"name": "app:jobs"}).json()["waiting"]
    assert real_db.get("app:settings:queue") == b"dark mode"


# Host checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bound", ["127.0.0.2", "127.0.0.1", "[::1]"])
def test_a_loopback_dashboard_answers_loopback_host_names_with_its_port_only(
    redis_url: str, bound: str
) -> None:
    app = create_app(DashboardSettings(url=redis_url, queues=("q",), loopback_only=True))
    with TestClient(app, base_url=f"http://{bound}:8765") as client:
        for host in (
            "127.0.0.2:8765",
            "127.1:8765",
            "localhost:8765",
            "[::1]:8765",
            "LOCALHOST:8765",
        ):
            reply = client.get("/", headers={"Host": host})
            assert reply.status_code == 200, host
            assert 'name="csrf-token"' in reply.text
        for host in (
            "evil.example:8765",
            "evil.example",
            "127.0.0.2.evil.example:8765",
            "127.0.0.2:9999",
            "localhost",
            "10.0.0.1:8765",
            "0.0.0.0:8765",
            "[::2]:8765",
            "",
        ):
            reply = client.get("/", headers={"Host": host})
            assert reply.status_code == 400, host
            assert "csrf" not in reply.text
            assert client.get("/api/overview", headers={"Host": host}).status_code == 400


@pytest.mark.parametrize("host", ["127.0.0.2", "127.1"])
def test_rwq_dashboard_on_any_loopback_address_refuses_other_host_names(
    real_db: redis.Redis, redis_url: str, tmp_path: Path, host: str
) -> None:
    import httpx  # noqa: PLC0415

    from dashboard_support import start_dashboard  # noqa: PLC0415

    WorkQueue(KeyPrefix("q")).add_item(real_db, Item(b"x"))
    dashboard = start_dashboard(redis_url, "q", "--allow-actions", workdir=tmp_path, host=host)
    try:
        ok = httpx.get(dashboard.url, timeout=10)
        assert ok.status_code == 200 and 'name="csrf-token"' in ok.text
        for name in ("evil.example", f"evil.example:{dashboard.port}", f"{host}:1"):
            rebound = httpx.get(dashboard.url, headers={"Host": name}, timeout=10)
            assert rebound.status_code == 400, name
            assert "csrf" not in rebound.text
    finally:
        dashboard.stop()


# Refresh interval and worker rows ----------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -5.0, 0.0, 0.1, 3_000_000.0])
def test_the_refresh_interval_is_bounded(bad: float) -> None:
    from redis_work_queue.errors import InvalidArgumentError  # noqa: PLC0415

    with pytest.raises(InvalidArgumentError, match="refresh_secs"):
        DashboardSettings(url="redis://127.0.0.1:1/0", refresh_secs=bad)


def test_workers_with_unreadable_numbers_are_shown_as_such(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix("q"))
    fields = {"host": "box", "pid": 7, "queues": "q", "started": 1.0, "completed": 3}
    run(real_db, heartbeat_steps(queue.keys, "box:7:good", 30_000, fields))
    run(real_db, heartbeat_steps(queue.keys, "box:8:bad", 30_000, fields))
    real_db.hset(
        queue.keys.worker("box:8:bad"),
        mapping={"pid": "inf", "completed": "1e400", "beat": "nan", "failed": "-2", "lost": "x"},
    )
    real_db.zadd(queue.keys.workers, {"box:9:forever": float("inf")})
    real_db.hset(queue.keys.worker("box:9:forever"), mapping={"host": "b", "pid": "1.5"})
    with client_for(redis_url, queues=("q",)) as client:
        reply = client.get("/api/queue", params={"name": "q"})
    assert reply.status_code == 200, reply.text

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON")

    workers = {w["id"]: w for w in json.loads(reply.text, parse_constant=refuse)["workers"]}
    assert workers["box:7:good"]["pid"] == 7 and workers["box:7:good"]["unreadable"] == []
    bad = workers["box:8:bad"]
    assert (bad["pid"], bad["beat"], bad["completed"], bad["failed"], bad["lost"]) == (
        None,
        None,
        0,
        0,
        0,
    )
    assert sorted(bad["unreadable"]) == ["beat", "completed", "failed", "lost", "pid"]
    forever = workers["box:9:forever"]
    assert forever["lapses"] is None and forever["pid"] is None
    assert {"lapses", "pid"} <= set(forever["unreadable"])


# The live feed ----------------------------------------------------------------------------------


def test_the_live_feed_of_a_queue_with_events(real_db: redis.Redis, redis_url: str) -> None:
    """``api/live`` waits (one bounded blocking read) for the queue's next events; a queue
    without events answers at once that it is not live; the job page lists the job's events,
    progress and result."""
    queue = WorkQueue(KeyPrefix("ev"), events=True, keep_results=60)
    plain = WorkQueue(KeyPrefix("plain"))
    queue.add_item(real_db, Item(b"a", id="a"))
    plain.add_item(real_db, Item(b"p", id="p"))
    with client_for(redis_url, queues=("ev", "plain")) as client:
        off = client.get("/api/live", params={"name": "plain", "since": "$"}).json()
        assert (off["ok"], off["live"], off["events"]) == (True, False, [])
        assert client.get("/api/job", params={"name": "plain", "id": "p"}).json()["events"] is None
        first = client.get("/api/live", params={"name": "ev", "since": "0"}).json()
        assert [(e["kind"], e["id"]) for e in first["events"]] == [("added", "a")]
        timer = threading.Timer(0.5, lambda: queue.lease(real_db, 30, block=False))
        timer.start()
        try:
            began = time.monotonic()
            woke = client.get("/api/live", params={"name": "ev", "since": first["since"]}).json()
        finally:
            timer.join()
        assert time.monotonic() - began < dash_data.LIVE_WAIT_SECS  # woken by the lease
        assert [(e["kind"], e["delivery"]) for e in woke["events"]] == [("leased", 1)]
        began = time.monotonic()
        idle = client.get("/api/live", params={"name": "ev", "since": woke["since"]}).json()
        assert idle["live"] is True and idle["events"] == [] and idle["since"] == woke["since"]
        assert 1.0 < time.monotonic() - began < dash_data.LIVE_WAIT_SECS + 5  # bounded
        job = client.get("/api/job", params={"name": "ev", "id": "a"}).json()
        assert [e["kind"] for e in job["events"]] == ["added", "leased"]
        assert job["progress"] is None and job["result"] is None
        assert client.get("/api/live", params={"name": "ev", "since": "soon"}).status_code == 400
        assert client.get("/api/live", params={"name": "nope"}).status_code == 404


def test_the_job_page_shows_progress_and_result(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix("pr"), keep_results=60)
    queue.add_items(real_db, [Item(b"a", id="a"), Item(b"b", id="b")])
    a, b = queue.lease(real_db, 30, block=False), queue.lease(real_db, 30, block=False)
    assert a is not None and b is not None
    assert queue.report_progress(real_db, a, {"step": 2, "of": 5})
    assert queue.complete(real_db, b, result=b"ok \xff")
    with client_for(redis_url, queues=("pr",)) as client:
        leased = client.get("/api/job", params={"name": "pr", "id": "a"}).json()
        done = client.get("/api/job", params={"name": "pr", "id": "b"}).json()
    assert (leased["state"], leased["progress"], leased["result"]) == (
        "leased",
        {"step": 2, "of": 5},
        None,
    )
    assert done["state"] == "completed" and done["result"]["size"] == 4
    assert done["result"]["kind"] == "hex"  # not UTF-8: shown as hex, as item data is


def test_a_job_page_reads_a_bounded_part_of_a_large_result(
    real_db: redis.Redis, redis_url: str
) -> None:
    """A kept result of 1 MB: one view of the job's page makes Redis send a few kB of it, and
    the page shows its first bytes, cut, with the whole result's size."""
    queue = WorkQueue(KeyPrefix("res"), keep_results=60)
    queue.add_item(real_db, Item(b"a", id="a"))
    item = queue.lease(real_db, 30, block=False)
    assert item is not None
    assert queue.complete(real_db, item, result=b"R" * 1_000_000)
    with client_for(redis_url, queues=("res",), sample_secs=3600) as client:
        before = net_output(real_db)
        job = client.get("/api/job", params={"name": "res", "id": "a"})
        cost = net_output(real_db) - before
    assert job.status_code == 200
    assert cost < 50_000, f"one job page read {cost} bytes from Redis"
    result = job.json()["result"]
    assert result["size"] == 1_000_000 and result["truncated"] is True
    assert result["text"] == "R" * dash_data.JOB_PREVIEW_BYTES
    assert queue.result(real_db, "a") == b"R" * 1_000_000  # the library's read stays whole


def test_an_action_on_a_queue_with_events_is_on_its_stream(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix("q"), events=True)
    queue.add_item(real_db, Item(b"later", id="later"), delay=600)
    plain = WorkQueue(KeyPrefix("p"))
    plain.add_item(real_db, Item(b"later", id="later"), delay=600)
    with client_for(redis_url, queues=("q", "p"), allow_actions=True) as client:
        token = csrf_of(client)
        for name in ("q", "p"):
            for kind in ("promote", "cancel"):
                body = {"queue": name, "action": kind, "id": "later"}
                reply = client.post("/api/action", json=body, headers={"X-CSRF-Token": token})
                assert reply.status_code == 200, reply.text
    assert [(e.kind, e.id) for e in queue.events(real_db)] == [
        ("added", "later"),
        ("promoted", "later"),
        ("cancelled", "later"),
    ]
    assert real_db.exists("p:events") == 0
