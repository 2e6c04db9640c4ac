"""``rwq info`` dead-letter counts and ``rwq dead-letters`` (list, requeue, purge)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from redis_work_queue import Item, KeyPrefix, WorkQueue
from redis_work_queue.cli import EXIT_FAILED, EXIT_OK, EXIT_USAGE, main

P = "cli"


def rwq(url: str, *args: str) -> int:
    """Run ``rwq --url URL ARGS`` in this process; argparse's usage errors give their code."""
    try:
        return main(["--url", url, *args])
    except SystemExit as exit_:
        return int(exit_.code or 0)


def bury(db: redis.Redis, queue: WorkQueue, ids: list[str]) -> None:
    for item_id in ids:
        queue.add_item(db, Item(f"data of {item_id}", id=item_id))
        item = queue.lease(db, 30, block=False)
        assert item is not None
        assert item.id() == item_id
        assert queue.release(db, item, reason=f"reason {item_id}")


@pytest.fixture
def queue() -> WorkQueue:
    return WorkQueue(KeyPrefix(P), max_deliveries=1)


@pytest.fixture
def setup(real_db: redis.Redis, queue: WorkQueue) -> redis.Redis:
    """Three dead letters, two queued items and one leased item."""
    bury(real_db, queue, ["d0", "d1", "d2"])
    for item_id in ("q0", "q1", "q2"):
        queue.add_item(real_db, Item(b"live", id=item_id))
    assert queue.lease(real_db, 30, block=False) is not None
    return real_db


def test_info_has_a_dead_column(
    setup: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "info", P, "other") == EXIT_OK
    lines = capsys.readouterr().out.splitlines()
    header = lines[0].split()
    assert header[0] == "queue"
    assert "dead" in header
    rows = {
        line.split()[0]: dict(zip(header[1:], line.split()[1:], strict=True)) for line in lines[1:]
    }
    assert set(rows) == {P, "other"}
    assert rows[P]["dead"] == "3"
    assert rows[P]["queued"] == "2"
    assert rows["other"]["dead"] == "0"


def test_info_json_has_dead(
    setup: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "info", "--json", P) == EXIT_OK
    info = json.loads(capsys.readouterr().out)
    assert set(info) == {P}
    assert info[P]["dead"] == 3
    assert info[P]["queued"] == 2


def test_dead_letters_lists(
    setup: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "dead-letters", P) == EXIT_OK
    out = capsys.readouterr().out
    assert "3 dead letters" in out
    for item_id in ("d0", "d1", "d2"):
        assert item_id in out
        assert f"reason {item_id}" in out
        assert f"data of {item_id}" in out
    assert "q0" not in out
    positions = [out.index(f"{i}  ") for i in ("d0", "d1", "d2")]
    assert positions == sorted(positions), "not oldest first"


def test_dead_letters_json_and_paging(
    setup: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "dead-letters", P, "--json", "--start", "1", "--count", "5") == EXIT_OK
    page = json.loads(capsys.readouterr().out)
    assert page["total"] == 3
    assert [row["id"] for row in page["dead_letters"]] == ["d1", "d2"]
    row = page["dead_letters"][0]
    assert (row["data"], row["deliveries"], row["reason"]) == ("data of d1", 1, "reason d1")
    assert isinstance(row["died_at"], float)


def test_dead_letters_of_an_empty_store(
    real_db: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "dead-letters", P, "--json") == EXIT_OK
    assert json.loads(capsys.readouterr().out) == {"total": 0, "dead_letters": []}
    assert rwq(redis_url, "dead-letters", P) == EXIT_OK
    assert "0 dead letters" in capsys.readouterr().out


@pytest.mark.parametrize("ids_first", [False, True], ids=["requeue-ids", "ids-requeue"])
def test_requeue_some(
    setup: redis.Redis,
    queue: WorkQueue,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    ids_first: bool,
) -> None:
    """``rwq dead-letters QUEUE --requeue ID...`` (and the ids before the flag)."""
    db = setup
    ids = ["d0", "d2", "nope"]
    args = [*ids, "--requeue"] if ids_first else ["--requeue", *ids]
    # "nope" is not a dead letter: the others are requeued, and the exit code says so.
    assert rwq(redis_url, "dead-letters", P, *args) == EXIT_FAILED
    captured = capsys.readouterr()
    assert "requeued 2" in captured.out
    assert "nope" in captured.err and len(captured.err.strip().splitlines()) == 1
    assert queue.dead_count(db) == 1
    assert [d.id for d in queue.dead_letters(db)] == ["d1"]
    leased = {}
    while (item := queue.lease(db, 30, block=False)) is not None:
        leased[item.id()] = item.deliveries
    assert leased == {"q1": 1, "q2": 1, "d0": 1, "d2": 1}


def test_requeue_all(
    setup: redis.Redis, queue: WorkQueue, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "dead-letters", P, "--requeue", "--all") == EXIT_OK
    assert "requeued 3" in capsys.readouterr().out
    assert queue.dead_count(setup) == 0
    assert queue.queue_len(setup) == 5


@pytest.mark.parametrize("ids_first", [False, True], ids=["purge-ids", "ids-purge"])
def test_purge_some_and_all(
    setup: redis.Redis,
    queue: WorkQueue,
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    ids_first: bool,
) -> None:
    """``rwq dead-letters QUEUE --purge ID...`` (and the ids before the flag), then --all."""
    db = setup
    args = ["d1", "--purge"] if ids_first else ["--purge", "d1"]
    assert rwq(redis_url, "dead-letters", P, *args) == EXIT_OK
    assert "purged 1" in capsys.readouterr().out
    assert [d.id for d in queue.dead_letters(db)] == ["d0", "d2"]
    assert rwq(redis_url, "dead-letters", P, "--purge", "--all") == EXIT_OK
    assert "purged 2" in capsys.readouterr().out
    assert queue.dead_count(db) == 0
    assert queue.queue_len(db) == 2  # live items untouched
    assert queue.processing(db) == 1
    assert rwq(redis_url, "info", "--json", P) == EXIT_OK
    assert json.loads(capsys.readouterr().out)[P]["dead"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--requeue"],
        ["--purge"],
        ["d0", "--requeue", "--all"],
        ["d0", "--purge", "--all"],
    ],
)
def test_requeue_or_purge_needs_ids_or_all(
    setup: redis.Redis,
    queue: WorkQueue,
    redis_url: str,
    args: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert rwq(redis_url, "dead-letters", P, *args) == EXIT_USAGE
    assert "rwq:" in capsys.readouterr().err
    assert queue.dead_count(setup) == 3


def test_requeue_and_purge_together_is_a_usage_error(
    setup: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rwq(redis_url, "dead-letters", P, "--requeue", "--purge", "--all") == EXIT_USAGE


def test_rwq_entry_point_shows_dead_counts(setup: redis.Redis, redis_url: str) -> None:
    script = Path(sys.executable).with_name("rwq")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "redis_work_queue.cli"]
    done = subprocess.run(
        [*command, "--url", redis_url, "info", "--json", P],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[P]["dead"] == 3


def test_light_clean_buries_at_the_limit_given(
    real_db: redis.Redis, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cron light clean given the workers' --max-deliveries buries an item whose last allowed
    delivery expired; without it the item is requeued (and buried at its next lease)."""
    limited = WorkQueue(KeyPrefix("cron"), max_deliveries=1)
    limited.add_item(real_db, Item(b"d", id="x"))
    assert limited.lease(real_db, 0.05, block=False) is not None
    real_db.delete("cron:lease:x")  # the lease ran out
    assert rwq(redis_url, "light-clean", "cron", "--max-deliveries", "1", "--json") == EXIT_OK
    report = json.loads(capsys.readouterr().out)["cron"]
    assert (report["requeued"], report["dead"]) == (0, 1)
    [dead] = limited.dead_letters(real_db)
    assert (dead.id, dead.deliveries, dead.reason) == ("x", 1, "lease expired")
