"""Every operation of the package, each written once as a generator of calls (:mod:`..calls`).

An operation yields the calls it needs, receives each reply and returns its result; it never
sees a client, so the same code runs on a synchronous or an asyncio client, on one server or a
cluster, by :func:`~redis_work_queue.transport.run` and :func:`~redis_work_queue.transport.arun`.

- :mod:`.queue`: a queue's operations (:class:`QueueOps`): add, lease, renew, release, complete,
  inspection, dead letters, flush;
- :mod:`.lease`: the lease engine, leases over several queues, complete-and-lease;
- :mod:`.cleaning`: the light and deep cleans;
- :mod:`.health`: a worker's heartbeat, the fleet's light-clean turn, the live workers;
- :mod:`.metrics`: a queue's metrics;
- :mod:`.server`: the server's eviction policy;
- :mod:`.spark`: the Spark data source's snapshot pages and held completes.
"""

from __future__ import annotations

from .queue import *  # noqa: F403 - the queue's operations and what they name
from .queue import __all__ as __all__
