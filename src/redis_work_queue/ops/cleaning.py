"""The light and deep cleans, written once as generators of Redis calls (see :mod:`..calls`).

Every step is one script call that reports the server time it took (``TIME`` inside the
script); the size of the next step of the same kind is adapted from it so that each call holds
Redis for about :data:`CLEAN_TARGET_US`.

The deep clean in seven steps, each linear in what it reads:

1. SCAN the queue's data keys (``deep_clean_scan``).
2. Walk the main queue from its head (``deep_clean_walk``); drop the ids seen there. What is
   left are suspects: leased, lost from both lists, on the processing list with an expired
   lease, or queued after the walk passed their place. The queue changes at its ends but for
   the ids a cancel or a reschedule removes from inside it, which it counts (``P:removals``):
   each step of a walk starts back by as many places as were removed since the walk's last
   step, so an id that stays on the queue is never skipped.
3. Hold each suspect that still exists and has no lease key (``deep_clean_hold``), so neither
   leased nor delayed: the hold is a lease key with the run's token, so from now on nothing
   queues the item. A hold lasts :data:`HOLD_MS`; from here to step 6 the run renews its holds
   every :data:`HOLD_RENEW_SECS` (``deep_clean_renew``, in calls of about a millisecond of
   server time; an id queued in step 6 is no longer renewed), so the holds of a run that dies
   lapse within seconds.
4. Walk the main queue again; a held id met there loses its hold in the same call (it is queued).
   A held id not met is not on the main queue, and cannot enter it while held.
5. One light-clean pass of as many pops from the tail of the processing list as it has entries
   now: it requeues (or buries) expired leases, and a held id it meets is requeued with its hold
   removed. Every id on the list now is within that many pops of the tail (the list is only
   pushed at its head), so afterwards no held id is on it.
6. Each id still held by this run is in neither list: ``deep_clean`` removes the hold and queues
   it, once. A lease taken meanwhile (by any client) replaced the hold: such an item is skipped.
7. HSCAN the bookkeeping hashes and drop the entries of items that no longer exist.

Once a deep clean has reached Redis, every call of it waits out a transient error (a lost
connection, a BUSY script, a server loading its data: see :mod:`..retryable`; not out of memory,
which it raises at once) as the runners do, for up to :data:`RETRY_SECS`, then sends the call
again; each step can be sent twice. A first call that fails raises at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from redis.exceptions import OutOfMemoryError

from .. import scripts
from ..calls import Call, Command, ScriptCall, Sleep, Steps
from ..keyprefix import QueueKeys, glob_escape
from ..results import CleanProgress, CleanReport, ProgressCallback
from ..retryable import reconnect_delay, transient
from .registry import builds

if TYPE_CHECKING:
    from .queue import QueueOps

logger = logging.getLogger("redis_work_queue")

#: Server time one clean call aims at, in microseconds.
CLEAN_TARGET_US = 1000
#: Size of the first call of each kind of step, before any measurement.
CLEAN_FIRST = 200
#: Most ids one call passes to or reads back through Lua's ``unpack`` (whose limit is ~8000).
CLEAN_MAX = 4000
#: Most entries one walk step or SCAN step reads (their replies do not go through ``unpack``).
WALK_MAX = 16000
#: How long a deep clean's hold on a suspect lasts, in ms. The run renews its holds while it
#: runs; a hold left by a run that died lapses after it, leaving the item as it was.
HOLD_MS = 5000
#: How often a running deep clean renews its holds, in seconds (checked after every call). A
#: renewal of 100,000 holds takes about 0.4 s of server time: well inside the 3 s left.
HOLD_RENEW_SECS = 2.0
#: How long a deep clean waits out a transient error (see :mod:`..retryable`) before it gives up
#: and raises it, in seconds.
RETRY_SECS = 30.0
#: Bookkeeping entries a light clean checks per pass, at least (more when the processing list is
#: longer); the HSCAN cursor carries over to the next pass.
FORGET_PER_PASS = 1000
#: Seconds between two calls of a progress callback, and between two INFO log lines.
PROGRESS_SECS = 0.5
LOG_SECS = 5.0


# The scripts' argument builders -------------------------------------------------------------


@builds("light_clean")
def light_clean_call(keys: QueueKeys, budget: int, max_deliveries: int, due: int) -> ScriptCall:
    """``lua/light_clean.lua``: one step over the processing list's oldest ``budget`` ids."""
    return ScriptCall.on(keys, "light_clean", budget, max_deliveries, due)


@builds("forget_gone")
def forget_gone_call(keys: QueueKeys, which: str, cursor: int, count: int) -> ScriptCall:
    """``lua/forget_gone.lua``: one HSCAN step over the bookkeeping hash ``which``."""
    return ScriptCall.on(keys, "forget_gone", which, cursor, count)


@builds("deep_clean_scan")
def deep_clean_scan_call(keys: QueueKeys, cursor: Any, count: int, pattern: str) -> ScriptCall:
    """``lua/deep_clean_scan.lua``: one SCAN step over the queue's data keys."""
    args: tuple[scripts.Arg, ...] = (*keys.script_args, cursor, count, pattern)
    script = scripts.load("deep_clean_scan")
    return ScriptCall(script, keys.script_keys, args, None, keys.slot_keys)


@builds("deep_clean_walk")
def deep_clean_walk_call(
    keys: QueueKeys,
    first: int,
    count: int,
    removals: int | None,
    token: str,
    group: bytes | None = None,
) -> ScriptCall:
    """``lua/deep_clean_walk.lua``: one step of a walk of a list from its head.

    The list is the main queue, or ``group``'s list when it is given. ``removals`` is the count
    of removals from inside the main queue that the walk's previous step returned (``None`` for
    its first step).
    """
    groups = () if group is None else (group,)
    seen = "" if removals is None else removals
    return ScriptCall.on(keys, "deep_clean_walk", first, count, seen, token, *groups)


@builds("deep_clean_hold")
def deep_clean_hold_call(keys: QueueKeys, token: str, hold_ms: int, *ids: bytes) -> ScriptCall:
    """``lua/deep_clean_hold.lua``: hold the suspects ``ids`` for run ``token``."""
    args: tuple[scripts.Arg, ...] = (*keys.script_args, token, hold_ms, *ids)
    script = scripts.load("deep_clean_hold")
    return ScriptCall(script, keys.script_keys, args, None, keys.slot_keys)


@builds("deep_clean_renew")
def deep_clean_renew_call(keys: QueueKeys, token: str, hold_ms: int, *ids: bytes) -> ScriptCall:
    """``lua/deep_clean_renew.lua``: renew the holds of run ``token`` on ``ids``."""
    args: tuple[scripts.Arg, ...] = (keys.prefix, token, hold_ms, *ids)
    script = scripts.load("deep_clean_renew")
    return ScriptCall(script, keys.script_keys, args, None, keys.slot_keys)


@builds("deep_clean")
def deep_clean_call(keys: QueueKeys, token: str, *ids: bytes) -> ScriptCall:
    """``lua/deep_clean.lua``: queue the ``ids`` run ``token`` still holds (in neither list)."""
    return ScriptCall.on(keys, "deep_clean", token, *ids)


# Pacing -------------------------------------------------------------------------------------


class Pace:
    """The size of one kind of clean step, adapted between calls from their server time.

    Args:
        maximum: The largest size allowed.
    """

    __slots__ = ("maximum", "size")

    def __init__(self, maximum: int = CLEAN_MAX) -> None:
        self.maximum = maximum
        self.size = min(CLEAN_FIRST, maximum)

    def update(self, done: int, elapsed_us: int) -> None:
        """Size the next call from this one: ``done`` units of work in ``elapsed_us``.

        The size grows at most twofold per call, and only after a full call; it shrinks at once
        to what the measured rate allows.
        """
        if done <= 0:
            return
        fits = int(CLEAN_TARGET_US * done / max(elapsed_us, 1))
        grown = self.size * 2 if done >= self.size else self.size
        self.size = max(1, min(self.maximum, fits, grown))


class CleanState:
    """What a queue's light cleans carry from one pass to the next (per process)."""

    __slots__ = ("cursors", "forget", "light")

    def __init__(self) -> None:
        self.light = Pace()
        self.forget = Pace(WALK_MAX)
        #: HSCAN cursors of the bookkeeping hashes.
        self.cursors: dict[str, int] = {"deliveries": 0, "reasons": 0}


class _Tally:
    """Running totals of one clean, its progress callback and its periodic log line."""

    def __init__(self, what: str, prefix: str, progress: ProgressCallback | None) -> None:
        self.what = what
        self.prefix = prefix
        self.progress = progress
        self.examined = self.requeued = self.dropped = self.dead = self.forgotten = 0
        self.longest_us = 0
        self.phase = "scan"
        self.started = self.reported = self.logged = time.monotonic()

    def timed(self, elapsed_us: int) -> None:
        self.longest_us = max(self.longest_us, int(elapsed_us))
        self.tick()

    def snapshot(self) -> CleanProgress:
        return CleanProgress(
            phase=self.phase,
            **asdict(self.report()),
            elapsed=time.monotonic() - self.started,
            longest_call=self.longest_us / 1e6,
        )

    def tick(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.progress is not None and (force or now - self.reported >= PROGRESS_SECS):
            self.reported = now
            self.progress(self.snapshot())
        if now - self.logged >= LOG_SECS:
            self.logged = now
            p = self.snapshot()
            logger.info(
                "%s of %s: %s, %d examined, %d requeued, %d dead, %d forgotten (%.0f/s)",
                self.what,
                self.prefix,
                p.phase,
                p.examined,
                p.requeued,
                p.dead,
                p.forgotten,
                p.rate,
            )

    def report(self) -> CleanReport:
        return CleanReport(
            examined=self.examined,
            requeued=self.requeued,
            dropped=self.dropped,
            dead=self.dead,
            forgotten=self.forgotten,
        )


def _key_bytes(key: bytes | str) -> bytes:
    return key.encode("utf-8", "surrogateescape") if isinstance(key, str) else key


#: How a clean sends one call and gets its reply: as it is (a light clean), or retried and with
#: the holds renewed (:meth:`_DeepRun.send`).
Send = Callable[[Call], Steps[Any]]


def _as_is(call: Call) -> Steps[Any]:
    return (yield call)


def _waited_out(err: BaseException) -> bool:
    """Whether a deep clean waits ``err`` out: a transient error, but for out of memory.

    Out of memory may be the clean's own writes refused: it raises at once, having written
    nothing.
    """
    if isinstance(err, OutOfMemoryError) or "OOM command not allowed" in str(err):
        return False
    return transient(err)


class _DeepRun:
    """One deep clean's holds and its retries: every call of the run goes through :meth:`send`."""

    def __init__(self, ops: QueueOps, token: str) -> None:
        self.ops = ops
        self.token = token
        #: The ids this run holds (or held: a hold removed since is skipped by the renewal).
        self.held: list[bytes] = []
        #: How many of the first of :attr:`held` are no longer held (queued by step 6).
        self.released = 0
        self.renewed = time.monotonic()
        #: The size of a renewal call, sized by its measured server time as the other steps.
        self.renewals = Pace()
        #: Whether a call of the run has reached Redis: one that cannot at the start raises at
        #: once (as a runner that cannot reach Redis at its start stops).
        self.reached = False

    def retried(self, call: Call) -> Steps[Any]:
        """Send ``call``, waiting out transient errors for up to :data:`RETRY_SECS`."""
        tries = 0
        deadline = time.monotonic() + RETRY_SECS
        while True:
            try:
                reply = yield call
            except Exception as err:
                if not self.reached or not _waited_out(err) or time.monotonic() >= deadline:
                    raise
                if tries == 0:
                    logger.warning(
                        "deep clean of %s: %s: %s; retrying for up to %.0f s",
                        self.ops.keys.prefix,
                        type(err).__name__,
                        err,
                        RETRY_SECS,
                    )
                yield Sleep(min(reconnect_delay(tries), max(deadline - time.monotonic(), 0)))
                tries += 1
                continue
            self.reached = True
            return reply

    def send(self, call: Call) -> Steps[Any]:
        """Send ``call`` (retried), then renew the holds when they are due."""
        reply = yield from self.retried(call)
        if self.held and time.monotonic() - self.renewed >= HOLD_RENEW_SECS:
            yield from self.renew()
        return reply

    def renew(self) -> Steps[None]:
        """Renew every hold of the run, each call retried.

        The calls are sized by their measured server time, about :data:`CLEAN_TARGET_US` each.
        """
        self.renewed = time.monotonic()
        keys, token, pace = self.ops.keys, self.token, self.renewals
        start = self.released
        while start < len(self.held):
            chunk = self.held[start : start + pace.size]
            reply = yield from self.retried(deep_clean_renew_call(keys, token, HOLD_MS, *chunk))
            pace.update(len(chunk), int(reply[0]))
            start += len(chunk)


def _processing_pass(
    ops: QueueOps, total: int, tally: _Tally, pace: Pace, send: Send = _as_is
) -> Steps[None]:
    """Examine ``total`` entries from the tail of the processing list (fewer if it runs out).

    Due delayed items are promoted on the way.
    """
    popped = 0
    while True:
        budget = max(1, min(pace.size, total - popped))
        due = pace.size
        reply = yield from send(light_clean_call(ops.keys, budget, ops.max_deliveries, due))
        seen, back, gone, buried, promoted, elapsed_us = (int(v) for v in reply)
        pace.update(seen + promoted, elapsed_us)
        popped += seen
        tally.requeued += back
        tally.dropped += gone
        tally.dead += buried
        if tally.what == "light clean":
            tally.examined += seen
        tally.timed(elapsed_us)
        if (seen < budget or popped >= total) and promoted < due:
            return


def _forget(
    ops: QueueOps,
    tally: _Tally,
    pace: Pace,
    cursors: dict[str, int],
    limit: int | None,
    send: Send = _as_is,
) -> Steps[None]:
    """HSCAN both bookkeeping hashes from ``cursors`` (updated), dropping dead items' entries.

    Each hash stops after a full round, or once ``limit`` fields were checked.
    """
    for name in ("deliveries", "reasons"):
        checked = 0
        while True:
            reply = yield from send(forget_gone_call(ops.keys, name, cursors[name], pace.size))
            elapsed_us, cursor, fields, gone = (int(v) for v in reply)
            pace.update(max(fields, 1), elapsed_us)
            cursors[name] = cursor
            checked += fields
            tally.forgotten += gone
            tally.timed(elapsed_us)
            if cursor == 0 or (limit is not None and checked >= limit):
                break


def light_clean(ops: QueueOps, state: CleanState) -> Steps[CleanReport]:
    """One pass over the processing list, then a bounded share of the bookkeeping."""
    tally = _Tally("light clean", ops.keys.prefix, None)
    total = int((yield Command(("LLEN", ops.keys.processing))))
    yield from _processing_pass(ops, total, tally, state.light)
    yield from _forget(ops, tally, state.forget, state.cursors, max(FORGET_PER_PASS, total))
    report = tally.report()
    busy = report.requeued or report.dropped or report.dead or report.forgotten
    logger.log(
        logging.INFO if busy else logging.DEBUG,
        "light clean of %s: %s (longest call %.2f ms)",
        ops.keys.prefix,
        report,
        tally.longest_us / 1000,
    )
    return report


def _walk(
    ops: QueueOps,
    token: str,
    tally: _Tally,
    collect: set[bytes],
    send: Send,
    groups: Sequence[bytes] = (),
) -> Steps[None]:
    """Walk the main queue, then each of ``groups``' lists, from its head into ``collect``.

    Without a token, every id read is collected; with one, every id whose hold by run ``token``
    was removed.
    """
    for group in (None, *groups):
        pace = Pace(WALK_MAX)
        first = 0
        removals: int | None = None
        while True:
            count = pace.size
            call = deep_clean_walk_call(ops.keys, first, count, removals, token, group)
            elapsed_us, read, ids, start, now_removals = yield from send(call)
            pace.update(int(read), int(elapsed_us))
            collect.update(ids)
            # The step read from ``start``: back from ``first`` by the removals since the last.
            first = int(start) + int(read)
            removals = int(now_removals)
            tally.timed(int(elapsed_us))
            if int(read) < count:
                break


def _scan(
    keys: QueueKeys, pattern: str, skip: int, tally: _Tally, send: Send
) -> Steps[dict[bytes, None]]:
    """Every key of ``pattern`` (SCAN, in paced steps), without its first ``skip`` bytes."""
    found_all: dict[bytes, None] = {}
    pace = Pace(WALK_MAX)
    cursor: Any = 0
    while True:
        count = pace.size
        elapsed_us, cursor, found = yield from send(
            deep_clean_scan_call(keys, cursor, count, pattern)
        )
        pace.update(count, int(elapsed_us))
        found_all.update(dict.fromkeys(_key_bytes(key)[skip:] for key in found))
        tally.timed(int(elapsed_us))
        if int(cursor) == 0:
            return found_all


def _in_chunks(
    call: Callable[[Sequence[bytes]], ScriptCall],
    ids: Sequence[bytes],
    tally: _Tally,
    send: Send,
    out: list[bytes],
) -> Steps[list[bytes]]:
    """Make ``call`` of chunks of ``ids`` (a builder's call of them); return ``out``.

    The ids each call returns are added to ``out`` as they come.
    """
    pace = Pace()
    start = 0
    while start < len(ids):
        chunk = ids[start : start + pace.size]
        elapsed_us, got = yield from send(call(chunk))
        pace.update(len(chunk), int(elapsed_us))
        out.extend(got)
        start += len(chunk)
        tally.timed(int(elapsed_us))
    return out


def deep_clean(
    ops: QueueOps, token: str, progress: ProgressCallback | None = None
) -> Steps[CleanReport]:
    """Recover every item that exists, is not queued and has no lease; see the module doc."""
    keys = ops.keys
    tally = _Tally("deep clean", keys.prefix, progress)
    run = _DeepRun(ops, token)
    send = run.send
    tally.tick(force=True)
    # 1. The data keys, and the groups' lists.
    skip = len(keys.item_prefix.encode("utf-8"))
    candidates = yield from _scan(keys, keys.item_pattern(), skip, tally, send)
    tally.examined += len(candidates)
    groups: list[bytes] = []
    # Every grouped item has its group noted in P:grouped: a queue with none of the groups' keys
    # holds no grouped item, and its keyspace is not scanned a second time for group lists.
    grouping = (keys.grouped, keys.groups, keys.groups_state, keys.groups_backlog)
    if candidates and int((yield from send(Command(("EXISTS", *grouping))))):
        pattern = glob_escape(keys.group_prefix) + "*"
        skip = len(keys.group_prefix.encode("utf-8"))
        groups = list((yield from _scan(keys, pattern, skip, tally, send)))
    # 2. Those not seen on the main queue or a group's list are suspects.
    tally.phase = "walk"
    if candidates:
        queued: set[bytes] = set()
        yield from _walk(ops, "", tally, queued, send, groups)
        suspects = [i for i in candidates if i not in queued]
        del queued
    else:
        suspects = []
    del candidates
    # 3. Hold them; 4. release the ones queued meanwhile.
    tally.phase = "hold"
    held = yield from _in_chunks(
        lambda chunk: deep_clean_hold_call(keys, token, HOLD_MS, *chunk),
        suspects,
        tally,
        send,
        run.held,
    )
    del suspects
    released: set[bytes] = set()
    if held:
        tally.phase = "recheck"
        yield from _walk(ops, token, tally, released, send, groups)
    run.held = rest = [i for i in held if i not in released]
    # 5. Expired leases, and held ids, on the processing list.
    tally.phase = "processing"
    total = int((yield from send(Command(("LLEN", keys.processing)))))
    yield from _processing_pass(ops, total, tally, Pace(), send)
    # 6. Held ids in neither list.
    tally.phase = "requeue"
    requeued: list[bytes] = []

    def requeue(chunk: Sequence[bytes]) -> ScriptCall:
        # Once this call is through, the ids before the chunk's end are held no longer.
        run.released += len(chunk)
        return deep_clean_call(keys, token, *chunk)

    yield from _in_chunks(requeue, rest, tally, send, requeued)
    run.held = []
    lost = len(requeued)
    tally.requeued += lost
    # 7. Bookkeeping of items that no longer exist.
    tally.phase = "forget"
    cursors = {"deliveries": 0, "reasons": 0}
    yield from _forget(ops, tally, Pace(WALK_MAX), cursors, None, send)
    tally.phase = "done"
    tally.tick(force=True)
    report = tally.report()
    longest = tally.longest_us / 1000
    if lost:
        logger.warning(
            "deep clean of %s requeued %d items lost from both lists: %s (longest call %.2f ms)",
            keys.prefix,
            lost,
            report,
            longest,
        )
    else:
        logger.info("deep clean of %s: %s (longest call %.2f ms)", keys.prefix, report, longest)
    return report
