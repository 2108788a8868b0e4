"""The cluster's format version (issue 60, spec §3.1): ``llog upgrade status|finalize``,
a finalize that waits for every live process to read the new format, and a process
too old for the cluster's format that refuses to start, naming both versions, before
it writes anything. Real etcd, S3, brokers and commands.

The release under test reads format 1 only, so a newer release is this test process
with :data:`FORMAT_VERSION` raised: the commands and brokers it starts (forked from
a process that imported llog unchanged) are then the older release."""

from __future__ import annotations

import json

import msgpack
import pytest

from llog.cli.doctor import diagnose
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CasConflict, CorruptMetadata
from llog.state import cluster_format
from llog.state.cluster_format import FinalizeRefused, FormatTooNew, finalize, live_processes, read_format
from llog.state.keys import prefix_range_end
from llog.topic.admin import Topics
from llog.version import __version__
from llog.writer import Writer
from tests import forked_llog
from tests.conftest import config_env


@pytest.fixture
def newer(monkeypatch: pytest.MonkeyPatch) -> int:
    """This process as a release that reads one format more than the one under test."""
    newest = cluster_format.FORMAT_VERSION + 1
    monkeypatch.setattr(cluster_format, "FORMAT_VERSION", newest)
    monkeypatch.setitem(cluster_format.FORMATS, newest, "9.9.0")
    return newest


def _sessions(conn: Connection) -> list[str]:
    prefix = conn.keys.sessions_prefix()
    return [kv.key for kv in conn.etcd.scan(prefix, prefix_range_end(prefix))]


def test_a_cluster_never_finalized_is_at_the_first_format_and_finalize_keeps_it(
    config: LlogConfig, conn: Connection,
) -> None:
    assert read_format(conn) == cluster_format.ClusterFormat(1)
    out = forked_llog.run(["upgrade", "status", "--json"], config_env(config), timeout=60)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert (doc["cluster_format"], doc["finalized_by"], doc["this_release"]) == (1, None, __version__)
    assert doc["can_finalize"] is False
    out = forked_llog.run(["upgrade", "finalize"], config_env(config), timeout=60)
    assert (out.returncode, out.stdout) == (0, f"cluster format stays 1: nothing newer in llog {__version__}\n")
    assert conn.etcd.get(conn.keys.cluster_format()) is None  # nothing written


def test_finalize_waits_for_every_live_process_then_an_older_release_refuses_to_start(
    config: LlogConfig, conn: Connection, newer: int,
) -> None:
    Topics(conn).create("fmt", 1)
    # A process of 0.2.0 (its session names no format) is live: finalizing would break it.
    lease = conn.etcd.grant_lease(30)
    old = {"kind": "writer", "host": "old-host", "pid": 7, "started_at_ms": 0, "version": "0.2.0"}
    conn.etcd.put(conn.keys.session("0ld"), msgpack.packb(old), lease=lease)
    with pytest.raises(FinalizeRefused, match=r"cannot finalize format 2: 1 live process\(es\) cannot read it: "
                                              r"writer session pid 7 on old-host \(llog 0.2.0, reads up to 1\)"):
        finalize(conn)
    assert read_format(conn).version == 1
    conn.etcd.revoke_lease(lease)

    before, after = finalize(conn)
    assert (before.version, after.version, after.release) == (1, newer, __version__)
    assert read_format(conn) == after
    assert finalize(conn) == (after, after)  # again: nothing to raise

    # The release under test is now too old for the cluster: each process refuses to
    # start, with one line naming both versions, and leaves nothing behind.
    line = (f"llog: error: llog {__version__} reads cluster formats up to 1, but this cluster is at format "
            f"{newer} (finalized by llog {__version__}): run llog {__version__} or later here\n")
    for argv in (["broker", "--port", "0"], ["broker", "--port", "0", "--workers", "2"], ["compactor", "--port", "0"],
                 ["produce", "fmt", "--partition", "0"]):
        out = forked_llog.run(argv, config_env(config), input="x\n", timeout=120)
        assert (out.returncode, out.stderr.splitlines()[-1:]) == (1, [line.rstrip("\n")]), (argv, out.stderr)
        assert out.stderr.count("\n") <= 2, out.stderr  # the refusal, and at most one warning before it
    assert _sessions(conn) == []
    assert list(conn.etcd.scan(conn.keys.brokers_prefix(), prefix_range_end(conn.keys.brokers_prefix()))) == []
    assert list(conn.etcd.scan(conn.keys.http_brokers_prefix(),
                               prefix_range_end(conn.keys.http_brokers_prefix()))) == []


def test_an_sdk_writer_of_an_older_release_writes_nothing_to_a_newer_cluster(
    config: LlogConfig, conn: Connection,
) -> None:
    Topics(conn).create("fmt", 1)
    conn.etcd.put(conn.keys.cluster_format(), msgpack.packb({"version": 5, "release": "4.0.0", "at_ms": 1}))
    with Writer(conn) as w, pytest.raises(FormatTooNew, match=r"this cluster is at format 5 \(finalized by "
                                                              r"llog 4.0.0\): run llog 4.0.0 or later here"):
        w.append("fmt", 0, [b"x"])
    assert _sessions(conn) == []
    assert list(conn.etcd.scan(conn.keys.index_prefix("fmt", 0), conn.keys.index_range_end("fmt", 0))) == []


def test_an_unreadable_format_record_stops_a_writer_and_names_its_key(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("fmt", 1)
    conn.etcd.put(conn.keys.cluster_format(), b"\xc1 not msgpack")
    with Writer(conn) as w, pytest.raises(CorruptMetadata, match=r"_maintenance/cluster-format"):
        w.append("fmt", 0, [b"x"])
    # A broker of workers reads it from a child of its parent: the same error, by its message.
    out = forked_llog.run(["broker", "--port", "0", "--workers", "2"], config_env(config), timeout=120)
    assert out.returncode == 1 and "corrupt metadata at etcd key " in out.stderr.splitlines()[-1], out.stderr
    assert "_maintenance/cluster-format" in out.stderr.splitlines()[-1]
    assert _sessions(conn) == []


def test_doctor_names_the_format_and_a_process_that_cannot_read_it(
    config: LlogConfig, conn: Connection, newer: int,
) -> None:
    [fmt] = [f for f in diagnose(conn) if f.check == "format"]
    assert (fmt.level, fmt.detail) == ("OK", f"cluster format 1, never finalized; every process reads {newer}: "
                                             "`llog upgrade finalize` raises it")
    finalize(conn)
    # A 0.2.0 process predates the check: started after the finalize, it runs, and doctor says so.
    lease = conn.etcd.grant_lease(30)
    conn.etcd.put(conn.keys.http_broker("0ld"), json.dumps({"url": "http://old:1", "version": "0.2.0"}).encode(),
                  lease=lease)
    assert [p.what for p in live_processes(conn)] == ["HTTP broker"]
    [fmt] = [f for f in diagnose(conn) if f.check == "format"]
    assert fmt.level == "ERROR"
    assert fmt.detail == (f"cluster format {newer}, finalized by llog {__version__}; 1 process(es) read only older "
                          "formats: HTTP broker http://old:1 (llog 0.2.0); upgrade or stop them")
    conn.etcd.revoke_lease(lease)


def test_of_two_finalizes_at_once_the_second_loses_its_compare(conn: Connection, newer: int) -> None:
    stale = read_format(conn)  # what a second finalize read before the first one's write
    finalize(conn)
    with pytest.raises(CasConflict, match="another finalize ran at the same time"):
        cluster_format.raise_format(conn, stale, newer)
    assert read_format(conn).version == newer
