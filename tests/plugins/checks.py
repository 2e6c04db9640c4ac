"""The fixtures of the shared write-check and out-of-memory tables (see ``tests/checks.py``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from servers import Proc


@pytest.fixture(scope="module")
def check_clients(redis_server: Proc) -> Iterator[tuple[redis.Redis, redis.Redis]]:
    """Two clients of the session's server for a module's write checks; each case empties the
    database (FLUSHDB of that server only)."""
    db = redis_server.client(socket_timeout=10)
    yield db, redis_server.client(socket_timeout=10)
    db.flushdb()


@pytest.fixture
def full_db(module_redis: Proc) -> Iterator[redis.Redis]:
    """An emptied client of the module's own server (whose memory limit the tests lower and
    raise); ``checks.limit`` makes it run out of memory."""
    db = module_redis.client(socket_timeout=10)
    db.config_set("maxmemory", 0)
    db.config_set("maxmemory-policy", "noeviction")
    db.flushdb()
    try:
        yield db
    finally:
        db.config_set("maxmemory", 0)
