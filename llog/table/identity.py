"""Which Iceberg table is a topic's: its location and the UUID recorded in etcd.

A catalog is a name → metadata map that more than one deployment may share, and that a
misconfigured process may not share at all (a fresh SQLite file). Either way a name can
resolve to a table that is not this topic's, and a sync or a fencing vacuum that trusted
it would rewrite another deployment's table or judge files by an empty one. So:

* the table's location must be this deployment's (``{store}/{root}/{topic}/table``);
* its UUID is recorded at ``{root}/{topic}/meta/table`` when first seen (put-if-absent),
  and a table with another UUID, or no table where one was recorded, is refused.

The record goes with the topic's keys when the topic is deleted, and with
``llog topics alter --table none``, after which a new table may be created.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from llog.connection import Connection
from llog.errors import TableError
from llog.etcd.operations import Put, absent

if TYPE_CHECKING:
    from pyiceberg.table import Table


def recorded(conn: Connection, topic: str) -> str | None:
    """The UUID of the topic's table as recorded, ``None`` if none was."""
    kv = conn.etcd.get(conn.keys.table_identity(topic))
    return kv.value.decode() if kv is not None else None


def refuse_missing(topic: str, identifier: str, catalog: str, uuid: str) -> TableError:
    """The catalog lacks a table this deployment created: another catalog holds it."""
    return TableError(topic, f"{identifier} is not in the catalog {catalog}, but this deployment created "
                             f"table {uuid} for the topic: point LLOG_ICEBERG_CATALOG_URI at the catalog "
                             "that holds it (or, if that catalog is lost, `llog topics alter --table none` "
                             "and then `--table iceberg` start a new table)")


def check(conn: Connection, topic: str, table: Table, expected_location: str, catalog: str) -> None:
    """Refuse ``table`` unless it is at this deployment's location and has the recorded
    UUID; record its UUID if none is (the first process to see the table)."""
    identifier = ".".join(table.name())
    location = table.location().rstrip("/")
    if location != expected_location.rstrip("/"):
        raise TableError(topic, f"{identifier} in the catalog {catalog} is at {location}, not at this "
                                f"deployment's {expected_location}: another deployment (root prefix) owns "
                                "it; give each deployment its own LLOG_ICEBERG_NAMESPACE")
    uuid = str(table.metadata.table_uuid)
    key = conn.keys.table_identity(topic)
    have = recorded(conn, topic)
    if have is None:
        if conn.etcd.txn([absent(key)], [Put(key, uuid.encode())]).succeeded:
            return
        have = recorded(conn, topic)
    if have is not None and have != uuid:
        raise TableError(topic, f"{identifier} in the catalog {catalog} is table {uuid}, but this deployment's "
                                f"table for the topic is {have}: point LLOG_ICEBERG_CATALOG_URI at the "
                                "catalog that holds it")


def forget(conn: Connection, topic: str) -> None:
    """Drop the record: the topic's table was dropped."""
    conn.etcd.delete_range(conn.keys.table_identity(topic))
