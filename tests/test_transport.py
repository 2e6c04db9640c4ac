"""How calls reach Redis: one sender per client, chosen and kept by ``transport.py``.

The structure the rest of the suite relies on: operations never see a client, redis-py's private
attributes are read only by the lean path (``lean.py``), the lean path is taken only for the
redis-py releases it was tested with, nothing is stored on the caller's client object, and the
lean path reads a large reply whole.
"""

from __future__ import annotations

import ast
import gc
import pathlib
from typing import Any

import pytest
import redis
import redis.asyncio

import redis_work_queue
from redis_work_queue import Item, KeyPrefix, WorkQueue, lean, transport
from redis_work_queue.errors import InvalidArgumentError
from redis_work_queue.senders import Sender
from servers import Proc

PACKAGE = pathlib.Path(redis_work_queue.__file__).parent
#: The modules that see a client; nothing of the operations layer may import them.
CLIENT_SIDE = {"transport", "senders", "lean", "routing"}


def _own_private_names() -> set[str]:
    """The private names the package gives its own attributes, functions and classes."""
    found: set[str] = set()
    for file in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("self", "cls"):
                found.add(node.attr)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                found.add(node.name)
    return found


def _redis_private_names() -> set[str]:
    """Every private name redis-py's own source uses as an attribute, function or class."""
    found: set[str] = set()
    for file in pathlib.Path(redis.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            name = getattr(node, "attr", None) or getattr(node, "name", None)
            if isinstance(name, str) and name.startswith("_") and not name.startswith("__"):
                found.add(name)
    return found


def test_no_private_attribute_of_redis_py_outside_the_lean_path() -> None:
    """Outside lean.py, no attribute of another object than our own (``self``, ``cls``) has
    a name redis-py keeps private."""
    private = _redis_private_names()
    assert {"_sock", "_parser", "_available_connections", "_buffer"} <= private  # read right
    private -= _own_private_names() - {"_sock", "_parser", "_available_connections", "_buffer"}
    offenders = []
    for file in sorted(PACKAGE.rglob("*.py")):
        if file.name == "lean.py":
            continue
        for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
            own = isinstance(node, ast.Attribute) and ast.unparse(node.value) in ("self", "cls")
            if isinstance(node, ast.Attribute) and node.attr in private and not own:
                offenders.append(f"{file.relative_to(PACKAGE)}:{node.lineno} {node.attr}")
    assert offenders == []


def test_the_lean_module_does_read_them() -> None:
    """The check above is not vacuous: lean.py is where they are."""
    text = (PACKAGE / "lean.py").read_text(encoding="utf-8")
    assert "._available_connections" in text and "._sock" in text


def test_operations_never_import_a_client_side_module() -> None:
    for file in sorted((PACKAGE / "ops").glob("*.py")):
        tree = ast.parse(file.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                names = {node.module.split(".")[0]} if node.module else set()
                names |= {alias.name for alias in node.names} if not node.module else set()
                assert not names & CLIENT_SIDE, (file.name, names)


def test_the_lean_path_is_only_taken_on_the_tested_releases(
    redis_server: Proc, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = redis_server.client()
    if redis.__version__ in lean.TESTED_VERSIONS:
        assert lean.takes(db)
    monkeypatch.setattr(redis, "__version__", "99.0.0")
    assert not lean.takes(db)
    assert not transport.lean_available(db)
    with pytest.raises(InvalidArgumentError, match="lean path does not take"):
        transport.use(db, "lean")
    transport.use(db, "auto")
    assert type(transport.sender_of(db)) is Sender
    q = WorkQueue(KeyPrefix("tested"))
    assert q.add_item(db, Item(b"a", id="a")) is True  # the public path works all the same
    assert q.lease(db, 30, block=False) is not None


def test_a_path_can_be_chosen_per_client(redis_server: Proc) -> None:
    db = redis_server.client()
    transport.use(db, "public")
    assert type(transport.sender_of(db)) is Sender
    transport.use(db, "auto")
    assert isinstance(transport.sender_of(db), lean.LeanSender) == lean.takes(db)
    with pytest.raises(InvalidArgumentError, match="'auto', 'public' or 'lean'"):
        transport.use(db, "fast")  # type: ignore[arg-type]


def test_nothing_is_kept_on_the_client_and_its_sender_goes_with_it(redis_server: Proc) -> None:
    db = redis.Redis(port=redis_server.port)  # not the fixture's: it keeps its clients
    before = set(vars(db))
    q = WorkQueue(KeyPrefix("kept"))
    q.add_item(db, Item(b"a", id="a"), replicas=0)
    q.complete(db, q.lease(db, 30, block=False))  # type: ignore[arg-type]
    assert set(vars(db)) == before
    key = id(db)
    assert key in transport._SENDERS
    del db, q
    gc.collect()
    assert key not in transport._SENDERS


BIG = 200_000


def _big_reply_then(tail: bytes) -> bytes:
    return b"*2\r\n:7\r\n$%d\r\n%b\r\n%b" % (BIG, b"v" * BIG, tail)


def test_a_reply_ending_in_a_large_bulk_string_is_read_whole_at_every_cut() -> None:
    """A reply is parsed by the short parser only when whole: cut anywhere (a read that ends
    inside the last bulk string, or before its final CRLF), it is left to redis-py's."""
    parser = redis.Connection()._parser
    reply = _big_reply_then(b"")
    assert lean._whole_reply(parser, reply) == ([7, b"v" * BIG], len(reply))
    for cut in (*range(1, 40), *range(len(reply) - 40, len(reply)), 32768, 65536):
        assert lean._whole_reply(parser, reply[:cut]) is None, cut


@pytest.mark.parametrize("asyncio_client", [False, True])
def test_peek_of_a_large_item_on_the_lean_path_then_another_call(
    redis_server: Proc, asyncio_client: bool
) -> None:
    """A 200 kB item comes back whole, and the connection is left clean for the next call."""
    data = bytes(range(256)) * (BIG // 256)
    admin = redis_server.client()
    admin.flushall()
    if not asyncio_client:
        db = redis_server.client()
        q = WorkQueue(KeyPrefix("large"))
        q.add_item(db, Item(data, id="big"))
        assert isinstance(transport.sender_of(db), lean.LeanSender) == lean.takes(db)
        for _ in range(3):
            (found,) = q.peek(db, 0, 1)
            assert found.data == data
            assert q.add_item(db, Item(b"x", id="x")) in (True, False)
            assert q.queue_len(db) == 2
        return
    import asyncio  # noqa: PLC0415

    from redis_work_queue import AsyncWorkQueue  # noqa: PLC0415

    async def main() -> None:
        db: Any = redis.asyncio.Redis(port=redis_server.port)
        q = AsyncWorkQueue(KeyPrefix("large"))
        await q.add_item(db, Item(data, id="big"))
        for _ in range(3):
            (found,) = await q.peek(db, 0, 1)
            assert found.data == data
            assert await q.add_item(db, Item(b"x", id="x")) in (True, False)
            assert await q.queue_len(db) == 2
        await db.aclose()

    asyncio.run(main())


def test_the_lean_path_is_tested_on_every_release_it_takes() -> None:
    """The releases the lean path takes are those the conformance job runs, no more."""
    source = (pathlib.Path(__file__).parents[1] / "conformance" / "run.py").read_text("utf-8")
    tree = ast.parse(source)
    (versions,) = [
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "VERSIONS"
    ]
    assert set(lean.TESTED_VERSIONS) <= set(versions)
