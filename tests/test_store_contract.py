"""One object-store contract, run against both real backends: ``S3Store`` on the
moto S3 server from the fixtures and ``LocalStore`` in a temporary directory."""

from __future__ import annotations

import os
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llog.errors import InvalidInput, ObjectNotFound, StoreError
from llog.store import LocalStore, ObjectStore
from llog.store.s3 import EXPECT_CONTINUE_MIN_BYTES, S3Store
from tests.conftest import TEST_BUCKET, Servers

BACKENDS = ["s3", "local"]


@pytest.fixture(scope="module")
def s3_client(servers: Servers) -> Iterator[Any]:
    """One boto3 client for the module: building one costs about half a second."""
    with S3Store(TEST_BUCKET, endpoint_url=servers.s3_endpoint) as s:
        yield s._client


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, root_prefix: str, tmp_path: Path) -> Iterator[ObjectStore]:
    if request.param == "s3":
        # Each test's S3 keys live under its own prefix; the shared client outlives it.
        yield S3Store(TEST_BUCKET, prefix=root_prefix, client=request.getfixturevalue("s3_client"))
    else:
        with LocalStore(tmp_path / "objects") as s:
            yield s


def payload(n: int, seed: int = 0) -> bytes:
    """``n`` bytes whose every position is distinguishable (catches off-by-one ranges)."""
    return bytes((i * 7 + seed) % 251 for i in range(n))


def test_put_get_round_trip(store: ObjectStore) -> None:
    store.put("a/b/c", b"hello")
    assert store.get("a/b/c") == b"hello"


def test_put_overwrites(store: ObjectStore) -> None:
    store.put("k", b"first version, longer")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    info = store.head("k")
    assert info is not None and info.size == len(b"second")


def test_empty_object(store: ObjectStore) -> None:
    store.put("empty", b"")
    assert store.get("empty") == b""
    info = store.head("empty")
    assert info is not None and info.size == 0


@pytest.mark.parametrize(("offset", "length"), [(0, 10), (0, 1000), (123, 456), (990, 10), (999, 1)])
def test_get_range_returns_exact_bytes(store: ObjectStore, offset: int, length: int) -> None:
    data = payload(1000)
    store.put("blob", data)
    assert store.get_range("blob", offset, length) == data[offset : offset + length]


@pytest.mark.parametrize(("offset", "length"), [(990, 11), (1000, 1), (5000, 10)])
def test_get_range_past_end_is_a_store_error(store: ObjectStore, offset: int, length: int) -> None:
    store.put("blob", payload(1000))
    with pytest.raises(StoreError) as err:
        store.get_range("blob", offset, length)
    assert not isinstance(err.value, ObjectNotFound)


@pytest.mark.parametrize(("offset", "length"), [(-1, 10), (0, 0), (0, -5)])
def test_get_range_rejects_bad_ranges(store: ObjectStore, offset: int, length: int) -> None:
    store.put("blob", payload(100))
    with pytest.raises(InvalidInput):
        store.get_range("blob", offset, length)


def test_missing_key_is_object_not_found(store: ObjectStore) -> None:
    with pytest.raises(ObjectNotFound) as err:
        store.get("no/such/key")
    assert err.value.key == "no/such/key"
    with pytest.raises(ObjectNotFound) as err:
        store.get_range("no/such/key", 0, 10)
    assert err.value.key == "no/such/key"
    assert store.head("no/such/key") is None


def test_a_prefix_of_existing_keys_is_not_an_object(store: ObjectStore) -> None:
    store.put("dir/file", b"x")
    with pytest.raises(ObjectNotFound):
        store.get("dir")
    with pytest.raises(ObjectNotFound):
        store.get_range("dir", 0, 1)


def test_head_reports_size_and_modification_time(store: ObjectStore) -> None:
    before = time.time()
    store.put("h", payload(4321))
    after = time.time()
    info = store.head("h")
    assert info is not None
    assert info.key == "h"
    assert info.size == 4321
    # S3 keeps whole seconds; allow clock granularity, not speed.
    assert before - 2 <= info.modified <= after + 2


def test_list_by_prefix_in_key_order(store: ObjectStore) -> None:
    keys = ["p/b", "p/a", "p/c/d", "p/a0", "p/a-", "q/a", "pp/x", "p0"]
    for i, k in enumerate(keys):
        store.put(k, payload(i + 1))
    listed = list(store.list("p/"))
    assert [o.key for o in listed] == sorted(k for k in keys if k.startswith("p/"))
    sizes = {k: i + 1 for i, k in enumerate(keys)}
    assert all(o.size == sizes[o.key] for o in listed)
    assert [o.key for o in store.list("p")] == sorted(k for k in keys if k.startswith("p"))
    assert [o.key for o in store.list("q/")] == ["q/a"]
    assert list(store.list("nothing/")) == []


def test_list_everything_under_the_store_root(store: ObjectStore) -> None:
    store.put("x/1", b"1")
    store.put("y/2", b"2")
    assert [o.key for o in store.list("")] == ["x/1", "y/2"]


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("d/1", b"1")
    store.put("d/2", b"2")
    store.put("d/keep", b"k")
    assert store.delete(["d/1", "d/2", "d/never-existed"]) == 3
    assert [o.key for o in store.list("d/")] == ["d/keep"]
    assert store.delete(["d/1", "d/2"]) == 2
    assert store.delete([]) == 0
    with pytest.raises(ObjectNotFound):
        store.get("d/1")


def test_delete_many_keys_across_batches(store: ObjectStore) -> None:
    # S3 deletes at most 1000 keys per request: real objects sit on both sides of each
    # batch boundary; the rest of the 2,001 keys do not exist (deleting them is a no-op).
    keys = [f"many/{i:05d}" for i in range(2001)]
    real = [keys[0], keys[999], keys[1000], keys[1999], keys[2000]]
    for k in real:
        store.put(k, b"x")
    store.put("many-other", b"stays")
    deletes_before = store.metrics.value("llog_s3_ops_total", op="delete")
    assert store.delete(iter(keys)) == len(keys)
    assert list(store.list("many/")) == []
    assert store.get("many-other") == b"stays"
    if isinstance(store, S3Store):
        assert store.metrics.value("llog_s3_ops_total", op="delete") - deletes_before == 3


@pytest.mark.parametrize("bad", ["", "/abs", "a/../b", "..", "../up", "a//b", "a/./b", "a/", "a\\b", "a\0b"])
def test_invalid_keys_are_rejected(store: ObjectStore, bad: str) -> None:
    with pytest.raises(InvalidInput):
        store.put(bad, b"x")
    with pytest.raises(InvalidInput):
        store.get(bad)
    with pytest.raises(InvalidInput):
        store.get_range(bad, 0, 1)
    with pytest.raises(InvalidInput):
        store.head(bad)
    with pytest.raises(InvalidInput):
        store.delete([bad])
    assert list(store.list("")) == []


def test_large_object_round_trip(store: ObjectStore) -> None:
    data = os.urandom(5 * 1024 * 1024 + 17)
    store.put("large", data)
    assert store.get("large") == data
    mid = 3 * 1024 * 1024 + 5
    assert store.get_range("large", mid, 1024 * 1024) == data[mid : mid + 1024 * 1024]
    info = store.head("large")
    assert info is not None and info.size == len(data)


def test_metrics_count_operations_and_bytes(store: ObjectStore) -> None:
    m = store.metrics
    store.put("m", payload(300))
    store.get("m")
    store.get_range("m", 10, 20)
    assert m.value("llog_s3_ops_total", op="put") == 1
    assert m.value("llog_s3_ops_total", op="get") == 1
    assert m.value("llog_s3_ops_total", op="get_range") == 1
    assert m.value("llog_s3_bytes_total", direction="in") == 300
    assert m.value("llog_s3_bytes_total", direction="out") == 320


def test_put_with_the_callers_crc_round_trips(store: ObjectStore) -> None:
    data = payload(4096)
    store.put("crc", data, crc32=zlib.crc32(data))
    assert store.get("crc") == data


# -- S3Store specifics ------------------------------------------------------------


def test_s3_put_waits_for_100_continue_only_for_large_bodies(
    root_prefix: str, s3_client: Any
) -> None:
    sent: list[dict[str, str]] = []

    def spy(request: Any, **_: Any) -> None:
        sent.append({k: (v.decode() if isinstance(v, bytes) else v) for k, v in request.headers.items()})

    store = S3Store(TEST_BUCKET, prefix=root_prefix, client=s3_client)
    s3_client.meta.events.register("before-send.s3.PutObject", spy, unique_id="test-spy")
    try:
        small, large = payload(1000), os.urandom(EXPECT_CONTINUE_MIN_BYTES)
        store.put("small", small, crc32=zlib.crc32(small))
        store.put("large", large)
    finally:
        s3_client.meta.events.unregister("before-send.s3.PutObject", unique_id="test-spy")
    assert "Expect" not in sent[0]  # one round trip fewer on a small PUT
    assert sent[1].get("Expect") == "100-continue"
    assert store.get("small") == small and store.get("large") == large


def test_s3_put_hands_a_bytes_body_to_botocore_as_is(root_prefix: str, s3_client: Any) -> None:
    # Wrapped in a BytesIO (botocore's default for PutObject) it is hashed and sent in
    # 8 KiB copies; the store keeps it bytes (see S3Store.__init__).
    bodies: list[type] = []

    def spy(request: Any, **_: Any) -> None:
        bodies.append(type(request.body))

    store = S3Store(TEST_BUCKET, prefix=root_prefix, client=s3_client)
    data = payload(100_000)
    s3_client.meta.events.register("before-sign.s3.PutObject", spy, unique_id="test-body-spy")
    try:
        store.put("as-is", data, crc32=zlib.crc32(data))
        store.put("as-is-no-crc", data)
    finally:
        s3_client.meta.events.unregister("before-sign.s3.PutObject", unique_id="test-body-spy")
    assert bodies == [bytes, bytes]
    assert store.get("as-is") == data and store.get("as-is-no-crc") == data


# -- LocalStore specifics ---------------------------------------------------------


def test_local_store_leaves_no_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    with LocalStore(root) as s:
        for i in range(20):
            s.put(f"t/{i % 3}", payload(100 + i))
        s.put("t/deep/er/key", b"x")
    on_disk = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    assert on_disk == ["t/0", "t/1", "t/2", "t/deep/er/key"]


def test_local_store_put_is_atomic_under_concurrent_readers(tmp_path: Path) -> None:
    payloads = [payload(size, seed) for seed, size in enumerate((1, 4096, 65536 + 3, 1024 * 1024 + 11))]
    allowed = set(payloads)
    with LocalStore(tmp_path / "objects") as s:
        s.put("hot", payloads[0])
        stop = threading.Event()
        bad: list[int] = []
        reads = [0]

        def reader() -> None:
            while not stop.is_set():
                data = s.get("hot")
                reads[0] += 1
                if data not in allowed:
                    bad.append(len(data))

        def writer(seed: int) -> None:
            for i in range(40):
                s.put("hot", payloads[(i + seed) % len(payloads)])

        readers = [threading.Thread(target=reader) for _ in range(2)]
        writers = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        assert bad == []
        assert reads[0] > 0
        assert s.get("hot") in allowed
        assert [o.key for o in s.list("")] == ["hot"]


def test_local_store_keys_cannot_escape_the_root(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    (tmp_path / "secret").write_bytes(b"outside")
    with LocalStore(root) as s:
        with pytest.raises(InvalidInput):
            s.get("../secret")
        with pytest.raises(InvalidInput):
            s.put("../escaped", b"x")
    assert not (tmp_path / "escaped").exists()
