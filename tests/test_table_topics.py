"""Table topics (llog/table/, spec §10.1) on the suite's real etcd and S3, with
pyiceberg's SQL catalog on SQLite: the Iceberg table holds exactly the compacted
records, follows compactions killed at every point, drops what retention drops before
vacuum deletes it from storage, never takes back a file a fencing vacuum judged, and
bad settings get clear errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from compactor import compact_once
from compactor.metrics import compactor_metrics
from compactor.retention import apply_retention
from compactor.stages import StageEvent
from compactor.vacuum import vacuum
from llog.codec.etcd_values.maps import MetaFormatError
from llog.codec.etcd_values.partition import PARQUET_ENCODING
from llog.codec.etcd_values.topic import TopicMeta
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.reader import Reader
from llog.records import Record
from llog.table import TableCatalog, TableInfo, delete_topic, sync_table
from llog.topic.admin import Topics
from tests.test_parquet_compaction import _entries, _write

pytest.importorskip("pyiceberg")
pytest.importorskip("pyarrow")

T0 = 1_714_564_800_000
Row = tuple[int, int, int, bytes | None, bytes, tuple[tuple[str, bytes], ...]]


@pytest.fixture(name="tconn")
def tconn_fixture(config: LlogConfig, tmp_path: Path) -> Iterator[Connection]:
    cfg = replace(config, compact_min_age_ms=0, iceberg_catalog_uri=f"sqlite:///{tmp_path / 'catalog.db'}")
    with Connection(cfg) as c:
        yield c


@pytest.fixture(name="tables")
def tables_fixture(tconn: Connection) -> Iterator[TableCatalog]:
    with TableCatalog(tconn) as t:
        yield t


def _records(n: int, start: int = 0) -> list[Record]:
    return [Record(f"value-{i}".encode() * (1 + i % 3), None if i % 4 == 0 else f"k{i}".encode(), T0 + i,
                   (("h", str(i).encode()),) if i % 5 == 0 else ()) for i in range(start, start + n)]


def _fresh(n: int) -> list[Record]:
    """Records the writer stamps now: retention keeps them."""
    return [Record(f"fresh-{i}".encode()) for i in range(n)]


def _sdk_rows(conn: Connection, topic: str, partition: int) -> list[Row]:
    with Reader(conn) as r:
        return [(partition, x.offset, x.timestamp, x.key, x.value, x.headers) for x in r.scan(topic, partition)]


def _table_rows(tables: TableCatalog, topic: str) -> list[Row]:
    table = tables.table(topic, create=False)
    assert table is not None
    cols = table.scan().to_arrow().sort_by([("partition", "ascending"), ("offset", "ascending")]).to_pylist()
    return [(c["partition"], c["offset"], c["timestamp"], c["key"], c["value"],
             tuple((h["key"], h["value"]) for h in c["headers"])) for c in cols]


def _compacted_end(conn: Connection, topic: str, partition: int) -> int:
    """One past the last compacted offset of the partition (its compaction cursor)."""
    from compactor.compact import read_cursor

    cursor, _ = read_cursor(conn, topic, partition)
    return cursor or 0


def _compacted_rows(conn: Connection, topic: str, partitions: int) -> list[Row]:
    rows: list[Row] = []
    for p in range(partitions):
        end = _compacted_end(conn, topic, p)
        if end:
            rows += [r for r in _sdk_rows(conn, topic, p) if r[1] < end]
    return rows


def test_the_table_holds_exactly_the_compacted_records(tconn: Connection, tables: TableCatalog) -> None:
    meta = Topics(tconn).create("events", 2, table="iceberg")
    assert (meta.table, meta.compacted_format) == ("iceberg", "parquet")
    for p in range(2):
        _write(tconn, "events", p, _records(300, 1000 * p), groups=6)
        assert compact_once(tconn, "events", p).outcome == "compacted"
    first = sync_table(tables, "events")
    assert (first.added, first.removed, first.committed) == (2, 0, True)
    assert _table_rows(tables, "events") == _compacted_rows(tconn, "events", 2)
    assert sync_table(tables, "events").committed is False  # nothing changed: no snapshot
    # More records: the uncompacted tail stays out of the table until compacted.
    _write(tconn, "events", 1, _records(100, 5000), groups=2)
    assert sync_table(tables, "events").added == 0
    assert compact_once(tconn, "events", 1).outcome == "compacted"
    assert sync_table(tables, "events").added == 1
    rows = _table_rows(tables, "events")
    assert rows == _compacted_rows(tconn, "events", 2) and len(rows) == 700
    info = tables.describe("events")
    assert info is not None
    assert (info.files, info.rows, info.identifier) == (3, 700, f"{tconn.keys.root}.events")
    assert info.location == tconn.store.object_uri(tconn.keys.table_location("events"))
    # The data files are the compactor's objects, not copies.
    table = tables.table("events")
    assert table is not None
    indexed = {tconn.store.object_uri(e.data_key) for p in range(2) for e in _entries(tconn, "events", p)
               if e.encoding == PARQUET_ENCODING}
    assert {t.file.file_path for t in table.scan().plan_files()} == indexed


@pytest.mark.parametrize("point", ["after_put", "after_record", "after_WRITING_COMPACTED_INDEX",
                                   "after_DELETING_OLD", "after_UPDATING_CURSOR"])
def test_a_compactor_killed_at_any_point_before_the_table_commit_loses_nothing(
    tconn: Connection, tables: TableCatalog, point: str
) -> None:
    class Stopped(BaseException):  # like a kill: nothing after the point runs
        pass

    Topics(tconn).create("kills", 1, table="iceberg")
    recs = _records(200)
    _write(tconn, "kills", 0, recs, groups=5)

    def hook(event: StageEvent) -> None:
        if event.point == point:
            raise Stopped

    with pytest.raises(Stopped):
        compact_once(tconn, "kills", 0, hook=hook)
    # A sync now takes the file only once the index names it (K4 done).
    in_index = point not in ("after_put", "after_record")
    assert sync_table(tables, "kills").added == (1 if in_index else 0)
    assert _table_rows(tables, "kills") == (_sdk_rows(tconn, "kills", 0) if in_index else [])
    compact_once(tconn, "kills", 0)  # finishes the interrupted compaction
    sync_table(tables, "kills")
    assert _table_rows(tables, "kills") == _sdk_rows(tconn, "kills", 0)
    assert len(_sdk_rows(tconn, "kills", 0)) == 200
    assert tables.describe("kills").files == 1  # type: ignore[union-attr]


def test_retention_drops_files_from_the_table_before_vacuum_deletes_them(
    tconn: Connection, tables: TableCatalog
) -> None:
    Topics(tconn).create("ret", 1, table="iceberg", retention_ms=60_000)
    old, new = _records(100), _records(100, 100)
    _write(tconn, "ret", 0, old, groups=2)
    assert compact_once(tconn, "ret", 0).outcome == "compacted"
    _write(tconn, "ret", 0, [replace(r, timestamp=None) for r in new], groups=2)
    assert compact_once(tconn, "ret", 0).outcome == "compacted"
    assert sync_table(tables, "ret").added == 2
    expired = _entries(tconn, "ret", 0)[0].data_key
    assert apply_retention(tconn, "ret", 0).new_start == 100
    # Retention changed the index only: the table still names the expired file, so a
    # vacuum now must first drop it from the table, then delete it.
    assert tables.describe("ret").files == 2  # type: ignore[union-attr]
    metrics = compactor_metrics(tconn.metrics)
    synced, removed = metrics.table_syncs.labels("committed"), metrics.table_files.labels("removed")
    before = (synced._value.get(), removed._value.get())
    report = vacuum(tconn)
    # Vacuum's fencing sync is counted as the service's syncs are (issue 56).
    assert (synced._value.get(), removed._value.get()) == (before[0] + 1, before[1] + 1)
    # The fence dropped it from the current snapshot, but the snapshots kept for time
    # travel still name it: it stays until they are expired.
    assert expired not in report.deleted and report.table_files == 1
    one_kept = replace(tconn.config, iceberg_snapshots_kept=1)
    with Connection(one_kept, etcd=tconn.etcd, store=tconn.store) as oconn, TableCatalog(oconn) as one:
        assert sync_table(one, "ret", fence=True).kept == {
            tconn.store.object_uri(e.data_key) for e in _entries(tconn, "ret", 0)}
    report = vacuum(tconn)
    assert expired in report.deleted and tconn.store.head(expired) is None
    table = tables.table("ret")
    assert table is not None
    assert [t.file.file_path for t in table.scan().plan_files()] == [
        tconn.store.object_uri(e.data_key) for e in _entries(tconn, "ret", 0)
    ]
    assert [r[1] for r in _table_rows(tables, "ret")] == list(range(100, 200))


def test_vacuum_keeps_a_table_topic_s_files_when_the_catalog_is_unreachable(tconn: Connection) -> None:
    Topics(tconn).create("lost-cat", 1, table="iceberg", retention_ms=60_000)
    _write(tconn, "lost-cat", 0, _records(50), groups=1)
    assert compact_once(tconn, "lost-cat", 0).outcome == "compacted"
    key = _entries(tconn, "lost-cat", 0)[0].data_key
    _write(tconn, "lost-cat", 0, _fresh(10), groups=1)
    assert apply_retention(tconn, "lost-cat", 0).new_start == 50
    broken = replace(tconn.config, iceberg_catalog_uri="postgresql+nosuchdriver://127.0.0.1:1/llog")
    with Connection(broken, etcd=tconn.etcd, store=tconn.store) as bconn:
        report = vacuum(bconn)
    assert key not in report.deleted and report.table_files == 1
    assert tconn.store.head(key) is not None
    assert key in vacuum(tconn).deleted  # with the catalog back, it goes


def test_a_sync_paused_across_a_fencing_vacuum_cannot_bring_back_a_deleted_file(
    tconn: Connection, tables: TableCatalog
) -> None:
    from pyiceberg.exceptions import CommitFailedException

    Topics(tconn).create("fence", 1, table="iceberg", retention_ms=60_000)
    _write(tconn, "fence", 0, _records(50), groups=1)
    assert compact_once(tconn, "fence", 0).outcome == "compacted"
    key = _entries(tconn, "fence", 0)[0].data_key
    uri = tconn.store.object_uri(key)
    # A sync reads the table (empty) and the index (naming the file), stages the add,
    # and pauses before its commit.
    stale = tables.table("fence")
    assert stale is not None
    tx = stale.transaction()
    tx.add_files([uri], check_duplicate_files=False)
    _write(tconn, "fence", 0, _fresh(10), groups=1)
    assert apply_retention(tconn, "fence", 0).new_start == 50
    assert key in vacuum(tconn).deleted  # its fencing sync committed before the delete
    with pytest.raises(CommitFailedException):
        tx.commit_transaction()  # the paused sync wakes up: refused, the table moved on
    table = tables.table("fence")
    assert table is not None and uri not in {t.file.file_path for t in table.scan().plan_files()}


def test_deleting_a_table_topic_drops_its_table_and_vacuum_its_files(tconn: Connection) -> None:
    Topics(tconn).create("dropped", 1, table="iceberg")
    _write(tconn, "dropped", 0, _records(50), groups=2)
    assert compact_once(tconn, "dropped", 0).outcome == "compacted"
    with TableCatalog(tconn) as tables:
        assert sync_table(tables, "dropped").added == 1
    def stored() -> set[str]:
        return {o.key for o in tconn.store.list(tconn.keys.topic_prefix("dropped"))}

    location = tconn.keys.table_location("dropped")
    metadata = {k for k in stored() if k.startswith(location)}
    data = stored() - metadata
    assert data and metadata
    assert delete_topic(tconn, "dropped").table == "iceberg"
    with TableCatalog(tconn) as tables:
        assert tables.describe("dropped") is None
    assert stored() == data  # the table's metadata went with it; the data files are vacuum's
    assert data <= set(vacuum(tconn, grace_s=0).deleted)
    assert stored() == set()


def test_bad_table_settings_get_clear_errors(tconn: Connection) -> None:
    with pytest.raises(InvalidInput, match="table"):
        Topics(tconn).create("bad", 1, table="delta")
    Topics(tconn).create("tb", 1, table="iceberg")
    with pytest.raises(InvalidInput, match="compacted_format must be 'parquet'"):
        Topics(tconn).set_compacted_format("tb", None)
    assert Topics(tconn).set_table("tb", None).table is None
    assert Topics(tconn).set_compacted_format("tb", None).compacted_format is None
    with pytest.raises(MetaFormatError, match="needs compacted_format"):
        TopicMeta.decode(replace(TopicMeta("x", 1, 0, compacted_format="parquet", table="iceberg"),
                                 compacted_format=None).encode())


def test_the_cli_creates_describes_and_drops_a_table(tconn: Connection) -> None:
    from tests.test_cli import llog_cli

    cfg = tconn.config
    llog_cli(cfg, "topics", "create", "cli-tb", "-p", "2", "--table", "iceberg")
    assert tconn.topic("cli-tb", refresh=True).table == "iceberg"
    _write(tconn, "cli-tb", 0, _records(40), groups=2)
    assert compact_once(tconn, "cli-tb", 0).outcome == "compacted"
    out = json.loads(llog_cli(cfg, "topics", "describe", "cli-tb", "--json", "--sync-table").stdout)
    assert (out["table"]["files"], out["table"]["rows"]) == (1, 40)
    text = llog_cli(cfg, "topics", "describe", "cli-tb").stdout
    assert f"table: {cfg.root_prefix}.cli-tb" in text
    out = llog_cli(cfg, "topics", "alter", "cli-tb", "--table", "none")
    assert "dropped" in out.stdout
    assert json.loads(llog_cli(cfg, "topics", "describe", "cli-tb", "--json").stdout)["table"] is None


def test_the_compactor_service_keeps_the_table_in_step(tconn: Connection) -> None:
    """Records written before, during and after the service's compactions: the table
    ends up holding exactly the compacted ones, and a consumer group reads every record
    once from the Parquet files and the tail."""
    from compactor.service import CompactorService
    from llog.groups.consumer import Consumer
    from tests.conftest import wait_until

    cfg = replace(tconn.config, settle_after_ms=0, compactor_port=0, compactor_pass_interval_s=0.2,
                  compactor_discovery_interval_s=0.3, vacuum_interval_s=0, iceberg_sync_interval_s=0.3)
    Topics(tconn).create("svc", 2, table="iceberg")
    before = _records(200)
    for p in range(2):
        _write(tconn, "svc", p, before, groups=4)
    with CompactorService(cfg) as svc, TableCatalog(tconn) as tables:
        wait_until(lambda: (tables.describe("svc") or _NO_TABLE).rows == 400, 60, "the first files in the table")
        for p in range(2):
            _write(tconn, "svc", p, _records(100, 200), groups=2)  # during: the service keeps going
        wait_until(lambda: (tables.describe("svc") or _NO_TABLE).rows == 600, 60, "the later files in the table")
        assert _table_rows(tables, "svc") == _compacted_rows(tconn, "svc", 2)
        assert svc.metrics.table_files.labels("added")._value.get() >= 2
        assert svc.metrics.table_syncs.labels("committed")._value.get() >= 2
    for p in range(2):  # after: a tail the service never saw
        _write(tconn, "svc", p, _fresh(20), groups=1)
    got: list[tuple[int, int]] = []
    with Consumer(tconn, "readers", ["svc"], exclusive=True) as c:
        while len(got) < 640:
            recs = c.poll(max_records=500, timeout_s=5)
            assert recs, f"the group stopped after {len(got)} records"
            got += [(r.partition, r.offset) for r in recs]
    assert sorted(got) == [(p, o) for p in range(2) for o in range(320)]


_NO_TABLE = TableInfo("", "", "", None, 0, 0, 0, 0)


def test_processes_creating_the_first_tables_at_once_all_succeed(config: LlogConfig, tmp_path: Path) -> None:
    """Issue 56: on a fresh SQL catalog the service's sync and its vacuum raced to create
    the namespace (pyiceberg checks, then inserts; the loser's insert broke the UNIQUE
    constraint). Several catalogs, each its own SQLite connection, create tables at once."""
    import threading

    for attempt in range(4):
        cfg = replace(config, iceberg_catalog_uri=f"sqlite:///{tmp_path / f'race-{attempt}.db'}")
        topics = [f"race{attempt}-{i}" for i in range(6)]
        with Connection(cfg) as conn:
            for t in topics:
                Topics(conn).create(t, 1, table="iceberg")
            start = threading.Barrier(len(topics))
            errors: list[BaseException] = []

            def create(topic: str, start: threading.Barrier, errors: list[BaseException]) -> None:
                with TableCatalog(conn) as catalog:
                    start.wait()
                    try:
                        assert catalog.table(topic) is not None
                    except BaseException as exc:
                        errors.append(exc)

            threads = [threading.Thread(target=create, args=(t, start, errors)) for t in topics]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            assert errors == []
