"""Progress of long cleans: the deep clean's callback and INFO lines, and ``rwq`` clean output."""

from __future__ import annotations

import json
import logging
import os
import pty
import select
import subprocess
import sys

import pytest
import redis

from redis_work_queue import CleanProgress, Item, KeyPrefix, WorkQueue
from redis_work_queue.cli import EXIT_OK, main
from redis_work_queue.ops import cleaning

QUEUE = KeyPrefix("pg")


def _lost_and_queued(db: redis.Redis, queue: WorkQueue, lost: int, queued: int) -> None:
    db.mset({f"pg:item:lost-{i}": b"" for i in range(lost)})
    queue.add_items(db, [Item(b"", id=f"q{i}") for i in range(queued)])


def test_progress_callback_sees_every_phase_and_the_totals(
    db: redis.Redis, queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cleaning, "PROGRESS_SECS", 0.0)  # every step
    _lost_and_queued(db, queue, 700, 300)
    seen: list[CleanProgress] = []
    report = queue.deep_clean(db, progress=seen.append)
    assert report.requeued == 700
    phases = [p.phase for p in seen]
    for phase in ("scan", "walk", "hold", "recheck", "processing", "requeue", "forget", "done"):
        assert phase in phases
    assert phases[-1] == "done"
    last = seen[-1]
    assert (last.examined, last.requeued, last.forgotten) == (1000, 700, 0)
    assert last.elapsed > 0
    assert last.rate > 0
    assert last.longest_call > 0
    examined = [p.examined for p in seen]
    assert examined == sorted(examined)


def test_progress_is_throttled(
    db: redis.Redis, queue: WorkQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between its start and its end, progress is reported once per interval at most."""
    monkeypatch.setattr(cleaning, "PROGRESS_SECS", 3600.0)
    _lost_and_queued(db, queue, 5, 5)
    seen: list[CleanProgress] = []
    queue.deep_clean(db, progress=seen.append)
    assert [p.phase for p in seen] == ["scan", "done"]


def test_progress_is_logged_at_info(
    db: redis.Redis,
    queue: WorkQueue,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(cleaning, "LOG_SECS", 0.0)
    _lost_and_queued(db, queue, 50, 50)
    with caplog.at_level(logging.INFO, logger="redis_work_queue"):
        queue.deep_clean(db)
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("examined" in line and "requeued" in line and "/s" in line for line in lines)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("requeued 50 items lost from both lists" in line for line in warnings)


def rwq(url: str, *args: str) -> int:
    try:
        return main(["--url", url, *args])
    except SystemExit as exit_:
        return int(exit_.code or 0)


@pytest.mark.parametrize("command", ["light-clean", "deep-clean"])
def test_clean_commands_print_forgotten(
    real_db: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    real_db.hset("pg:deliveries", "gone", 1)
    assert rwq(redis_url, command, "pg") == EXIT_OK
    captured = capsys.readouterr()
    assert captured.out.strip() == ("pg: examined 0, requeued 0, dropped 0, dead 0, forgotten 1")
    assert captured.err == ""  # no progress display off a terminal
    real_db.hset("pg:deliveries", "gone", 1)
    assert rwq(redis_url, command, "pg", "--json") == EXIT_OK
    totals = json.loads(capsys.readouterr().out)["pg"]
    assert totals == {"examined": 0, "requeued": 0, "dropped": 0, "dead": 0, "forgotten": 1}


def test_deep_clean_shows_progress_on_a_terminal(real_db: redis.Redis, redis_url: str) -> None:
    """On a TTY, ``rwq deep-clean`` rewrites one progress line on stderr; stdout keeps the
    totals."""
    real_db.mset({f"pg:item:{i}": b"" for i in range(20)})
    leader, follower = pty.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "redis_work_queue.cli", "--url", redis_url, "deep-clean", "pg"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
            timeout=60,
            check=False,
        )
        os.close(follower)
        follower = -1
        err = b""
        while select.select([leader], [], [], 0.5)[0]:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0, err
    assert done.stdout.decode().strip() == (
        "pg: examined 20, requeued 20, dropped 0, dead 0, forgotten 0"
    )
    text = err.decode()
    assert "\r" in text
    assert "pg: done, examined 20, requeued 20" in text
