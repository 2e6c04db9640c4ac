"""Schedules: cron and interval items of a queue, each occurrence added exactly once.

A schedule is stored under the queue's prefix (``<P>:schedules`` its definition,
``<P>:schedules:data`` the data of its occurrences, ``<P>:schedules:due`` its next due time,
``<P>:schedules:last`` the id of its last occurrence). Python computes the due times (a cron
expression with the ``cronsim`` package, or a fixed interval); the scripts only compare and move
them. A scheduler reads the due schedules and the server's time (``lua/schedule_due.lua``), works
out each one's occurrences and next due time, and adds them with ``lua/schedule_fire.lua``, which
does so only while the schedule's next due time is still the one it read and moves it in the same
call: any number of schedulers racing add each occurrence once. An occurrence's id is the
schedule's name, :data:`SEPARATOR` and its due time (``nightly@2026-11-27T01:00:00.000Z``).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone, tzinfo
from functools import partial
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .. import scripts
from ..calls import Command, ScriptCall, Steps
from ..errors import InvalidArgumentError, InvalidArgumentTypeError, WorkQueueError
from ..extras import extra_needed
from ..keyprefix import QueueKeys
from ..validation import MAX_SECS, decode
from .registry import builds, operation

logger = logging.getLogger("redis_work_queue")

#: Where the docs describe schedules.
DOCS = "schedules.md#the-api"
#: What separates a schedule's name from the due time in an occurrence's id (refused in names).
SEPARATOR = "@"
#: The longest schedule name.
MAX_NAME = 200
#: The shortest interval of an ``every`` schedule, in seconds.
MIN_EVERY = 0.1
#: The most occurrences ``catch_up="all"`` adds for the due times that passed (the latest ones).
CATCH_UP_LIMIT = 100
#: A due time first seen later than this (ms) counts as missed (``catch_up="none"`` skips it).
LATE_MS = 60_000
#: The most due schedules one scheduler call takes (the rest wait for the next call).
DUE_LIMIT = 25
#: The most calls of :func:`due_steps` one scheduler's turn makes while schedules are left due.
ROUNDS = 40
#: How many times :func:`resume_steps` reads a schedule that is replaced meanwhile.
RESUME_TRIES = 10
#: Schedules read per script call by :func:`list_steps`.
LIST_CHUNK = 500
#: The next due time of a paused schedule, and of one with no occurrence left.
PAUSED_MS = -1
NEVER = "+inf"

CatchUp = Literal["none", "one", "all"]
Overlap = Literal["add", "skip"]
CATCH_UPS: tuple[str, ...] = ("none", "one", "all")
OVERLAPS: tuple[str, ...] = ("add", "skip")
_FIELDS = ("minute", "hour", "day-of-month", "month", "day-of-week")
_UTC = timezone.utc


# Times ----------------------------------------------------------------------------------------


def occurrence_id(name: str, due_ms: int) -> str:
    """The id of schedule ``name``'s occurrence due at ``due_ms`` (ms since the epoch).

    It is the name, :data:`SEPARATOR`, and the due time in UTC to the millisecond:
    ``nightly@2026-11-27T01:00:00.000Z``.
    """
    moment = datetime.fromtimestamp(due_ms // 1000, _UTC)
    return f"{name}{SEPARATOR}{moment:%Y-%m-%dT%H:%M:%S}.{due_ms % 1000:03d}Z"


def occurrence_time(item_id: str) -> tuple[str, float] | None:
    """The schedule name and due time (seconds since the epoch) an occurrence id holds, or None."""
    name, sep, when = item_id.rpartition(SEPARATOR)
    if not sep or not when.endswith("Z"):
        return None
    try:
        moment = datetime.strptime(when[:-1], "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=_UTC)
    except ValueError:
        return None
    return name, moment.timestamp()


def _cronsim() -> Any:
    with extra_needed("a cron schedule", "schedules"):
        import cronsim  # noqa: PLC0415 - an optional extra, imported when first needed
    return cronsim


def _zone(tz: str) -> tzinfo:
    """The time zone named ``tz``; UTC needs no zone database."""
    if not isinstance(tz, str):
        raise InvalidArgumentTypeError(f"tz must be a time zone name, not {type(tz).__name__}")
    try:
        return ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError) as err:
        if tz == "UTC":
            return _UTC
        raise InvalidArgumentError(
            f"tz {tz!r} is not a known time zone: pass an IANA name such as 'Europe/Paris' or "
            "'UTC' (on a system without a zone database, pip install tzdata)"
        ) from err


def _dt(ms: int, zone: tzinfo) -> datetime:
    return datetime.fromtimestamp(ms // 1000, zone).replace(microsecond=(ms % 1000) * 1000)


def _ms(moment: datetime) -> int:
    return round(moment.timestamp() * 1000)


def check_cron(expr: object) -> str:
    """Check a cron expression with the cron library; return it.

    Five fields (minute, hour, day of month, month, day of week), or six with a seconds field
    first.

    Raises:
        InvalidArgumentError: It does not parse; the message names the field and its value.
        MissingExtraError: The ``schedules`` extra (``cronsim``) is not installed.
    """
    if not isinstance(expr, str):
        raise InvalidArgumentTypeError(
            f"cron must be a str such as '0 2 * * *', not {type(expr).__name__}"
        )
    cronsim = _cronsim()
    parts = expr.split()
    names = _FIELDS if len(parts) == 5 else ("second", *_FIELDS)
    if len(parts) not in (5, 6):
        raise InvalidArgumentError(
            f"cron {expr!r} has {len(parts)} fields: write five (minute hour day-of-month month "
            "day-of-week), or six with seconds first, e.g. cron='0 2 * * *'"
        )
    try:
        it = cronsim.CronSim(expr, datetime(2000, 1, 1, tzinfo=_UTC))
        next(it)
    except cronsim.CronSimError as err:
        text = str(err)
        for index, field in enumerate(names):
            if text.lower() == f"bad {field}":
                raise InvalidArgumentError(
                    f"cron {expr!r}: the {field} field {parts[index]!r} is not valid: write e.g. "
                    "cron='0 2 * * *' (minute hour day-of-month month day-of-week)"
                ) from err
        raise InvalidArgumentError(f"cron {expr!r} is not valid: {text}") from err
    except StopIteration as err:  # pragma: no cover - the library iterates for ever
        raise InvalidArgumentError(f"cron {expr!r} never falls due") from err
    return expr


def _moment(value: object, what: str) -> int | None:
    """``start``/``end`` as ms since the epoch: an aware datetime, or seconds since the epoch."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidArgumentError(
                f"{what} is a naive datetime: give it a time zone, e.g. "
                f"datetime(..., tzinfo=ZoneInfo('Europe/Paris'))"
            )
        return _ms(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgumentTypeError(
            f"{what} must be an aware datetime or seconds since the epoch, not "
            f"{type(value).__name__}"
        )
    if not math.isfinite(value) or not 0 <= value <= MAX_SECS * 10:
        raise InvalidArgumentError(
            f"{what} must be a finite time after 1970, got {value!r}: pass e.g. an aware datetime"
        )
    return round(value * 1000)


def check_name(name: object) -> str:
    """Check a schedule's name; return it.

    Raises:
        InvalidArgumentError: It is not a non-empty str of at most :data:`MAX_NAME` characters
            without :data:`SEPARATOR`.
    """
    if not isinstance(name, str):
        raise InvalidArgumentTypeError(f"a schedule's name is a str, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME:
        raise InvalidArgumentError(
            f"a schedule's name must have 1 to {MAX_NAME} characters, got {len(name)}"
        )
    if SEPARATOR in name:
        raise InvalidArgumentError(
            f"the schedule name {name!r} holds {SEPARATOR!r}, which separates the name from the "
            f"due time in an occurrence's id: use another character, e.g. "
            f"{name.replace(SEPARATOR, '-')!r}"
        )
    return name


class ConcurrentChangeError(WorkQueueError):
    """A schedule kept changing while an operation on it ran; nothing was changed."""


@dataclass(frozen=True)
class Spec:
    """A schedule's definition, checked: what ``schedule`` stores and the schedulers read.

    Attributes:
        cron: The cron expression, or None for an interval schedule.
        every_ms: The interval in ms, or None for a cron schedule.
        tz: The time zone the cron expression is read in.
        start_ms: No occurrence is due before this (ms since the epoch), or None.
        end_ms: No occurrence is due after this, or None.
        catch_up: What a scheduler adds for due times that passed unseen.
        overlap: ``"skip"``: add nothing while the last occurrence still exists.
    """

    cron: str | None
    every_ms: int | None
    tz: str
    start_ms: int | None
    end_ms: int | None
    catch_up: str
    overlap: str

    @classmethod
    def of(
        cls,
        cron: str | None,
        every: float | None,
        tz: str,
        start: datetime | float | None,
        end: datetime | float | None,
        catch_up: str,
        overlap: str,
    ) -> Spec:
        """Check the arguments of ``schedule``; the definition they make.

        Raises:
            InvalidArgumentError: One is out of range (the message names it and the fix).
        """
        if (cron is None) == (every is None):
            raise InvalidArgumentError(
                "a schedule takes exactly one of cron= (e.g. cron='0 2 * * *') and every= "
                "(seconds, e.g. every=30)"
            )
        every_ms = None
        if every is not None:
            if isinstance(every, bool) or not isinstance(every, int | float):
                raise InvalidArgumentTypeError(
                    f"every must be a number of seconds, not {type(every).__name__}"
                )
            if not math.isfinite(every) or not MIN_EVERY <= every <= MAX_SECS:
                raise InvalidArgumentError(
                    f"every must be a finite number of seconds from {MIN_EVERY} to {MAX_SECS}, "
                    f"got {every!r}: pass e.g. every=30"
                )
            every_ms = round(every * 1000)
        else:
            cron = check_cron(cron)
        _zone(tz)
        start_ms, end_ms = _moment(start, "start"), _moment(end, "end")
        if start_ms is not None and end_ms is not None and end_ms < start_ms:
            raise InvalidArgumentError(f"end ({end!r}) is before start ({start!r})")
        if catch_up not in CATCH_UPS:
            raise InvalidArgumentError(
                f"catch_up must be one of {', '.join(CATCH_UPS)}, got {catch_up!r}"
            )
        if overlap not in OVERLAPS:
            raise InvalidArgumentError(
                f"overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}"
            )
        return cls(cron, every_ms, tz, start_ms, end_ms, catch_up, overlap)

    def dumps(self) -> str:
        """The definition as stored: compact JSON with sorted keys.

        The same definition always gives the same text, which the scripts compare.
        """
        fields = {
            "catch_up": self.catch_up,
            "cron": self.cron,
            "end": self.end_ms,
            "every": self.every_ms,
            "overlap": self.overlap,
            "start": self.start_ms,
            "tz": self.tz,
        }
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def loads(cls, text: str) -> Spec:
        """The definition a stored text holds.

        Raises:
            ValueError: The text is not a definition (written by something else).
        """
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("not a schedule definition")
        spec = cls(
            fields.get("cron"),
            fields.get("every"),
            fields.get("tz", "UTC"),
            fields.get("start"),
            fields.get("end"),
            fields.get("catch_up", "one"),
            fields.get("overlap", "add"),
        )
        if (spec.cron is None) == (spec.every_ms is None):
            raise ValueError("a schedule definition needs cron or every")
        return spec

    # Due times, in ms since the epoch -------------------------------------------------------

    def after(self, t_ms: int) -> int | None:
        """The first due time strictly after ``t_ms`` and not before ``start``.

        None when none is left before ``end``.
        """
        if self.start_ms is not None and t_ms < self.start_ms:
            t_ms = self.start_ms - 1
        if self.every_ms is not None:
            anchor = self.start_ms or 0
            steps = (t_ms - anchor) // self.every_ms + 1 if t_ms >= anchor else 0
            found = anchor + steps * self.every_ms
        else:
            cronsim = _cronsim()
            found = _ms(next(cronsim.CronSim(self.cron, _dt(t_ms, _zone(self.tz)))))
        return None if self.end_ms is not None and found > self.end_ms else found

    def passed(self, first_ms: int, now_ms: int, most: int) -> list[int]:
        """The due times from ``first_ms`` to ``now_ms``, oldest first: the latest ``most``."""
        last = now_ms if self.end_ms is None else min(now_ms, self.end_ms)
        if last < first_ms:
            return []
        if self.every_ms is not None:
            anchor = self.start_ms or 0
            low = -(-(first_ms - anchor) // self.every_ms)
            high = (last - anchor) // self.every_ms
            return [anchor + k * self.every_ms for k in range(max(low, high - most + 1), high + 1)]
        cronsim = _cronsim()
        found: list[int] = []
        for moment in cronsim.CronSim(self.cron, _dt(last + 1, _zone(self.tz)), reverse=True):
            ms = _ms(moment)
            if ms < first_ms or len(found) >= most:
                break
            found.append(ms)
        return found[::-1]

    def plan(self, due_ms: int, now_ms: int) -> tuple[list[int], int | None]:
        """What a scheduler adds at ``now_ms`` for a schedule due at ``due_ms``.

        It returns the due times to add occurrences for, and the next due time after them
        (None: none left).

        ``catch_up`` decides for the due times that passed: ``"all"`` adds each (the latest
        :data:`CATCH_UP_LIMIT`), ``"one"`` adds one for the latest, ``"none"`` adds the latest
        only when it is the only one and was seen within :data:`LATE_MS` (it is not missed).
        With ``overlap="skip"`` at most one (the latest) is added.
        """
        passed = self.passed(due_ms, now_ms, CATCH_UP_LIMIT) or [due_ms]
        latest = passed[-1]
        if self.catch_up == "all" and self.overlap != "skip":
            chosen = passed
        elif self.catch_up == "none":
            on_time = len(passed) == 1 and now_ms - latest <= LATE_MS
            chosen = [latest] if on_time else []
        else:
            chosen = [latest]
        return chosen, self.after(max(now_ms, latest))


@dataclass(frozen=True)
class Schedule:
    """One schedule of a queue, as :meth:`~redis_work_queue.WorkQueue.schedules` lists it.

    Attributes:
        name: Its name.
        cron: Its cron expression, or None for an interval schedule.
        every: Its interval in seconds, or None for a cron schedule.
        tz: The time zone its cron expression is read in.
        start: No occurrence is due before this time (seconds since the epoch), or None.
        end: No occurrence is due after this time, or None.
        catch_up: ``"none"``, ``"one"`` or ``"all"`` (see :meth:`Spec.plan`).
        overlap: ``"add"`` or ``"skip"``.
        paused: Whether it is paused.
        next_due: When its next occurrence is due (seconds since the epoch); None when it is
            paused or has none left.
        last_id: The id of the last occurrence added, or None.
    """

    name: str
    cron: str | None
    every: float | None
    tz: str
    start: float | None
    end: float | None
    catch_up: str
    overlap: str
    paused: bool
    next_due: float | None
    last_id: str | None


# The scripts' argument builders ---------------------------------------------------------------


@builds("schedule_set")
def schedule_set_call(
    keys: QueueKeys, name: str, spec: str, data: bytes, next_ms: int | str
) -> ScriptCall:
    """``lua/schedule_set.lua``: create or replace schedule ``name``."""
    return ScriptCall.on(keys, "schedule_set", name, spec, data, next_ms)


@builds("schedule_change")
def schedule_change_call(
    keys: QueueKeys, name: str, action: str, spec: str, next_ms: int | str
) -> ScriptCall:
    """``lua/schedule_change.lua``: pause, resume or remove schedule ``name``."""
    return ScriptCall.on(keys, "schedule_change", name, action, spec, next_ms)


@builds("schedule_due")
def schedule_due_call(keys: QueueKeys, owner: str, turn_ms: int, limit: int) -> ScriptCall:
    """``lua/schedule_due.lua``: the due schedules (taking the fleet's turn when ``owner``)."""
    return ScriptCall.on(keys, "schedule_due", owner, turn_ms, limit)


@builds("schedule_fire")
def schedule_fire_call(keys: QueueKeys, *schedules: scripts.Arg) -> ScriptCall:
    """``lua/schedule_fire.lua``: add due occurrences and move next due times.

    ``schedules`` holds, for each schedule, its name, the definition read, the due time read,
    the next due time, the overlap flag, the number of ids, then the ids (see :func:`firing`).
    """
    return ScriptCall.on(keys, "schedule_fire", *schedules)


def firing(
    name: str, spec: str, due_ms: int, next_ms: int | None, skip: bool, ids: Sequence[str]
) -> tuple[scripts.Arg, ...]:
    """One schedule's part of a :func:`schedule_fire_call`."""
    return (name, spec, due_ms, _score(next_ms), "1" if skip else "0", len(ids), *ids)


@builds("schedule_list")
def schedule_list_call(keys: QueueKeys, first: int, last: int) -> ScriptCall:
    """``lua/schedule_list.lua``: the schedules of ranks first..last."""
    return ScriptCall.on(keys, "schedule_list", first, last)


# The operations -------------------------------------------------------------------------------


def _data(data: object) -> bytes:
    if isinstance(data, str):
        return data.encode()
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidArgumentTypeError(f"data must be bytes or str, not {type(data).__name__}")


def _now_ms(reply: Sequence[Any]) -> int:
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


def _time(keys: QueueKeys) -> Command:
    return Command(("TIME",), route=keys.queue)


def _score(next_ms: int | None) -> int | str:
    return NEVER if next_ms is None else next_ms


@operation(
    methods=("schedule",),
    scripts=("schedule_set",),
    commands=("TIME",),
    writes=True,
    cli="schedule",
    docs=DOCS,
)
def schedule_steps(keys: QueueKeys, name: str, spec: Spec, data: bytes | str) -> Steps[bool]:
    """Create or replace schedule ``name``; True when it changed.

    False: it was there already, with this definition and data, and keeps its next due time.
    """
    name = check_name(name)
    payload = _data(data)
    now = _now_ms((yield _time(keys)))
    first = spec.after(now)
    reply = yield schedule_set_call(keys, name, spec.dumps(), payload, _score(first))
    return int(reply) != 0


#: The registration of the operations that change one schedule with one script call.
_changing = partial(operation, scripts=("schedule_change",), writes=True, docs=DOCS)


@_changing(methods=("pause_schedule",), cli="schedule")
def pause_steps(keys: QueueKeys, name: str) -> Steps[bool]:
    """Pause schedule ``name``: True when it was running."""
    return int((yield schedule_change_call(keys, check_name(name), "pause", "", 0))) == 1


@_changing(methods=("resume_schedule",), commands=("TIME", "HGET"))
def resume_steps(keys: QueueKeys, name: str) -> Steps[bool]:
    """Resume schedule ``name`` from its next due time after now; True when it was paused.

    The due times that passed while it was paused are skipped.
    """
    name = check_name(name)
    for _ in range(RESUME_TRIES):
        text = yield Command(
            ("HGET", keys.schedules, name), route=keys.queue, slot_keys=(keys.schedules,)
        )
        if text is None:
            return False
        spec = Spec.loads(decode(text))
        now = _now_ms((yield _time(keys)))
        next_ms = _score(spec.after(now))
        reply = yield schedule_change_call(keys, name, "resume", decode(text), next_ms)
        if int(reply) >= 0:
            return int(reply) == 1
    raise ConcurrentChangeError(
        f"schedule {name!r} was replaced {RESUME_TRIES} times while it was being resumed: "
        "resume it again"
    )


@_changing(methods=("remove_schedule",), cli="schedule")
def remove_steps(keys: QueueKeys, name: str) -> Steps[bool]:
    """Remove schedule ``name`` (the occurrences it added stay): True when it existed."""
    return int((yield schedule_change_call(keys, check_name(name), "remove", "", 0))) == 1


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000


def listed(flat: Sequence[Any]) -> list[Schedule]:
    """The schedules of one :func:`schedule_list_call` reply (unreadable definitions skipped)."""
    found: list[Schedule] = []
    for k in range(0, len(flat), 4):
        name, score, text, last = flat[k : k + 4]
        if text is None:
            continue
        try:
            spec = Spec.loads(decode(text))
        except ValueError:
            logger.warning("schedule %r holds no readable definition", decode(name))
            continue
        due = float(score)
        found.append(
            Schedule(
                name=decode(name),
                cron=spec.cron,
                every=_seconds(spec.every_ms),
                tz=spec.tz,
                start=_seconds(spec.start_ms),
                end=_seconds(spec.end_ms),
                catch_up=spec.catch_up,
                overlap=spec.overlap,
                paused=due < 0,
                next_due=due / 1000 if 0 <= due < math.inf else None,
                last_id=None if last is None else decode(last),
            )
        )
    return found


@operation(methods=("schedules",), scripts=("schedule_list",), cli="schedules", docs=DOCS)
def list_steps(keys: QueueKeys) -> Steps[list[Schedule]]:
    """Every schedule of the queue, paused ones first, then by next due time.

    One script call reads :data:`LIST_CHUNK` schedules.
    """
    found: list[Schedule] = []
    first = 0
    while True:
        flat = yield schedule_list_call(keys, first, first + LIST_CHUNK - 1)
        found.extend(listed(flat))
        if len(flat) < 4 * LIST_CHUNK:
            return found
        first += LIST_CHUNK


@operation(
    methods=("run_schedules",),
    scripts=("schedule_due", "schedule_fire"),
    writes=True,
    cli="scheduler",
    docs=DOCS,
)
def run_steps(
    keys: QueueKeys, limit: int = DUE_LIMIT, owner: str = "", turn_ms: int = 0
) -> Steps[list[str]]:
    """Add the occurrences of the due schedules (at most ``limit`` schedules); the ids added.

    It is two script calls, whatever the number of schedules: one reads the due ones with the
    server's time, one adds their occurrences. With ``owner`` (a worker's id), only when that
    worker takes the fleet's turn, which lasts ``turn_ms`` (see ``lua/schedule_due.lua``).
    """
    added, _ = yield from due_steps(keys, limit, owner, turn_ms)
    return added


def due_steps(
    keys: QueueKeys, limit: int = DUE_LIMIT, owner: str = "", turn_ms: int = 0
) -> Steps[tuple[list[str], bool]]:
    """:func:`run_steps`, also saying whether ``limit`` schedules were due (more may be)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise InvalidArgumentError(f"limit must be an int from 1 to 10000, got {limit!r}")
    reply = yield schedule_due_call(keys, owner, turn_ms, limit)
    now, taken = int(reply[0]), int(reply[1])
    due = reply[2:]
    if not taken or not due:
        return [], False
    parts: list[scripts.Arg] = []
    for k in range(0, len(due), 3):
        raw_name, score, text = due[k : k + 3]
        if text is None:
            continue
        name = decode(raw_name)
        try:
            spec = Spec.loads(decode(text))
            at = int(float(score))
            times, next_ms = spec.plan(at, now)
        except Exception as err:  # a definition this host cannot read: left for another
            logger.warning("schedule %r of %s cannot be run here: %s", name, keys.prefix, err)
            continue
        ids = [occurrence_id(name, t) for t in times]
        parts += firing(name, decode(text), at, next_ms, spec.overlap == "skip", ids)
    full = len(due) >= 3 * limit
    if not parts:
        return [], full
    replies = yield schedule_fire_call(keys, *parts)
    added: list[str] = []
    for fired in replies:
        if not isinstance(fired, int):  # -1: another scheduler was first
            added += (decode(each) for each in fired)
    if added:
        logger.debug("added %d scheduled occurrence(s) to %s", len(added), keys.prefix)
    return added, full


def turn_steps(keys: QueueKeys, owner: str = "", turn_ms: int = 0) -> Steps[list[str]]:
    """One scheduler's turn: :func:`due_steps` again while :data:`DUE_LIMIT` were due.

    At most :data:`ROUNDS` calls; the runners and ``rwq scheduler`` make it.
    """
    added, full = yield from due_steps(keys, DUE_LIMIT, owner, turn_ms)
    for _ in range(ROUNDS - 1):
        if not full:
            break
        more, full = yield from due_steps(keys, DUE_LIMIT)
        added += more
    return added
