"""The ``rwq`` command: cleaning and inspection for cron jobs and maintenance, and a demo.

Exit codes: 0 success; 1 an operation failed (for example a queue key of the wrong type);
2 bad usage; 3 Redis could not be reached.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import redis

from . import metrics, server
from .cleaning import CleanProgress, CleanReport
from .demo import run_demo
from .errors import InvalidArgumentError, WorkerFailedError, WorkQueueError
from .health import live_workers
from .keyprefix import KeyPrefix
from .worker import Worker, load_handler
from .workqueue import WorkQueue

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

logger = logging.getLogger(__name__)


def _connect(url: str | None) -> redis.Redis:
    if not url:
        raise SystemExit(_fail(EXIT_USAGE, "no Redis URL: pass --url or set REDIS_URL"))
    try:
        return redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=30)
    except ValueError as err:
        raise SystemExit(_fail(EXIT_USAGE, f"bad Redis URL {url!r}: {err}")) from err


def _fail(code: int, message: str) -> int:
    print(f"rwq: {message}", file=sys.stderr)
    return code


def _show_progress(name: str) -> Callable[[CleanProgress], None]:
    """A deep clean's progress, as one line rewritten in place on stderr (a terminal)."""

    def show(p: CleanProgress) -> None:
        line = (
            f"{name}: {p.phase}, examined {p.examined}, requeued {p.requeued}, "
            f"dead {p.dead}, forgotten {p.forgotten} ({p.rate:,.0f}/s, {p.elapsed:.1f} s)"
        )
        end = "\n" if p.phase == "done" else ""
        print(f"\r{line}\x1b[K", end=end, file=sys.stderr, flush=True)

    return show


def _clean(kind: str) -> Callable[[argparse.Namespace, redis.Redis], int]:
    def run(args: argparse.Namespace, db: redis.Redis) -> int:
        reports: dict[str, dict[str, int]] = {}
        tty = sys.stderr.isatty()
        for name in args.queues:
            queue = WorkQueue(KeyPrefix(name), args.max_deliveries)
            report: CleanReport
            if kind == "deep_clean":
                report = queue.deep_clean(db, _show_progress(name) if tty else None)
            else:
                report = queue.light_clean(db)
            reports[name] = asdict(report)
            if not args.json:
                print(
                    f"{name}: examined {report.examined}, requeued {report.requeued}, "
                    f"dropped {report.dropped}, dead {report.dead}, "
                    f"forgotten {report.forgotten}"
                )
        if args.json:
            print(json.dumps(reports))
        return EXIT_OK

    return run


STAT_COLUMNS = ("queued", "leased", "expired", "delayed", "dead")


def _info(args: argparse.Namespace, db: redis.Redis) -> int:
    rows: dict[str, dict[str, Any]] = {
        name: asdict(WorkQueue(KeyPrefix(name)).stats(db)) for name in args.queues
    }
    policy = server.eviction_policy(db)
    warning = server.eviction_message(policy) if policy and server.may_evict(policy) else None
    if args.json:
        for row in rows.values():
            row["maxmemory_policy"] = policy
            row["eviction_warning"] = warning
        print(json.dumps(rows))
        return EXIT_OK
    width = max(len("queue"), *(len(name) for name in rows))
    print(f"{'queue':<{width}}" + "".join(f"  {c:>9}" for c in STAT_COLUMNS))
    for name, row in rows.items():
        print(f"{name:<{width}}" + "".join(f"  {row[c]:>9}" for c in STAT_COLUMNS))
    if warning:
        print(f"rwq: warning: {warning}", file=sys.stderr)
    return EXIT_OK


def _metrics(args: argparse.Namespace, db: redis.Redis) -> int:
    queues = [WorkQueue(KeyPrefix(name)) for name in args.queues]
    sys.stdout.write(metrics.render(db, queues))
    return EXIT_OK


def _flush(args: argparse.Namespace, db: redis.Redis) -> int:
    if not args.yes:
        names = ", ".join(args.queues)
        if not sys.stdin.isatty():
            return _fail(EXIT_USAGE, f"refusing to flush {names} without --yes (no terminal)")
        try:
            answer = input(
                f"Delete every key of {names}, including queued and leased items? [y/N] "
            )
        except (EOFError, KeyboardInterrupt):
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return EXIT_FAILED
    for name in args.queues:
        report = WorkQueue(KeyPrefix(name)).flush(db)
        print(f"{name}: deleted {report.keys} keys ({report.items} items)")
    return EXIT_OK


def _preview(data: bytes, width: int = 40) -> str:
    text = data.decode("utf-8", "backslashreplace")
    return text if len(text) <= width else text[: width - 3] + "..."


def _dead_letters(args: argparse.Namespace, db: redis.Redis) -> int:
    queue = WorkQueue(KeyPrefix(args.queue))
    if args.requeue is not None or args.purge is not None:
        named = args.ids + (args.requeue if args.requeue is not None else args.purge)
        if bool(named) == args.all:
            return _fail(EXIT_USAGE, "name the dead letters' ids, or pass --all (not both)")
        ids = None if args.all else named
        if args.requeue is not None:
            print(f"requeued {queue.requeue_dead(db, ids)} dead letters of {args.queue}")
        else:
            print(f"purged {queue.purge_dead(db, ids)} dead letters of {args.queue}")
        return EXIT_OK
    page = queue.dead_letters(db, args.start, args.count)
    if args.json:
        rows = [
            {
                "id": d.id,
                "data": d.data.decode("utf-8", "backslashreplace"),
                "deliveries": d.deliveries,
                "reason": d.reason,
                "died_at": d.died_at,
            }
            for d in page
        ]
        print(json.dumps({"total": queue.dead_count(db), "dead_letters": rows}))
        return EXIT_OK
    print(f"{queue.dead_count(db)} dead letters in {args.queue}")
    for d in page:
        died = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d.died_at))
        print(f"{d.id}  deliveries={d.deliveries}  died={died}  reason={d.reason!r}")
        print(f"    {_preview(d.data, 72)}")
    return EXIT_OK


def _worker(args: argparse.Namespace, db: redis.Redis) -> int:
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        handler = load_handler(args.handler)
        queues = [WorkQueue(KeyPrefix(name), args.max_deliveries) for name in args.queues]
        worker = Worker(
            args.url,
            queues,
            handler,
            lease_secs=args.lease_secs,
            concurrency=args.concurrency,
            processes=args.processes,
            backoff=args.backoff,
            max_backoff=args.max_backoff,
            timeout=args.timeout,
            clean_secs=None if args.no_clean else args.clean_secs,
            heartbeat_secs=args.heartbeat_secs,
            health_file=args.health_file,
        )
    except InvalidArgumentError as err:
        return _fail(EXIT_USAGE, str(err))
    db.ping()
    try:
        stats = worker.run()
    except WorkerFailedError as err:
        return _fail(EXIT_FAILED, str(err))
    print(
        f"completed {stats.completed}, failed {stats.failed}, lost {stats.lost}, "
        f"timed out {stats.timed_out}"
    )
    return EXIT_OK


def _workers(args: argparse.Namespace, db: redis.Redis) -> int:
    found = {name: live_workers(db, WorkQueue(KeyPrefix(name))) for name in args.queues}
    if args.json:
        print(json.dumps({name: [w.as_dict() for w in rows] for name, rows in found.items()}))
        return EXIT_OK
    header = ("queue", "worker", "pid", "beat", "completed", "failed", "lost")
    table = [header]
    now = time.time()
    for name, rows in found.items():
        for w in rows:
            beat = f"{max(now - w.beat, 0):.1f}s ago"
            table.append(
                (name, w.id, str(w.pid), beat, str(w.completed), str(w.failed), str(w.lost))
            )
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))
    if len(table) == 1:
        print("no live workers")
    return EXIT_OK


DASHBOARD_AUTH_ENV = "RWQ_DASHBOARD_AUTH"
#: Bound to one of these, the dashboard answers requests for these host names only.
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1", "[::1]")


def _dashboard(args: argparse.Namespace, db: redis.Redis) -> int:
    try:
        from .dashboard import DashboardSettings, serve  # noqa: PLC0415 (optional extra)
    except ImportError as err:
        return _fail(
            EXIT_USAGE,
            f"the dashboard needs the dashboard extra: pip install "
            f"'redis-work-queue[dashboard]' ({err.name or err} is missing)",
        )
    auth_text = args.auth if args.auth is not None else os.environ.get(DASHBOARD_AUTH_ENV)
    auth: tuple[str, str] | None = None
    if auth_text:
        user, sep, password = auth_text.partition(":")
        if not sep or not user or not password:
            return _fail(EXIT_USAGE, "--auth (or $RWQ_DASHBOARD_AUTH) must be USER:PASSWORD")
        auth = (user, password)
    from .keyprefix import check_queue_name  # noqa: PLC0415 (keeps this command's edit local)

    for name in args.queues:
        check_queue_name(name)
    match = tuple(args.match) if args.match else (() if args.queues else ("*",))
    settings = DashboardSettings(
        url=args.url,
        queues=tuple(args.queues),
        match=match,
        allow_actions=args.allow_actions,
        auth=auth,
        refresh_secs=args.refresh_secs,
        allowed_hosts=LOOPBACK_NAMES if args.host in LOOPBACK_NAMES else None,
    )
    mode = "actions enabled" if args.allow_actions else "read-only"
    print(
        f"rwq dashboard on http://{args.host}:{args.port}/ ({mode}, "
        f"basic auth {'on' if auth else 'off'})",
        flush=True,
    )
    serve(settings, host=args.host, port=args.port)
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    return run_demo(url=args.url, items=args.items, workers=args.workers, out=print)


def _clean_secs(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``rwq``."""
    parser = argparse.ArgumentParser(
        prog="rwq", description="Clean, inspect and demonstrate redis-work-queue queues."
    )
    parser.add_argument(
        "--url",
        default=os.environ.get("REDIS_URL"),
        help="Redis URL, such as redis://localhost:6379/0 (default: $REDIS_URL)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log what is done")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    for command, kind, text in (
        ("light-clean", "light_clean", "requeue items whose lease expired (run every lease time)"),
        ("deep-clean", "deep_clean", "also recover items lost from both lists (run rarely)"),
    ):
        p = sub.add_parser(command, help=text, description=text)
        p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
        p.add_argument("--json", action="store_true", help="print one JSON object")
        p.add_argument(
            "--max-deliveries",
            type=int,
            default=None,
            help="bury items whose last allowed delivery expired (as the workers' setting)",
        )
        p.set_defaults(func=_clean(kind))

    p = sub.add_parser(
        "info", help="queued, leased, expired-awaiting-clean, delayed and dead counts"
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_info)

    p = sub.add_parser("metrics", help="the queues' counts in the Prometheus text format")
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.set_defaults(func=_metrics)

    p = sub.add_parser(
        "flush",
        help="delete every key of queues (asks first)",
        description="Delete every key of the queues: items in every state, leases, dead letters "
        "and bookkeeping. Other queues are never touched, whatever characters their names hold.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=_flush)

    p = sub.add_parser(
        "dead-letters",
        help="list, requeue or purge a queue's dead letters",
        description="List a queue's dead letters (oldest first), or requeue or purge some or all "
        "of them.",
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
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_dead_letters)

    p = sub.add_parser(
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
        "--timeout",
        type=float,
        default=None,
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
    p.set_defaults(func=_worker)

    p = sub.add_parser(
        "workers",
        help="list the live workers of queues",
        description="List the workers whose heartbeat has not lapsed, per queue.",
    )
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_workers)

    p = sub.add_parser(
        "dashboard",
        help="serve a web page to watch queues (and, with --allow-actions, act on them)",
        description="Serve a web page showing queues' counts, waiting items, leases, dead "
        "letters and live workers, refreshed every few seconds. Read-only unless "
        "--allow-actions. Needs the dashboard extra.",
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
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
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
        "--refresh-secs", type=float, default=2.0, help="page refresh interval (default 2)"
    )
    p.set_defaults(func=_dashboard)

    p = sub.add_parser(
        "demo",
        help="run a producer, worker processes and a cleaner",
        description="Run a producer, worker processes (one of which crashes) and a cleaner on "
        "one queue. Without --url or REDIS_URL it starts an embedded server (fakeredis).",
    )
    p.add_argument("--items", type=int, default=200, help="items to produce (default 200)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.set_defaults(func=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rwq`` and return its exit code."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "demo":
            return _demo(args)
        db = _connect(args.url)
        func: Callable[[argparse.Namespace, Any], int] = args.func
        return func(args, db)
    except (redis.ConnectionError, redis.TimeoutError) as err:
        return _fail(EXIT_UNREACHABLE, f"cannot reach Redis at {args.url}: {err}")
    except (WorkQueueError, redis.RedisError) as err:
        return _fail(EXIT_FAILED, str(err))


if __name__ == "__main__":
    sys.exit(main())
