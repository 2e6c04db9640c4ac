"""The ``rwq`` command: cleaning, inspection, metrics, workers and a demo.

Global options (``--url``, ``--cluster``, ``--sentinel``, ``--master``, ``--tls-ca-cert``,
``--timeout``, ``--json``, ``-v``) are accepted before or after the subcommand. Exit codes: 0
success; 1 an operation failed (for example a queue key of the wrong type, or named dead letters
that were not found); 2 bad usage; 3 Redis could not be reached; 130 interrupted (Ctrl-C).
Errors are one line on stderr (with ``--json``, one JSON object ``{"error": ..., "exit": ...}``),
with a traceback only under ``-v``. With ``--json``, the commands that serve (``metrics
--serve``, ``dashboard``) print one JSON line on stdout once listening: ``{"serving": URL, ...}``.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import asdict
from datetime import datetime, timezone
from types import FrameType
from typing import Any, NoReturn

import redis
from redis.exceptions import AskError, ClusterDownError, MovedError

from . import layout, metrics, server, transport
from .connect import Target, connect, mask, target, with_credentials
from .durations import BOUNDS
from .errors import (
    DISTRIBUTION,
    InvalidArgumentError,
    WorkerFailedError,
    WorkQueueError,
    WrongKeyTypeError,
)
from .extras import extra_needed
from .flow import RateLimit
from .health import live_workers
from .keyprefix import KeyPrefix, QueueKeys
from .ops import events as events_ops
from .ops import schedules as schedule_ops
from .results import CleanProgress, CleanReport
from .validation import MAX_REFRESH_SECS, MIN_REFRESH_SECS, check_refresh_secs, decode
from .workqueue import WorkQueue

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_INTERRUPTED = 130
#: The default connect and socket timeout, in seconds.
DEFAULT_TIMEOUT = 10.0

logger = logging.getLogger(__name__)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        from . import __version__  # noqa: PLC0415

        return __version__


class Failure(Exception):
    """A failure the command reports in one line, with its exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _json_out(value: Any) -> None:
    # Strict JSON: a NaN or an infinity (which json.dumps would write as NaN or Infinity, that
    # JSON parsers refuse) is a one-line error (exit 1) rather than invalid output.
    try:
        text = json.dumps(value, allow_nan=False)
    except ValueError as err:
        raise Failure(
            EXIT_FAILED, f"a number read from Redis is not finite, so not JSON ({err})"
        ) from err
    print(text)


def _warn(message: str) -> None:
    print(f"rwq: warning: {message}", file=sys.stderr)


# Progress ---------------------------------------------------------------------------------------


class Progress:
    """One line on stderr rewritten in place, on a terminal only (else nothing is shown)."""

    def __init__(self, label: str, total: int | None = None) -> None:
        self.label = label
        self.total = total
        self.shown = sys.stderr.isatty()
        self.begun = time.monotonic()
        self._last = 0.0

    def line(self, text: str, force: bool = False) -> None:
        """Show ``text`` (at most ten times a second, unless ``force``)."""
        now = time.monotonic()
        if not self.shown or (now - self._last < 0.1 and not force):
            return
        self._last = now
        print(f"\r{self.label}: {text}\x1b[K", end="", file=sys.stderr, flush=True)

    def count(self, done: int) -> None:
        """Show a count of things done (a bar when the total is known)."""
        elapsed = max(time.monotonic() - self.begun, 1e-6)
        rate = f"{done / elapsed:,.0f}/s"
        if self.total:
            width = 30
            filled = min(width, int(width * done / self.total))
            bar = "#" * filled + "-" * (width - filled)
            self.line(f"[{bar}] {done}/{self.total} ({rate})")
        else:
            self.line(f"{done:,} ({rate}, {elapsed:.1f} s)")

    def done(self) -> None:
        """End the line."""
        if self.shown and self._last:
            print(file=sys.stderr, flush=True)


def _clean_progress(progress: Progress) -> Callable[[CleanProgress], None]:
    def show(p: CleanProgress) -> None:
        progress.line(
            f"{p.phase}, examined {p.examined}, requeued {p.requeued}, dead {p.dead}, "
            f"forgotten {p.forgotten} ({p.rate:,.0f}/s, {p.elapsed:.1f} s)",
            force=p.phase == "done",
        )

    return show


# Checks shared by commands ----------------------------------------------------------------------

#: The Redis type of each fixed key of a queue, by QueueKeys attribute (from the layout table).
KEY_TYPES = layout.KEY_TYPES
_WRONGTYPE = re.compile(r"WRONGTYPE (?P<key>.+?) holds an? (?P<found>\w+), not an? (?P<kind>\w+)")


def _queue(args: argparse.Namespace, name: str, db: Any = None) -> WorkQueue:
    """The queue ``name`` as the options make it.

    Given ``db`` (a command that changes items), with events on when ``P:events`` holds a
    stream, so that its changes are on the stream too.
    """
    shards = getattr(args, "shards", 1) or 1
    before = tuple(getattr(args, "shards_before", None) or ())
    cap = None
    if db is not None and shards == 1 and not before:
        stream = QueueKeys(KeyPrefix(name)).events
        kind = db.type(stream)
        cap = events_ops.found_cap(kind, db.xlen(stream) if decode(kind) == "stream" else 0)
    return WorkQueue(
        KeyPrefix(name),
        getattr(args, "max_deliveries", None),
        shards=shards,
        shards_before=before,
        events=cap is not None,
        events_maxlen=cap or events_ops.EVENTS_MAXLEN,
    )


def wrong_keys(db: Any, name: str) -> list[tuple[str, str, str]]:
    """The fixed keys of queue ``name`` that hold another type than the layout's.

    Returns:
        (key, type found, type expected) for each.
    """
    keys = QueueKeys(KeyPrefix(name))
    found = []
    for attr, kind in KEY_TYPES.items():
        key = getattr(keys, attr)
        held = db.type(key)
        held = held.decode() if isinstance(held, bytes) else str(held)
        if held not in ("none", kind):
            found.append((key, held, kind))
    return found


def _wrong_type_message(db: Any, err: BaseException, queues: Sequence[str]) -> str:
    match = _WRONGTYPE.search(str(err))
    if match is not None:
        key, held, kind = match["key"], match["found"], match["kind"]
    else:
        bad: list[tuple[str, str, str]] = []
        try:
            for name in queues:
                bad += wrong_keys(db, name)
        except redis.RedisError:
            bad = []
        if not bad:
            return f"a key of {', '.join(queues)} holds the wrong Redis type; nothing was changed"
        key, held, kind = bad[0]
    return (
        f"key {key!r} holds a {held}, where the queue keeps a {kind}; nothing was changed. "
        f"Another program uses that name: rename or delete that key (redis-cli TYPE / RENAME), "
        f"or use another queue name"
    )


def _exists(db: Any, name: str, args: argparse.Namespace) -> bool:
    if db.exists(*QueueKeys(KeyPrefix(name)).fixed()):
        return True
    if "{" in name or "}" in name:
        return False
    # A sharded queue: its home shard's keys (shard 0 of the count given by --shards).
    return bool(db.exists(*_queue(args, name).ops.keys.fixed()))


def _warn_missing(db: Any, names: Sequence[str], args: argparse.Namespace) -> None:
    for name in names:
        if not _exists(db, name, args):
            _warn(
                f"queue {name!r} has no keys (never used, or flushed): check its name, and "
                "--shards for a sharded queue"
            )


# Commands ---------------------------------------------------------------------------------------


def _clean(kind: str) -> Callable[[argparse.Namespace, Any], int]:
    def run(args: argparse.Namespace, db: Any) -> int:
        reports: dict[str, dict[str, int]] = {}
        for name in args.queues:
            queue = _queue(args, name, db)
            report: CleanReport
            if kind == "deep_clean":
                progress = Progress(name)
                try:
                    report = queue.deep_clean(db, _clean_progress(progress))
                finally:
                    progress.done()
            else:
                report = queue.light_clean(db)
            reports[name] = asdict(report)
            if not any(reports[name].values()):
                _warn_missing(db, [name], args)
            if not args.json:
                print(
                    f"{name}: examined {report.examined}, requeued {report.requeued}, "
                    f"dropped {report.dropped}, dead {report.dead}, "
                    f"forgotten {report.forgotten}"
                )
        if args.json:
            _json_out(reports)
        return EXIT_OK

    return run


STAT_COLUMNS = ("queued", "leased", "expired", "delayed", "dead")


def _info(args: argparse.Namespace, db: Any) -> int:
    transport.sender_of(db).checked = True  # the policy is reported below, not logged first
    rows: dict[str, dict[str, Any]] = {
        name: asdict(_queue(args, name).stats(db)) for name in args.queues
    }
    _warn_missing(db, [name for name, row in rows.items() if not any(row.values())], args)
    policy = server.eviction_policy(db)
    warning = server.eviction_message(policy) if policy and server.may_evict(policy) else None
    if args.json:
        for row in rows.values():
            row["maxmemory_policy"] = policy
            row["eviction_warning"] = warning
        _json_out(rows)
        return EXIT_OK
    width = max(len("queue"), *(len(name) for name in rows))
    print(f"{'queue':<{width}}" + "".join(f"  {c:>9}" for c in STAT_COLUMNS))
    for name, row in rows.items():
        print(f"{name:<{width}}" + "".join(f"  {row[c]:>9}" for c in STAT_COLUMNS))
    if warning:
        _warn(warning)
    return EXIT_OK


def _metrics_json(found: Sequence[metrics.QueueMetrics]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in found:
        out[m.queue] = {
            **asdict(m.stats),
            "delayed_due": m.delayed_due,
            "work": m.work,
            "oldest_waiting_seconds": m.oldest_waiting,
            "delayed_overdue_seconds": m.delayed_overdue,
            "workers": m.workers,
            "counts": asdict(m.counts),
            "durations": {
                outcome: {
                    "buckets": dict(zip(BOUNDS, counts, strict=True)),
                    "sum": total,
                }
                for outcome, (counts, total) in m.durations.items()
            },
        }
    return out


def _metrics(args: argparse.Namespace, db: Any) -> int:
    queues = [_queue(args, name) for name in args.queues]
    if args.serve is None:
        found = metrics.read(db, queues)
        _warn_missing(db, [m.queue for m in found if not m.work and not m.stats.dead], args)
        if args.json:
            _json_out(_metrics_json(found))
        else:
            sys.stdout.write(metrics.render_families(metrics.families(found)))
        return EXIT_OK
    try:
        with extra_needed("rwq metrics --serve", "prometheus"):
            httpd, _ = metrics.serve(db, queues, args.serve, args.bind)
    except ImportError as err:  # a MissingExtraError, naming the extra
        raise Failure(EXIT_USAGE, str(err)) from err
    except OSError as err:
        raise Failure(EXIT_FAILED, f"cannot listen on {args.bind}:{args.serve}: {err}") from err
    url = f"http://{args.bind}:{httpd.server_port}/metrics"
    if args.json:
        _json_out({"serving": url, "queues": list(args.queues)})
    else:
        print(f"rwq metrics on {url} ({len(queues)} queues)")
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, _terminate)
    while True:
        time.sleep(3600)


def _terminate(signum: int, frame: object) -> NoReturn:
    raise SystemExit(EXIT_OK)


def _flush(args: argparse.Namespace, db: Any) -> int:
    if not args.yes:
        names = ", ".join(args.queues)
        if not sys.stdin.isatty():
            raise Failure(EXIT_USAGE, f"refusing to flush {names} without --yes (no terminal)")
        try:
            answer = input(
                f"Delete every key of {names}, including queued and leased items? [y/N] "
            )
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            raise Failure(EXIT_FAILED, "nothing deleted")
    _warn_missing(db, args.queues, args)
    reports = {}
    for name in args.queues:
        progress = Progress(f"{name}: deleted keys")
        try:
            report = _queue(args, name).flush(db, progress.count)
        finally:
            progress.done()
        reports[name] = asdict(report)
        if not args.json:
            print(f"{name}: deleted {report.keys} keys ({report.items} items)")
    if args.json:
        _json_out(reports)
    return EXIT_OK


#: Bytes of each dead letter's data ``rwq dead-letters`` reads to show its first characters.
LISTING_PREVIEW_BYTES = 1024


def plural(count: int, noun: str) -> str:
    """``"1 dead letter"``, ``"2 dead letters"``: a count and its noun, in the right number."""
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _preview(data: bytes, width: int = 40) -> str:
    text = data.decode("utf-8", "backslashreplace")
    return text if len(text) <= width else text[: width - 3] + "..."


def _dead_action(args: argparse.Namespace, db: Any, queue: WorkQueue) -> int:
    named = args.ids + (args.requeue if args.requeue is not None else args.purge)
    if bool(named) == args.all:
        raise Failure(EXIT_USAGE, "name the dead letters' ids, or pass --all (not both)")
    ids = None if args.all else list(dict.fromkeys(named))
    _warn_missing(db, [args.queue], args)
    missing: list[str] = []
    if ids is not None:
        found = db.zmscore(queue.keys.dead, ids)
        missing = [i for i, score in zip(ids, found, strict=True) if score is None]
    if args.requeue is not None:
        verb = "requeued"
        progress = Progress(f"{args.queue}: requeued", len(ids) if ids else queue.dead_count(db))
        try:
            done = queue.requeue_dead(db, ids, progress.count)
        finally:
            progress.done()
    else:
        verb = "purged"
        done = queue.purge_dead(db, ids)
    if args.json:
        _json_out({"queue": args.queue, verb: done, "not_found": missing})
    else:
        print(f"{verb} {plural(done, 'dead letter')} of {args.queue}")
    if missing:
        shown = ", ".join(missing[:10]) + (" ..." if len(missing) > 10 else "")
        raise Failure(
            EXIT_FAILED,
            f"{len(missing)} of the ids named are not dead letters of {args.queue}: {shown} "
            f"(list them with: rwq dead-letters {args.queue})",
        )
    return EXIT_OK


def _dead_letters(args: argparse.Namespace, db: Any) -> int:
    queue = _queue(args, args.queue, db)
    if args.requeue is not None or args.purge is not None:
        return _dead_action(args, db, queue)
    # The listing shows the first characters of each: a preview is read, not the whole data.
    preview = None if args.json else LISTING_PREVIEW_BYTES
    page = queue.dead_letters(db, args.start, args.count, preview_bytes=preview)
    total = queue.dead_count(db)
    if not total:
        _warn_missing(db, [args.queue], args)
    if args.json:
        rows = [
            {
                "id": d.id,
                "data": d.data.decode("utf-8", "backslashreplace"),
                "size": d.size,
                "deliveries": d.deliveries,
                "reason": d.reason,
                "died_at": d.died_at,
            }
            for d in page
        ]
        _json_out({"total": total, "dead_letters": rows})
        return EXIT_OK
    print(f"{plural(total, 'dead letter')} in {args.queue}")
    for d in page:
        died = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.died_at))
        print(f"{d.id}  deliveries={d.deliveries}  died={died}  reason={d.reason!r}")
        print(f"    {_preview(d.data, 72)}")
    return EXIT_OK


def _worker(args: argparse.Namespace, db: Any) -> int:
    from .worker import Worker, load_handler, socket_timeout_for  # noqa: PLC0415

    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    where: Target = args.target
    try:
        handler = load_handler(args.handler)
        queues = [_queue(args, name, db) for name in args.queues]
        source: Any = where.url
        if where.kind == "cluster" and args.processes:
            # Each worker process makes its own cluster client from the URL.
            source = with_credentials(where)
        elif where.kind != "single":
            if args.processes:
                raise InvalidArgumentError(
                    "--processes connects by URL: use threads (--concurrency) with --sentinel"
                )
            source = connect(
                where,
                max(args.timeout, socket_timeout_for(1.0)),
                max_connections=args.concurrency + 4,
            )
        elif where.url is not None:
            source = with_credentials(where)  # the password may come from the environment
        worker = Worker(
            source,
            queues,
            handler,
            lease_secs=args.lease_secs,
            concurrency=args.concurrency,
            processes=args.processes,
            backoff=args.backoff,
            max_backoff=args.max_backoff,
            timeout=args.job_timeout,
            clean_secs=None if args.no_clean else args.clean_secs,
            heartbeat_secs=args.heartbeat_secs,
            health_file=args.health_file,
            schedule_secs=None if args.no_schedules else args.schedule_secs,
            batch=not args.no_batch,
        )
    except InvalidArgumentError as err:
        raise Failure(EXIT_USAGE, str(err)) from err
    db.ping()
    try:
        stats = worker.run()
    except WorkerFailedError as err:
        raise Failure(EXIT_FAILED, str(err)) from err
    if args.json:
        _json_out(asdict(stats))
    else:
        print(
            f"completed {stats.completed}, failed {stats.failed}, lost {stats.lost}, "
            f"timed out {stats.timed_out}"
        )
    return EXIT_OK


def _workers(args: argparse.Namespace, db: Any) -> int:
    found = {name: live_workers(db, _queue(args, name)) for name in args.queues}
    _warn_missing(db, [name for name, rows in found.items() if not rows], args)
    if args.json:
        _json_out({name: [w.as_dict() for w in rows] for name, rows in found.items()})
        return EXIT_OK
    header = ["queue", "worker", "pid", "beat", "completed", "failed", "lost"]
    # A registration holding numbers that cannot be read (see WorkerInfo) says which: "?" in
    # their cells and a note naming them.
    noted = any(w.unreadable for rows in found.values() for w in rows)
    if noted:
        header.append("note")
    table = [header]
    now = time.time()
    for name, rows in found.items():
        for w in rows:
            beat = "?" if w.beat is None else f"{max(now - w.beat, 0):.1f}s ago"
            pid = "?" if w.pid is None else str(w.pid)
            row = [name, w.id, pid, beat, str(w.completed), str(w.failed), str(w.lost)]
            if noted:
                row.append(f"unreadable: {', '.join(w.unreadable)}" if w.unreadable else "")
            table.append(row)
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print(line.rstrip())
    if len(table) == 1:
        print("no live workers")
    return EXIT_OK


DASHBOARD_AUTH_ENV = "RWQ_DASHBOARD_AUTH"


def _dashboard(args: argparse.Namespace, db: Any) -> int:
    where: Target = args.target
    if where.kind != "single":
        raise Failure(EXIT_USAGE, "the dashboard connects by --url only (no cluster or sentinel)")
    try:
        from .dashboard import DashboardSettings, serve  # noqa: PLC0415 (optional extra)
    except ImportError as err:  # a MissingExtraError, naming the extra
        raise Failure(EXIT_USAGE, str(err)) from err
    auth_text = args.auth if args.auth is not None else os.environ.get(DASHBOARD_AUTH_ENV)
    auth: tuple[str, str] | None = None
    if auth_text:
        user, sep, password = auth_text.partition(":")
        if not sep or not user or not password:
            raise Failure(EXIT_USAGE, "--auth (or $RWQ_DASHBOARD_AUTH) must be USER:PASSWORD")
        auth = (user, password)
    from .dashboard.app import is_loopback  # noqa: PLC0415
    from .keyprefix import check_queue_name  # noqa: PLC0415

    for name in args.queues:
        check_queue_name(name)
    match = tuple(args.match) if args.match else (() if args.queues else ("*",))
    listener = _listen(args.host, args.port)  # bound before the URL is shown (port 0: any)
    bound, port = listener.getsockname()[:2]
    # Bound to a loopback address (whatever the spelling of --host: 127.0.0.2, 127.1, a name),
    # the dashboard answers only requests naming a loopback address or localhost, with its port.
    loopback = is_loopback(bound)
    settings = DashboardSettings(
        url=where.url or "",
        queues=tuple(args.queues),
        match=match,
        allow_actions=args.allow_actions,
        auth=auth,
        refresh_secs=args.refresh_secs,
        loopback_only=loopback,
    )
    mode = "actions enabled" if args.allow_actions else "read-only"
    shown = args.host.strip("[]")
    url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/"
    if not loopback and auth is None:
        _exposed(args.host, port, args.allow_actions)
    if args.json:
        _json_out({"serving": url, "actions": args.allow_actions, "auth": auth is not None})
    else:
        print(f"rwq dashboard on {url} ({mode}, basic auth {'on' if auth else 'off'})", flush=True)
    sys.stdout.flush()
    # The server restores this handler once stopped and raises the signal again: exit 0.
    signal.signal(signal.SIGTERM, _terminate)
    serve(settings, host=args.host, port=port, sock=listener)
    return EXIT_OK


def _exposed(host: str, port: int, actions: bool) -> None:
    """Warn that the dashboard serves beyond this machine without authentication.

    Loudly: a WARNING log line and a line on stderr.
    """
    what = (
        "read the queues and requeue, purge, clean and flush them"
        if actions
        else "read the queues and their items' data"
    )
    message = (
        f"the dashboard listens on {host}:{port} (not a loopback address) without "
        f"authentication: anyone who can reach it can {what}. Pass --auth USER:PASSWORD (or set "
        f"${DASHBOARD_AUTH_ENV}), or bind 127.0.0.1"
    )
    logger.warning("%s", message)
    _warn(message)


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` (an IPv6 host with or without brackets)."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    try:
        return socket.create_server((bare, port), family=family)
    except OSError as err:
        raise Failure(EXIT_FAILED, f"cannot listen on {host}:{port}: {err}") from err


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo  # noqa: PLC0415

    if args.cluster or args.sentinel:
        raise Failure(EXIT_USAGE, "the demo connects by --url only (or starts its own server)")
    lines: list[str] = []
    out: Callable[[str], None] = lines.append if args.json else print
    try:
        code = run_demo(url=args.url, items=args.items, workers=args.workers, out=out)
    except ImportError as err:  # a MissingExtraError: the embedded server's extra is missing
        raise Failure(EXIT_USAGE, str(err)) from err
    if args.json:
        _json_out({"ok": code == 0, "lines": lines})
    return code


# The parser -------------------------------------------------------------------------------------


def _clean_secs(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _refresh_secs(text: str) -> float:
    try:
        return check_refresh_secs(text, "the refresh interval")
    except InvalidArgumentError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line (JSON with ``--json``), exit 2."""

    def error(self, message: str) -> NoReturn:
        _report(EXIT_USAGE, f"{message} (see: {self.prog} --help)", "--json" in sys.argv[1:])
        raise SystemExit(EXIT_USAGE)


def _global_options(parser: argparse.ArgumentParser, top: bool) -> None:
    """The options every command takes, before or after its name.

    On subcommands their default is SUPPRESS, so a value given before the subcommand stands.
    """

    def default(value: Any) -> Any:
        return value if top else argparse.SUPPRESS

    group = parser.add_argument_group("connection and output (anywhere on the line)")
    group.add_argument(
        "--url",
        default=default(os.environ.get("REDIS_URL")),
        help="Redis URL: redis://, rediss:// (TLS), unix://, redis+cluster://, "
        "redis+sentinel://HOST:PORT[,HOST:PORT]/MASTER[/DB] (default: $REDIS_URL; a missing "
        "password comes from $REDIS_PASSWORD)",
    )
    group.add_argument(
        "--cluster", action="store_true", default=default(False), help="the URL is a cluster node"
    )
    group.add_argument(
        "--sentinel",
        action="append",
        metavar="HOST:PORT",
        default=default(None),
        help="reach the primary through this sentinel (repeatable; needs --master)",
    )
    group.add_argument(
        "--master", default=default(None), metavar="NAME", help="the Sentinel primary's name"
    )
    group.add_argument(
        "--tls-ca-cert",
        default=default(None),
        metavar="PATH",
        help="verify a TLS (rediss://) server with this CA certificate (PEM) instead of the "
        "system's; also the URL query ssl_ca_certs=PATH",
    )
    group.add_argument(
        "--timeout",
        type=_seconds,
        default=default(DEFAULT_TIMEOUT),
        metavar="SECS",
        help=f"connect and reply timeout in seconds (default {DEFAULT_TIMEOUT:g})",
    )
    group.add_argument(
        "--shards",
        type=int,
        default=default(1),
        metavar="N",
        help="the queues are sharded over N shards (as the workers' shards=N; see sharding.md)",
    )
    group.add_argument(
        "--shards-before",
        type=int,
        action="append",
        default=default(None),
        metavar="N",
        help="an earlier shard count whose shards may still hold items (repeatable)",
    )
    group.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print one JSON document on stdout (errors as JSON on stderr)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default(False),
        help="log what is done; show tracebacks",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rwq``."""
    parser = _Parser(
        prog="rwq",
        description="Clean, inspect, measure and work redis-work-queue queues.",
        epilog="Exit codes: 0 ok, 1 failed, 2 bad usage, 3 Redis unreachable, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=f"rwq {_version()}")
    _global_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, **kwargs: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, **kwargs)
        _global_options(p, top=False)
        return p

    for name, kind, text in (
        ("light-clean", "light_clean", "requeue items whose lease expired (run every lease time)"),
        ("deep-clean", "deep_clean", "also recover items lost from both lists (run rarely)"),
    ):
        p = command(name, help=text, description=text)
        p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
        p.add_argument(
            "--max-deliveries",
            type=int,
            default=None,
            help="bury items whose last allowed delivery expired (as the workers' setting)",
        )
        p.set_defaults(func=_clean(kind))

    p = command(
        "info",
        help="queued, leased, expired-awaiting-clean, delayed and dead counts",
        description="Print each queue's counts: queued (waiting), leased, expired (leases run "
        "out, awaiting a light clean), delayed (due later) and dead (dead letters), and warn "
        "when the server may evict keys or a queue has no keys.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.set_defaults(func=_info)

    p = command(
        "metrics",
        help="the queues' metrics in the Prometheus text format, or served over HTTP",
        description="Print the queues' metrics (gauges, counters, the job duration histogram) "
        "in the Prometheus text format, or with --serve answer scrapes over HTTP, reading Redis "
        "at each scrape (rwq_up 0 while Redis does not answer).",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--serve", type=_port, metavar="PORT", help="serve /metrics on PORT")
    p.add_argument("--bind", default="127.0.0.1", help="address to serve on (default 127.0.0.1)")
    p.set_defaults(func=_metrics)

    p = command(
        "flush",
        help="delete every key of queues (asks first)",
        description="Delete every key of the queues: items in every state, leases, dead letters "
        "and bookkeeping. Other queues are never touched, whatever characters their names hold.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_flush)

    p = command(
        "dead-letters",
        help="list, requeue or purge a queue's dead letters",
        description="List a queue's dead letters (oldest first), or requeue or purge some or all "
        "of them. Naming ids that are not dead letters exits 1 (the others are still done).",
    )
    p.add_argument("queue", metavar="QUEUE", help="queue key prefix")
    p.add_argument("ids", nargs="*", metavar="ID", help="dead letters to requeue or purge")
    action = p.add_mutually_exclusive_group()
    action.add_argument(
        "--requeue", nargs="*", metavar="ID", help="put these (or, with --all, all) back"
    )
    action.add_argument("--purge", nargs="*", metavar="ID", help="delete these for good")
    p.add_argument("--all", action="store_true", help="requeue or purge every dead letter")
    p.add_argument("--start", type=int, default=0, help="first to list (default 0)")
    p.add_argument("--count", type=int, default=20, help="how many to list (default 20)")
    p.set_defaults(func=_dead_letters)

    p = command(
        "worker",
        help="run a handler over queues",
        description="Lease items from the queues (highest priority first) and call HANDLER on "
        "each: a return completes the item, an exception releases it for a retry with "
        "exponential backoff. Redis outages are waited out. SIGTERM or Ctrl-C stops cleanly "
        "(exit 0); a second one releases held items. Exit 1 after a fatal error, 2 on bad "
        "usage, 3 when Redis cannot be reached at start.",
    )
    p.add_argument("handler", metavar="HANDLER", help="module:function, called with each Item")
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefixes")
    p.add_argument("--concurrency", type=int, default=1, help="handlers at once (default 1)")
    p.add_argument("--processes", action="store_true", help="run handlers in processes")
    p.add_argument("--lease-secs", type=float, default=30.0, help="lease time (default 30)")
    p.add_argument("--max-deliveries", type=int, default=None, help="then dead-letter")
    p.add_argument("--backoff", type=float, default=1.0, help="first retry delay (default 1)")
    p.add_argument("--max-backoff", type=float, default=300.0, help="longest retry delay")
    p.add_argument(
        "--job-timeout",
        type=float,
        default=None,
        metavar="SECS",
        help="give up a job running longer than this: it fails with reason 'timeout'",
    )
    p.add_argument(
        "--health-file",
        default=None,
        metavar="PATH",
        help="touch PATH at each heartbeat while healthy (for a liveness probe)",
    )
    p.add_argument(
        "--heartbeat-secs", type=float, default=5.0, help="heartbeat interval (default 5)"
    )
    p.add_argument(
        "--clean-secs",
        type=_clean_secs,
        default="auto",
        help="light-clean the queues at most this often across all workers (default: the "
        "lease time)",
    )
    p.add_argument("--no-clean", action="store_true", help="leave the light clean to cron")
    p.add_argument(
        "--schedule-secs",
        type=_seconds,
        default=1.0,
        help="add the queues' due scheduled items at most this often across all workers "
        "(default 1)",
    )
    p.add_argument(
        "--no-schedules",
        action="store_true",
        help="leave the schedules to rwq scheduler",
    )
    p.add_argument(
        "--no-batch",
        action="store_true",
        help="each thread leases and completes its own items, one per call (default: they "
        "lease together and complete together, and a fast handler's items run several per "
        "call in the thread that leased them)",
    )
    p.set_defaults(func=_worker)

    p = command(
        "workers",
        help="list the live workers of queues",
        description="List the workers whose heartbeat has not lapsed, per queue.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.set_defaults(func=_workers)

    p = command(
        "dashboard",
        help="serve a web page to watch queues (and, with --allow-actions, act on them)",
        description="Serve a web page showing queues' counts and charts, their waiting, leased, "
        "delayed and dead items by tab and page, a page per job, and the live workers, "
        "refreshed every few seconds. Read-only unless --allow-actions. Needs the dashboard "
        "extra.",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="queue key prefixes to show")
    p.add_argument(
        "--match",
        action="append",
        metavar="PATTERN",
        help="also show queues whose names match this glob, found by SCAN (repeatable; "
        "default '*' when no QUEUE is named)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=_port, default=8765, help="port (default 8765; 0: any free)")
    p.add_argument(
        "--allow-actions",
        action="store_true",
        help="enable requeue/purge of dead letters, light/deep clean and flush",
    )
    p.add_argument(
        "--auth",
        default=None,
        metavar="USER:PASSWORD",
        help="require HTTP basic auth (default: $RWQ_DASHBOARD_AUTH, if set)",
    )
    p.add_argument(
        "--refresh-secs",
        type=_refresh_secs,
        default=2.0,
        metavar="SECS",
        help=f"page refresh interval, {MIN_REFRESH_SECS:g} to {MAX_REFRESH_SECS:g} (default 2)",
    )
    p.set_defaults(func=_dashboard)

    _job_commands(command)
    _events_command(command)

    p = command(
        "functions",
        help="load the function library ahead (install), or show which servers have it",
        description="Redis 7 and later: 'install' loads this release's function library "
        "(FUNCTION LOAD) on the server, or every primary of a cluster; 'status' lists the "
        "package's libraries on each and exits 1 when one lacks this release's. Clients load "
        "it themselves when they may (FUNCTION LOAD granted); install serves users that may "
        "only call it (FCALL).",
    )
    p.add_argument("action", choices=("install", "status"), help="install or status")
    p.set_defaults(func=_functions)

    p = command(
        "demo",
        help="run a producer, worker processes and a cleaner",
        description="Run a producer, worker processes (one of which crashes) and a cleaner on "
        "one queue. Without --url or REDIS_URL it starts an embedded server (fakeredis).",
    )
    p.add_argument("--items", type=int, default=200, help="items to produce (default 200)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.set_defaults(func=None)
    _schedule_commands(command)

    p = command(
        "rate-limit",
        help="show, set or remove a queue's rate limit",
        description="Show a queue's rate limit; with COUNT and PER_SECS set it for every worker "
        "(at most COUNT items leased per PER_SECS seconds, --burst at once), from their next "
        "lease; with --off remove it.",
    )
    p.add_argument("queues", nargs=1, metavar="QUEUE", help="queue key prefix")
    p.add_argument("count", nargs="?", type=float, metavar="COUNT", help="items per window")
    p.add_argument("per_secs", nargs="?", type=float, metavar="PER_SECS", help="the window")
    p.add_argument("--burst", type=int, default=1, help="most items at once (default 1)")
    p.add_argument("--off", action="store_true", help="remove the limit")
    p.set_defaults(func=_rate_limit)
    _groups_command(command)
    return parser


# Job control by id ------------------------------------------------------------------------------


def _item(args: argparse.Namespace, db: Any) -> int:
    found = _queue(args, args.queue).state(db, args.id)
    row = asdict(found)
    if found.result is not None:  # bytes: as text when it is UTF-8, else in base64
        try:
            row["result"] = found.result.decode("utf-8")
        except UnicodeDecodeError:
            row["result"] = None
            row["result_base64"] = base64.b64encode(found.result).decode("ascii")
    if args.json:
        _json_out(row)
    else:
        for name, value in row.items():
            if value is not None and value is not False:
                print(f"{name:<11} {value}")
    return EXIT_OK


#: The commands that act on items by id: what each does, and the word for an id it acted on.
_ACTIONS = {
    "cancel": (
        "cancel items: remove waiting ones, stop leased ones (never delivered again)",
        "cancelled",
    ),
    "promote": ("make delayed items due now (next to be leased)", "promoted"),
    "retry": ("put dead letters back on the queue, their delivery counts reset", "retried"),
}


def _act(args: argparse.Namespace, db: Any) -> int:
    queue = _queue(args, args.queue, db)
    method = getattr(queue, args.command)
    done: list[str] = []
    missed: list[str] = []
    for item_id in args.ids:
        (done if method(db, item_id) else missed).append(item_id)
    word = _ACTIONS[args.command][1]
    if args.json:
        _json_out({"queue": args.queue, word: done, "not_found": missed})
    else:
        for item_id in done:
            print(f"{word} {item_id}")
        for item_id in missed:
            print(f"not {word} (no such item in that state) {item_id}")
    return EXIT_FAILED if missed else EXIT_OK


def _job_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add the commands that act on items by id."""
    for name, (text, _) in _ACTIONS.items():
        p = command(
            name,
            help=text,
            description=f"{text[0].upper()}{text[1:]}, by id. An id that was not acted on (no "
            "such item in a state the command applies to) exits 1; the others are still done.",
        )
        p.add_argument("queue", metavar="QUEUE", help="queue key prefix")
        p.add_argument("ids", nargs="+", metavar="ID", help="the items' ids")
        p.set_defaults(func=_act)
    p = command(
        "item",
        help="where one item is: its state, deliveries, lease, due time and last failure",
        description="Show one item's state (queued, delayed, leased, expired, dead, completed "
        "or gone) in one read.",
    )
    p.add_argument("queue", metavar="QUEUE", help="queue key prefix")
    p.add_argument("id", metavar="ID", help="the item's id")
    p.set_defaults(func=_item)


#: How long one read of ``rwq events --follow`` waits for a new event, in seconds.
_FOLLOW_SECS = 5.0


def _events(args: argparse.Namespace, db: Any) -> int:
    queue = _queue(args, args.queue)
    since = args.since
    while True:
        for event in queue.events(db, since=since, block=_FOLLOW_SECS if args.follow else None):
            since = event.event_id
            if args.json:
                print(json.dumps(asdict(event)), flush=True)
            else:
                extra = "" if event.delivery is None else f" delivery={event.delivery}"
                extra += "" if event.reason is None else f" reason={event.reason!r}"
                print(f"{_when(event.at)} {event.kind:<9} {event.id}{extra}", flush=True)
        if not args.follow:
            return EXIT_OK


def _events_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``rwq events``."""
    p = command(
        "events",
        help="print the queue's events (a queue made with events=True); --follow waits for more",
        description="Print the entries of the queue's event stream (P:events: added, leased, "
        "completed, failed, retried, dead, expired, requeued, cancelled, promoted), oldest "
        "first, one a line (JSON lines with --json). With --follow, wait for new ones until "
        "interrupted.",
    )
    p.add_argument("queue", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--follow", action="store_true", help="wait for new events until stopped")
    p.add_argument(
        "--since",
        default="0",
        help="start after this event id ('0', the default: every kept event; '$': new ones)",
    )
    p.set_defaults(func=_events)


# Schedules --------------------------------------------------------------------------------------


def _moment(text: str) -> datetime | float:
    """A ``--start``/``--end`` value: ISO 8601 with an offset, or seconds since the epoch."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a time: write ISO 8601 with an offset "
            "(2026-12-01T02:00:00+01:00) or seconds since the epoch"
        ) from err


def _schedule(args: argparse.Namespace, db: Any) -> int:
    queue = _queue(args, args.queue)
    if args.action == "add":
        changed: bool = queue.schedule(
            db,
            args.name,
            cron=args.cron,
            every=args.every,
            tz=args.tz,
            data=args.data.encode(),
            start=args.start,
            end=args.end,
            catch_up=args.catch_up,
            overlap=args.overlap,
        )
        what = "saved" if changed else "unchanged"
    else:
        act = {
            "remove": queue.remove_schedule,
            "pause": queue.pause_schedule,
            "resume": queue.resume_schedule,
        }[args.action]
        changed = act(db, args.name)
        if not changed and not any(s.name == args.name for s in queue.schedules(db)):
            raise Failure(EXIT_FAILED, f"queue {args.queue} has no schedule {args.name!r}")
        what = {"remove": "removed", "pause": "paused", "resume": "resumed"}[args.action]
        what = what if changed else f"already {what}"
    if args.json:
        _json_out({"queue": args.queue, "schedule": args.name, "changed": changed})
    else:
        print(f"{args.queue} {args.name}: {what}")
    return EXIT_OK


def _when(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="milliseconds")


def _schedules(args: argparse.Namespace, db: Any) -> int:
    found = {name: _queue(args, name).schedules(db) for name in args.queues}
    if args.json:
        _json_out({name: [asdict(s) for s in rows] for name, rows in found.items()})
        return EXIT_OK
    table = [["queue", "schedule", "when", "tz", "next (UTC)", "state", "last added"]]
    for name, rows in found.items():
        for s in rows:
            when = s.cron if s.cron is not None else f"every {s.every:g}s"
            state = "paused" if s.paused else ("ended" if s.next_due is None else "running")
            table.append([name, s.name, when, s.tz, _when(s.next_due), state, s.last_id or "-"])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    if len(table) == 1:
        print("no schedules")
    return EXIT_OK


def _scheduler(args: argparse.Namespace, db: Any) -> int:
    """Run the queues' schedules every ``--interval`` seconds until SIGTERM or SIGINT."""
    queues = [_queue(args, name) for name in args.queues]
    db.ping()  # unreachable at start: exit 3; later outages are waited out
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    if not args.once:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    down = False
    while True:
        try:
            for queue in queues:
                for added in transport.run(db, schedule_ops.turn_steps(queue.keys)):
                    logger.info("added %s to %s", added, queue.name.prefix)
                    if args.once:
                        print(json.dumps({"queue": queue.name.prefix, "added": added}))
            if down:
                logger.info("Redis answers again")
                down = False
        except (
            redis.ConnectionError,
            redis.TimeoutError,
            redis.exceptions.OutOfMemoryError,
            redis.exceptions.ReadOnlyError,
        ) as err:
            if args.once:
                raise
            if not down:
                logger.warning("Redis cannot take the schedules' writes now, retrying: %s", err)
                down = True
        if args.once or stop.wait(args.interval):
            return EXIT_OK


def _schedule_commands(command: Callable[..., argparse.ArgumentParser]) -> None:
    """The subcommands of schedules: ``schedule``, ``schedules`` and ``scheduler``."""
    p = command(
        "schedule",
        help="add (or replace), remove, pause or resume a schedule of a queue",
        description="Manage a schedule: items added to the queue on a cron expression or at a "
        "fixed interval, each occurrence exactly once however many schedulers run.",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    add = actions.add_parser("add", help="add or replace a schedule")
    _global_options(add, top=False)
    add.add_argument("queue", metavar="QUEUE", help="queue key prefix")
    add.add_argument("name", metavar="NAME", help="the schedule's name (no '@')")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", help="cron expression, e.g. '0 2 * * *' (seconds first if 6)")
    when.add_argument("--every", type=float, metavar="SECS", help="a fixed interval")
    add.add_argument("--tz", default="UTC", help="time zone of the cron expression")
    add.add_argument("--data", default="", help="the data of each occurrence (text)")
    add.add_argument("--start", type=_moment, help="no occurrence before (ISO 8601 or epoch)")
    add.add_argument("--end", type=_moment, help="no occurrence after (ISO 8601 or epoch)")
    add.add_argument("--catch-up", choices=("none", "one", "all"), default="one")
    add.add_argument("--overlap", choices=("add", "skip"), default="add")
    for name, text in (
        ("remove", "remove a schedule (its occurrences stay)"),
        ("pause", "pause a schedule"),
        ("resume", "resume a paused schedule from its next due time"),
    ):
        sub = actions.add_parser(name, help=text)
        _global_options(sub, top=False)
        sub.add_argument("queue", metavar="QUEUE", help="queue key prefix")
        sub.add_argument("name", metavar="NAME", help="the schedule's name")
    p.set_defaults(func=_schedule)

    p = command(
        "schedules",
        help="list the schedules of queues with their next due times",
        description="List each queue's schedules: when they fall due, their next due time, "
        "whether they are paused, and the id of the last occurrence added.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.set_defaults(func=_schedules)

    p = command(
        "scheduler",
        help="add the due occurrences of queues' schedules, until stopped",
        description="Add the due occurrences of the queues' schedules every --interval "
        "seconds, until SIGTERM or Ctrl-C (exit 0). Workers do this already; run it for a "
        "fleet without workers, or beside them: racing schedulers add each occurrence once.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefixes")
    p.add_argument("--interval", type=_seconds, default=0.5, metavar="SECS", help="default 0.5")
    p.add_argument("--once", action="store_true", help="run once, print what was added")
    p.set_defaults(func=_scheduler)


def _functions(args: argparse.Namespace, db: Any) -> int:
    """``rwq functions install|status``."""
    from . import functions  # noqa: PLC0415 - only this command needs it

    nodes = functions.install(db) if args.action == "install" else functions.status(db)
    name = functions.library().name
    if args.json:
        rows = [{"node": n.node, "loaded": n.loaded, "libraries": list(n.libraries)} for n in nodes]
        print(json.dumps({"library": name, "nodes": rows}))
    else:
        for n in nodes:
            others = [lib for lib in n.libraries if lib != name]
            state = "loaded" if n.loaded else "not loaded"
            extra = f" (also: {', '.join(others)})" if others else ""
            print(f"{n.node}: {name} {state}{extra}")
    return 0 if all(n.loaded for n in nodes) else EXIT_FAILED


def _rate_limit(args: argparse.Namespace, db: Any) -> int:
    """``rwq rate-limit``: show, set or remove one queue's rate limit."""
    queue = _queue(args, args.queues[0])
    if args.off and args.count is not None:
        raise Failure(EXIT_USAGE, "pass COUNT and PER_SECS, or --off (not both)")
    if args.count is not None:
        if args.per_secs is None:
            raise Failure(EXIT_USAGE, "pass PER_SECS after COUNT: rwq rate-limit QUEUE 100 1")
        count = int(args.count) if args.count.is_integer() else args.count
        queue.set_rate_limit(db, RateLimit(count, args.per_secs, burst=args.burst))
    elif args.off:
        queue.set_rate_limit(db, None)
    limit = queue.stats(db).rate_limit
    if args.json:
        _json_out({args.queues[0]: None if limit is None else asdict(limit)})
    elif limit is None:
        print(f"{args.queues[0]}: no rate limit")
    else:
        print(f"{args.queues[0]}: {limit.count:g} per {limit.per_secs:g} s, burst {limit.burst}")
    return EXIT_OK


# Fair groups ------------------------------------------------------------------------------------

#: Groups ``rwq groups QUEUE`` lists by default, and at most (``--top``).
GROUPS_TOP = 20
GROUPS_TOP_MAX = 1000
_GROUPS_USAGE = (
    "rwq groups [options] QUEUE | pause QUEUE GROUP | resume QUEUE GROUP | concurrency QUEUE N|off"
    " | rate QUEUE GROUP COUNT PER_SECS [BURST]|off | rate-default QUEUE COUNT PER_SECS [BURST]|off"
)


def _groups_command(command: Callable[..., argparse.ArgumentParser]) -> None:
    """Add ``rwq groups``."""
    p = command(
        "groups",
        usage=_GROUPS_USAGE,
        help="list a queue's fair groups by backlog; pause, resume, or set their concurrency",
        description="With QUEUE: the groups with the most items waiting (--top of them), each "
        "with its items waiting and in flight and whether it is paused, and how many groups "
        "have items waiting. 'pause QUEUE GROUP' stops handing out a group's items, 'resume "
        "QUEUE GROUP' lets them go again, 'concurrency QUEUE N' caps the items of one group "
        "in flight across the fleet ('off' removes the cap); 'rate QUEUE GROUP COUNT PER_SECS "
        "[BURST]' sets a group's own rate limit, 'rate-default QUEUE COUNT PER_SECS [BURST]' "
        "that of every group ('off' removes either).",
    )
    p.add_argument("words", nargs="+", metavar="ARG", help="QUEUE, or ACTION QUEUE VALUE")
    p.add_argument(
        "--top",
        type=int,
        default=GROUPS_TOP,
        metavar="N",
        help=f"groups listed, 1 to {GROUPS_TOP_MAX} (default {GROUPS_TOP})",
    )
    p.set_defaults(func=_groups)


def _shown(name: str) -> str:
    """A group's name for a terminal: as it is when printable, else quoted with escapes."""
    return name if name.isprintable() and name.strip() == name else repr(name)


def _groups(args: argparse.Namespace, db: Any) -> int:
    """``rwq groups``: list a queue's top groups, or pause, resume or cap them."""
    words = list(args.words)
    if words[0] in ("rate", "rate-default") and len(words) > 1:
        return _group_rate(args, db, words)
    if words[0] in ("pause", "resume", "concurrency") and len(words) > 1:
        if len(words) != 3:
            what = "N|off" if words[0] == "concurrency" else "GROUP"
            raise Failure(EXIT_USAGE, f"usage: rwq groups {words[0]} QUEUE {what}")
        action, name, value = words
        queue = _queue(args, name)
        if action == "concurrency":
            return _group_concurrency(args, db, queue, name, value)
        changed = (queue.pause_group if action == "pause" else queue.resume_group)(db, value)
        if args.json:
            _json_out({"queue": name, "group": value, "action": action, "changed": changed})
        else:
            done = {"pause": "paused", "resume": "resumed"}[action]
            if not changed:
                done = "paused already" if action == "pause" else "not paused"
            print(f"{name} {_shown(value)}: {done}")
        return EXIT_OK
    if len(words) != 1:
        raise Failure(EXIT_USAGE, f"name one queue (usage: {_GROUPS_USAGE})")
    if not 1 <= args.top <= GROUPS_TOP_MAX:
        raise Failure(EXIT_USAGE, f"--top must be 1 to {GROUPS_TOP_MAX}, got {args.top}")
    name = words[0]
    stats = _queue(args, name).stats(db, top_groups=args.top)
    rows = [
        {"group": g, "waiting": c.ready, "in_flight": c.in_flight, "paused": c.paused}
        for g, c in stats.top_groups.items()
    ]
    rest = max(stats.groups_waiting - len(rows), 0)
    if not rows:
        _warn_missing(db, [name], args)
    if args.json:
        _json_out(
            {
                "queue": name,
                "groups_waiting": stats.groups_waiting,
                "grouped": stats.grouped,
                "group_concurrency": stats.group_concurrency,
                "groups": rows,
                "rest": rest,
            }
        )
        return EXIT_OK
    cap = "none" if stats.group_concurrency is None else str(stats.group_concurrency)
    print(
        f"{name}: {plural(stats.groups_waiting, 'group')} with items waiting "
        f"({plural(stats.grouped, 'item')}); group concurrency {cap}"
    )
    if rows:
        table = [["group", "waiting", "in flight", "state"]]
        for group, c in stats.top_groups.items():
            state = "paused" if c.paused else "active"
            table.append([_shown(group), str(c.ready), str(c.in_flight), state])
        widths = [max(len(row[i]) for row in table) for i in range(4)]
        for row in table:
            name_cell = row[0].ljust(widths[0])
            print(f"{name_cell}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  {row[3]}")
    if rest:
        print(f"... and {plural(rest, 'more group')} with items waiting (--top to list more)")
    return EXIT_OK


def _group_concurrency(
    args: argparse.Namespace, db: Any, queue: WorkQueue, name: str, value: str
) -> int:
    """``rwq groups concurrency QUEUE N|off``: set or remove the cap; print the one in force."""
    if value == "off":
        queue.set_group_concurrency(db, None)
    else:
        try:
            cap = int(value)
        except ValueError as err:
            raise Failure(
                EXIT_USAGE, f"the group concurrency must be a positive int or off, got {value!r}"
            ) from err
        queue.set_group_concurrency(db, cap)
    found = queue.stats(db).group_concurrency
    if args.json:
        _json_out({"queue": name, "group_concurrency": found})
    else:
        print(f"{name}: group concurrency {'none' if found is None else found}")
    return EXIT_OK


def _group_rate(args: argparse.Namespace, db: Any, words: list[str]) -> int:
    """``rwq groups rate`` and ``rwq groups rate-default``: set or remove a group's rate limit.

    ``rate QUEUE GROUP COUNT PER_SECS [BURST]|off`` sets a group's own limit, ``rate-default
    QUEUE COUNT PER_SECS [BURST]|off`` that of every group; the limit in force is printed.
    """
    every = words[0] == "rate-default"
    head = 2 if every else 3
    values = words[head:]
    usage = (
        f"usage: rwq groups {words[0]} QUEUE{'' if every else ' GROUP'} COUNT PER_SECS [BURST]|off"
    )
    if len(words) < head + 1 or (values != ["off"] and len(values) not in (2, 3)):
        raise Failure(EXIT_USAGE, usage)
    name = words[1]
    group = None if every else words[2]
    queue = _queue(args, name)
    limit = None
    if values != ["off"]:
        try:
            count, per_secs = float(values[0]), float(values[1])
            burst = int(values[2]) if len(values) == 3 else 1
        except ValueError as err:
            raise Failure(
                EXIT_USAGE, f"COUNT and PER_SECS are numbers, BURST an int ({usage})"
            ) from err
        limit = RateLimit(int(count) if count.is_integer() else count, per_secs, burst=burst)
    if group is None:
        queue.set_default_group_rate_limit(db, limit)
        found = queue.stats(db).group_rate_limit
    else:
        queue.set_group_rate_limit(db, group, limit)
        found = queue.stats(db, groups=[group]).groups[group].rate_limit
    if args.json:
        shown = None if found is None else asdict(found)
        key = (
            {"group_rate_limit": shown} if group is None else {"group": group, "rate_limit": shown}
        )
        _json_out({"queue": name, **key})
        return EXIT_OK
    who = f"{name}: every group" if group is None else f"{name} {_shown(group)}"
    if found is None:
        print(f"{who}: no rate limit")
    else:
        print(f"{who}: {found.count:g} per {found.per_secs:g} s, burst {found.burst}")
    return EXIT_OK


# Running ----------------------------------------------------------------------------------------


def _report(code: int, message: str, as_json: bool) -> int:
    message = mask(message)
    if as_json:
        print(json.dumps({"error": message, "exit": code}), file=sys.stderr)
    else:
        print(f"rwq: {message}", file=sys.stderr)
    return code


class _MaskingFormatter(logging.Formatter):
    """The command's log format, each line passed through :func:`~.connect.mask`.

    A URL that reaches a log line (from this package or a library) shows no password.
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record formatted, masked."""
        return mask(super().format(record))


def _queues_of(args: argparse.Namespace) -> list[str]:
    if getattr(args, "queues", None):
        return list(args.queues)
    return [args.queue] if getattr(args, "queue", None) else []


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rwq`` and return its exit code."""
    args = build_parser().parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_MaskingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    if args.command == "worker":
        # The worker's start and stop lines (and a signal's), with -v or without.
        logging.getLogger("redis_work_queue.worker").setLevel(logging.INFO)
    db: Any = None
    where = "Redis"
    try:
        try:
            if args.command == "demo":
                return _demo(args)
            found = target(
                args.url,
                cluster=args.cluster,
                sentinels=args.sentinel,
                master=args.master,
                tls_ca_cert=args.tls_ca_cert,
            )
            where = found.describe()
            args.target = found
            db = connect(found, args.timeout)
            func: Callable[[argparse.Namespace, Any], int] = args.func
            return func(args, db)
        except BaseException:
            if args.verbose:
                print(mask(traceback.format_exc()), end="", file=sys.stderr)
            raise
    except (KeyboardInterrupt, WorkQueueError, redis.RedisError, Failure) as err:
        return _handle(err, args, db, where)


def _handle(err: BaseException, args: argparse.Namespace, db: Any, where: str) -> int:
    """Report a failure in one line; return its exit code."""
    code, message = EXIT_FAILED, _one_line(err)
    if isinstance(err, KeyboardInterrupt):
        code, message = EXIT_INTERRUPTED, "interrupted"
    elif isinstance(err, Failure):
        code, message = err.code, str(err)
    elif isinstance(err, InvalidArgumentError):
        code = EXIT_USAGE
    elif isinstance(err, redis.ConnectionError | redis.TimeoutError):
        code, message = EXIT_UNREACHABLE, f"cannot reach Redis at {where}: {err}"
    elif isinstance(err, WrongKeyTypeError) or "WRONGTYPE" in str(err):
        message = _wrong_type_message(db, err, _queues_of(args))
    elif any(isinstance(e, MovedError | AskError | ClusterDownError) for e in (err, err.__cause__)):
        message = (
            f"{where} is a Redis Cluster node ({_one_line(err)}): pass --cluster, or a "
            "redis+cluster:// URL"
        )
    return _report(code, message, args.json)


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


if __name__ == "__main__":
    sys.exit(main())
