"""The parallel phase's test order (tests/packing.py): pure code."""

from __future__ import annotations

from tests.packing import chunk_sizes, known_seconds, packed


def _chunks(order: list[str], workers: int) -> list[list[str]]:
    out, at = [], 0
    for size in chunk_sizes(len(order), workers):
        out.append(order[at:at + size])
        at += size
    return out


def test_chunk_sizes_are_worksteals_first_split() -> None:
    assert chunk_sizes(10, 4) == [2, 2, 3, 3]
    assert chunk_sizes(8, 4) == [2, 2, 2, 2]
    assert sum(chunk_sizes(2028, 4)) == 2028


def test_each_chunk_starts_with_its_long_tests_longest_first_and_keeps_the_rest_in_order() -> None:
    ids = [f"t{i}" for i in range(20)]
    seconds = {"t3": 100.0, "t17": 90.0, "t5": 60.0, "t11": 50.0, "t12": 40.0, "t0": 9.0, "t1": 7.9}
    order = packed(ids, ids, seconds, 4)
    assert sorted(order) == sorted(ids)  # nothing lost or repeated
    chunks = _chunks(order, 4)
    assert [c[0] for c in chunks] == ["t3", "t17", "t5", "t11"]  # the four longest, one per chunk
    assert chunks[3][:2] == ["t11", "t12"]  # LPT: t12 joins the least loaded chunk
    assert chunks[2][:2] == ["t5", "t0"]  # and the 9 s test too, after the longer t5
    shorts = [t for t in order if seconds.get(t, 0.0) < 8.0]
    assert shorts == [t for t in ids if seconds.get(t, 0.0) < 8.0]  # collection order kept


def test_one_worker_or_nothing_known_keeps_the_collection_order() -> None:
    ids = [f"t{i}" for i in range(12)]
    assert packed(ids, ids, {"t5": 50.0}, 1) == ids
    assert packed(ids, ids, {}, 4) == ids


def test_more_long_tests_than_a_chunk_holds_still_place_every_test_once() -> None:
    ids = [f"t{i}" for i in range(9)]
    order = packed(ids, ids, {t: 10.0 + i for i, t in enumerate(ids)}, 4)
    assert sorted(order) == sorted(ids)


def test_the_checked_in_seconds_name_tests_that_exist() -> None:
    seconds = known_seconds()
    assert seconds, "tests/data/test_seconds.tsv is missing or empty"
    assert all(nodeid.startswith("tests/test_") and "::" in nodeid for nodeid in seconds)


def test_a_documents_blocks_are_never_moved() -> None:
    ids = [f"tests/test_docs.py::test_block_runs[README.md:{i}]" for i in range(6)] + [f"t{i}" for i in range(6)]
    order = packed(ids, ids, {ids[4]: 60.0, "t3": 30.0}, 2)
    docs = [t for t in order if t.startswith("tests/test_docs.py")]
    assert docs == ids[:6] and order[0] == "t3"
