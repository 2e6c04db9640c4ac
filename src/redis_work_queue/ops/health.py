"""Worker health as operations: a worker's heartbeat, the fleet's light-clean turn, live workers.

Each running worker registers itself in every queue it serves (``lua/heartbeat.lua``):
``<P>:workers`` (sorted set, worker id -> ms its registration lapses) and ``<P>:worker:<id>``
(hash: host, pid, queues, started, beat, completed, failed, lost). Both expire on their own, so a
worker killed with SIGKILL vanishes from the listing once its registration lapses; a clean stop
removes it at once. Each queue's keys stay in that queue's slot (Redis Cluster safe).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .. import scripts
from ..calls import Command, ScriptCall, Steps
from ..keyprefix import QueueKeys
from ..results import WorkerInfo
from ..validation import decode
from .registry import builds, operation

#: Where the docs describe the runner's heartbeats and clean turn.
DOCS = "worker.md#what-it-does"


@builds("heartbeat")
def heartbeat_call(
    keys: QueueKeys, worker: str, ttl_ms: int, durations: int, *pairs: scripts.Arg
) -> ScriptCall:
    """``lua/heartbeat.lua``: register ``worker`` for ``ttl_ms`` (0: remove its registration).

    ``pairs`` holds ``durations`` histogram increments (field, value), then the registration's
    fields (field, value).
    """
    return ScriptCall.on(keys, "heartbeat", worker, ttl_ms, durations, *pairs)


@operation(scripts=("heartbeat",), writes=True, docs=DOCS)
def heartbeat_steps(
    keys: QueueKeys,
    worker_id: str,
    ttl_ms: int,
    fields: dict[str, str | int | float],
    durations: Mapping[str, int] | None = None,
) -> Steps[int]:
    """Register (or, with ``ttl_ms`` 0, unregister) a worker; returns the live worker count.

    ``durations`` (histogram field -> increment, see :mod:`.durations`) are added to
    ``<P>:durations`` in the same call.
    """
    deltas = [(name, value) for name, value in (durations or {}).items() if value]
    pairs: list[scripts.Arg] = []
    for name, value in deltas:
        pairs += (name, value)
    for name, field_value in fields.items():
        pairs += (name, field_value)
    return int((yield heartbeat_call(keys, worker_id, ttl_ms, len(deltas), *pairs)))


@operation(commands=("SET",), writes=True, docs=DOCS)
def clean_gate_steps(keys: QueueKeys, worker_id: str, interval_ms: int) -> Steps[bool]:
    """Take the fleet's turn to light-clean the queue: True for at most one worker per interval.

    It is ``SET <P>:cleaned <worker> NX PX <interval>``; the caller cleans after. A worker that
    dies between the two leaves the turn unused: the next interval cleans.
    """
    reply = yield Command(
        ("SET", keys.cleaned, worker_id, "NX", "PX", interval_ms),
        route=keys.queue,
        slot_keys=(keys.cleaned,),
    )
    return reply is not None


#: The latest time a registration may name: the end of the year 9999, in seconds.
MAX_TIME = 253_402_300_799.0
#: The largest count or process id read from a registration (a Redis integer).
MAX_INT = 2**63 - 1


def _text(fields: dict[Any, Any], name: str) -> str:
    value = fields.get(name.encode(), fields.get(name, b""))
    return decode(value) if isinstance(value, bytes | str) else str(value)


class _Reader:
    """Reads the numbers of one registration hash, noting the fields that hold none in range.

    Out of range: not a number, not finite, too large, negative, a fraction where a whole one is
    kept.
    """

    def __init__(self, fields: dict[Any, Any]) -> None:
        self.fields = fields
        self.unreadable: list[str] = []

    def number(self, name: str, high: float, whole: bool = False) -> float | None:
        """The field as a finite number from 0 to ``high``; None when missing or unreadable."""
        text = _text(self.fields, name).strip()
        if not text:
            return None
        value = _finite(text, high, whole)
        if value is None:
            self.unreadable.append(name)
        return value

    def count(self, name: str) -> int:
        """The field as a whole count; 0 when missing or unreadable."""
        value = self.number(name, MAX_INT, whole=True)
        return 0 if value is None else int(value)


def _finite(text: str, high: float, whole: bool) -> float | None:
    """``text`` as a number from 0 to ``high`` (a whole one with ``whole``), else None."""
    try:
        value = float(int(text)) if whole and text.lstrip("+-").isdigit() else float(text)
    except (ValueError, OverflowError):
        return None
    if not math.isfinite(value) or not 0 <= value <= high or (whole and not value.is_integer()):
        return None
    return value


@operation(
    functions=(("live_workers", "alive_workers"),),
    commands=("TIME", "ZRANGE", "HGETALL"),
    cli="workers",
    docs=DOCS,
)
def workers_steps(keys: QueueKeys) -> Steps[list[WorkerInfo]]:
    """The queue's live workers (registrations not lapsed), oldest registration first."""
    seconds, micros = yield Command(("TIME",), route=keys.queue)
    now_ms = int(seconds) * 1000 + int(micros) // 1000
    rows = yield Command(
        ("ZRANGE", keys.workers, f"({now_ms}", "+inf", "BYSCORE", "WITHSCORES"),
        route=keys.queue,
        slot_keys=(keys.workers,),
    )
    if rows and isinstance(rows[0], list | tuple):  # RESP3: [[member, score], ...]
        pairs = [(row[0], row[1]) for row in rows]
    else:
        pairs = list(zip(rows[::2], rows[1::2], strict=True))
    found: list[WorkerInfo] = []
    for raw_id, lapses in pairs:
        worker_id = decode(raw_id)
        key = keys.worker(worker_id)
        flat = yield Command(("HGETALL", key), route=keys.queue, slot_keys=(key,))
        fields = flat if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2], strict=True))
        if not fields:
            continue
        queues = _text(fields, "queues")
        read = _Reader(fields)
        pid = read.number("pid", MAX_INT, whole=True)
        started = read.number("started", MAX_TIME)
        beat = read.number("beat", MAX_TIME * 1000)
        until = _finite(
            decode(lapses) if isinstance(lapses, bytes) else str(lapses), MAX_TIME * 1000, False
        )
        if until is None:
            read.unreadable.append("lapses")
        completed, failed, lost = read.count("completed"), read.count("failed"), read.count("lost")
        found.append(
            WorkerInfo(
                id=worker_id,
                host=_text(fields, "host"),
                pid=None if pid is None else int(pid),
                queues=tuple(queues.split("\n")) if queues else (),
                started=started,
                beat=None if beat is None else beat / 1000,
                lapses=None if until is None else until / 1000,
                completed=completed,
                failed=failed,
                lost=lost,
                unreadable=tuple(sorted(read.unreadable)),
            )
        )
    return found
