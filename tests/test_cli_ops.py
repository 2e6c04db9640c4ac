"""``rwq`` as a user meets it: run as a subprocess (exit codes, ``--json``, one-line errors), with
options anywhere, ``--version``, ``--timeout``, passwords from the environment, progress on a
terminal only, Ctrl-C, and Redis Cluster and Sentinel connections."""

from __future__ import annotations

import argparse
import json
import os
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
import redis

from helpers import dump_state, wait_for
from redis_work_queue import Item, KeyPrefix, RateLimit, WorkQueue, cli
from redis_work_queue.connect import cluster_node, connect, mask, target, with_credentials
from redis_work_queue.errors import InvalidArgumentError
from runner_handlers import job
from servers import MASTER_NAME, Cluster, SentinelSetup, TlsServer, start_server

P = "ops"
RWQ = [sys.executable, "-m", "redis_work_queue.cli"]
TESTS_DIR = Path(__file__).resolve().parent


def env(**extra: str) -> dict[str, str]:
    found = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "REDIS_PASSWORD")}
    found["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TESTS_DIR), os.environ.get("PYTHONPATH", "")) if p
    )
    return {**found, **extra}


def rwq(*args: str, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``rwq ARGS`` in a new process, stdin closed, output captured (not a terminal)."""
    return subprocess.run(
        [sys.executable, "-m", "redis_work_queue.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env(**extra),
        cwd=TESTS_DIR,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def fill(db: redis.Redis) -> WorkQueue:
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    queue.add_items(db, [Item(b"", id=f"i{n}") for n in range(4)])
    dead = queue.lease(db, 30, block=False)
    assert dead is not None
    queue.release(db, dead, reason="broken")
    return queue


# Options, versions and exit codes ---------------------------------------------------------------


def test_version() -> None:
    from redis_work_queue import __version__  # noqa: PLC0415

    result = rwq("--version")
    assert result.returncode == 0
    assert result.stdout.split() == ["rwq", __version__]


def test_global_options_before_or_after_the_command(real_db: redis.Redis, redis_url: str) -> None:
    queue = fill(real_db)
    expected = asdict(queue.stats(real_db))
    for args in (
        ["--url", redis_url, "--json", "info", P],
        ["info", P, "--url", redis_url, "--json"],
        ["info", "--json", P, "--url", redis_url, "-v"],
        ["--json", "info", P, "--timeout", "3", "--url", redis_url],
    ):
        result = rwq(*args)
        assert result.returncode == 0, (args, result.stderr)
        row = json.loads(result.stdout)[P]
        assert {k: row[k] for k in expected} == expected
    # REDIS_URL when no --url is given.
    result = rwq("info", P, "--json", REDIS_URL=redis_url)
    assert json.loads(result.stdout)[P]["queued"] == expected["queued"]


def test_usage_errors_exit_2_in_one_line() -> None:
    assert rwq("info", P).returncode == 2  # no URL at all
    assert "--url" in one_line(rwq("info", P))
    for bad in ("0", "-1", "nan", "soon"):
        result = rwq("--url", "redis://127.0.0.1:1/0", "info", P, "--timeout", bad)
        assert result.returncode == 2
        assert "timeout" in one_line(result)
    result = rwq("--url", "redis://127.0.0.1:1/0", "no-such-command")
    assert result.returncode == 2 and one_line(result)
    result = rwq("--url", "ftp://127.0.0.1/0", "info", P)
    assert result.returncode == 2 and "scheme" in one_line(result)
    result = rwq("--sentinel", "127.0.0.1:1", "info", P)
    assert result.returncode == 2 and "--master" in one_line(result)


def test_unreachable_exits_3_and_never_shows_the_password() -> None:
    result = rwq("--url", "redis://user:s3cret@127.0.0.1:1/0", "info", P)
    assert result.returncode == 3
    line = one_line(result)
    assert "s3cret" not in line and "***" in line
    result = rwq("--url", "redis://user:s3cret@127.0.0.1:1/0", "info", P, "--json")
    assert result.returncode == 3
    error = json.loads(result.stderr)
    assert error["exit"] == 3 and "s3cret" not in error["error"]
    assert result.stdout == ""


def test_password_from_the_environment(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    server.admin().config_set("requirepass", "pw-from-env")
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        result = rwq("--url", url, "info", P, "--json", REDIS_PASSWORD="pw-from-env")
        assert result.returncode == 0, result.stderr
        refused = rwq("--url", url, "info", P, REDIS_PASSWORD="wrong-pw")
        assert refused.returncode in (1, 3)
        assert "wrong-pw" not in refused.stderr + refused.stdout
    finally:
        server.stop()


def test_a_queue_that_does_not_exist_warns_and_exits_0(
    real_db: redis.Redis, redis_url: str
) -> None:
    for command in ("info", "light-clean", "deep-clean", "metrics", "dead-letters"):
        result = rwq("--url", redis_url, command, "never-used")
        assert result.returncode == 0, (command, result.stderr)
        assert "'never-used' has no keys" in one_line(result), command
    fill(real_db)
    result = rwq("--url", redis_url, "info", P)
    assert result.returncode == 0 and result.stderr == ""


def test_requeue_of_ids_that_are_not_dead_exits_1(real_db: redis.Redis, redis_url: str) -> None:
    fill(real_db)
    result = rwq("--url", redis_url, "dead-letters", P, "--requeue", "nonexist", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout) == {"queue": P, "requeued": 0, "not_found": ["nonexist"]}
    assert "nonexist" in json.loads(result.stderr)["error"]


def test_wrong_type_names_the_key_and_the_fix(real_db: redis.Redis, redis_url: str) -> None:
    real_db.set(f"{P}:queue", "not a list")
    for command in ("info", "light-clean", "deep-clean", "flush"):
        args = [command, P, "--yes"] if command == "flush" else [command, P]
        result = rwq("--url", redis_url, *args)
        if command == "flush":  # the flush deletes whatever the keys hold
            assert result.returncode == 0
            continue
        assert result.returncode == 1, (command, result.stderr)
        line = one_line(result)
        assert f"'{P}:queue' holds a string" in line and "rename or delete" in line, line
        assert "script" not in line.lower() and "f_" not in line


def test_traceback_only_with_verbose(real_db: redis.Redis, redis_url: str) -> None:
    real_db.set(f"{P}:queue", "not a list")
    assert "Traceback" in rwq("--url", redis_url, "info", P, "-v").stderr
    assert "Traceback" not in rwq("--url", redis_url, "info", P).stderr


@pytest.fixture
def silent_listener() -> Iterator[int]:
    """A TCP port that accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(timeout=5)
        for conn in held:
            conn.close()
        listener.close()


def test_timeout_against_a_server_that_never_answers(silent_listener: int) -> None:
    begun = time.monotonic()
    result = rwq("--url", f"redis://127.0.0.1:{silent_listener}/0", "info", P, "--timeout", "1")
    took = time.monotonic() - begun
    assert result.returncode == 3
    assert "cannot reach Redis" in one_line(result)
    assert took < 20  # the default reply timeout alone is 10 s; redis-py may retry once


def test_demo_without_its_extra_names_it() -> None:
    code = (
        "import sys; sys.modules['fakeredis'] = None\n"
        "from redis_work_queue.cli import main\n"
        "sys.exit(main(['demo', '--items', '1']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "embedded" in one_line(result)


# --json on every command -------------------------------------------------------------------------


def test_json_on_every_command(real_db: redis.Redis, redis_url: str, tmp_path: Path) -> None:
    queue = fill(real_db)
    url = ["--url", redis_url, "--json"]
    outputs: dict[str, Any] = {}
    for name, args in {
        "info": ["info", P],
        "light-clean": ["light-clean", P],
        "deep-clean": ["deep-clean", P],
        "metrics": ["metrics", P],
        "workers": ["workers", P],
        "dead-letters": ["dead-letters", P],
        "requeue": ["dead-letters", P, "--requeue", "--all"],
        "purge": ["dead-letters", P, "--purge", "--all"],
        "flush": ["flush", P, "--yes"],
    }.items():
        result = rwq(*args, *url)
        assert result.returncode == 0, (name, result.stderr)
        outputs[name] = json.loads(result.stdout)
    assert outputs["info"][P]["dead"] == 1
    assert set(outputs["light-clean"][P]) == {
        "examined",
        "requeued",
        "dropped",
        "dead",
        "forgotten",
    }
    assert outputs["metrics"][P]["dead"] == 1
    assert outputs["workers"] == {P: []}
    assert outputs["dead-letters"]["total"] == 1
    assert outputs["requeue"] == {"queue": P, "requeued": 1, "not_found": []}
    assert outputs["purge"] == {"queue": P, "purged": 0, "not_found": []}
    assert outputs["flush"][P]["keys"] > 0
    assert queue.stats(real_db).queued == 0

    # The worker prints its final counts as JSON once stopped.
    queue.add_item(real_db, Item(job(redis_url, "cli-ops"), id="w"))
    proc = subprocess.Popen(
        [*RWQ, "worker", "runner_handlers:record", P, *url, "--heartbeat-secs", "0.2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=tmp_path,
    )
    try:
        wait_for(lambda: queue.stats(real_db).queued == 0, timeout=60, what="the worker")
        wait_for(lambda: queue.stats(real_db).leased == 0, timeout=60, what="the completion")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["completed"] == 1


def test_worker_json_error_and_bad_handler(redis_url: str) -> None:
    result = rwq("--url", redis_url, "worker", "no_such_module:f", P, "--json")
    assert result.returncode == 2
    assert "no_such_module" in json.loads(result.stderr)["error"]


# Progress on a terminal, Ctrl-C ------------------------------------------------------------------


def run_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """Run ``rwq ARGS`` with stderr on a pseudo-terminal; return (code, stdout, stderr)."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "redis_work_queue.cli", *args],
            stdout=subprocess.PIPE,
            stderr=follower,
            stdin=subprocess.DEVNULL,
            env=env(),
        )
        os.close(follower)
        follower = -1
        err = b""
        while True:
            ready = select.select([leader], [], [], 0.5)[0]
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            err += chunk
        out = proc.stdout.read() if proc.stdout else b""
        proc.wait(timeout=60)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return proc.returncode, out.decode(), err.decode()


def test_progress_bar_on_a_terminal_only(real_db: redis.Redis, redis_url: str) -> None:
    queue = WorkQueue(KeyPrefix(P), max_deliveries=1)
    ids = [f"d{n}" for n in range(1200)]
    queue.add_items(real_db, [Item(b"", id=i) for i in ids])
    real_db.mset({f"{P}:item:x{n}": b"" for n in range(2500)})  # keys for the flush to count
    for _ in ids:
        item = queue.lease(real_db, 30, block=False)
        assert item is not None
        queue.release(real_db, item, reason="r")
    assert queue.dead_count(real_db) == len(ids)

    code, out, err = run_on_a_terminal("--url", redis_url, "dead-letters", P, "--requeue", "--all")
    assert code == 0, err
    assert out.strip() == f"requeued {len(ids)} dead letters of {P}"
    assert "\r" in err and f"/{len(ids)}" in err and "[" in err

    code, out, err = run_on_a_terminal("--url", redis_url, "flush", P, "--yes")
    assert code == 0, err
    assert "\r" in err and "deleted keys" in err
    assert real_db.dbsize() == 0

    # Off a terminal: no progress at all.
    queue.add_items(real_db, [Item(b"", id=i) for i in ids])
    result = rwq("--url", redis_url, "flush", P, "--yes")
    assert result.returncode == 0 and result.stderr == ""


@pytest.mark.slow
def test_ctrl_c_in_a_long_deep_clean(real_db: redis.Redis, redis_url: str) -> None:
    lost = 200_000
    for start in range(0, lost, 20_000):
        real_db.mset({f"{P}:item:lost-{n}": b"" for n in range(start, start + 20_000)})
    # Ctrl-C as at a terminal: a suite started in the background of a shell has SIGINT ignored,
    # which a child would inherit (and Python would never raise KeyboardInterrupt in it); a
    # caught signal is not inherited, so the child starts with the default.
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "redis_work_queue.cli", "--url", redis_url, "deep-clean", P],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env(),
        )
    finally:
        signal.signal(signal.SIGINT, inherited)
    try:
        # The clean is under way once it holds or requeues something.
        wait_for(
            lambda: real_db.dbsize() > lost or proc.poll() is not None,
            timeout=60,
            what="the deep clean to start",
            interval=0.05,
        )
        time.sleep(0.2)
        assert proc.poll() is None, "the deep clean ended before the test could interrupt it"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    assert err.strip() == "rwq: interrupted"
    assert out == ""


# Connections --------------------------------------------------------------------------------------


def test_targets_from_options_and_urls() -> None:
    single = target("rediss://:pw@host:6380/2", environ={})
    assert (single.kind, single.tls, single.password) == ("single", True, "pw")
    assert "pw" not in single.describe() and "pw" not in repr(single)
    from_env = target("redis://host:6379/0", environ={"REDIS_PASSWORD": "envpw"})
    assert from_env.password == "envpw"
    cluster = target("redis+cluster://node:7000", environ={})
    assert (cluster.kind, cluster.url) == ("cluster", "redis://node:7000")
    # Worker processes get the cluster's URL, password written in, and make their own client.
    secret = target("redis+cluster://node:7000", environ={"REDIS_PASSWORD": "p w"})
    assert with_credentials(secret) == "redis+cluster://:p%20w@node:7000"
    assert cluster_node(with_credentials(secret)) == "redis://:p%20w@node:7000"
    assert cluster_node("rediss+cluster://n:1/0") == "rediss://n:1/0"
    assert cluster_node("redis://n:1") is None
    assert with_credentials(from_env) == "redis://:envpw@host:6379/0"
    sentinel = target("redis+sentinel://:pw@s1:26379,s2:26380/mymaster/3", environ={})
    assert sentinel.sentinels == (("s1", 26379), ("s2", 26380))
    assert (sentinel.master, sentinel.db, sentinel.password) == ("mymaster", 3, "pw")
    flags = target(None, sentinels=["s1:1", "[::1]:2"], master="m", environ={})
    assert flags.sentinels == (("s1", 1), ("::1", 2))
    for bad in (
        {"url": None},
        {"url": None, "sentinels": ["s1"], "master": "m"},
        {"url": None, "sentinels": ["s1:1"]},
        {"url": "redis://h", "master": "m"},
        {"url": "redis+sentinel://s1:1"},
    ):
        with pytest.raises(InvalidArgumentError):
            target(environ={}, **bad)
    assert (
        mask("redis://u:secret@h:1/0 and rediss://:p@x")
        == "redis://u:***@h:1/0 and rediss://:***@x"
    )


def test_cluster_connection(cluster: Cluster) -> None:
    cluster.wait_healthy()
    cluster.flushall()
    db = cluster.client()
    name = "{ops}jobs"
    queue = WorkQueue(KeyPrefix(name), max_deliveries=1)
    queue.add_items(db, [Item(b"", id=f"c{n}") for n in range(5)])
    node = cluster.primaries()[0]
    # Without --cluster a node answers MOVED for most keys: the error says what to do.
    owner = cluster.primary_for(f"{name}:queue")
    other = next(p for p in cluster.primaries() if p.port != owner.port)
    result = rwq("--url", other.url, "info", name)
    assert result.returncode == 1
    assert "--cluster" in one_line(result)
    for args in (
        ["--cluster", "--url", node.url],
        ["--url", f"redis+cluster://127.0.0.1:{node.port}"],
    ):
        result = rwq(*args, "info", name, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[name]["queued"] == 5
        result = rwq(*args, "metrics", name)
        assert f'rwq_queued{{queue="{name}"}} 5' in result.stdout
    # A worker whose handlers run in processes, each with its own cluster client.
    notes = f"{name}:notes"
    queue.flush(db)
    # (the handlers note on the primary of the queue's slot, whose tag the notes share)
    queue.add_items(db, [Item(job(owner.url, notes), id=f"w{n}") for n in range(4)])
    proc = serving(
        *("--cluster", "--url", node.url, "worker", "runner_handlers:record", name),
        *("--processes", "--concurrency", "2", "--json"),
    )
    try:
        wait_for(lambda: queue.counts(db).completed == 4, timeout=90, what="the cluster worker")
    finally:
        _, err = stopped(proc)
    assert proc.returncode == 0, err
    assert sorted(v.decode() for v in db.lrange(f"{notes}:done", 0, -1)) == [
        f"w{n}" for n in range(4)
    ]
    result = rwq("--cluster", "--url", node.url, "deep-clean", name, "--json")
    assert result.returncode == 0, result.stderr
    result = rwq("--cluster", "--url", node.url, "flush", name, "--yes", "--json")
    assert result.returncode == 0, result.stderr
    assert queue.stats(db).queued == 0


def test_sentinel_connection(sentinel_setup: SentinelSetup) -> None:
    host, port = sentinel_setup.address
    primary = sentinel_setup.by_port(sentinel_setup.master_port())
    db = primary.client()
    queue = WorkQueue(KeyPrefix(P))
    queue.flush(db)
    queue.add_items(db, [Item(b"", id=f"s{n}") for n in range(3)])
    for args in (
        ["--sentinel", f"{host}:{port}", "--master", MASTER_NAME],
        ["--url", f"redis+sentinel://{host}:{port}/{MASTER_NAME}"],
    ):
        result = rwq(*args, "info", P, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[P]["queued"] == 3
    result = rwq("--sentinel", f"{host}:{port}", "--master", "no-such-master", "info", P)
    assert result.returncode == 3
    queue.flush(db)


# TLS ---------------------------------------------------------------------------------------------


def test_a_ca_certificate_option_goes_into_the_url_and_is_checked(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here\n")
    single = target("rediss://:pw@host:6380/2", tls_ca_cert=str(ca), environ={})
    assert single.tls_ca_cert == str(ca)
    assert single.url == f"rediss://:pw@host:6380/2?{urlencode({'ssl_ca_certs': str(ca)})}"
    in_url = target(f"rediss://host:6380/0?ssl_ca_certs={quote(str(ca))}", environ={})
    assert in_url.tls_ca_cert == str(ca)
    assert target("rediss+cluster://node:7000", tls_ca_cert=str(ca), environ={}).url == (
        f"rediss://node:7000?{urlencode({'ssl_ca_certs': str(ca)})}"
    )
    sentinel = target("rediss+sentinel://s1:1/m", tls_ca_cert=str(ca), environ={})
    assert (sentinel.tls, sentinel.tls_ca_cert) == (True, str(ca))
    pool = connect(sentinel, 1.0).connection_pool  # no connection is made yet
    assert pool.connection_kwargs["ssl_ca_certs"] == str(ca)
    assert pool.connection_class.__name__ == "SentinelManagedSSLConnection"
    for url, option, message in (
        ("redis://host:6379/0", str(ca), "rediss://"),
        (f"redis://host:6379/0?ssl_ca_certs={ca}", None, "rediss://"),
        ("redis+sentinel://s1:1/m", str(ca), "rediss://"),
        ("rediss://host:6379/0", str(tmp_path / "missing.pem"), "not a readable file"),
        (f"rediss://host:6379/0?ssl_ca_certs={ca}", str(tmp_path / "x.pem"), "not both"),
    ):
        with pytest.raises(InvalidArgumentError, match=message):
            target(url, tls_ca_cert=option, environ={})


def test_tls_with_the_ca_from_the_option_or_the_url(tls_server: TlsServer, tmp_path: Path) -> None:
    db = tls_server.proc.client()  # the plain port, to look
    queue = WorkQueue(KeyPrefix(P))
    queue.flush(db)
    queue.add_items(db, [Item(b"", id=f"t{n}") for n in range(3)])
    ca = str(tls_server.ca)
    option = ["--url", tls_server.url, "--tls-ca-cert", ca]
    for args in (option, ["--url", f"{tls_server.url}?ssl_ca_certs={quote(ca)}"]):
        result = rwq(*args, "info", P, "--json")
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)[P]["queued"] == 3

    # A light clean over TLS requeues an expired lease.
    assert queue.lease(db, 0.2, block=False) is not None
    wait_for(lambda: queue.stats(db).expired == 1, timeout=30, what="the lease to expire")
    result = rwq(*option, "light-clean", P, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[P]["requeued"] == 1

    # A worker whose handlers run in processes (each connects by the URL, CA included).
    queue.flush(db)
    queue.add_items(db, [Item(job(tls_server.proc.url, "tls"), id=f"w{n}") for n in range(3)])
    proc = subprocess.Popen(
        [*RWQ, "worker", "runner_handlers:record", P, *option, "--processes", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=tmp_path,
    )
    try:
        wait_for(lambda: db.llen("tls:done") == 3, timeout=90, what="the worker over TLS")
        wait_for(lambda: queue.stats(db).leased == 0, timeout=60, what="the completions")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert json.loads(out)["completed"] == 3


def test_tls_without_the_ca_is_refused_in_one_line(tls_server: TlsServer) -> None:
    result = rwq("--url", tls_server.url, "info", P)
    assert result.returncode == 3
    line = one_line(result)
    assert "cannot reach Redis" in line and "certificate verify failed" in line.lower()
    result = rwq("--url", tls_server.url, "info", P, "--json")
    assert result.returncode == 3 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["exit"] == 3 and "certificate verify failed" in error["error"].lower()
    # The CA option with a plain URL, or a CA file that is not there: bad usage.
    ca = str(tls_server.ca)
    result = rwq("--url", tls_server.proc.url, "--tls-ca-cert", ca, "info", P)
    assert result.returncode == 2 and "rediss://" in one_line(result)
    result = rwq("--url", tls_server.url, "--tls-ca-cert", ca + ".missing", "info", P, "--json")
    assert result.returncode == 2
    assert "not a readable file" in json.loads(result.stderr)["error"]


# The long-running commands with --json -----------------------------------------------------------


def first_line(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """The first line the process prints on stdout (failing after ``timeout`` seconds)."""
    assert proc.stdout is not None
    ready = select.select([proc.stdout], [], [], timeout)[0]
    assert ready, "nothing on stdout"
    return proc.stdout.readline()


def fetch(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()


def serving(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*RWQ, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env(),
        cwd=TESTS_DIR,
    )


def stopped(proc: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM the process; its remaining (stdout, stderr)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something else listens on."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock.getsockname()[1]


def test_metrics_serve_json_prints_where_it_serves(
    real_db: redis.Redis, redis_url: str, busy_port: int
) -> None:
    WorkQueue(KeyPrefix(P)).add_items(real_db, [Item(b"", id=f"m{n}") for n in range(2)])
    proc = serving("--url", redis_url, "metrics", P, "--serve", "0", "--json")
    try:
        started = json.loads(first_line(proc))
        assert set(started) == {"serving", "queues"} and started["queues"] == [P]
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/metrics", started["serving"])
        status, body = fetch(started["serving"])
        assert status == 200 and f'rwq_queued{{queue="{P}"}} 2.0' in body.splitlines()
    finally:
        out, err = stopped(proc)
    assert proc.returncode == 0, err
    assert (out, err) == ("", "")
    # A port taken: one JSON error on stderr, nothing on stdout, exit 1.
    result = rwq("--url", redis_url, "metrics", P, "--serve", str(busy_port), "--json")
    assert result.returncode == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["exit"] == 1 and f"cannot listen on 127.0.0.1:{busy_port}" in error["error"]


def test_dashboard_json_prints_where_it_serves(
    real_db: redis.Redis, redis_url: str, busy_port: int
) -> None:
    pytest.importorskip("uvicorn", reason="needs the dashboard extra")
    WorkQueue(KeyPrefix(P)).add_item(real_db, Item(b"", id="d"))
    proc = serving("--url", redis_url, "dashboard", P, "--port", "0", "--json")
    try:
        started = json.loads(first_line(proc))
        assert {k: v for k, v in started.items() if k != "serving"} == {
            "actions": False,
            "auth": False,
        }
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", started["serving"])
        port = int(started["serving"].rsplit(":", 1)[1].strip("/"))
        assert port != 0
        overview = started["serving"] + "api/overview"
        status, body = wait_for(lambda: fetch(overview), timeout=30, what="the dashboard")
        assert status == 200
        assert [(q["name"], q["queued"]) for q in json.loads(body)["queues"]] == [(P, 1)]
    finally:
        out, err = stopped(proc)
    assert proc.returncode == 0, err
    assert out == "" and "Traceback" not in err
    result = rwq("--url", redis_url, "dashboard", P, "--port", str(busy_port), "--json")
    assert result.returncode == 1 and result.stdout == ""
    error = json.loads(result.stderr)
    assert error["exit"] == 1 and f"cannot listen on 127.0.0.1:{busy_port}" in error["error"]


def test_demo_json(redis_url: str) -> None:
    result = rwq("--url", redis_url, "demo", "--items", "20", "--workers", "1", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is True and report["lines"]


# Every command: --help, bad options, an unreachable Redis ----------------------------------------

#: Each command with arguments it accepts (a worker's handler, a queue): every command of the
#: parser is here (checked below), so a new one is not left out of these tests.
RUNNABLE: dict[str, list[str]] = {
    "light-clean": [P],
    "deep-clean": [P],
    "info": [P],
    "metrics": [P],
    "flush": [P, "--yes"],
    "dead-letters": [P],
    "worker": ["runner_handlers:record", P],
    "workers": [P],
    "dashboard": [P],
    "demo": ["--items", "1"],
    "item": [P, "an-id"],
    "schedule": ["pause", P, "nightly"],
    "schedules": [P],
    "scheduler": [P, "--once"],
    "cancel": [P, "an-id"],
    "promote": [P, "an-id"],
    "retry": [P, "an-id"],
    "functions": ["status"],
    "rate-limit": [P],
    "events": [P],
    "groups": [P],
}


def commands() -> set[str]:
    """The subcommands the parser offers."""
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_every_command_has_help_and_refuses_a_bad_option_in_one_line() -> None:
    assert commands() == set(RUNNABLE)
    for name, args in RUNNABLE.items():
        result = rwq(name, "--help")
        assert result.returncode == 0, (name, result.stderr)
        assert result.stdout.startswith(f"usage: rwq {name}") and result.stderr == ""
        result = rwq(name, *args, "--no-such-option")
        assert result.returncode == 2, name
        assert "--no-such-option" in one_line(result) and result.stdout == ""
        result = rwq(name, *args, "--no-such-option", "--json")
        assert result.returncode == 2 and result.stdout == "", name
        error = json.loads(result.stderr)
        assert error["exit"] == 2 and "--no-such-option" in error["error"]


def test_every_command_that_connects_at_start_exits_3_when_redis_is_unreachable() -> None:
    serves = {"dashboard"}  # serves pages that say Redis is unreachable, until stopped
    for name, args in RUNNABLE.items():
        if name in serves:
            continue
        result = rwq("--url", "redis://127.0.0.1:1/0", name, *args, "--json")
        assert result.returncode == 3, (name, result.stderr)
        assert json.loads(result.stderr)["exit"] == 3 and result.stdout == "", name


# Operators' safety ------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["nan", "inf", "-inf", "-5", "0", "0.1", "3000000", "soon"])
def test_dashboard_refresh_secs_out_of_bounds_exits_2(bad: str) -> None:
    result = rwq("--url", "redis://127.0.0.1:1/0", "dashboard", P, f"--refresh-secs={bad}")
    assert result.returncode == 2
    line = one_line(result)
    assert "--refresh-secs" in line and "0.5" in line and "3600" in line
    assert result.stdout == ""


def _serve_dashboard(redis_url: str, *args: str) -> tuple[dict[str, Any], str]:
    """Start ``rwq dashboard ... --json`` on a free port; its start line and stderr once
    stopped."""
    proc = serving("--url", redis_url, "dashboard", P, "--port", "0", "--json", *args)

    def answered(url: str) -> int:
        try:
            return fetch(url)[0]
        except urllib.error.HTTPError as err:  # 401 with --auth: it answers all the same
            return err.code

    try:
        started = json.loads(first_line(proc))
        port = int(started["serving"].rsplit(":", 1)[1].strip("/"))
        status = wait_for(
            lambda: answered(f"http://127.0.0.1:{port}/static/dashboard.css"),
            timeout=30,
            what="the dashboard",
        )
        assert status in (200, 401)
    finally:
        _, err = stopped(proc)
    assert proc.returncode == 0, err
    return started, err


def test_dashboard_exposed_with_actions_and_no_auth_warns_loudly(redis_url: str) -> None:
    pytest.importorskip("uvicorn", reason="needs the dashboard extra")
    started, err = _serve_dashboard(redis_url, "--host", "0.0.0.0", "--allow-actions")
    assert started["actions"] is True and started["auth"] is False
    warning = [line for line in err.splitlines() if line.startswith("rwq: warning:")]
    assert len(warning) == 1, err
    assert "0.0.0.0" in warning[0] and "--auth" in warning[0] and "flush" in warning[0]
    assert any(" WARNING " in line and "--auth" in line for line in err.splitlines()), err
    # With auth, or bound to loopback, no such warning.
    for args in (
        ("--host", "0.0.0.0", "--allow-actions", "--auth", "ops:pw-not-shown"),
        ("--host", "127.0.0.1", "--allow-actions"),
    ):
        _, err = _serve_dashboard(redis_url, *args)
        assert "--auth" not in err and "pw-not-shown" not in err, (args, err)


def test_workers_with_unreadable_numbers_list_and_print_valid_json(
    real_db: redis.Redis, redis_url: str
) -> None:
    from redis_work_queue.ops.health import heartbeat_steps  # noqa: PLC0415
    from redis_work_queue.transport import run  # noqa: PLC0415

    queue = WorkQueue(KeyPrefix(P))
    fields = {"host": "box", "pid": 11, "queues": P, "started": 1.0, "completed": 2}
    run(real_db, heartbeat_steps(queue.keys, "box:11:ok", 30_000, fields))
    run(real_db, heartbeat_steps(queue.keys, "box:12:bad", 30_000, fields))
    real_db.hset(
        queue.keys.worker("box:12:bad"),
        mapping={"pid": "inf", "completed": "1e400", "beat": "nan", "started": "-inf"},
    )
    result = rwq("--url", redis_url, "workers", P)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    rows = {line.split()[1]: line for line in result.stdout.splitlines()[1:]}
    assert "box:11:ok" in rows and "unreadable" not in rows["box:11:ok"]
    assert "unreadable: beat, completed, pid, started" in rows["box:12:bad"]
    result = rwq("--url", redis_url, "workers", P, "--json")
    assert result.returncode == 0, result.stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in JSON")

    listed = {w["id"]: w for w in json.loads(result.stdout, parse_constant=refuse)[P]}
    bad = listed["box:12:bad"]
    assert (bad["pid"], bad["beat"], bad["started"], bad["completed"]) == (None, None, None, 0)
    assert bad["unreadable"] == ["beat", "completed", "pid", "started"]
    assert listed["box:11:ok"]["pid"] == 11 and listed["box:11:ok"]["completed"] == 2


def test_json_output_is_strict_or_a_one_line_error(real_db: redis.Redis, redis_url: str) -> None:
    """A number Redis holds that is not finite never reaches --json output as NaN/Infinity."""
    queue = WorkQueue(KeyPrefix(P))
    queue.add_item(real_db, Item(b"x"))
    real_db.zadd(queue.keys.delayed, {"odd": float("-inf")})  # due "before all time"
    result = rwq("--url", redis_url, "metrics", P, "--json")
    assert result.returncode == 1 and result.stdout == "", result.stdout
    error = json.loads(result.stderr)
    assert error["exit"] == 1 and "not finite" in error["error"]


# Fair groups ---------------------------------------------------------------------------------


def test_groups_lists_the_top_groups_and_pauses_resumes_and_caps_them(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix(P), group_concurrency=2)
    escape = "evil\x1b[2J"  # a terminal escape in a group's name is never printed raw
    for group, size in (("acme", 5), ("globex", 3), (escape, 1)):
        assert all(queue.add_items(real_db, [Item(b"d") for _ in range(size)], group=group))
    assert queue.lease(real_db, 30, block=False) is not None  # acme's turn
    url = ["--url", redis_url]

    listed = rwq("groups", P, *url, "--json")
    assert listed.returncode == 0 and listed.stderr == "", listed.stderr
    assert json.loads(listed.stdout) == {
        "queue": P,
        "groups_waiting": 3,
        "grouped": 8,
        "group_concurrency": 2,
        "groups": [
            {"group": "acme", "waiting": 4, "in_flight": 1, "paused": False},
            {"group": "globex", "waiting": 3, "in_flight": 0, "paused": False},
            {"group": escape, "waiting": 1, "in_flight": 0, "paused": False},
        ],
        "rest": 0,
    }
    top = rwq("groups", P, "--top", "1", *url)
    assert top.returncode == 0, top.stderr
    assert top.stdout.splitlines() == [
        f"{P}: 3 groups with items waiting (8 items); group concurrency 2",
        "group  waiting  in flight  state",
        "acme         4          1  active",
        "... and 2 more groups with items waiting (--top to list more)",
    ]
    # The same text on a terminal (stderr on a pseudo-terminal), with the escape quoted.
    code, out, err = run_on_a_terminal("groups", P, *url)
    assert code == 0 and err == "", err
    assert out == rwq("groups", P, *url).stdout
    assert "\x1b" not in out and repr(escape) in out

    paused = rwq("groups", "pause", P, "globex", *url)
    assert (paused.returncode, paused.stdout) == (0, f"{P} globex: paused\n")
    assert queue.stats(real_db, groups=["globex"]).groups["globex"].paused
    again = rwq("groups", "pause", P, "globex", *url, "--json")
    assert json.loads(again.stdout) == {
        "queue": P,
        "group": "globex",
        "action": "pause",
        "changed": False,
    }
    shown = {line.split()[0]: line for line in rwq("groups", P, *url).stdout.splitlines()[2:]}
    assert shown["globex"].endswith("paused") and shown["acme"].endswith("active")
    resumed = rwq("groups", "resume", P, "globex", *url)
    assert (resumed.returncode, resumed.stdout) == (0, f"{P} globex: resumed\n")
    assert rwq("groups", "resume", P, "globex", *url).stdout == f"{P} globex: not paused\n"
    assert not queue.stats(real_db, groups=["globex"]).groups["globex"].paused

    capped = rwq("groups", "concurrency", P, "5", *url, "--json")
    assert json.loads(capped.stdout) == {"queue": P, "group_concurrency": 5}
    assert queue.stats(real_db).group_concurrency == 5
    off = rwq("groups", "concurrency", P, "off", *url)
    assert (off.returncode, off.stdout) == (0, f"{P}: group concurrency none\n")
    assert queue.stats(real_db).group_concurrency is None


def test_groups_rate_sets_and_removes_a_groups_limit_and_every_groups(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix(P))
    url = ["--url", redis_url]
    own = rwq("groups", "rate", P, "acme", "5", "1", "2", *url)
    assert (own.returncode, own.stdout) == (0, f"{P} acme: 5 per 1 s, burst 2\n"), own.stderr
    assert queue.stats(real_db, groups=["acme"]).groups["acme"].rate_limit == RateLimit(5, 1.0, 2)
    every = rwq("groups", "rate-default", P, "0.5", "2", *url, "--json")
    assert json.loads(every.stdout) == {
        "queue": P,
        "group_rate_limit": {"count": 0.5, "per_secs": 2.0, "burst": 1},
    }
    shown = rwq("groups", "rate", P, "acme", "off", *url, "--json")
    assert json.loads(shown.stdout) == {
        "queue": P,
        "group": "acme",
        "rate_limit": {"count": 0.5, "per_secs": 2.0, "burst": 1},  # every group's applies
    }
    off = rwq("groups", "rate-default", P, "off", *url)
    assert (off.returncode, off.stdout) == (0, f"{P}: every group: no rate limit\n")
    assert queue.stats(real_db).group_rate_limit is None


def test_groups_refuses_bad_usage_in_one_line_and_writes_nothing(
    real_db: redis.Redis, redis_url: str
) -> None:
    queue = WorkQueue(KeyPrefix(P))
    queue.add_item(real_db, Item(b"d"), group="acme")
    before = dump_state(real_db)
    for args, words in (
        (["concurrency", P, "0"], "at least 1"),
        (["concurrency", P, "many"], "positive int or off"),
        (["concurrency", P], "usage: rwq groups concurrency QUEUE N|off"),
        (["pause", P], "usage: rwq groups pause QUEUE GROUP"),
        (["pause", P, ""], "must not be empty"),
        (["resume", P, "x" * 257], "at most 256 bytes"),
        ([P, "other"], "name one queue"),
        ([P, "--top", "0"], "--top must be 1 to 1000"),
        (["pause", P, "acme", "--shards", "2"], "sharded queue"),
        (["rate", P, "acme"], "usage: rwq groups rate QUEUE GROUP COUNT PER_SECS [BURST]|off"),
        (["rate", P, "acme", "five", "1"], "COUNT and PER_SECS are numbers"),
        (["rate", P, "acme", "0", "1"], "must be positive"),
        (["rate", P, "", "5", "1"], "must not be empty"),
        (["rate-default", P, "5"], "usage: rwq groups rate-default QUEUE COUNT PER_SECS"),
        (["rate-default", P, "5", "1", "0"], "burst must be a positive int"),
    ):
        result = rwq("groups", *args, "--url", redis_url)
        assert result.returncode == 2 and result.stdout == "", args
        assert words in one_line(result), args
    as_json = rwq("groups", "concurrency", P, "0", "--url", redis_url, "--json")
    assert as_json.returncode == 2 and "at least 1" in json.loads(as_json.stderr)["error"]
    assert dump_state(real_db) == before


def test_groups_never_prints_the_password() -> None:
    result = rwq("--url", "redis://:s3cret-pw@127.0.0.1:1/0", "groups", "pause", P, "acme")
    assert result.returncode == 3
    assert "s3cret-pw" not in result.stderr + result.stdout and "cannot reach" in one_line(result)


def test_groups_of_a_queue_without_groups(real_db: redis.Redis, redis_url: str) -> None:
    WorkQueue(KeyPrefix(P)).add_item(real_db, Item(b"plain"))
    result = rwq("groups", P, "--url", redis_url)
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout == f"{P}: 0 groups with items waiting (0 items); group concurrency none\n"
    missing = rwq("groups", "nothing-here", "--url", redis_url)
    assert missing.returncode == 0 and "has no keys" in one_line(missing)
