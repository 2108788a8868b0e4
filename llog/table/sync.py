"""Reconcile a table topic's Iceberg table with its index (spec §10.1).

The index is the authority; the table is derived from it. One sync:

1. load the table: its current snapshot S and data files T;
2. AFTER that, read the topic's index: the COMPACTED entries whose ``encoding`` is
   ``parquet-v1``, as object URIs I;
3. commit one snapshot on top of S that removes ``T - I`` and adds ``I - T`` (the files
   as they are, no copy), requiring that the table is still at S. A commit that finds
   the table moved fails (the table's ``commit.retry.num-retries`` is 0, so pyiceberg
   never rebases it) and the sync starts over.

So a file joins the table only after K4 put its COMPACTED entry (the file is durable
and committed), leaves it once retention dropped the entry, and a compactor killed
between its PUT and any sync loses nothing: the next sync of any process adds it.

Why a file once gone from the index never comes back into the table, however long a
sync pauses between 2 and 3: a sync whose commit lands on a snapshot newer than the
one it read fails; one whose read came after the removal commit also read the index
after the file left it, and references never return (spec §11). Vacuum relies on this
with ``fence=True``: it commits a snapshot (empty if nothing changed) after its
reference scan, so every sync that read the table earlier fails, and then deletes only
files that no snapshot the table keeps names (:mod:`llog.table.snapshots`): time travel
to any kept snapshot reads every file it names.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from llog.codec.etcd_values.partition import COMPACTED, PARQUET_ENCODING
from llog.connection import Connection
from llog.errors import LlogError, TableError
from llog.state.control import decode_index
from llog.table.catalog import TableCatalog
from llog.table.orphans import delete_orphans
from llog.table.snapshots import expire, files_of_snapshots

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table, Transaction

log = logging.getLogger(__name__)

#: Attempts at a contended commit before :class:`TableError`.
MAX_ATTEMPTS = 16


@dataclass(frozen=True)
class SyncResult:
    """One sync: files ``added`` and ``removed``, the table's ``files`` (object URIs)
    after it, its snapshot, and whether a snapshot was committed. A fencing sync also
    gives ``kept``: every file a snapshot the table keeps names (what vacuum spares)."""

    topic: str
    added: int
    removed: int
    files: frozenset[str]
    snapshot_id: int | None
    committed: bool
    kept: frozenset[str] = frozenset()


def indexed_files(conn: Connection, topic: str) -> set[str]:
    """The object URIs of every Parquet file the topic's index names now."""
    etcd, keys, store = conn.etcd, conn.keys, conn.store
    out: set[str] = set()
    for p in range(conn.topic(topic, refresh=True).partitions):
        for kv in etcd.scan(keys.index_prefix(topic, p), keys.index_range_end(topic, p)):
            e = decode_index(kv.key, kv.value)
            if e.kind == COMPACTED and e.encoding == PARQUET_ENCODING:
                out.add(store.object_uri(e.data_key))
    return out


def table_files(table: Table) -> dict[str, DataFile]:
    """Object URI → data file of the table's current snapshot."""
    if table.current_snapshot() is None:
        return {}
    return {task.file.file_path: task.file for task in table.scan().plan_files()}


def sync_table(tables: TableCatalog, topic: str, *, fence: bool = False) -> SyncResult:
    """Bring the topic's table to the index's Parquet files (creating the table if
    missing). ``fence``: commit a snapshot even when nothing changed (vacuum's fence,
    module doc). Raises :class:`TableError` when the catalog fails or stays contended."""
    try:
        for _ in range(MAX_ATTEMPTS):
            result = _attempt(tables, topic, fence)
            if result is not None:
                return result
    except LlogError:
        raise
    except Exception as exc:  # pyiceberg, its FileIO and the catalog driver raise their own
        raise TableError(topic, f"sync failed: {exc}") from exc
    raise TableError(topic, f"sync still contended after {MAX_ATTEMPTS} attempts")


def _attempt(tables: TableCatalog, topic: str, fence: bool) -> SyncResult | None:
    """One read-compare-commit; ``None`` if the table moved under it."""
    from pyiceberg.exceptions import CommitFailedException

    table = tables.table(topic)
    assert table is not None
    current = table_files(table)  # step 1, before the index read
    wanted = indexed_files(tables.conn, topic)
    add = sorted(wanted - current.keys())
    remove = [current[u] for u in sorted(current.keys() - wanted)]
    snap = table.current_snapshot()
    if not add and not remove and not fence:
        return SyncResult(topic, 0, 0, frozenset(current), snap.snapshot_id if snap else None, False)
    props = {"llog.sync": "fence" if fence and not (add or remove) else "index"}
    tx = table.transaction()
    if remove:
        with tx.update_snapshot(snapshot_properties=props).overwrite() as overwrite:
            for f in remove:
                overwrite.delete_data_file(f)
    if add:
        evolve_schema(tx, table, add)
        tx.add_files(add, snapshot_properties=props, check_duplicate_files=False)
    if not add and not remove:
        with tx.update_snapshot(snapshot_properties=props).fast_append():
            pass
    try:
        table = tx.commit_transaction()
    except CommitFailedException as exc:
        log.info("table sync of %s raced another commit (%s); again", topic, exc)
        return None
    if add or remove:
        log.info("table of %s: +%d -%d files", topic, len(add), len(remove))
    return _after_commit(tables, topic, table, SyncResult(topic, len(add), len(remove), frozenset(wanted),
                                                          None, True), fence)


def evolve_schema(tx: Transaction, table: Table, files: list[str]) -> None:
    """Widen the table's schema to the typed columns of ``files`` (spec §7.6): a field
    added keeps the ids of those before it, a type promoted (int to long, float to
    double) keeps its own, so every file the table had still reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.exceptions import ValidationError

    from llog.registry.columns import FIELDS, FIELDS_ERROR

    typed = []
    for uri in files:
        with table.io.new_input(uri).open() as f:
            schema = pq.read_schema(f)
        if FIELDS in schema.names:
            typed.append(pa.schema([schema.field(FIELDS), schema.field(FIELDS_ERROR)]))
    if not typed:
        return
    try:
        with tx.update_schema() as update:
            update.union_by_name(pa.unify_schemas(typed, promote_options="permissive"))
    except (ValueError, TypeError, ValidationError, pa.ArrowException) as exc:  # a type change: ValidationError
        topic = table.name()[-1]
        # Re-creating the table does not help while files of both types are indexed: the
        # new table takes one type and refuses the other's files.
        raise TableError(topic, f"the typed columns of new files cannot widen the table's schema ({exc}): Iceberg "
                                "promotes only int to long, float to double and decimal precision, so files of "
                                "both types cannot share the table; the new files wait in the index (vacuum keeps "
                                "them) until retention drops the older ones and the table is re-created "
                                "(llog topics alter --table none, then --table iceberg)") from exc


def _after_commit(tables: TableCatalog, topic: str, table: Table, result: SyncResult, fence: bool) -> SyncResult:
    """Expire snapshots; for a fence, also the files kept snapshots name (read after the
    fence committed: a later snapshot names only files the index names, and the fence
    refused every sync that read the table before it) and orphaned metadata."""
    snap = table.current_snapshot()
    fence_metadata = table.metadata_location
    expire(table, tables.conn.config.iceberg_snapshots_kept, tables.manifest_lists,
           lambda uris: tables.delete_metadata(topic, uris))
    kept = frozenset[str]()
    if fence:
        kept = files_of_snapshots(table)
        delete_orphans(tables.conn, topic, table, fence_metadata, tables.manifest_lists)
    return replace(result, snapshot_id=snap.snapshot_id if snap else None, kept=kept)
