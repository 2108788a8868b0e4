"""A poll moves a consumer's positions only past records it hands back: a partition that
fails part way through a poll costs no other partition's records, and its error is
raised, never swallowed."""

from __future__ import annotations

import pytest

import llog
from llog.groups import Consumer, GroupOffsets


def test_a_failing_partition_does_not_lose_the_records_read_before_it(conn: llog.Connection) -> None:
    llog.Topics(conn).create("t", 2)
    with llog.Writer(conn) as w:
        w.append("t", 0, [b"p0-%d" % i for i in range(5)])
        w.append("t", 1, [b"p1-%d" % i for i in range(2)])
        gone = w.append("t", 1, [b"p1-%d" % i for i in range(2, 4)]).data_key
    conn.store.delete([gone])  # partition 1's second blob: unreadable, the index still names it
    with Consumer(conn, "g", ["t"], exclusive=True) as c:
        # The first poll reads partition 0, then partition 1 up to its missing blob.
        got = c.poll(max_records=100, timeout_s=0)
        assert [(r.partition, r.value) for r in got] == (
            [(0, b"p0-%d" % i) for i in range(5)] + [(1, b"p1-0"), (1, b"p1-1")]
        )
        with pytest.raises(llog.ObjectNotFound) as err:
            c.poll(max_records=100, timeout_s=0)
        assert err.value.key == gone
        assert (c.position("t", 0), c.position("t", 1)) == (5, 2)
        c.commit()
    committed = {(o.topic, o.partition): o.offset for o in GroupOffsets(conn, "g").all()}
    # Everything delivered is committed, nothing more: partition 1 stays at its first
    # record it could not deliver.
    assert committed == {("t", 0): 5, ("t", 1): 2}


def test_auto_commit_commits_only_what_earlier_polls_returned(conn: llog.Connection) -> None:
    llog.Topics(conn).create("t", 1)
    with llog.Writer(conn) as w:
        w.append("t", 0, [b"r%d" % i for i in range(6)])
    with Consumer(conn, "g", ["t"], exclusive=True, auto_commit_interval_s=0) as c:
        assert len(c.poll(max_records=4, timeout_s=0)) == 4
        # Not processed yet: a crash now must deliver them again.
        committed = GroupOffsets(conn, "g").get("t", 0)
        assert committed is None or committed.offset == 0
        assert len(c.poll(max_records=4, timeout_s=0)) == 2
        committed = GroupOffsets(conn, "g").get("t", 0)
        assert committed is not None and committed.offset == 4
