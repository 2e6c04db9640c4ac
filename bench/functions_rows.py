"""Row module of Redis Functions: the same calls as functions (FCALL) and as scripts (EVALSHA).

Workload ``functions:ab`` (key ``functions``): in one process, two clients of the same server,
one calling the library's functions, the other its scripts (``transport.use_functions(db,
"never")``), their rounds alternating so both are measured at the same moments: add one item
per call, lease+complete one item at a time, and the runner's own call (complete with the next
lease). Each figure is the client's rate (items/s) and the server's time per item (``INFO
commandstats``, the usec of FCALL or of EVALSHA). The rows are ratios functions/scripts, for
information: the server time is the one the issue's capacity target reads.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import redis

from rows import Job, Ratio, Result, Results, Row, rate
from workloads import DATA, PREFIX, WARMUP, BenchError

KINDS = ("add", "lease_complete", "complete_and_lease")
LABELS = {
    "add": "add, 1 per call",
    "lease_complete": "lease+complete, 1 at a time",
    "complete_and_lease": "complete with the next lease",
}


def _server_usec(db: redis.Redis) -> tuple[int, int]:
    """(calls, usec) of FCALL and EVALSHA together since the last reset."""
    stats = db.info("commandstats")
    calls = usec = 0
    for name in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"):
        calls += int(stats.get(name, {}).get("calls", 0))
        usec += int(stats.get(name, {}).get("usec", 0))
    return calls, usec


def functions_ab(db: redis.Redis, q: Any, p: Result) -> Result:
    """Functions against scripts, rounds alternating (see the module's description)."""
    rwq = q.rwq
    n, rounds = p["n"], p["rounds"]
    per = max(1, n // rounds)
    kwargs = db.connection_pool.connection_kwargs
    clients = {
        way: redis.Redis(host=kwargs.get("host", "127.0.0.1"), port=kwargs["port"])
        for way in ("functions", "scripts")
    }
    rwq.transport.use_functions(clients["scripts"], "never")
    queue = rwq.WorkQueue(rwq.KeyPrefix(PREFIX))

    def fill(client: redis.Redis, k: int) -> None:
        for start in range(0, k, 1000):
            batch = [rwq.Item(DATA) for _ in range(min(1000, k - start))]
            queue.add_items(client, batch, unique=True)

    def add(client: redis.Redis, k: int) -> None:
        items = [rwq.Item(DATA) for _ in range(k)]
        for item in items:
            queue.add_item(client, item)

    def lease_complete(client: redis.Redis, k: int) -> None:
        for _ in range(k):
            item = queue.lease(client, 30, block=False)
            if item is None:
                raise BenchError("the queue ran dry")
            queue.complete(client, item)

    def chain(client: redis.Redis, k: int) -> None:
        item = queue.lease(client, 30, block=False)
        for _ in range(k):
            if item is None:
                raise BenchError("the queue ran dry")
            _, found = rwq.complete_and_lease_from(client, queue, item, [queue], 30)
            item = None if found is None else found[1]
        if item is not None:
            queue.complete(client, item)

    bodies: dict[str, tuple[Callable[[redis.Redis, int], None], bool]] = {
        "add": (add, False),
        "lease_complete": (lease_complete, True),
        "complete_and_lease": (chain, True),
    }
    out: Result = {}
    for kind, (body, needs_items) in bodies.items():
        figures = {way: {"rates": [], "usec": []} for way in clients}
        for client in clients.values():  # warm up: the library loaded, scripts cached
            if needs_items:
                fill(client, WARMUP + 1)
            body(client, WARMUP)
            db.flushdb()
        for _ in range(rounds):
            for way, client in clients.items():
                if needs_items:
                    fill(client, per + 1)
                gc.collect()
                db.config_resetstat()
                start = time.perf_counter()
                body(client, per)
                seconds = time.perf_counter() - start
                _, usec = _server_usec(db)
                figures[way]["rates"].append(per / seconds)
                figures[way]["usec"].append(usec / per)
                db.flushdb()
        out[kind] = {
            way: {"value": max(f["rates"]), "usec_per_item": min(f["usec"]), **f}
            for way, f in figures.items()
        }
    if not rwq.transport.uses_functions(clients["functions"]):
        raise BenchError("the functions client called scripts (a server without functions?)")
    for client in clients.values():
        client.close()
    return out


#: Registered with this library's worker (``ours_worker.py``).
WORKLOADS = {"functions_ab": functions_ab}


def jobs(quick: bool) -> list[Job]:
    """One job: every kind of call, both ways."""
    n, rounds = (600, 2) if quick else (6_000, 5)
    return [Job("functions", "ours", "functions_ab", {"n": n, "rounds": rounds})]


def _part(results: Results, kind: str, way: str, field: str) -> float | None:
    r = results.get(("functions", "ours"), {})
    if "error" in r:
        return None
    value = r.get(kind, {}).get(way, {}).get(field)
    return None if value is None else float(value)


def report(results: Results, quick: bool) -> list[str]:
    """Nothing beyond the rows."""
    del results, quick
    return []


def rows(results: Results, quick: bool) -> list[Row]:
    """Per kind of call: client rate and server time, functions against scripts."""
    del quick
    out = []
    for kind in KINDS:
        ways = ("functions", "scripts")
        fn, sc = (_part(results, kind, way, "value") for way in ways)
        fn_us, sc_us = (_part(results, kind, way, "usec_per_item") for way in ways)
        ratio = None if fn is None or sc is None or sc == 0 else fn / sc
        out.append(
            Ratio(ratio, "functions/scripts, items/s").row(
                ("functions",), f"{LABELS[kind]}: client rate", rate(fn), f"(scripts {rate(sc)})"
            )
        )
        server = None if fn_us is None or sc_us is None or fn_us == 0 else sc_us / fn_us
        out.append(
            Ratio(server, "scripts/functions, server µs").row(
                ("functions",),
                f"{LABELS[kind]}: server time per item",
                "ERR" if fn_us is None else f"{fn_us:.1f} µs",
                "" if sc_us is None else f"(scripts {sc_us:.1f} µs)",
            )
        )
    return out
