"""Writer and reader round trip against the real servers."""

from __future__ import annotations

import llog
from llog import AppendGroup, Record


def test_append_shared_round_trip(conn: llog.Connection) -> None:
    llog.Topics(conn).create("orders", 3)
    with llog.Writer(conn) as w:
        res = w.append_shared(
            [
                AppendGroup("orders", 0, [b"a", b"b"]),
                AppendGroup("orders", 1, [Record(b"x", b"k", 5, (("h", b"v"),))]),
                AppendGroup("orders", 0, [b"c"]),
            ]
        )
    assert [(r.partition, r.start_offset, r.end_offset) for r in res] == [(0, 0, 1), (1, 0, 0), (0, 2, 2)]
    assert len({r.data_key for r in res}) == 1
    with llog.Reader(conn) as r:
        assert [x.value for x in r.scan("orders", 0)] == [b"a", b"b", b"c"]
        rec = r.read("orders", 1, 0)
        assert rec is not None
        assert (rec.key, rec.value, rec.timestamp, rec.headers) == (b"k", b"x", 5, (("h", b"v"),))
        assert r.read("orders", 1, 1) is None
