"""The worker runtime, shared by the thread, process and asyncio runners.

Everything a worker decides is written once here, one module per concern:

- :mod:`.options`: the options every runner takes, checked before anything starts;
- :mod:`.retry`: which errors are waited out, the backoffs, outages, and the one retrying step
  every call goes through;
- :mod:`.core`: the loops (the job loop, the watchdog, housekeeping), the jobs a worker holds,
  its counts and failure records;
- :mod:`.actions`: the runner's own steps (call the handler, pause, replace a timed-out
  handler) and the flags its loops wait on;
- :mod:`.drivers`: how a loop runs, in a thread or as an asyncio task (the package's one pair
  of drivers, :func:`~redis_work_queue.calls.drive` and ``adrive``, each with its perform
  function);
- :mod:`.processes`: the process pool and the messages of its children;
- :mod:`.shell`: what both runners share around their core (stop, abort, signals, the result);
- :mod:`.progress`: progress reports from a running handler (:func:`report_progress`).

The runners in :mod:`redis_work_queue.worker` and :mod:`redis_work_queue.aioworker` only start
threads, processes or tasks around a :class:`Core`.
"""

from __future__ import annotations

from ..retryable import RECONNECT_FIRST_SECS, RECONNECT_MAX_SECS, reconnect_delay, transient
from .core import (
    JOIN_SECS,
    LAPSE_BEATS,
    MESSAGE_MAX_BYTES,
    REASON_MAX_BYTES,
    WATCH_TICK_SECS,
    Core,
    Held,
    Job,
    WorkerStats,
    failure_reason,
)
from .options import CleanSecs, Options, check_options, check_pool, socket_timeout_for
from .progress import areport_progress, report_progress
from .retry import Outage, backoff_delay, retrying

__all__ = [
    "JOIN_SECS",
    "LAPSE_BEATS",
    "MESSAGE_MAX_BYTES",
    "REASON_MAX_BYTES",
    "RECONNECT_FIRST_SECS",
    "RECONNECT_MAX_SECS",
    "WATCH_TICK_SECS",
    "CleanSecs",
    "Core",
    "Held",
    "Job",
    "Options",
    "Outage",
    "WorkerStats",
    "areport_progress",
    "backoff_delay",
    "check_options",
    "check_pool",
    "failure_reason",
    "reconnect_delay",
    "report_progress",
    "retrying",
    "socket_timeout_for",
    "transient",
]
