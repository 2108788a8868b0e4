"""The Iceberg catalog of table topics: open it, create and load a topic's table.

One table per topic whose ``meta/topic`` has ``table = "iceberg"``, named
``{namespace}.{topic}`` (the namespace defaults to the root prefix), at
``{store}/{root}/{topic}/table`` (metadata only: the data files are the compactor's
Parquet files, added where they are). Its schema is the Parquet file's (spec §7.6),
partitioned by llog partition (identity). A table loaded by name must be this
deployment's (:mod:`llog.table.identity`). The pyiceberg catalog's name is ``llog``.

pyiceberg is an optional dependency (``pip install 'llog[table]'``); without it the
table calls raise :class:`TableUnavailable` naming the fix.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from llog.connection import Connection
from llog.errors import LlogError, TableError
from llog.store import LocalStore
from llog.table import identity
from llog.table.snapshots import ManifestLists

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

#: Table properties llog sets on create and keeps: a commit never rebases onto a newer
#: snapshot (the sync's and vacuum's compare-and-swap, llog/table/sync.py), and old
#: metadata files go with the snapshots that named them.
TABLE_PROPERTIES = {
    "commit.retry.num-retries": "0",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    # Appends merge small manifests, so planning reads a bounded number of them however
    # many syncs the table has seen.
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": "16",
    "llog.managed": "true",
}

#: The name pyiceberg gives the catalog (``load_catalog("llog", ...)`` in engines' docs).
CATALOG_NAME = "llog"


class TableUnavailable(LlogError):
    """A table call in a process without pyiceberg."""

    def __init__(self) -> None:
        super().__init__("table topics need pyiceberg: pip install 'llog[table]'")


def _pyiceberg() -> None:
    try:
        import pyiceberg  # noqa: F401
    except ImportError:
        raise TableUnavailable() from None


def catalog_uri(conn: Connection) -> str | None:
    """The configured catalog, or the default: SQLite beside a local store's data. An S3
    store has none: every process of the deployment must reach one catalog, and no
    file on one host (let alone one working directory) is that."""
    if conn.config.iceberg_catalog_uri:
        return conn.config.iceberg_catalog_uri
    store = conn.store
    return f"sqlite:///{store.root / 'iceberg.db'}" if isinstance(store, LocalStore) else None


def namespace(conn: Connection) -> str:
    """The catalog namespace of the deployment's tables: configured, or the root prefix."""
    return conn.config.iceberg_namespace or conn.keys.root


def io_properties(conn: Connection) -> dict[str, str]:
    """pyiceberg FileIO settings that reach the same store llog writes to."""
    cfg = conn.config
    if not cfg.object_store.startswith("s3://"):
        return {}
    import boto3

    props = {"s3.region": cfg.s3_region or "us-east-1"}
    if cfg.s3_endpoint_url:
        props["s3.endpoint"] = cfg.s3_endpoint_url
    creds = boto3.session.Session().get_credentials()
    if creds is not None:
        frozen = creds.get_frozen_credentials()
        props["s3.access-key-id"] = frozen.access_key or ""
        props["s3.secret-access-key"] = frozen.secret_key or ""
        if frozen.token:
            props["s3.session-token"] = frozen.token
    return props


def iceberg_schema() -> Any:
    """The Parquet file's columns (spec §7.6) as an Iceberg schema, every field optional
    as pyarrow writes them."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BinaryType,
        IntegerType,
        ListType,
        LongType,
        NestedField,
        StringType,
        StructType,
    )

    header = StructType(
        NestedField(8, "key", StringType(), required=False),
        NestedField(9, "value", BinaryType(), required=False),
    )
    return Schema(
        NestedField(1, "partition", IntegerType(), required=False),
        NestedField(2, "offset", LongType(), required=False),
        NestedField(3, "timestamp", LongType(), required=False),
        NestedField(4, "key", BinaryType(), required=False),
        NestedField(5, "value", BinaryType(), required=False),
        NestedField(6, "headers", ListType(7, header, element_required=False), required=False),
    )


@dataclass(frozen=True)
class TableInfo:
    """A table topic's table as the catalog has it now."""

    identifier: str
    location: str
    catalog: str
    snapshot_id: int | None
    snapshots: int
    files: int
    rows: int
    bytes: int

    def to_json(self) -> dict[str, object]:
        return asdict(self)


class TableCatalog:
    """The catalog of one connection's table topics; opened on first use.

    >>> with TableCatalog(conn) as tables:                       # doctest: +SKIP
    ...     tables.sync("events").added
    3
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.configured_uri = catalog_uri(conn)
        self.manifest_lists = ManifestLists()
        self._catalog: Catalog | None = None

    @property
    def uri(self) -> str:
        """The catalog's URI; :class:`TableError` if the deployment has none."""
        if self.configured_uri is None:
            raise TableError("*", "table topics on an S3 store need LLOG_ICEBERG_CATALOG_URI: a catalog every "
                                  "llog process of the deployment reaches (Postgres, a REST catalog, or SQLite "
                                  "on a path all of them share)")
        return self.configured_uri

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            _pyiceberg()
            self._catalog = self._open()
        return self._catalog

    def _open(self) -> Catalog:
        props = io_properties(self.conn)
        try:
            if self.uri.startswith(("http://", "https://")):
                from pyiceberg.catalog.rest import RestCatalog

                return RestCatalog(CATALOG_NAME, uri=self.uri, **props)
            from pyiceberg.catalog.sql import SqlCatalog

            if self.uri.startswith("sqlite:///"):
                os.makedirs(os.path.dirname(self.uri[len("sqlite:///"):]) or ".", exist_ok=True)
            # A new catalog's two tables are made as the namespace is (check, then create):
            # a process opening it at the same moment as others can lose that race once per
            # table, each loss meaning another process made one; the third attempt finds both.
            for _ in range(2):
                try:
                    return SqlCatalog(CATALOG_NAME, uri=self.uri, **props)
                except Exception:  # the driver's own types; the third failure is raised
                    continue
            return SqlCatalog(CATALOG_NAME, uri=self.uri, **props)
        except LlogError:
            raise
        except Exception as exc:  # the catalog's driver raises its own types
            raise TableError("*", f"cannot open the catalog {self.uri}: {exc}") from exc

    def identifier(self, topic: str) -> str:
        return f"{namespace(self.conn)}.{topic}"

    def location(self, topic: str) -> str:
        return self.conn.store.object_uri(self.conn.keys.table_location(topic))

    def table(self, topic: str, *, create: bool = True) -> Table | None:
        """The topic's table, created if missing (``create``), else ``None`` if absent.
        Its commit properties are put back if someone changed them. :class:`TableError`
        if the catalog's table is not this deployment's, or the deployment's table is
        in another catalog (:mod:`llog.table.identity`)."""
        from pyiceberg.exceptions import NoSuchTableError
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.transforms import IdentityTransform

        ident = self.identifier(topic)
        try:
            try:
                table = self.catalog.load_table(ident)
            except NoSuchTableError:
                uuid = identity.recorded(self.conn, topic)
                if uuid is not None:
                    raise identity.refuse_missing(topic, ident, self.uri, uuid) from None
                if not create:
                    return None
                self._create_namespace()
                spec = PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "partition"))
                table = self.catalog.create_table_if_not_exists(
                    ident, schema=iceberg_schema(), partition_spec=spec,
                    location=self.location(topic), properties=TABLE_PROPERTIES,
                )
                log.info("created Iceberg table %s at %s", ident, table.location())
            identity.check(self.conn, topic, table, self.location(topic), self.uri)
            drift = {k: v for k, v in TABLE_PROPERTIES.items() if table.properties.get(k) != v}
            if drift:
                with table.transaction() as tx:
                    tx.set_properties(drift)
                table = self.catalog.load_table(ident)
            return table
        except LlogError:
            raise
        except Exception as exc:
            raise TableError(topic, f"cannot load or create {ident} in {self.uri}: {exc}") from exc

    def _create_namespace(self) -> None:
        """The deployment's namespace, created if missing. pyiceberg checks, then inserts:
        two processes creating the first table topic's table at once (the service's sync
        and its vacuum, two compactors) can both pass the check, and the second insert
        then fails (a SQL catalog's UNIQUE constraint), though the namespace exists."""
        ns = namespace(self.conn)
        try:
            self.catalog.create_namespace_if_not_exists(ns)
        except Exception:
            if not self.catalog.namespace_exists(ns):
                raise

    def describe(self, topic: str) -> TableInfo | None:
        """The table's location, snapshot and totals; ``None`` if it does not exist."""
        table = self.table(topic, create=False)
        if table is None:
            return None
        snap = table.current_snapshot()
        summary = snap.summary if snap is not None and snap.summary is not None else None

        def total(name: str) -> int:
            return int(summary.get(name, "0") or 0) if summary is not None else 0

        return TableInfo(
            identifier=self.identifier(topic), location=table.location(), catalog=self.uri,
            snapshot_id=snap.snapshot_id if snap is not None else None,
            snapshots=len(table.metadata.snapshots),
            files=total("total-data-files"), rows=total("total-records"), bytes=total("total-files-size"),
        )

    def drop(self, topic: str, *, metadata: bool = False) -> bool:
        """Drop the topic's table from the catalog; ``False`` if there was none. Its
        data files stay (they are the topic's objects: the index names them, or vacuum
        deletes them); with ``metadata``, the metadata files it names (metadata JSON,
        manifest lists, manifests) are deleted too, for a topic that is gone. Only
        those: a topic created again under the name writes its table's metadata to the
        same location."""
        from pyiceberg.exceptions import NoSuchTableError

        ident = self.identifier(topic)
        try:
            table = self.catalog.load_table(ident) if metadata else None
            self.catalog.drop_table(ident)
        except NoSuchTableError:
            identity.forget(self.conn, topic)
            return False
        identity.forget(self.conn, topic)
        if table is not None:
            self.delete_metadata(topic, _metadata_files(table))
        return True

    def delete_metadata(self, topic: str, uris: Iterable[str]) -> None:
        """Delete the topic's table metadata files ``uris`` (others are ignored).
        Through the store, not the table's FileIO: pyarrow's S3 file system leaves an
        empty "directory" object behind each deletion."""
        uri, key = self.location(topic), self.conn.keys.table_location(topic)
        self.conn.store.delete(sorted(key + f[len(uri):] for f in uris if f.startswith(uri + "/")))

    def close(self) -> None:
        engine = getattr(self._catalog, "engine", None)
        if engine is not None:
            engine.dispose()
        self._catalog = None

    def __enter__(self) -> TableCatalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _metadata_files(table: Table) -> set[str]:
    """Every metadata file ``table``'s metadata names: its metadata JSON files, and
    each snapshot's manifest list and manifests."""
    meta = table.metadata
    files = {table.metadata_location, *(e.metadata_file for e in meta.metadata_log)}
    for snap in meta.snapshots:
        files.add(snap.manifest_list)
        files.update(m.manifest_path for m in snap.manifests(table.io))
    return files
