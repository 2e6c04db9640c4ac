"""Small helpers shared by the tests (not fixtures)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import redis

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.005, what: str = ""
) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def raw(db: redis.Redis, *args: Any) -> Any:
    """Run a command and get its reply undecoded, whatever the client's decode_responses."""
    return db.execute_command(*args, NEVER_DECODE=True)


def b(text: str | bytes) -> bytes:
    """UTF-8 bytes of a key or id."""
    return text if isinstance(text, bytes) else text.encode("utf-8")


def lrange(db: redis.Redis, key: str) -> list[bytes]:
    """A whole list, as bytes."""
    return list(raw(db, "LRANGE", key, 0, -1))


def get(db: redis.Redis, key: str) -> bytes | None:
    """A string value, as bytes."""
    return raw(db, "GET", key)


def dump_state(db: redis.Redis) -> dict[bytes, tuple[str, Any, bool]]:
    """Every key of the database with its type and value (lease TTLs reduced to 'has a TTL')."""
    state: dict[bytes, tuple[str, Any, bool]] = {}
    for key in raw(db, "KEYS", "*"):
        kind = raw(db, "TYPE", key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "string":
            value: Any = raw(db, "GET", key)
        elif kind == "list":
            value = list(raw(db, "LRANGE", key, 0, -1))
        else:
            value = kind
        has_ttl = int(raw(db, "PTTL", key)) > 0
        state[bytes(key)] = (kind, value, has_ttl)
    return state


def script_calls(admin: redis.Redis) -> int:
    """EVALSHA and EVAL calls a server has run since its stats were reset (decoded client)."""
    stats = admin.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "eval"))


def kill_clients_in(admin: redis.Redis, command: str, timeout: float = 15.0) -> None:
    """Wait until a client of the server runs ``command`` (such as a blocked WAIT), then kill
    that client's connection (CLIENT KILL ID) through ``admin`` (a decoded client)."""
    ids = wait_for(
        lambda: [c["id"] for c in admin.client_list() if c.get("cmd") == command],
        timeout,
        0.01,
        f"a client running {command}",
    )
    for client_id in ids:
        admin.client_kill_filter(_id=client_id)


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    """Run ``call`` in a daemon thread; the list gets its result or the exception it raised."""
    outcome: list[Any] = []

    def body() -> None:
        try:
            outcome.append(call())
        except BaseException as err:  # handed to the test
            outcome.append(err)

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, outcome
