"""Row module of the peers: this library next to the published baseline, rq, BullMQ, Redis
Streams consumer groups and the plain SET+LPUSH layout, on the same workloads in the same run.

Workloads (keys ``peers:<workload>``): one add per call; adds 100 per call; the client's worker
with a no-op handler draining pre-added items (this library: the ``Worker`` runner, in rounds
alternating with the plain lease+complete loop); lease+complete one at a time and 100 at a
time (where the client has them); Redis bytes per waiting 100-byte item after 20k adds.
"""

from __future__ import annotations

from rows import Job, Ratio, Result, Results, Row, div, per_item, rate

CLIENTS = ("ours", "baseline", "rq", "bullmq", "streams", "plain")
#: workload -> label, the clients that offer it.
WORKLOADS = {
    "add": ("add, 1 per call", ("ours", "baseline", "rq", "bullmq", "streams")),
    "add_batch": ("add, 100 per call", ("ours", "baseline", "rq", "bullmq", "streams")),
    "worker": ("worker, no-op handler", ("ours", "rq", "bullmq", "streams")),
    "lease_complete": ("lease+complete, 1 at a time", ("ours", "baseline", "streams")),
    "lease_complete_batch": ("lease+complete, 100 at a time", ("ours", "streams")),
    "memory_per_item": ("bytes per waiting item", CLIENTS),
}
MEMORY_ITEMS = 20_000
ITEM_BYTES = 100


def _sizes(quick: bool) -> dict[str, int]:
    if quick:
        return {"add": 600, "add_batch": 3_000, "worker": 1_500, "slow_worker": 300,
                "lease_complete": 1_500, "lease_complete_batch": 3_000, "rounds": 1}  # fmt: skip
    return {"add": 6_000, "add_batch": 30_000, "worker": 9_000, "slow_worker": 1_500,
            "lease_complete": 9_000, "lease_complete_batch": 30_000, "rounds": 3}  # fmt: skip


def memory_job(workload: str) -> bool:
    """Memory figures do not depend on timing: measured in the first pass only."""
    return workload == "memory_per_item"


def jobs(quick: bool) -> list[Job]:
    """Every client's job of every workload it offers."""
    s = _sizes(quick)
    out: list[Job] = []
    for workload, (_, clients) in WORKLOADS.items():
        for impl in clients:
            params: Result = {"n": s.get(workload, 0), "rounds": s["rounds"]}
            name = workload
            if workload == "memory_per_item":
                params = {"n": MEMORY_ITEMS, "size": ITEM_BYTES}
            elif workload == "worker" and impl == "ours":
                name = "worker_runner"  # the runner and the plain loop, rounds alternating
            elif workload == "worker" and impl in ("rq", "bullmq"):
                params["n"] = s["slow_worker"]
            out.append(Job(f"peers:{workload}", impl, name, params, once=memory_job(workload)))
    return out


def _value(results: Results, workload: str, impl: str, part: str | None = None) -> float | None:
    r = results.get((f"peers:{workload}", impl), {})
    if part is not None:
        r = r.get(part, {}) if "error" not in r else r
    return None if "error" in r or "value" not in r else float(r["value"])


def _figure(results: Results, workload: str, impl: str) -> float | None:
    if workload == "worker" and impl == "ours":
        return _value(results, workload, impl, "runner")
    return _value(results, workload, impl)


def report(results: Results, quick: bool) -> list[str]:
    """The peers table: each client's figure, and this library's ratio to it."""
    del quick
    ran = {key for key, _ in results}
    header = ["workload", *CLIENTS]
    table = [header]
    for workload, (label, clients) in WORKLOADS.items():
        if f"peers:{workload}" not in ran:
            continue
        memory = workload == "memory_per_item"
        fmt = per_item if memory else rate
        ours = _figure(results, workload, "ours")
        cells, ratios = [label], ["  ours/peer" if not memory else "  peer/ours"]
        for impl in CLIENTS:
            value = _figure(results, workload, impl) if impl in clients else None
            cells.append(fmt(value) if impl in clients else "-")
            ratio = div(value, ours) if memory else div(ours, value)
            ratios.append("" if impl == "ours" or impl not in clients or ratio is None
                          else f"{ratio:.2f}x")  # fmt: skip
        table += [cells, ratios]
    if len(table) == 1:
        return []
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    lines = ["Peers, same run (rates: items/s, best round; '-': the client has no such call):"]
    for row in table:
        cells = [
            c.ljust(w) if i == 0 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip())
    return [*lines, ""]


def rows(results: Results, quick: bool) -> list[Row]:
    """The targets: the runner against the plain loop, BullMQ's and rq's workers; memory."""
    del quick
    runner = _value(results, "worker", "ours", "runner")
    plain = _value(results, "worker", "ours", "plain")
    bull, rq = _figure(results, "worker", "bullmq"), _figure(results, "worker", "rq")
    mem, mem_plain = (_figure(results, "memory_per_item", i) for i in ("ours", "plain"))
    needs, label = ("peers:worker",), "Worker runner, no-op handler"
    return [
        Ratio(div(runner, plain), "runner/plain loop", at_least=0.9).row(
            needs, f"{label} vs plain lease+complete loop", rate(runner), f"(plain {rate(plain)})"
        ),
        Ratio(div(runner, bull), "runner/BullMQ Worker", at_least=3.0).row(
            needs, f"{label} vs BullMQ Worker", rate(runner), f"(BullMQ {rate(bull)})"
        ),
        Ratio(div(runner, rq), "runner/rq SimpleWorker", at_least=10.0).row(
            needs, f"{label} vs rq SimpleWorker", rate(runner), f"(rq {rate(rq)})"
        ),
        Ratio(div(mem, mem_plain), "ours/plain SET+LPUSH", at_most=1.05).row(
            ("peers:memory_per_item",),
            f"bytes per waiting {ITEM_BYTES} B item, {MEMORY_ITEMS // 1000}k items",
            per_item(mem),
            f"(plain {per_item(mem_plain)})",
        ),
    ]
