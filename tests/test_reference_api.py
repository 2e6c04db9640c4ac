"""Code written for the reference Python client runs on this library with the import unchanged.

Each test is written the way a program or a test suite of the reference client
(shared/peers/mevitae/python) uses it: its README's examples, ``Item`` as a ``dict``, its private
attributes (``_main_queue_key``, ``_processing_key``, ``_item_data_key``, ``_lease_key``,
``_session``) used to look at Redis directly, and the replies its pipeline method leaves.
"""

from __future__ import annotations

import array
import asyncio
import copy
import json
import pickle

import pytest
import redis
import redis.asyncio

from helpers import b, keys_left
from plugins.backends import Backend
from redis_work_queue import AsyncWorkQueue, InvalidArgumentError, Item, KeyPrefix, WorkQueue

NAME = "example_work_queue"


@pytest.fixture
def work_queue() -> WorkQueue:
    return WorkQueue(KeyPrefix(NAME))


def test_readme_items() -> None:
    bytes_item = Item(b"[1,2,3]")
    string_item = Item("[1,2,3]")
    json_item = Item.from_json_data([1, 2, 3])
    assert bytes_item.data() == b"[1,2,3]"
    assert bytes_item.data() == string_item.data()
    assert bytes_item.data() == json_item.data()
    assert bytes_item.data_json() == [1, 2, 3]


def test_an_item_is_a_dict_of_data_and_id() -> None:
    item = Item(b"payload", id="job-1")
    assert isinstance(item, dict)
    assert item["id"] == "job-1"
    assert item["data"] == b"payload"
    assert item == {"data": b"payload", "id": "job-1"}
    assert dict(item) == {"data": b"payload", "id": "job-1"}
    assert sorted(item) == ["data", "id"]
    assert item.id() is item["id"]
    assert item.data() is item["data"]
    assert Item.from_dict(item) == item
    assert json.loads(json.dumps({**item, "data": item["data"].decode()}))["id"] == "job-1"
    assert Item(b"x", id=7)["id"] == "7"


def test_a_leased_item_survives_copy_and_pickle(bytes_db: redis.Redis) -> None:
    queue = WorkQueue(KeyPrefix(NAME))
    queue.add_item(bytes_db, Item(b"d", id="p"))
    leased = queue.lease(bytes_db, 30, block=False)
    assert leased is not None
    for clone in (pickle.loads(pickle.dumps(leased)), copy.copy(leased), copy.deepcopy(leased)):
        assert type(clone) is Item
        assert clone == leased
        assert (clone.lease_token, clone.deliveries) == (leased.lease_token, 1)
    assert queue.complete(bytes_db, pickle.loads(pickle.dumps(leased))) is True


@pytest.mark.parametrize(
    ("data", "stored"),
    [
        (bytearray(b"ba"), b"ba"),
        (memoryview(b"mv"), b"mv"),
        (array.array("B", [1, 2]), b"\x01\x02"),
        ([1, 2, 3], b"\x01\x02\x03"),
        ((255, 0), b"\xff\x00"),
        (range(3), b"\x00\x01\x02"),
    ],
    ids=["bytearray", "memoryview", "array", "list-of-ints", "tuple-of-ints", "range"],
)
def test_any_bytes_like_data_is_taken_as_bytes_takes_it(data: object, stored: bytes) -> None:
    item = Item(data)
    assert item.data() == stored
    assert type(item["data"]) is bytes


@pytest.mark.parametrize(
    "data",
    [5, True, {1: "a"}, None, 1.5, [256], ["a"]],
    ids=["int", "bool", "mapping", "None", "float", "int-out-of-range", "list-of-str"],
)
def test_data_that_bytes_would_lose_or_refuse_is_rejected(data: object) -> None:
    with pytest.raises(InvalidArgumentError, match="item data must be"):
        Item(data)
    if data != [256]:
        with pytest.raises(TypeError):  # as the reference client's bytes(data) raises
            Item(data)


def test_a_changed_item_is_checked_before_use(bytes_db: redis.Redis, work_queue: WorkQueue) -> None:
    item = Item(b"x", id="c")
    item["data"] = 12
    with pytest.raises(InvalidArgumentError, match=r"item\['data'\]"):
        work_queue.add_item(bytes_db, item)
    item["data"] = b"fine"
    item["id"] = "renamed"
    assert work_queue.add_item(bytes_db, item) is True
    assert bytes_db.get(work_queue._item_data_key.of("renamed")) == b"fine"


def test_reference_attributes_name_the_layout(backend: Backend, work_queue: WorkQueue) -> None:
    db = backend.client()
    assert work_queue._main_queue_key == f"{NAME}:queue"
    assert work_queue._processing_key == f"{NAME}:processing"
    assert work_queue._item_data_key.of("abc") == f"{NAME}:item:abc"
    assert work_queue._item_data_key.prefix == f"{NAME}:item:"
    assert work_queue._lease_key.of("abc") == f"{NAME}:lease:abc"
    assert isinstance(work_queue._session, str)
    assert len(work_queue._session) == 32
    assert work_queue._session != WorkQueue(KeyPrefix(NAME))._session
    # ... and the keys they name are where a reference test suite looks for the items.
    item = Item(b"\x00data", id="job")
    assert work_queue.add_item(db, item) is True
    raw = backend.client(decode_responses=False)
    assert raw.get(work_queue._item_data_key.of(item.id())) == b"\x00data"
    assert raw.lrange(work_queue._main_queue_key, 0, -1) == [b"job"]
    leased = work_queue.lease(db, 5, block=False)
    assert leased is not None and leased["id"] == "job"
    assert raw.exists(work_queue._lease_key.of("job")) == 1
    assert raw.lrange(work_queue._processing_key, 0, -1) == [b"job"]
    raw.delete(work_queue._lease_key.of("job"))  # as if the lease expired
    work_queue.light_clean(db)
    assert raw.lrange(work_queue._main_queue_key, 0, -1) == [b"job"]
    assert work_queue.lease(db, 5, block=False) == item
    assert work_queue.complete(db, item) is True
    assert not raw.exists(work_queue._item_data_key.of("job"))


@pytest.mark.parametrize("transaction", [True, False])
def test_pipeline_replies_are_shaped_as_set_and_lpush(
    backend: Backend, work_queue: WorkQueue, transaction: bool
) -> None:
    db = backend.client()
    pipe = db.pipeline(transaction=transaction)
    assert work_queue.add_unique_item_to_pipeline(pipe, Item(b"a", id="a")) is None
    assert work_queue.add_unique_item_to_pipeline(pipe, Item(b"b", id="b")) is None
    pipe.get("unrelated")
    results = pipe.execute()
    assert results == [True, 1, True, 2, None]
    assert results[0] == 1 and type(results[1]) is int
    assert work_queue.queue_len(db) == 2
    first = work_queue.lease(db, 5, block=False)
    assert first is not None and first.id() == "a"


def test_add_unique_item_through_a_caller_pipeline_then_lease(
    bytes_db: redis.Redis, work_queue: WorkQueue
) -> None:
    with bytes_db.pipeline() as pipe:
        for n in range(3):
            work_queue.add_unique_item_to_pipeline(pipe, Item.from_json_data({"n": n}, id=f"{n}"))
        set_ok, *rest = pipe.execute()
    assert set_ok and rest == [1, True, 2, True, 3]
    jobs = [work_queue.lease(bytes_db, 5, block=False) for _ in range(3)]
    assert [job.data_json()["n"] for job in jobs if job] == [0, 1, 2]


def test_reference_worker_loop(bytes_db: redis.Redis, work_queue: WorkQueue) -> None:
    """The README's worker loop, with its error handling: a job to retry is dropped and comes
    back once its lease has expired and a light clean ran."""
    for n in range(3):
        work_queue.add_unique_item(bytes_db, Item.from_json_data(n))
    done, failed_once = [], False
    while work_queue.queue_len(bytes_db) or work_queue.processing(bytes_db):
        job: Item | None = work_queue.lease(bytes_db, 0.05, timeout=1)
        if job is None:
            work_queue.light_clean(bytes_db)
            continue
        if job.data_json() == 1 and not failed_once:
            failed_once = True  # should_retry: don't complete it
            continue
        assert work_queue.complete(bytes_db, job) is True
        done.append(job.data_json())
    assert sorted(done) == [0, 1, 2]
    assert work_queue.lease(bytes_db, 5, timeout=1) is None
    assert work_queue.lease(bytes_db, 5, block=False) is None


def test_only_one_complete_returns_true(bytes_db: redis.Redis, work_queue: WorkQueue) -> None:
    work_queue.add_item(bytes_db, Item(b"once", id="o"))
    job = work_queue.lease(bytes_db, 1000)
    assert job is not None
    assert work_queue.complete(bytes_db, job) is True
    assert work_queue.complete(bytes_db, job) is False
    assert work_queue.complete(bytes_db, Item(b"", id="o")) is False


def test_an_empty_id_from_another_client_is_an_ordinary_item(
    bytes_db: redis.Redis, work_queue: WorkQueue
) -> None:
    """This library never makes an empty id, but one added by another client is leased,
    completed and cleaned like any other."""
    bytes_db.set(work_queue._item_data_key.of(""), b"foreign")
    bytes_db.lpush(work_queue._main_queue_key, "")
    job = work_queue.lease(bytes_db, 5, block=False)
    assert job is not None and (job["id"], job["data"]) == ("", b"foreign")
    assert work_queue.complete(bytes_db, job) is True
    assert keys_left(bytes_db) == []


def test_lease_secs_zero_is_refused_before_anything_is_written(
    bytes_db: redis.Redis, work_queue: WorkQueue
) -> None:
    work_queue.add_item(bytes_db, Item(b"x", id="z"))
    with pytest.raises(InvalidArgumentError, match="lease_secs"):
        work_queue.lease(bytes_db, 0)
    assert bytes_db.lrange(work_queue._main_queue_key, 0, -1) == [b"z"]
    assert bytes_db.llen(work_queue._processing_key) == 0


def test_asyncio_queue_has_the_same_attributes_and_pipeline_replies(
    real_backend: Backend,
) -> None:
    async def scenario() -> None:
        db = redis.asyncio.Redis.from_url(real_backend.url)
        try:
            queue = AsyncWorkQueue(KeyPrefix(NAME))
            assert queue._main_queue_key == f"{NAME}:queue"
            assert queue._processing_key == f"{NAME}:processing"
            assert queue._item_data_key.of("i") == f"{NAME}:item:i"
            assert queue._lease_key.of("i") == f"{NAME}:lease:i"
            assert len(queue._session) == 32
            pipe = db.pipeline()
            queue.add_unique_item_to_pipeline(pipe, Item(b"x", id="i"))
            queue.add_item_to_pipeline(pipe, Item(b"y", id="j"))
            assert await pipe.execute() == [True, 1, True, 2]
            leased = await queue.lease(db, 5, block=False)
            assert leased is not None and leased["data"] == b"x"
            assert await db.exists(b(queue._lease_key.of("i"))) == 1
        finally:
            await db.aclose()

    asyncio.run(asyncio.wait_for(scenario(), 30))
