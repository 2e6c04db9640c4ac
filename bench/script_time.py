"""Where the server's time goes: Redis time per call of this library's scripts against minimal
scripts of the same key layout, read from ``INFO commandstats`` on a throw-away redis-server.

    python bench/script_time.py            # every row (about a minute)
    python bench/script_time.py --quick    # fewer calls
    python bench/script_time.py --only single batch complete_list events
    python bench/script_time.py --check    # exit 1 when a target ratio is missed
    python bench/script_time.py --functions never   # ours as scripts (EVALSHA), not functions

Rows:

* ``single``: add / lease / complete one item per call (in rounds of ROUND items, so the
  processing list stays short), ours against a minimal script doing the same writes (SET +
  LPUSH; RPOPLPUSH + GET + SET PX; DEL + LREM + DEL), an empty script, and variants of ours
  (the includes alone, as sent with the script and with every definition kept) to show what
  costs what; and renew (each leased item once, before its completion) against GET + PEXPIRE.
* ``batch``: lease_many + complete_many and add_items at BATCH items per call, against minimal
  batch scripts, in server time per item and in client items per second.
* ``events``: add / lease / complete one item per call on a queue made with ``events=True``
  (its stream full, at the cap of 10,000 entries, so that each append trims too) against the
  same queue without events, rounds alternating.
* ``complete_list``: complete's server time per call with a long processing list (5k stuck
  leases at the old end and 5k in flight completed in lease order; 5k in flight completed in
  random order; 20k in flight), against the same completions with a near-empty list.

Ours run as the library's functions (FCALL) by default, on a Redis 7 server; ``--functions
never`` runs them as scripts (EVALSHA). The minimal scripts are always scripts.

Every figure is a ratio of two measurements of the same run; the server and this process share
the machine, so absolute figures move with its load.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))  # the launcher

import servers
from redis_work_queue import Item, KeyPrefix, WorkQueue, complete_and_lease_from, loader
from redis_work_queue.keyprefix import QueueKeys

ROUND = 50
BATCH = 100
DATA = b'{"kind": "resize", "source": "s3://bucket/path/0001.png", "width": 640, "q": 80}'
PREFIX = "st"

#: Targets: (row, ratio name) -> the largest (or, for rates, smallest) ratio allowed.
TARGETS = {
    "add": 1.6,
    "lease": 2.0,
    "complete": 1.6,
    "complete_list": 1.3,
    "batch_server": 1 / 0.8,
}

ADD_MIN = """
local p = ARGV[1]
redis.call('SET', p .. ':item:' .. ARGV[2], ARGV[3])
redis.call('LPUSH', KEYS[1], ARGV[2])
return 1
"""
LEASE_MIN = """
local p = ARGV[1]
local id = redis.call('RPOPLPUSH', KEYS[1], p .. ':processing')
if not id then
  return nil
end
local data = redis.call('GET', p .. ':item:' .. id)
redis.call('SET', p .. ':lease:' .. id, ARGV[2], 'PX', ARGV[3])
return {id, data}
"""
COMPLETE_MIN = """
local p, id = ARGV[1], ARGV[2]
local done = redis.call('DEL', p .. ':item:' .. id)
redis.call('LREM', p .. ':processing', 1, id)
redis.call('DEL', p .. ':lease:' .. id)
return done
"""
RENEW_MIN = """
local lease = ARGV[1] .. ':lease:' .. ARGV[2]
if redis.call('GET', lease) == ARGV[3] then
  redis.call('PEXPIRE', lease, ARGV[4])
  return 1
end
return 0
"""
EMPTY = "return 1"
ADD_MANY_MIN = """
local p, ids = ARGV[1], {}
for i = 2, #ARGV, 2 do
  redis.call('SET', p .. ':item:' .. ARGV[i], ARGV[i + 1])
  ids[#ids + 1] = ARGV[i]
end
redis.call('LPUSH', KEYS[1], unpack(ids))
local out = {}
for i = 1, #ids do
  out[i] = 1
end
return out
"""
LEASE_MANY_MIN = """
local p = ARGV[1]
local ids = redis.call('RPOP', KEYS[1], tonumber(ARGV[4]))
if not ids then
  return {}
end
redis.call('LPUSH', p .. ':processing', unpack(ids))
local keys = {}
for i, id in ipairs(ids) do
  keys[i] = p .. ':item:' .. id
  redis.call('SET', p .. ':lease:' .. id, ARGV[2], 'PX', ARGV[3])
end
local data = redis.call('MGET', unpack(keys))
local out = {}
for i, id in ipairs(ids) do
  out[#out + 1] = id
  out[#out + 1] = data[i]
end
return out
"""
COMPLETE_MANY_MIN = """
local p, items, leases = ARGV[1], {}, {}
for i = 2, #ARGV do
  items[#items + 1] = p .. ':item:' .. ARGV[i]
  leases[#leases + 1] = p .. ':lease:' .. ARGV[i]
  redis.call('LREM', p .. ':processing', -1, ARGV[i])
end
local out = {}
for i = 1, #items do
  out[i] = redis.call('DEL', items[i])
end
redis.call('DEL', unpack(leases))
return out
"""


# The server ------------------------------------------------------------------------------------


@contextlib.contextmanager
def redis_server(binary: str) -> Iterator[tuple[redis.Redis, Callable[[redis.Redis], Meter]]]:
    """A throw-away redis-server (no persistence; the tests' launcher), a client of it, and the
    meter of its time."""
    os.environ[servers.BINARY_ENV] = binary
    with tempfile.TemporaryDirectory(prefix="script-time-") as base:
        server = servers.start_server(Path(base))
        db = redis.Redis(port=server.port)
        try:
            yield db, Meter
        finally:
            db.close()
            server.stop()


@contextlib.contextmanager
def callgrind_server(
    binary: str,
) -> Iterator[tuple[redis.Redis, Callable[[redis.Redis], Meter]]]:
    """A throw-away redis-server run by valgrind's callgrind, which counts the instructions the
    server runs inside EVALSHA (``--toggle-collect=evalShaCommand``), a client of it, and the meter
    of those instructions. Instruction counts repeat from run to run whatever else the machine
    is doing; they are not time (a cache miss costs one instruction)."""
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (Debian's valgrind package)")
    with tempfile.TemporaryDirectory(prefix="script-instructions-") as base:
        port = servers.free_port()
        out = Path(base) / "callgrind.out"
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--toggle-collect=evalShaCommand",
            "--toggle-collect=fcallCommand",
            f"--callgrind-out-file={out}",
            binary,
            *("--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *("--dir", base),
        ]
        process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        db = redis.Redis(port=port, socket_timeout=120)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    db.ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise SystemExit("redis-server did not start under valgrind") from None
                    time.sleep(0.2)

            def meter(db: redis.Redis) -> Meter:
                return InstructionMeter(db, process.pid, out)

            yield db, meter
        finally:
            db.close()
            process.terminate()
            process.wait(timeout=60)


# Measuring -------------------------------------------------------------------------------------


#: Commands counted as the client's own, not as commands a script ran.
_OUTER = {
    "cmdstat_evalsha",
    "cmdstat_eval",
    "cmdstat_fcall",
    "cmdstat_function|load",
    "cmdstat_config|resetstat",
    "cmdstat_info",
}
#: The calls measured: scripts, and functions (only one of them runs in a phase).
_CALLS = ("cmdstat_evalsha", "cmdstat_fcall")


class Meter:
    """The server's cost of EVALSHA (its time in µs, from ``INFO commandstats``), its calls and
    the commands those calls ran, summed over the phases measured."""

    def __init__(self, db: redis.Redis) -> None:
        self.db = db
        self.cost = 0
        self.calls = 0
        self.inner = 0
        self.wall = 0.0

    def measure(self, phase: Callable[[], Any]) -> Any:
        self.db.config_resetstat()
        self.start()
        start = time.perf_counter()
        out = phase()
        self.wall += time.perf_counter() - start
        stats = self.db.info("commandstats")
        evalsha = {
            field: sum(int(stats.get(name, {}).get(field, 0)) for name in _CALLS)
            for field in ("calls", "usec")
        }
        self.cost += self.stop(evalsha)
        self.calls += int(evalsha.get("calls", 0))
        self.inner += sum(int(v["calls"]) for k, v in stats.items() if k not in _OUTER)
        return out

    def start(self) -> None:
        """Called as a phase starts (the server's own statistics are reset already)."""

    def stop(self, evalsha: dict[str, Any]) -> int:
        """The phase's cost, given the EVALSHA line of ``INFO commandstats``."""
        return int(evalsha.get("usec", 0))

    @property
    def per_call(self) -> float:
        return self.cost / max(self.calls, 1)

    @property
    def commands_per_call(self) -> float:
        return self.inner / max(self.calls, 1)


class InstructionMeter(Meter):
    """The instructions the server ran inside EVALSHA (see :func:`callgrind_server`)."""

    def __init__(self, db: redis.Redis, pid: int, out: Path) -> None:
        super().__init__(db)
        self.pid, self.out = pid, out

    def _control(self, option: str) -> None:
        done = subprocess.run(
            ["callgrind_control", option, str(self.pid)],
            check=False,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise RuntimeError(f"callgrind_control {option}: {done.stderr.strip()}")

    def start(self) -> None:
        self._control("--zero")

    def stop(self, evalsha: dict[str, Any]) -> int:
        before = set(self.out.parent.glob(self.out.name + ".*"))
        self._control("--dump")
        deadline = time.monotonic() + 30
        while True:
            new = set(self.out.parent.glob(self.out.name + ".*")) - before
            text = new and next(iter(new)).read_text()
            found = text and _TOTALS.search(text)
            if found:
                return int(found[1])
            if time.monotonic() > deadline:
                raise RuntimeError("callgrind wrote no counts")
            time.sleep(0.05)


#: The instruction count of a callgrind dump.
_TOTALS = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)


def loaded(db: redis.Redis, source: str) -> Callable[..., Any]:
    sha = db.script_load(source)

    def call(keys: tuple[str, ...], args: tuple[Any, ...]) -> Any:
        return db.evalsha(sha, len(keys), *keys, *args)

    return call


# Rows ------------------------------------------------------------------------------------------


def single(
    db: redis.Redis, rounds: int, meter: Callable[[redis.Redis], Meter] = Meter
) -> dict[str, float]:
    """Server cost per call of ours, the minimal scripts, the empty script and the preambles."""
    keys = QueueKeys(KeyPrefix(PREFIX))
    queue = WorkQueue(KeyPrefix(PREFIX))
    mins = {n: loaded(db, s) for n, s in (("add", ADD_MIN), ("lease", LEASE_MIN))}
    mins["complete"] = loaded(db, COMPLETE_MIN)
    mins["renew"] = loaded(db, RENEW_MIN)
    empty = loaded(db, EMPTY)
    preamble = {
        f"{kind}_{name}": loaded(db, _preamble(name, keep_unused=kind == "all"))
        for name in ("add", "lease", "complete", "renew")
        for kind in ("kept", "all")
    }
    ops = ("add", "lease", "complete", "renew")
    meters = {f"{who}_{op}": meter(db) for who in ("ours", "min") for op in ops}
    meters["empty"] = meter(db)
    meters["ours_chain"] = meter(db)
    for kind_op in preamble:
        meters[f"preamble_{kind_op}"] = meter(db)
    sk, sa = keys.script_keys, keys.script_args

    def one_round(ids: list[str]) -> None:
        db.flushall()
        meters["ours_add"].measure(lambda: [queue.add_item(db, Item(DATA, id=i)) for i in ids])
        items = meters["ours_lease"].measure(
            lambda: [queue.lease(db, 30, block=False) for _ in ids]
        )
        meters["ours_renew"].measure(lambda: [queue.renew(db, it, 30) for it in items if it])
        meters["ours_complete"].measure(lambda: [queue.complete(db, it) for it in items if it])
        # The same items once more, each completed with the next one's lease in one call.
        for i in ids:
            queue.add_item(db, Item(DATA, id=i))
        held = queue.lease(db, 30, block=False)

        def chain() -> None:
            item = held
            while item is not None:
                _, found = complete_and_lease_from(db, queue, item, [queue], 30)
                item = None if found is None else found[1]

        meters["ours_chain"].measure(chain)
        db.flushall()
        meters["min_add"].measure(lambda: [mins["add"](sk, (*sa, i, DATA)) for i in ids])
        got = meters["min_lease"].measure(
            lambda: [mins["lease"](sk, (*sa, "t@1", 30000)) for _ in ids]
        )
        meters["min_renew"].measure(
            lambda: [mins["renew"](sk, (*sa, g[0], "t@1", 30000)) for g in got]
        )
        meters["min_complete"].measure(lambda: [mins["complete"](sk, (*sa, g[0])) for g in got])
        meters["empty"].measure(lambda: [empty(sk, sa) for _ in ids])
        for kind_op, script in preamble.items():
            meters[f"preamble_{kind_op}"].measure(lambda s=script: [s(sk, sa) for _ in ids])

    for r in range(rounds):
        one_round([f"i{r * ROUND + k}" for k in range(ROUND)])
    out = {name: m.per_call for name, m in meters.items()}
    out.update({f"{name}_commands": m.commands_per_call for name, m in meters.items()})
    return out


def events(
    db: redis.Redis, rounds: int, meter: Callable[[redis.Redis], Meter] = Meter
) -> dict[str, float]:
    """Server cost per call of add, lease and complete with events on and off."""
    sides = {
        "off": WorkQueue(KeyPrefix(PREFIX)),
        "on": WorkQueue(KeyPrefix(f"{PREFIX}e"), events=True),
    }
    db.flushall()
    stream = QueueKeys(KeyPrefix(f"{PREFIX}e")).events
    maxlen = sides["on"].events_maxlen
    pipe = db.pipeline(transaction=False)
    for k in range(maxlen or 0):  # the stream at its cap: every append trims as well
        pipe.xadd(stream, {"kind": "added", "id": f"old{k}"}, maxlen=maxlen, approximate=True)
    pipe.execute()
    meters = {f"{side}_{op}": meter(db) for side in sides for op in ("add", "lease", "complete")}

    def one_round(side: str, queue: WorkQueue, ids: list[str]) -> None:
        meters[f"{side}_add"].measure(lambda: [queue.add_item(db, Item(DATA, id=i)) for i in ids])
        items = meters[f"{side}_lease"].measure(
            lambda: [queue.lease(db, 30, block=False) for _ in ids]
        )
        meters[f"{side}_complete"].measure(lambda: [queue.complete(db, it) for it in items if it])

    for r in range(rounds):
        for side, queue in sides.items():
            one_round(side, queue, [f"e{r * ROUND + k}" for k in range(ROUND)])
    out = {name: m.per_call for name, m in meters.items()}
    out.update({f"{name}_commands": m.commands_per_call for name, m in meters.items()})
    return out


def _preamble(name: str, keep_unused: bool) -> str:
    """The script's includes as sent with it (the definitions it uses) or with every definition
    of every include (``keep_unused``), followed by ``return 1`` instead of the script's code."""
    assembled = loader.assemble(name, keep_unused=keep_unused)
    own = f"lua/{name}.lua"
    lines = [
        "" if label == own else line
        for line, (label, _) in zip(assembled.text.split("\n"), assembled.origins, strict=False)
    ]
    return "\n".join(lines) + "\nreturn 1\n"


def batch(
    db: redis.Redis, rounds: int, meter: Callable[[redis.Redis], Meter] = Meter
) -> dict[str, float]:
    """Per item: server cost and client items/s of ours and the minimal batch scripts."""
    keys = QueueKeys(KeyPrefix(PREFIX))
    queue = WorkQueue(KeyPrefix(PREFIX))
    add_min, lease_min = loaded(db, ADD_MANY_MIN), loaded(db, LEASE_MANY_MIN)
    complete_min = loaded(db, COMPLETE_MANY_MIN)
    sk, sa = keys.script_keys, keys.script_args
    m = {k: meter(db) for k in ("ours_add", "min_add", "ours_cycle", "min_cycle")}
    items_total = 0
    for r in range(rounds):
        db.flushall()
        batch_items = [Item(DATA, id=f"b{r}-{k}") for k in range(BATCH * 10)]
        items_total += len(batch_items)
        for start in range(0, len(batch_items), BATCH):
            chunk = batch_items[start : start + BATCH]
            m["ours_add"].measure(lambda c=chunk: queue.add_items(db, c))

        def ours_cycle() -> None:
            while True:
                leased = queue.lease_many(db, 30, BATCH, block=False)
                if not leased:
                    return
                queue.complete_many(db, leased)

        m["ours_cycle"].measure(ours_cycle)
        db.flushall()
        for start in range(0, len(batch_items), BATCH):
            fields: list[Any] = []
            for item in batch_items[start : start + BATCH]:
                fields += (item.id(), item.data())
            m["min_add"].measure(lambda f=fields: add_min(sk, (*sa, *f)))

        def min_cycle() -> None:
            while True:
                flat = lease_min(sk, (*sa, "t@1", 30000, BATCH))
                if not flat:
                    return
                complete_min(sk, (*sa, *flat[0::2]))

        m["min_cycle"].measure(min_cycle)
    out: dict[str, float] = {}
    for name, each in m.items():
        out[f"{name}_cost_per_item"] = each.cost / items_total
        out[f"{name}_items_per_s"] = items_total / each.wall
    return out


def complete_list(
    db: redis.Redis, n: int, meter: Callable[[redis.Redis], Meter] = Meter
) -> dict[str, float]:
    """Server cost per complete call, with the processing list in several shapes."""
    queue = WorkQueue(KeyPrefix(PREFIX))
    out: dict[str, float] = {}

    def case(name: str, stuck_old: int, flight: int, order: str, stuck_new: int = 0) -> None:
        db.flushall()
        total = stuck_old + flight + stuck_new
        queue.add_items(db, [Item(DATA, id=f"c{k}") for k in range(total)])
        held: list[Item] = []
        while len(held) < total:
            held += queue.lease_many(db, 300, min(500, total - len(held)), block=False)
        done = held[stuck_old : stuck_old + flight]
        if order == "random":
            random.Random(7).shuffle(done)
        elif order == "lifo":
            done.reverse()
        phase_meter = meter(db)
        phase_meter.measure(lambda: [queue.complete(db, it) for it in done])
        out[name] = phase_meter.per_call

    # The same completions with a near-empty list: ROUND leased at a time, completed in order.
    db.flushall()
    queue.add_items(db, [Item(DATA, id=f"e{k}") for k in range(n)])
    empty = meter(db)
    for _ in range(0, n, ROUND):
        few = queue.lease_many(db, 300, ROUND, block=False)
        empty.measure(lambda f=few: [queue.complete(db, it) for it in f])
    out["empty_list"] = empty.per_call
    case("stuck_old_fifo", n, n, "fifo")
    case("stuck_new_fifo", 0, n, "fifo", stuck_new=n)
    case("stuck_old_random", n, n, "random")
    case("stuck_old_lifo", n, n, "lifo")
    case("flight_4n_random", 0, 4 * n, "random")
    case("flight_4n_fifo", 0, 4 * n, "fifo")
    return out


# Report ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls")
    parser.add_argument("--only", nargs="+", choices=("single", "batch", "complete_list", "events"))
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="count the server's instructions per call under valgrind's callgrind instead of "
        "timing it (the same from run to run on a busy machine; slower)",
    )
    parser.add_argument(
        "--functions",
        choices=("auto", "always", "never"),
        default="auto",
        help="how ours are called: as functions where the server has them (auto, the "
        "default), or as scripts (never)",
    )
    parser.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    args = parser.parse_args(argv)
    os.environ["RWQ_FUNCTIONS"] = args.functions
    rows = args.only or ["single", "batch", "complete_list", "events"]
    missed: list[str] = []
    server = callgrind_server if args.instructions else redis_server
    unit = "instructions" if args.instructions else "µs"

    def fig(value: float) -> str:
        return f"{value:8.0f}" if args.instructions else f"{value:6.1f}"

    with server(args.redis_server) as (db, meter):
        version = db.info("server")["redis_version"]
        how = "callgrind, inside EVALSHA/FCALL" if args.instructions else "INFO commandstats"
        print(f"redis {version}; server {unit} per call ({how}); ours: functions {args.functions}")
        if "single" in rows:
            s = single(db, (2 if args.instructions else 10) if args.quick else 40, meter)
            print(f"\nsingle item per call, {unit} per call (ours / minimal same-layout script):")
            for op in ("add", "lease", "complete"):
                ratio = s[f"ours_{op}"] / s[f"min_{op}"]
                print(
                    f"  {op:9s} ours {fig(s[f'ours_{op}'])}  minimal {fig(s[f'min_{op}'])}  "
                    f"ratio {ratio:4.2f} (target <= {TARGETS[op]})  "
                    f"includes alone, as sent {fig(s[f'preamble_kept_{op}'])} "
                    f"(every definition {fig(s[f'preamble_all_{op}'])}); commands run per call "
                    f"ours {s[f'ours_{op}_commands']:4.1f} minimal {s[f'min_{op}_commands']:4.1f}"
                )
                if ratio > TARGETS[op]:
                    missed.append(f"{op} {ratio:.2f}")
            print(
                f"  renew     ours {fig(s['ours_renew'])}  minimal {fig(s['min_renew'])}  "
                f"ratio {s['ours_renew'] / s['min_renew']:4.2f}  includes alone, as sent "
                f"{fig(s['preamble_kept_renew'])} (every definition "
                f"{fig(s['preamble_all_renew'])}); commands run per call ours "
                f"{s['ours_renew_commands']:4.1f} minimal {s['min_renew_commands']:4.1f}"
            )
            print(f"  empty script {fig(s['empty']).strip()}")
            pair = s["ours_lease"] + s["ours_complete"]
            print(
                f"  complete_and_lease_from, one call per item {fig(s['ours_chain']).strip()} "
                f"({s['ours_chain_commands']:.1f} commands); ours lease + complete "
                f"{fig(pair).strip()} (one call / two: {s['ours_chain'] / pair:4.2f}); minimal "
                f"lease + complete {fig(s['min_lease'] + s['min_complete']).strip()}"
            )
        if "batch" in rows:
            bt = batch(db, (1 if args.instructions else 3) if args.quick else 10, meter)
            print(f"\nbatches of {BATCH} per call, per item (ours / minimal batch scripts):")
            for op, label in (("add", "add_items"), ("cycle", "lease_many+complete_many")):
                ours, least = bt[f"ours_{op}_cost_per_item"], bt[f"min_{op}_cost_per_item"]
                ours_r, min_r = bt[f"ours_{op}_items_per_s"], bt[f"min_{op}_items_per_s"]
                print(
                    f"  {label:25s} server {unit}/item ours {fig(ours)} minimal {fig(least)} "
                    f"(minimal/ours {least / ours:4.2f}, target >= 0.8); client items/s "
                    f"ours {ours_r:8.0f} minimal {min_r:8.0f} (ours/minimal {ours_r / min_r:4.2f})"
                )
                if least / ours < 0.8:
                    missed.append(f"{label} server {least / ours:.2f}")
        if "complete_list" in rows:
            n = 1000 if args.quick or args.instructions else 5000
            c = complete_list(db, n, meter)
            base = c["empty_list"]
            print(f"\ncomplete with a long processing list, {unit} per call (n = {n}):")
            print(f"  near-empty list                   {fig(base)}")
            for name, label in (
                ("stuck_old_fifo", f"{n} stuck at old end + {n} FIFO"),
                ("stuck_new_fifo", f"{n} FIFO + {n} stuck at new end"),
                ("stuck_old_random", f"{n} stuck at old end + {n} random"),
                ("stuck_old_lifo", f"{n} stuck at old end + {n} LIFO"),
                ("flight_4n_random", f"{4 * n} in flight, random order"),
                ("flight_4n_fifo", f"{4 * n} in flight, FIFO"),
            ):
                ratio = c[name] / base
                print(f"  {label:34s}{fig(c[name])}  ratio {ratio:5.2f} (target <= 1.3)")
                if ratio > TARGETS["complete_list"]:
                    missed.append(f"complete {name} {ratio:.2f}")
        if "events" in rows:
            ev = events(db, (2 if args.instructions else 10) if args.quick else 40, meter)
            print(f"\nevents on / off (stream at its cap), {unit} per call:")
            for op in ("add", "lease", "complete"):
                on, off = ev[f"on_{op}"], ev[f"off_{op}"]
                print(
                    f"  {op:9s} on {fig(on)}  off {fig(off)}  ratio {on / off:4.2f}; commands "
                    f"run per call on {ev[f'on_{op}_commands']:4.1f} "
                    f"off {ev[f'off_{op}_commands']:4.1f}"
                )
    if missed:
        print("\nmissed: " + ", ".join(missed))
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
