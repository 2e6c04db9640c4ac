"""Workloads of this library alone: the baseline has no counterpart for them.

Each compares this library with itself or with plain Redis in the same process, on the same
server, at the same moment: the Worker runner against the plain lease+complete loop, batches
against PING, the queue's memory against the plain key layout, asyncio against sync, writes
with WAIT against writes without. They are run by ``ours_worker.py`` (which imports this
repository's ``redis_work_queue`` and hands it over as ``q.rwq``), like the shared workloads of
``workloads.py``. The multi-process cluster row is ``drain_worker.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import statistics
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis
import redis.asyncio as aredis

from workloads import DATA, LONG_LEASE, PREFIX, WARMUP, BenchError, Result, _expect, _timed_rounds

#: Items per ``add_items`` call when a workload fills its queue.
FILL_CHUNK = 1000
#: Items per call of the batch workloads.
BATCH = 100
#: Items per MSET and per LPUSH when the memory workload builds the plain layout.
PLAIN_CHUNK = 1000


def _fill(q: Any, db: redis.Redis, n: int) -> None:
    """Add ``n`` fresh items to the benchmark queue, ``FILL_CHUNK`` per ``add_items`` call."""
    make = q.rwq.Item
    for start in range(0, n, FILL_CHUNK):
        q.queue.add_items(db, [make(DATA) for _ in range(min(FILL_CHUNK, n - start))], unique=True)


def _address(db: redis.Redis) -> tuple[str, int]:
    kwargs = db.connection_pool.connection_kwargs
    return str(kwargs.get("host", "127.0.0.1")), int(kwargs["port"])


def _record(into: Result, rate: float) -> None:
    into["rounds"].append(rate)
    into["value"] = max(into["value"], rate)


def _rate_result(per: int) -> Result:
    return {"value": 0.0, "unit": "ops/s", "rounds": [], "ops_per_round": per}


def _drained(q: Any) -> None:
    _expect("queue length at the end", q.queue_len(), 0)
    _expect("processing list at the end", q.processing(), 0)


def _plain_pairs(q: Any, k: int) -> None:
    """The plain loop: non-blocking lease then complete, ``k`` times."""
    lease, complete = q.lease, q.complete
    for _ in range(k):
        item = lease(30)
        if item is None:
            raise BenchError("the queue ran dry")
        complete(item)


# Worker runner -----------------------------------------------------------------------------------


def drain_with_worker(q: Any, db: redis.Redis, url: str, k: int) -> float:
    """Items/s of ``Worker`` (threads, concurrency 1, a no-op handler) draining ``k`` items.

    Fills the queue of ``q`` (an adapter: ``rwq``, ``queue``, ``processing()``,
    ``queue_len()``) with ``k`` items, starts ``Worker.run`` in a thread and times it until
    every item is completed (the handler counts the items; the last completion is seen as an
    empty processing list), then stops the worker (``stop()``, from this thread) and checks its
    counts. The worker polls with a short timeout (``poll_secs`` 0.1): that only matters once
    the queue is empty, after the clock has stopped.
    """
    _fill(q, db, k)
    handled = 0
    all_handled = threading.Event()

    def noop_handler(item: Any) -> None:
        nonlocal handled
        handled += 1
        if handled == k:
            all_handled.set()

    worker = q.rwq.Worker(url, [q.queue], noop_handler, concurrency=1, lease_secs=30, poll_secs=0.1)
    outcome: list[Any] = []
    thread = threading.Thread(
        target=lambda: outcome.append(worker.run(signals=())), name="bench-runner"
    )
    gc.collect()
    start = time.perf_counter()
    thread.start()
    if not all_handled.wait(timeout=300):
        worker.stop()
        raise BenchError(f"the worker handled {handled} of {k} items in 300 s")
    while q.processing():  # the last completion follows the last handler call
        time.sleep(0.0002)
    seconds = time.perf_counter() - start
    worker.stop()
    thread.join(timeout=30)
    if thread.is_alive() or not outcome:
        raise BenchError("the worker did not stop within 30 s of stop()")
    stats = outcome[0]
    _expect("items the worker completed", (stats.completed, stats.failed, stats.lost), (k, 0, 0))
    _drained(q)
    return k / seconds


def worker_runner(db: redis.Redis, q: Any, p: Result) -> Result:
    """Items/s of ``Worker`` (:func:`drain_with_worker`) in rounds alternating with rounds of
    the plain ``lease(block=False)`` + ``complete`` loop."""
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    host, port = _address(db)
    url = f"redis://{host}:{port}/0"

    def runner(k: int) -> float:
        return drain_with_worker(q, db, url, k)

    def plain(k: int) -> float:
        _fill(q, db, k)
        gc.collect()
        start = time.perf_counter()
        _plain_pairs(q, k)
        seconds = time.perf_counter() - start
        _drained(q)
        return k / seconds

    plain(WARMUP)
    runner(WARMUP)
    result: Result = {"runner": _rate_result(per), "plain": _rate_result(per)}
    for _ in range(rounds):
        _record(result["plain"], plain(per))
        _record(result["runner"], runner(per))
    return result


# Batches ----------------------------------------------------------------------------------------


def batch(db: redis.Redis, q: Any, p: Result) -> Result:
    """Items/s of ``add_items(unique=True)`` and of ``lease_many`` + ``complete_many``, 100
    items per call, each in timed rounds alternating with rounds of ``pings`` PINGs.

    The adding rounds fill the queue that the leasing rounds then drain. Items are built
    beforehand. ``lease_many(db, 30, 100)`` is called as written (blocking mode, which returns
    at once when the queue has items).
    """
    rwq, queue = q.rwq, q.queue
    n, rounds, pings = p["n"], p["rounds"], p["pings"]
    per = max(BATCH, n // rounds // BATCH * BATCH)
    items = [rwq.Item(DATA) for _ in range(per * rounds + 2 * BATCH)]
    chunks = iter([items[i : i + BATCH] for i in range(0, len(items), BATCH)])
    add_items, lease_many, complete_many = queue.add_items, queue.lease_many, queue.complete_many

    def adds(k: int) -> None:
        for _ in range(k // BATCH):
            add_items(db, next(chunks), unique=True)

    def pairs(k: int) -> None:
        for _ in range(k // BATCH):
            leased = lease_many(db, 30, BATCH)
            if len(leased) != BATCH:
                raise BenchError(f"lease_many leased {len(leased)} items, not {BATCH}")
            if len(complete_many(db, leased)) != BATCH:
                raise BenchError("complete_many did not complete every item")

    def ping(k: int) -> None:
        send = db.ping
        for _ in range(k):
            send()

    ping(WARMUP)
    adds(2 * BATCH)
    pairs(2 * BATCH)
    result: Result = {
        "add_items": _rate_result(per),
        "lease_complete_many": _rate_result(per),
        "ping": _rate_result(pings),
    }
    for body, key in ((adds, "add_items"), (pairs, "lease_complete_many")):
        for _ in range(rounds):
            _record(result["ping"], _timed_rounds(ping, pings, 1)["value"])
            _record(result[key], _timed_rounds(body, per, 1)["value"])
        if key == "add_items":
            _expect("queue length after add_items", q.queue_len(), per * rounds)
    _drained(q)
    return result


# Memory -----------------------------------------------------------------------------------------


def _used_memory(db: redis.Redis) -> int:
    with contextlib.suppress(redis.ResponseError):  # not built with jemalloc
        db.execute_command("MEMORY", "PURGE")
    return int(db.info("memory")["used_memory"])


def memory(db: redis.Redis, q: Any, p: Result) -> Result:
    """Bytes of Redis ``used_memory`` per queued item: this queue against the plain layout.

    ``n`` ids are made as the library makes them (UUIDv7, 32 hex characters), each with
    ``size`` bytes of data. The plain layout is ``SET <prefix>:item:<id> <data>`` plus
    ``LPUSH <prefix>:queue <id>`` per item, the same ids in the same order, sent through
    pipelines of ``chunk`` items as one MSET and one LPUSH per ``PLAIN_CHUNK`` items: the keys,
    values and list are the same as with a SET and an LPUSH per item (the same used_memory,
    checked at 100k items, within 0.5 B/item), and 2M single commands would take ~18 s of
    redis-py time. The queue gets the same ids and data through ``add_items(unique=True)``,
    ``chunk`` items per call (which the library sends in script calls of up to 500). Each is
    measured on a freshly flushed database: ``used_memory`` after the fill minus before it
    (MEMORY PURGE first).
    """
    rwq, queue = q.rwq, q.queue
    n, size, chunk = p["n"], p["size"], p["chunk"]
    data = (DATA * (size // len(DATA) + 1))[:size]
    new_id = rwq.item.new_id
    ids = [new_id() for _ in range(n)]
    _expect("id format", (len(ids[0]), int(ids[0], 16) >= 0, ids[0][12]), (32, True, "7"))
    # Load the add script and warm the connection up, outside the measurements.
    queue.add_items(db, [rwq.Item(data)], unique=True)
    item_key, queue_key = queue.keys.item, queue.keys.queue

    db.flushall()
    before = _used_memory(db)
    for start in range(0, n, chunk):
        pipe = db.pipeline(transaction=False)
        for first in range(start, min(start + chunk, n), PLAIN_CHUNK):
            some = ids[first : min(first + PLAIN_CHUNK, start + chunk, n)]
            pipe.mset({item_key(item_id): data for item_id in some})
            pipe.lpush(queue_key, *some)
        pipe.execute()
    plain = (_used_memory(db) - before) / n
    _expect("keys of the plain layout", db.dbsize(), n + 1)
    _expect("plain list length", db.llen(queue_key), n)

    db.flushall()
    make = rwq.Item
    before = _used_memory(db)
    for start in range(0, n, chunk):
        queue.add_items(db, [make(data, id=i) for i in ids[start : start + chunk]], unique=True)
    ours = (_used_memory(db) - before) / n
    _expect("keys of the queue (its items, list and counters)", db.dbsize(), n + 2)
    _expect("queue length", q.queue_len(), n)
    db.flushall()
    return {
        "ours": {"value": ours, "unit": "B/item"},
        "plain": {"value": plain, "unit": "B/item"},
        "n": n,
        "size": size,
    }


# asyncio ----------------------------------------------------------------------------------------


def asyncio_rates(db: redis.Redis, q: Any, p: Result) -> Result:
    """Lease+complete items/s: sync (one client), ``AsyncWorkQueue`` with one task, and
    ``tasks`` concurrent tasks on one ``redis.asyncio`` client (one connection pool, so a
    connection per task in flight), in rounds alternating between the three; and, as the
    ceiling that redis-py itself sets, EVALSHA ``return 1`` on the sync client and awaited on
    the single task's client.

    The single task uses its own client; with one task in flight its pool holds one
    connection. The sync rounds run inside the event loop's thread while nothing else runs.
    """
    rwq = q.rwq
    n, rounds, tasks = p["n"], p["rounds"], p["tasks"]
    per = max(tasks, n // rounds)
    _fill(q, db, 3 * (per * rounds + WARMUP))
    aq = rwq.AsyncWorkQueue(rwq.KeyPrefix(PREFIX))
    host, port = _address(db)

    async def main() -> Result:
        one = aredis.Redis(host=host, port=port)
        many = aredis.Redis(host=host, port=port)

        async def single(k: int) -> None:
            lease, complete = aq.lease, aq.complete
            for _ in range(k):
                item = await lease(one, 30, block=False)
                if item is None:
                    raise BenchError("the queue ran dry")
                await complete(one, item)

        async def concurrent(k: int) -> None:
            left = k

            async def task() -> None:
                nonlocal left
                lease, complete = aq.lease, aq.complete
                while left > 0:
                    left -= 1
                    item = await lease(many, 30, block=False)
                    if item is None:
                        raise BenchError("the queue ran dry")
                    await complete(many, item)

            await asyncio.gather(*(task() for _ in range(tasks)))

        async def sync(k: int) -> None:
            _plain_pairs(q, k)

        sha = db.script_load("return 1")
        key = PREFIX + ":rt"

        async def evalsha_sync(k: int) -> None:
            evalsha = db.evalsha
            for _ in range(k):
                evalsha(sha, 1, key)

        async def evalsha_async(k: int) -> None:
            evalsha = one.evalsha
            for _ in range(k):
                await evalsha(sha, 1, key)

        modes: dict[str, Callable[[int], Awaitable[None]]] = {
            "sync": sync,
            "async_1": single,
            "async_many": concurrent,
            "evalsha_sync": evalsha_sync,
            "evalsha_async": evalsha_async,
        }
        out: Result = {key: _rate_result(per) for key in modes}
        try:
            for body in modes.values():
                await body(WARMUP)
            for _ in range(rounds):
                for key, body in modes.items():
                    gc.collect()
                    start = time.perf_counter()
                    await body(per)
                    _record(out[key], per / (time.perf_counter() - start))
            out["connections"] = len(many.connection_pool._available_connections)
        finally:
            await one.aclose()
            await many.aclose()
        return out

    result = asyncio.run(main())
    _drained(q)
    return result


# WAIT -------------------------------------------------------------------------------------------


def wait_cost(db: redis.Redis, q: Any, p: Result) -> Result:
    """``add_item`` and ``complete`` with ``replicas=1`` (script + WAIT in one round trip)
    against the same calls without, on a primary with one replica (started by ``run.py``).

    Rounds with and without alternate. The items are built beforehand; the completing rounds
    complete items leased beforehand (long leases).
    """
    rwq, queue = q.rwq, q.queue
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    replication = db.info("replication")
    if int(replication.get("connected_slaves", 0)) < 1:
        raise BenchError(f"no replica attached to the primary: {replication}")
    total = 2 * (per * rounds + WARMUP)
    items = iter([rwq.Item(DATA) for _ in range(total)])
    add_item, complete = queue.add_item, queue.complete

    def adding(replicas: int | None) -> Callable[[int], None]:
        def body(k: int) -> None:
            for _ in range(k):
                if not add_item(db, next(items), replicas=replicas):
                    raise BenchError("add_item found a fresh id taken")

        return body

    adding(None)(WARMUP)
    adding(1)(WARMUP)
    result: Result = {key: _rate_result(per) for key in ("add", "add_wait")}
    for _ in range(rounds):
        _record(result["add"], _timed_rounds(adding(None), per, 1)["value"])
        _record(result["add_wait"], _timed_rounds(adding(1), per, 1)["value"])
    _expect("queue length after adding", q.queue_len(), total)

    leased = iter(queue.lease_many(db, LONG_LEASE, total, block=False))

    def completing(replicas: int | None) -> Callable[[int], None]:
        def body(k: int) -> None:
            for _ in range(k):
                if not complete(db, next(leased), replicas=replicas):
                    raise BenchError("complete did not complete a held item")

        return body

    completing(None)(WARMUP)
    completing(1)(WARMUP)
    result.update({key: _rate_result(per) for key in ("complete", "complete_wait")})
    for _ in range(rounds):
        _record(result["complete"], _timed_rounds(completing(None), per, 1)["value"])
        _record(result["complete_wait"], _timed_rounds(completing(1), per, 1)["value"])
    _drained(q)
    return result


# Cleans at scale ---------------------------------------------------------------------------------

#: Items written per script call when a clean workload builds its state inside Redis.
BUILD_CHUNK = 5_000
#: Calls of at least this many microseconds are logged by SLOWLOG during a timed clean: every
#: step of a clean is, and the commands inside scripts, which SLOWLOG logs too, almost never.
SLOWLOG_FROM_US = 200

_BUILD = """
local prefix, first, last, kind = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4]
local ids = {}
for i = first, last do
  local id = 'i' .. i
  ids[#ids + 1] = id
  redis.call('SET', prefix .. ':item:' .. id, ARGV[5])
  if kind == 'leased-out' then
    redis.call('HSET', prefix .. ':deliveries', id, 1)
  elseif kind == 'expired' and i % 3 == 0 then
    redis.call('SET', prefix .. ':lease:' .. id, 't@0', 'PX', 3600000)
  elseif kind == 'expired' and i % 3 == 1 then
    redis.call('DEL', prefix .. ':item:' .. id)
  end
end
if kind == 'queued' then
  redis.call('LPUSH', prefix .. ':queue', unpack(ids))
elseif kind == 'expired' then
  redis.call('LPUSH', prefix .. ':processing', unpack(ids))
end
return #ids
"""


def _build(db: redis.Redis, kind: str, first: int, n: int) -> None:
    """Items ``i<first>`` .. ``i<first + n - 1>``, built inside Redis: ``queued`` (data key and
    main queue), ``lost`` (data key only), ``leased-out`` (data key and a delivery count: leased
    once, then the processing list was lost and the lease ran out) or ``expired`` (on the
    processing list: a third leased, a third completed, a third with an expired lease)."""
    build = db.register_script(_BUILD)
    for start in range(first, first + n, BUILD_CHUNK):
        last = min(start + BUILD_CHUNK, first + n) - 1
        build(args=[PREFIX, start, last, kind, DATA])


@contextlib.contextmanager
def _slowlog(db: redis.Redis) -> Any:
    """Log every call of at least SLOWLOG_FROM_US; yields a function giving the longest, the
    99th percentile and the median of the calls logged, in seconds."""
    old = db.config_get("slowlog-*")
    db.config_set("slowlog-log-slower-than", SLOWLOG_FROM_US)
    db.config_set("slowlog-max-len", 1_000_000)
    db.slowlog_reset()

    def longest() -> tuple[float, float, float]:
        durations = sorted(e["duration"] for e in db.slowlog_get(1_000_000))
        if not durations:
            return 0.0, 0.0, 0.0
        last = len(durations) - 1
        return durations[-1] / 1e6, durations[int(0.99 * last)] / 1e6, durations[last // 2] / 1e6

    try:
        yield longest
    finally:
        db.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
        db.config_set("slowlog-max-len", old["slowlog-max-len"])
        db.slowlog_reset()


def deep_clean_lost(db: redis.Redis, q: Any, p: Result) -> Result:
    """One deep clean of ``n`` items of which a share was lost from both lists.

    ``lost`` is the lost share; ``all`` means every item was leased, the processing list was
    deleted and the leases ran out. The figure is the clean's time; ``longest_call`` is the
    longest call SLOWLOG saw during it (``p99_call`` the 99th percentile of the calls of at least
    SLOWLOG_FROM_US, ``p50_call`` their median) and ``longest_script`` the longest server time a
    step measured itself (TIME inside the script).
    """
    n = p["n"]
    if p["lost"] == "all":
        lost = n
        _build(db, "leased-out", 0, n)
    else:
        lost = round(n * float(p["lost"]))
        _build(db, "queued", 0, n - lost)
        _build(db, "lost", n - lost, lost)
    seen: list[Any] = []
    gc.collect()
    with _slowlog(db) as longest:
        start = time.perf_counter()
        report = q.queue.deep_clean(db, progress=seen.append)
        seconds = time.perf_counter() - start
        longest_call, p99, p50 = longest()
    _expect("items requeued by the deep clean", report.requeued, lost)
    _expect("data keys examined by the deep clean", report.examined, n)
    _expect("queue length after the clean", q.queue_len(), n)
    return {
        "value": seconds,
        "unit": "s",
        "longest_call": longest_call,
        "p99_call": p99,
        "p50_call": p50,
        "longest_script": seen[-1].longest_call,
        "lost": lost,
    }


def light_clean_longest(db: redis.Redis, q: Any, p: Result) -> Result:
    """One light clean of ``n`` processing-list entries (a third each leased, completed and
    expired); the figure is the longest call SLOWLOG saw during it."""
    n = p["n"]
    _build(db, "expired", 0, n)
    gc.collect()
    with _slowlog(db) as longest:
        start = time.perf_counter()
        report = q.queue.light_clean(db)
        seconds = time.perf_counter() - start
        longest_call, p99, p50 = longest()
    _expect("entries examined by the light clean", report.examined, n)
    return {"value": longest_call, "unit": "s", "total": seconds, "p99_call": p99, "p50_call": p50}


#: The commands that run the library's scripts: as scripts, or as functions of its library.
CALLS = ("evalsha", "eval", "fcall", "fcall_ro")


def schedules_tick(db: redis.Redis, q: Any, p: Result) -> Result:
    """Server time of the scheduler's call with ``counts`` schedules: nothing due, all due.

    The schedules (``every`` one hour, their due times spread over it) are written directly;
    each case runs ``calls`` calls, timed by the server (its script or function calls in
    ``INFO commandstats``): the median call.
    """
    ops = importlib.import_module("redis_work_queue.ops.schedules")
    run = q.rwq.transport.run
    keys = q.queue.keys
    spec = ops.Spec.of(None, 3600, "UTC", None, None, "one", "add").dumps()
    out: Result = {"value": 0.0, "unit": "us", "server_us": {}}
    for count in p["counts"]:
        db.delete(keys.schedules, keys.schedules_data, keys.schedules_due, keys.queue)
        now = int(db.time()[0]) * 1000
        names = [f"s{k}" for k in range(count)]
        with db.pipeline(transaction=False) as pipe:
            for k, name in enumerate(names):
                pipe.hset(keys.schedules, name, spec)
                pipe.hset(keys.schedules_data, name, DATA)
                pipe.zadd(keys.schedules_due, {name: now + 60_000 + k * 3_600_000 // count})
            pipe.execute()
        for case in ("idle", "due"):
            times: list[float] = []
            for _ in range(p["calls"]):
                if case == "due":  # every schedule due (moved back by the last call)
                    with db.pipeline(transaction=False) as pipe:
                        for k, name in enumerate(names):
                            pipe.zadd(keys.schedules_due, {name: now - 3_600_000 + k})
                        pipe.execute()
                db.config_resetstat()
                added = run(db, ops.run_steps(keys))
                stats = db.info("commandstats")
                usecs = (stats.get(f"cmdstat_{c}", {}).get("usec", 0) for c in CALLS)
                times.append(float(sum(usecs)))
                limit = ops.DUE_LIMIT
                _expect("occurrences added", len(added), 0 if case == "idle" else min(count, limit))
                if added:
                    db.delete(keys.queue, *(keys.item(item_id) for item_id in added))
            out["server_us"][f"{count}:{case}"] = statistics.median(times)
    out["value"] = out["server_us"][f"{p['counts'][-1]}:due"]
    return out


# Rate limits ------------------------------------------------------------------------------------


def rate_limited(db: redis.Redis, q: Any, p: Result) -> Result:
    """Items/s of the plain ``lease(block=False)`` + ``complete`` loop on a queue with a rate
    limit it never reaches (RateLimit(10**9, 1, burst=10**6): the lease script reads and writes
    the bucket on every call) and on the same queue without one, in alternating rounds.
    """
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    generous = rwq.RateLimit(10**9, 1, burst=10**6)

    def pairs(k: int, limit: Any) -> float:
        q.queue.set_rate_limit(db, limit)
        if limit is None:
            db.delete(q.queue.keys.rate)  # no limit at all: the reference keys only
        _fill(q, db, k)
        gc.collect()
        start = time.perf_counter()
        _plain_pairs(q, k)
        seconds = time.perf_counter() - start
        _drained(q)
        return k / seconds

    pairs(WARMUP, None)
    pairs(WARMUP, generous)
    result: Result = {"none": _rate_result(per), "limited": _rate_result(per)}
    for _ in range(rounds):
        _record(result["none"], pairs(per, None))
        _record(result["limited"], pairs(per, generous))
    return result


# Fair groups -------------------------------------------------------------------------------------


def _fill_groups(q: Any, db: redis.Redis, n: int, groups: int, start: int = 0) -> None:
    """Add ``n`` fresh items spread over ``groups`` groups (item k to group ``g<k % groups>``)."""
    make = q.rwq.Item
    for first in range(start, start + n, FILL_CHUNK):
        count = min(FILL_CHUNK, start + n - first)
        names = [f"g{k % groups}" for k in range(first, first + count)]
        q.queue.add_items(db, [make(DATA) for _ in range(count)], unique=True, group=names)


def grouped(db: redis.Redis, q: Any, p: Result) -> Result:
    """Items/s of the plain ``lease(block=False)`` + ``complete`` loop on ungrouped items, on
    items of 10 groups, and on items of ``many`` groups (two ready items each, filled once: the
    ring holds that many groups throughout, and each lease puts its group back, as with 10),
    in alternating rounds of one run.
    """
    n, rounds, many = p["n"], p["rounds"], p["many"]
    per = max(1, n // rounds)

    def pairs(k: int, groups: int) -> float:
        if groups == 0:
            _fill(q, db, k)
        elif groups < many:
            _fill_groups(q, db, k, groups)
        gc.collect()
        start = time.perf_counter()
        _plain_pairs(q, k)
        seconds = time.perf_counter() - start
        _expect("processing list after the round", q.processing(), 0)
        return k / seconds

    pairs(WARMUP, 0)
    pairs(WARMUP, 10)
    _fill_groups(q, db, 2 * many, many)
    _expect("items per round", n // rounds <= many, True)
    _expect("groups on the ring", int(db.llen(q.queue.keys.groups)), many)
    result: Result = {
        "ungrouped": _rate_result(per),
        "groups_10": _rate_result(per),
        "groups_many": _rate_result(per),
    }
    for _ in range(rounds):
        _record(result["ungrouped"], pairs(per, 0))
        _record(result["groups_10"], pairs(per, 10))
        _record(result["groups_many"], pairs(per, many))
    return result


def group_rate_limited(db: redis.Redis, q: Any, p: Result) -> Result:
    """Items/s of the plain ``lease(block=False)`` + ``complete`` loop on items of 10 groups,
    each group with a rate limit it never reaches (every group's, RateLimit(10**9, 1,
    burst=10**6): each lease reads and moves its group's pacing clock, and the pacer takes its
    turns on the ring) and without one, in alternating rounds of one run.
    """
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    generous = rwq.RateLimit(10**9, 1, burst=10**6)
    keys = q.queue.keys

    def pairs(k: int, limit: Any) -> float:
        q.queue.set_default_group_rate_limit(db, limit)
        if limit is None:
            db.delete(keys.groups_paced)  # no clocks: the ring holds the groups alone
            db.lrem(keys.groups, 0, b"\xff")
            db.hdel(keys.groups_state, b"q:\xff")
        _fill_groups(q, db, k, 10)
        gc.collect()
        start = time.perf_counter()
        _plain_pairs(q, k)
        seconds = time.perf_counter() - start
        _expect("processing list after the round", q.processing(), 0)
        return k / seconds

    pairs(WARMUP, None)
    pairs(WARMUP, generous)
    result: Result = {"none": _rate_result(per), "limited": _rate_result(per)}
    for _ in range(rounds):
        _record(result["none"], pairs(per, None))
        _record(result["limited"], pairs(per, generous))
    return result


OURS_ONLY: dict[str, Callable[[redis.Redis, Any, Result], Result]] = {
    "deep_clean_lost": deep_clean_lost,
    "light_clean_longest": light_clean_longest,
    "worker_runner": worker_runner,
    "batch": batch,
    "memory": memory,
    "asyncio": asyncio_rates,
    "wait": wait_cost,
    "schedules_tick": schedules_tick,
    "rate_limited": rate_limited,
    "grouped": grouped,
    "group_rate_limited": group_rate_limited,
}
