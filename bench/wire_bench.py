"""The wire path's rates against redis-py's own EVALSHA, measured in one run.

    python bench/wire_bench.py [--pin same|split|off] [--rounds 5] [--n 2000] [--no-hiredis]

Starts a throw-away redis-server (``run.redis_server``), pins it and this process as
``run.py --pin`` does (default: both on one CPU), and prints, rounds alternating so that every
figure is taken at the same moments: redis-py ``evalsha(<return 1>)``, our ``add_unique_item``,
lease+complete pairs one at a time, items one at a time with ``complete_and_lease_from`` (one
call per item), and the same on ``redis.asyncio``, with the ratios against the targets.
``--no-hiredis`` hides hiredis from redis-py (a ``sys.meta_path`` blocker installed before
redis is imported), to compare the two parsers.

The measuring functions (``evalsha_rate``, ``lean_rate``, ``add_rate``, ``pair_rate``,
``chain_rate``, ``aevalsha_rate``, ``alean_rate``, ``apair_rate``, ``achain_rate``) take a port
and a count and return operations (items, for the pairs and chains) per second; ``lean`` is
the wire path alone (an ``EVALSHA`` of ``return 1`` packed once), the least a call costs this
library's client.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.abc
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "src"))
sys.path.insert(0, str(BENCH))

DATA = b'{"id": 1, "kind": "resize", "url": "https://example.com/images/0001.png", "w": 640}'


class _NoHiredis(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> None:
        if name == "hiredis" or name.startswith("hiredis."):
            raise ImportError("hiredis hidden by --no-hiredis")


def evalsha_rate(port: int, n: int) -> float:
    """redis-py ``evalsha`` of ``return 1``, one at a time."""
    import redis  # noqa: PLC0415

    db = redis.Redis(port=port)
    sha = db.script_load("return 1")
    start = time.perf_counter()
    for _ in range(n):
        db.evalsha(sha, 0)
    return n / (time.perf_counter() - start)


def _return_1(sha: str) -> list[bytes]:
    """``EVALSHA <sha> 0``, packed."""
    return [b"*3\r\n$7\r\nEVALSHA\r\n$40\r\n%s\r\n$1\r\n0\r\n" % sha.encode()]


def lean_rate(port: int, n: int) -> float:
    """The wire path alone: ``EVALSHA`` of ``return 1``, packed once, sent and read by
    ``lean.send`` on redis-py's pool: what a call costs this library's client at the least."""
    import redis  # noqa: PLC0415

    from redis_work_queue import lean  # noqa: PLC0415

    db = redis.Redis(port=port)
    packed, pool = _return_1(db.script_load("return 1")), db.connection_pool
    start = time.perf_counter()
    for _ in range(n):
        lean.send(pool, packed)
    return n / (time.perf_counter() - start)


def add_rate(port: int, n: int) -> float:
    """``WorkQueue.add_unique_item``, one at a time."""
    import redis  # noqa: PLC0415

    from redis_work_queue import Item, KeyPrefix, WorkQueue  # noqa: PLC0415

    db = redis.Redis(port=port)
    q = WorkQueue(KeyPrefix("wire-bench"))
    items = [Item(DATA) for _ in range(n)]
    start = time.perf_counter()
    for item in items:
        q.add_unique_item(db, item)
    return n / (time.perf_counter() - start)


def pair_rate(port: int, n: int) -> float:
    """``lease`` then ``complete``, one item at a time; pairs per second."""
    import redis  # noqa: PLC0415

    from redis_work_queue import Item, KeyPrefix, WorkQueue  # noqa: PLC0415

    db = redis.Redis(port=port)
    q = WorkQueue(KeyPrefix("wire-pairs"))
    q.add_items(db, [Item(DATA) for _ in range(n)], unique=True)
    start = time.perf_counter()
    for _ in range(n):
        item = q.lease(db, 30, block=False)
        assert item is not None
        q.complete(db, item)
    return n / (time.perf_counter() - start)


def chain_rate(port: int, n: int) -> float:
    """One item at a time with ``complete_and_lease_from``: a lease, then one call per item."""
    import redis  # noqa: PLC0415

    from redis_work_queue import (  # noqa: PLC0415
        Item,
        KeyPrefix,
        WorkQueue,
        complete_and_lease_from,
    )

    db = redis.Redis(port=port)
    q = WorkQueue(KeyPrefix("wire-chain"))
    q.add_items(db, [Item(DATA) for _ in range(n)], unique=True)
    start = time.perf_counter()
    item = q.lease(db, 30, block=False)
    done = 0
    while item is not None:
        completed, found = complete_and_lease_from(db, q, item, [q], 30)
        assert completed
        done += 1
        item = None if found is None else found[1]
    took = time.perf_counter() - start
    assert done == n
    return n / took


def aevalsha_rate(port: int, n: int) -> float:
    """``redis.asyncio`` ``evalsha`` of ``return 1``, one at a time."""
    import redis.asyncio  # noqa: PLC0415

    async def main() -> float:
        db = redis.asyncio.Redis(port=port)
        sha = await db.script_load("return 1")
        start = time.perf_counter()
        for _ in range(n):
            await db.evalsha(sha, 0)
        took = time.perf_counter() - start
        await db.aclose()
        return n / took

    return asyncio.run(main())


def alean_rate(port: int, n: int) -> float:
    """``lean_rate`` on ``redis.asyncio`` (``lean.asend``)."""
    import redis.asyncio  # noqa: PLC0415

    from redis_work_queue import lean  # noqa: PLC0415

    async def main() -> float:
        db = redis.asyncio.Redis(port=port)
        packed, pool = _return_1(await db.script_load("return 1")), db.connection_pool
        start = time.perf_counter()
        for _ in range(n):
            await lean.asend(pool, packed)
        took = time.perf_counter() - start
        await db.aclose()
        return n / took

    return asyncio.run(main())


def apair_rate(port: int, n: int) -> float:
    """``AsyncWorkQueue`` lease then complete, one at a time, one task; pairs per second."""
    import redis.asyncio  # noqa: PLC0415

    from redis_work_queue import AsyncWorkQueue, Item, KeyPrefix  # noqa: PLC0415

    async def main() -> float:
        db = redis.asyncio.Redis(port=port)
        q = AsyncWorkQueue(KeyPrefix("wire-apairs"))
        await q.add_items(db, [Item(DATA) for _ in range(n)], unique=True)
        start = time.perf_counter()
        for _ in range(n):
            item = await q.lease(db, 30, block=False)
            assert item is not None
            await q.complete(db, item)
        took = time.perf_counter() - start
        await db.aclose()
        return n / took

    return asyncio.run(main())


def achain_rate(port: int, n: int) -> float:
    """``chain_rate`` on ``AsyncWorkQueue``, one task."""
    import redis.asyncio  # noqa: PLC0415

    from redis_work_queue import (  # noqa: PLC0415
        AsyncWorkQueue,
        Item,
        KeyPrefix,
        acomplete_and_lease_from,
    )

    async def main() -> float:
        db = redis.asyncio.Redis(port=port)
        q = AsyncWorkQueue(KeyPrefix("wire-achain"))
        await q.add_items(db, [Item(DATA) for _ in range(n)], unique=True)
        start = time.perf_counter()
        item = await q.lease(db, 30, block=False)
        done = 0
        while item is not None:
            completed, found = await acomplete_and_lease_from(db, q, item, [q], 30)
            assert completed
            done += 1
            item = None if found is None else found[1]
        took = time.perf_counter() - start
        await db.aclose()
        assert done == n
        return n / took

    return asyncio.run(main())


MEASURES: dict[str, Callable[[int, int], float]] = {
    "evalsha": evalsha_rate,
    "lean": lean_rate,
    "add": add_rate,
    "pair": pair_rate,
    "chain": chain_rate,
    "aevalsha": aevalsha_rate,
    "alean": alean_rate,
    "apair": apair_rate,
    "achain": achain_rate,
}


def measure(port: int, n: int, rounds: int) -> dict[str, float]:
    """Best of ``rounds`` alternating rounds of every measure, the database flushed between."""
    import redis  # noqa: PLC0415

    admin = redis.Redis(port=port)
    best: dict[str, float] = dict.fromkeys(MEASURES, 0.0)
    for fn in MEASURES.values():  # warm-up
        admin.flushall()
        fn(port, max(n // 10, 50))
    for _ in range(rounds):
        for name, fn in MEASURES.items():
            admin.flushall()
            best[name] = max(best[name], fn(port, n))
    return best


def report(best: dict[str, float]) -> list[str]:
    """The table's lines: rates, then ratios against their targets."""
    lines = [f"{name:10s} {rate:10.0f} /s" for name, rate in best.items()]
    checks = [
        ("add / evalsha", best["add"] / best["evalsha"], 1.6),
        ("pairs / (evalsha/2)", best["pair"] / (best["evalsha"] / 2), 1.6),
        ("async pairs / (async evalsha/2)", best["apair"] / (best["aevalsha"] / 2), 1.5),
        ("complete_and_lease / (evalsha/2)", best["chain"] / (best["evalsha"] / 2), 1.6),
        ("async same / (async evalsha/2)", best["achain"] / (best["aevalsha"] / 2), 1.5),
    ]
    for label, ratio, target in checks:
        verdict = "ok" if ratio >= target else "BELOW"
        lines.append(f"{label:34s} {ratio:5.2f}x  (target {target}x: {verdict})")
    lines += [
        f"{'wire path alone / evalsha':34s} {best['lean'] / best['evalsha']:5.2f}x",
        f"{'async wire path alone / async same':34s} {best['alean'] / best['aevalsha']:5.2f}x",
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pin", choices=["same", "split", "off"], default="same")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--no-hiredis", action="store_true")
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    options = parser.parse_args()
    if options.no_hiredis:
        sys.meta_path.insert(0, _NoHiredis())
    from redis.utils import HIREDIS_AVAILABLE  # noqa: PLC0415

    import run  # noqa: PLC0415 - after the blocker: run imports redis
    import servers  # noqa: PLC0415

    os.environ[servers.BINARY_ENV] = options.redis_server
    where = run.placement(options.pin)
    if where.clients.cpus is not None:
        os.sched_setaffinity(0, where.clients.cpus)
    with tempfile.TemporaryDirectory(prefix="rwq-wire-bench-") as base:
        server = servers.start_server(Path(base), spawn=where.server)
        try:
            best = measure(server.port, options.n, options.rounds)
        finally:
            server.stop()
    print(f"wire bench: {where.describe()}, hiredis {'on' if HIREDIS_AVAILABLE else 'off'}")
    for line in report(best):
        print(line)


if __name__ == "__main__":
    main()
