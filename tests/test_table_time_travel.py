"""Time travel that holds and tables that stay clean (spec §10.1, issue 40): after
retention and vacuum every snapshot a table keeps scans, read as a new user reads it
(pyiceberg on the catalog, not llog's helpers); two deployments on one store and
catalog keep separate tables; a catalog holding another table, or none where one was
created, is refused and vacuum keeps the files; expiry is idempotent; metadata stays
the size of what the table keeps. Real etcd and S3, pyiceberg's SQL catalog on SQLite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from compactor import compact_once
from compactor.retention import apply_retention
from compactor.vacuum import vacuum
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput, TableError
from llog.table import TableCatalog, sync_table
from llog.table.snapshots import ManifestLists, expire
from llog.topic.admin import Topics
from tests.test_parquet_compaction import _entries, _write
from tests.test_table_topics import _fresh, _records

pytest.importorskip("pyiceberg")
pytest.importorskip("pyarrow")


def _conn(config: LlogConfig, catalog: Path, **kw: object) -> Connection:
    return Connection(replace(config, compact_min_age_ms=0, iceberg_catalog_uri=f"sqlite:///{catalog}", **kw))


def _user_catalog(uri: str, conn: Connection) -> object:
    """The catalog as a pyiceberg user opens it: by the documented name and properties."""
    from pyiceberg.catalog import load_catalog

    from llog.table.catalog import CATALOG_NAME, io_properties

    return load_catalog(CATALOG_NAME, type="sql", uri=uri, **io_properties(conn))


def _round(conn: Connection, tables: TableCatalog, topic: str, n: int, start: int) -> None:
    """``n`` records compacted into one file, synced into the table (one snapshot)."""
    _write(conn, topic, 0, _records(n, start), groups=1)
    assert compact_once(conn, topic, 0).outcome == "compacted"
    assert sync_table(tables, topic).added == 1


def _compacted(keys: tuple[str, ...] | list[str]) -> set[str]:
    return {k for k in keys if "/compacted/" in k}


def _scan_every_snapshot(uri: str, conn: Connection, identifier: str) -> list[int]:
    """Rows of each snapshot the table keeps, oldest first, read through pyiceberg."""
    catalog = _user_catalog(uri, conn)
    try:
        table = catalog.load_table(identifier)  # type: ignore[attr-defined]
        return [table.scan(snapshot_id=s.snapshot_id).to_arrow().num_rows for s in table.metadata.snapshots]
    finally:
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


def _store_clock_passes(conn: Connection, when: float) -> None:
    """Wait until the object store stamps a new object later than ``when`` (orphans are
    judged by the store's clock, at its one-second resolution)."""
    from tests.conftest import wait_until

    probe = f"{conn.keys.root}/clock-probe"

    def later() -> bool:
        conn.store.put(probe, b"")
        return any(o.modified > when for o in conn.store.list(probe))

    wait_until(later, 30, "the store's clock")
    conn.store.delete([probe])


def test_every_kept_snapshot_scans_after_retention_and_vacuum(config: LlogConfig, tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with _conn(config, db, iceberg_snapshots_kept=4) as conn, TableCatalog(conn) as tables:
        Topics(conn).create("tt", 1, table="iceberg", retention_ms=60_000)
        for r in range(6):  # six snapshots, one file each; the table keeps the newest four
            _round(conn, tables, "tt", 50, 50 * r)
        old = _compacted([e.data_key for e in _entries(conn, "tt", 0)])
        _write(conn, "tt", 0, _fresh(10), groups=1)
        assert apply_retention(conn, "tt", 0).new_start == 300  # every file leaves the index
        report = vacuum(conn)
        # The fence's snapshot drops all six files, but the kept snapshots before it
        # (after rounds 4, 5 and 6) name them: nothing goes, every snapshot reads.
        assert not _compacted(report.deleted) and report.table_files == 6
        assert _scan_every_snapshot(tables.uri, conn, tables.identifier("tt")) == [200, 250, 300, 0]
        for _ in range(3):  # three more commits push those snapshots out
            _write(conn, "tt", 0, _fresh(20), groups=1)
            assert compact_once(conn, "tt", 0).outcome == "compacted"
            assert sync_table(tables, "tt").added == 1
        report = vacuum(conn)
        assert _compacted(report.deleted) == old
        assert all(conn.store.head(k) is None for k in old)
        # The last snapshot is the second vacuum's fence.
        assert _scan_every_snapshot(tables.uri, conn, tables.identifier("tt")) == [30, 50, 70, 70]


def test_two_root_prefixes_on_one_store_and_catalog_keep_separate_tables(
    config: LlogConfig, tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
    with _conn(config, db) as a, _conn(config, db, root_prefix=f"{config.root_prefix}-b") as b:
        for conn, n in ((a, 30), (b, 70)):
            Topics(conn).create("orders", 1, table="iceberg")
            _write(conn, "orders", 0, _records(n), groups=1)
            assert compact_once(conn, "orders", 0).outcome == "compacted"
            with TableCatalog(conn) as tables:
                assert sync_table(tables, "orders").added == 1
        with TableCatalog(a) as ta, TableCatalog(b) as tb:
            assert ta.identifier("orders") != tb.identifier("orders")
            assert [ta.describe("orders").rows, tb.describe("orders").rows] == [30, 70]  # type: ignore[union-attr]
        # One namespace forced on both: the second deployment finds the first's table
        # at another location and refuses it rather than rewrite it.
        shared = replace(b.config, iceberg_namespace=a.keys.root)
        with (Connection(shared, etcd=b.etcd, store=b.store) as forced, TableCatalog(forced) as tf,
              pytest.raises(TableError, match="another deployment")):
            sync_table(tf, "orders")
        with TableCatalog(a) as ta:
            assert ta.describe("orders").rows == 30  # type: ignore[union-attr]


def test_a_catalog_without_the_deployment_s_table_is_refused_and_vacuum_keeps_its_files(
    config: LlogConfig, tmp_path: Path
) -> None:
    with _conn(config, tmp_path / "real.db") as conn, TableCatalog(conn) as tables:
        Topics(conn).create("cat", 1, table="iceberg", retention_ms=60_000)
        _round(conn, tables, "cat", 40, 0)
        key = _entries(conn, "cat", 0)[0].data_key
        _write(conn, "cat", 0, _fresh(5), groups=1)
        assert apply_retention(conn, "cat", 0).new_start == 40
        # Another working directory's default, or a typo: a fresh, empty catalog.
        with _conn(config, tmp_path / "fresh.db") as other, TableCatalog(other) as wrong:
            with pytest.raises(TableError, match="not in the catalog"):
                sync_table(wrong, "cat")
            report = vacuum(other)
            assert key not in report.deleted and other.store.head(key) is not None
            with TableCatalog(other) as again, pytest.raises(TableError, match="not in the catalog"):
                again.describe("cat")
        assert tables.describe("cat").files == 1  # type: ignore[union-attr]


def test_an_s3_store_has_no_default_catalog(config: LlogConfig) -> None:
    assert config.object_store.startswith("s3://") and config.iceberg_catalog_uri is None
    with Connection(config) as conn:
        with pytest.raises(InvalidInput, match="LLOG_ICEBERG_CATALOG_URI"):
            Topics(conn).create("nocat", 1, table="iceberg")
        Topics(conn).create("nocat", 1, compacted_format="parquet")
        with pytest.raises(InvalidInput, match="LLOG_ICEBERG_CATALOG_URI"):
            Topics(conn).set_table("nocat", "iceberg")
        assert conn.topic("nocat", refresh=True).table is None
        with TableCatalog(conn) as tables, pytest.raises(TableError, match="LLOG_ICEBERG_CATALOG_URI"):
            tables.describe("nocat")


def test_expiry_is_idempotent_and_metadata_stays_the_size_of_what_is_kept(
    config: LlogConfig, tmp_path: Path
) -> None:
    with _conn(config, tmp_path / "c.db", iceberg_snapshots_kept=3) as conn, TableCatalog(conn) as tables:
        Topics(conn).create("meta", 1, table="iceberg")
        _round(conn, tables, "meta", 5, 0)
        stale = tables.table("meta")  # a second process's view, taken now
        assert stale is not None
        for r in range(1, 40):
            _round(conn, tables, "meta", 5, 5 * r)
        # The second process expires what the first already did: no error, nothing done.
        assert expire(stale, 3, ManifestLists(), lambda uris: None) == 0
        _store_clock_passes(conn, max(o.modified for o in conn.store.list(conn.keys.table_location("meta"))) + 3)
        vacuum(conn)  # its fence deletes the metadata files no snapshot names
        table = tables.table("meta")
        assert table is not None
        assert len(table.metadata.snapshots) == 3
        current = table.current_snapshot()
        assert current is not None
        assert len(current.manifests(table.io)) <= 17  # merged: planning reads a bounded number
        assert table.scan().to_arrow().num_rows == 200
        avro = [o.key for o in conn.store.list(conn.keys.table_location("meta") + "/") if o.key.endswith(".avro")]
        named = {s.manifest_list for s in table.metadata.snapshots}
        named |= {m.manifest_path for s in table.metadata.snapshots for m in s.manifests(table.io)}
        uri, loc = tables.location("meta"), conn.keys.table_location("meta")
        assert {loc + u[len(uri):] for u in named} == set(avro)  # no manifest of an expired snapshot left


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs Debian's faketime (make tools installs it)")
def test_a_sync_with_a_clock_ten_minutes_behind_is_kept_and_breaks_no_later_sync(
    config: LlogConfig, tmp_path: Path
) -> None:
    from tests.conftest import config_env

    with _conn(config, tmp_path / "c.db", iceberg_snapshots_kept=2) as conn, TableCatalog(conn) as tables:
        Topics(conn).create("skew", 1, table="iceberg")
        for r in range(2):
            _round(conn, tables, "skew", 10, 10 * r)
        _write(conn, "skew", 0, _records(10, 20), groups=1)
        assert compact_once(conn, "skew", 0).outcome == "compacted"
        env = config_env(conn.config) | {"LLOG_ICEBERG_SNAPSHOTS_KEPT": "2"}
        subprocess.run(["faketime", "-f", "-10m", sys.executable, "-m", "llog", "topics", "describe", "skew",
                        "--sync-table"], env=env, check=True, capture_output=True, timeout=120)
        table = tables.table("skew")
        assert table is not None and table.current_snapshot() is not None
        skewed = table.current_snapshot()
        assert skewed is not None and skewed.timestamp_ms < min(
            s.timestamp_ms for s in table.metadata.snapshots if s.snapshot_id != skewed.snapshot_id)
        # The newest snapshot is the oldest by clock: expiry by time would expire it.
        _round(conn, tables, "skew", 10, 30)
        table = tables.table("skew")
        assert table is not None
        ids = [s.snapshot_id for s in table.metadata.snapshots]
        assert skewed.snapshot_id in ids and len(ids) == 2
        assert table.scan().to_arrow().num_rows == 40
