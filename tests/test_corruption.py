"""Acceptance: a damaged blob makes read and scan raise ``CorruptBlob`` naming the
object key and the byte range of the damaged body; nothing corrupt is ever yielded.
The blob is damaged in place through the store API, on both backends. Also: a scan
whose blobs vanish under it (compaction + vacuum) re-plans from the index."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest

import llog
from compactor import compact_once
from compactor.vacuum import vacuum
from llog import AppendGroup
from llog.codec import blob
from llog.state.control import read_control

TOPIC = "rot"

Damage = Callable[[bytes, blob.BlobPart, int], bytes]


@dataclass(frozen=True)
class Written:
    """Partition 0: records 0-1 and 2-3 in one shared blob (side by side, partition
    1's body after them: a writer lays each partition's bodies together, so a scan
    fetches both slices in one GET), then 4-5 in a second blob. ``target`` is the body
    holding records 2-3."""

    data_key: str
    target: blob.BlobPart
    header_end: int
    values: dict[int, list[bytes]]


@pytest.fixture(params=["s3", "file"])
def cconn(request: pytest.FixtureRequest) -> Iterator[llog.Connection]:
    cfg: llog.LlogConfig = request.getfixturevalue("config" if request.param == "s3" else "file_config")
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create(TOPIC, 2)
        yield conn


def _write(conn: llog.Connection) -> Written:
    v = {0: [b"p0-%d-" % i + b"x" * 40 for i in range(6)], 1: [b"p1-0", b"p1-1"]}
    with llog.Writer(conn) as w:
        first = w.append_shared([
            AppendGroup(TOPIC, 0, v[0][0:2]),
            AppendGroup(TOPIC, 1, v[1]),
            AppendGroup(TOPIC, 0, v[0][2:4]),
        ])
        w.append(TOPIC, 0, v[0][4:6])
    assert isinstance(first[2], llog.AppendResult) and first[2].start_offset == 2
    key = first[2].data_key
    data = conn.store.get(key)
    _, parts = blob.parse_header(data)
    return Written(key, [p for p in parts if p.partition == 0][1], parts[0].body_offset, v)


def _in_body(where: str) -> Damage:
    def damage(data: bytes, target: blob.BlobPart, header_end: int) -> bytes:
        pos = target.body_offset + {
            "magic": 1,  # the body's own header: magic
            "crc": 5,  # ... and its checksum field
            "count": 8,  # ... and its record count
            "values": target.body_length - 12,  # the value bytes near the end
        }[where]
        return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :]

    return damage


def _truncate(data: bytes, target: blob.BlobPart, header_end: int) -> bytes:
    return data[: target.body_offset + target.body_length // 2]


DAMAGE: dict[str, Damage] = {
    "body magic": _in_body("magic"),
    "body crc": _in_body("crc"),
    "body count": _in_body("count"),
    "body values": _in_body("values"),
    "truncated": _truncate,
}


def _scan(conn: llog.Connection, p: int, start: int = 0) -> tuple[list[tuple[int, bytes]], Exception | None]:
    """What a scan yielded before it stopped, and why it stopped (None: it finished)."""
    got: list[tuple[int, bytes]] = []
    with llog.Reader(conn) as r:
        try:
            for rec in r.scan(TOPIC, p, start):
                got.append((rec.offset, rec.value))
        except llog.LlogError as exc:
            return got, exc
    return got, None


@pytest.mark.parametrize("how", list(DAMAGE))
def test_damaged_body_raises_corrupt_blob(cconn: llog.Connection, how: str) -> None:
    w = _write(cconn)
    data = cconn.store.get(w.data_key)
    cconn.store.put(w.data_key, DAMAGE[how](data, w.target, w.header_end))
    want = {p: list(enumerate(vals)) for p, vals in w.values.items()}

    got, err = _scan(cconn, 0)
    assert isinstance(err, llog.CorruptBlob), f"{how}: scan ended with {err!r}"
    assert (err.key, err.offset, err.length) == (w.data_key, w.target.body_offset, w.target.body_length)
    assert w.data_key in str(err)
    assert f"[{w.target.body_offset}, {w.target.body_offset + w.target.body_length})" in str(err)
    # Whatever came before the damage is correct, and nothing of or after it came out.
    assert got == want[0][: len(got)] and len(got) <= 2

    with llog.Reader(cconn) as r:
        for off in (2, 3):
            with pytest.raises(llog.CorruptBlob) as info:
                r.read(TOPIC, 0, off)
            assert (info.value.key, info.value.offset) == (w.data_key, w.target.body_offset)
        # Bodies the damage did not touch still read back exactly.
        assert [(off, r.read(TOPIC, 0, off).value) for off in (0, 1)] == want[0][:2]  # type: ignore[union-attr]
    assert _scan(cconn, 0, 4) == (want[0][4:], None)
    other = _scan(cconn, 1)
    if how == "truncated":  # partition 1's body, laid after the cut, is gone too: and said so
        assert other[0] == [] and isinstance(other[1], llog.CorruptBlob) and other[1].key == w.data_key
    else:
        assert other == (want[1], None)


def test_damaged_blob_header_is_not_on_the_read_path(cconn: llog.Connection) -> None:
    """Readers range-GET bodies, which check themselves; the blob header (a copy of
    what etcd holds) is not read, so damage there changes no record."""
    w = _write(cconn)
    data = cconn.store.get(w.data_key)
    damaged = data[: w.header_end // 2] + bytes([data[w.header_end // 2] ^ 0xFF]) + data[w.header_end // 2 + 1 :]
    cconn.store.put(w.data_key, damaged)
    for p, vals in w.values.items():
        assert _scan(cconn, p) == (list(enumerate(vals)), None)


def test_object_cut_before_the_body_raises_corrupt_blob(cconn: llog.Connection) -> None:
    """The range starts past the object's end (S3 answers 416, not a short read)."""
    w = _write(cconn)
    with llog.Writer(cconn) as wr:
        res = wr.append(TOPIC, 0, [b"last"])
    _, [part] = blob.parse_header(cconn.store.get(res.data_key))
    cconn.store.put(res.data_key, cconn.store.get(res.data_key)[: part.body_offset])
    got, err = _scan(cconn, 0, 4)
    assert got == list(enumerate(w.values[0]))[4:]
    assert isinstance(err, llog.CorruptBlob), err
    assert (err.key, err.offset, err.length) == (res.data_key, part.body_offset, part.body_length)


def test_damaged_pending_body_raises_corrupt_blob(cconn: llog.Connection) -> None:
    """The newest append, still pending (not in the index), is checked the same way."""
    with llog.Writer(cconn) as w:
        w.append(TOPIC, 0, [b"settled"])
        res = w.append(TOPIC, 0, [b"pending-one", b"pending-two"])
        ctl = read_control(cconn, TOPIC, 0).control
        assert ctl.pending is not None and ctl.pending.append_id == res.append_id
        p = ctl.pending
        data = cconn.store.get(res.data_key)
        pos = p.byte_offset + p.byte_length - 3
        cconn.store.put(res.data_key, data[:pos] + bytes([data[pos] ^ 0x80]) + data[pos + 1 :])
        # Settling is off, so the read resolves offset 1 through the pending itself.
        with llog.Reader(cconn, settle_pending=False) as r:
            assert r.read(TOPIC, 0, 0).value == b"settled"  # type: ignore[union-attr]
            with pytest.raises(llog.CorruptBlob) as info:
                r.read(TOPIC, 0, 2)
            assert (info.value.key, info.value.offset, info.value.length) == (
                res.data_key, p.byte_offset, p.byte_length,
            )
        assert read_control(cconn, TOPIC, 0).control.pending == p


# -- objects that vanish under a scan ---------------------------------------------


def test_scan_replans_when_compaction_and_vacuum_remove_its_blobs(config: llog.LlogConfig) -> None:
    """A scan planned from WAL index entries meets blobs that compaction replaced and
    vacuum deleted after planning: it re-reads the index from where it is and yields
    every record exactly once."""
    cfg = replace(config, read_prefetch=1, compact_min_age_ms=0)
    with llog.Connection(cfg) as conn:
        llog.Topics(conn).create(TOPIC, 1)
        values = [b"rec-%d" % i for i in range(12)]
        with llog.Writer(conn) as w:
            wal = [w.append(TOPIC, 0, values[i : i + 2]).data_key for i in range(0, len(values), 2)]
        with llog.Reader(conn) as r:
            it = r.scan(TOPIC, 0)
            # One GET in flight: the first blob's records are out, the second blob's GET
            # may be done, the rest are planned from the index but not fetched yet.
            got = [next(it).value]
            assert compact_once(conn, TOPIC, 0).outcome == "compacted"
            report = vacuum(conn, grace_s=0, now=time.time() + 60)
            assert set(wal) <= set(report.deleted)
            assert all(conn.store.head(k) is None for k in wal)
            got += [rec.value for rec in it]
        assert got == values


def test_scan_raises_when_the_index_still_names_a_missing_blob(config: llog.LlogConfig) -> None:
    """Re-reading the index cannot help when it still names the deleted object: the scan
    raises ObjectNotFound for it instead of skipping records."""
    with llog.Connection(config) as conn:
        llog.Topics(conn).create(TOPIC, 1)
        with llog.Writer(conn) as w:
            w.append(TOPIC, 0, [b"a"])
            gone = w.append(TOPIC, 0, [b"b"]).data_key
            w.append(TOPIC, 0, [b"c"])
        conn.store.delete([gone])
        got, err = _scan(conn, 0)
        assert got == [(0, b"a")]
        assert isinstance(err, llog.ObjectNotFound) and err.key == gone
