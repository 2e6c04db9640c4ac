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
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import redis

from .demo import run_demo
from .errors import WorkQueueError
from .keyprefix import KeyPrefix
from .workqueue import CleanReport, WorkQueue

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


def _clean(kind: str) -> Callable[[argparse.Namespace, redis.Redis], int]:
    def run(args: argparse.Namespace, db: redis.Redis) -> int:
        reports: dict[str, dict[str, int]] = {}
        for name in args.queues:
            queue = WorkQueue(KeyPrefix(name))
            report: CleanReport = getattr(queue, kind)(db)
            reports[name] = asdict(report)
            if not args.json:
                print(
                    f"{name}: examined {report.examined}, requeued {report.requeued}, "
                    f"dropped {report.dropped}"
                )
        if args.json:
            print(json.dumps(reports))
        return EXIT_OK

    return run


def _info(args: argparse.Namespace, db: redis.Redis) -> int:
    rows = {}
    for name in args.queues:
        queue = WorkQueue(KeyPrefix(name))
        rows[name] = {"queued": queue.queue_len(db), "processing": queue.processing(db)}
    if args.json:
        print(json.dumps(rows))
        return EXIT_OK
    width = max(len("queue"), *(len(name) for name in rows))
    print(f"{'queue':<{width}}  {'queued':>10}  {'processing':>10}")
    for name, row in rows.items():
        print(f"{name:<{width}}  {row['queued']:>10}  {row['processing']:>10}")
    return EXIT_OK


def _demo(args: argparse.Namespace) -> int:
    return run_demo(url=args.url, items=args.items, workers=args.workers, out=print)


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
        p.set_defaults(handler=_clean(kind))

    p = sub.add_parser("info", help="queued and processing counts")
    p.add_argument("queues", nargs="+", metavar="QUEUE", help="queue key prefix")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=_info)

    p = sub.add_parser(
        "demo",
        help="run a producer, worker processes and a cleaner",
        description="Run a producer, worker processes (one of which crashes) and a cleaner on "
        "one queue. Without --url or REDIS_URL it starts an embedded server (fakeredis).",
    )
    p.add_argument("--items", type=int, default=200, help="items to produce (default 200)")
    p.add_argument("--workers", type=int, default=3, help="worker processes (default 3)")
    p.set_defaults(handler=None)
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
        handler: Callable[[argparse.Namespace, Any], int] = args.handler
        return handler(args, db)
    except (redis.ConnectionError, redis.TimeoutError) as err:
        return _fail(EXIT_UNREACHABLE, f"cannot reach Redis at {args.url}: {err}")
    except (WorkQueueError, redis.RedisError) as err:
        return _fail(EXIT_FAILED, str(err))


if __name__ == "__main__":
    sys.exit(main())
