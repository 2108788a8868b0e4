"""Topic = table: a table topic's compacted Parquet files as an Iceberg table.

:class:`TableCatalog` opens the catalog and a topic's table; :func:`sync_table`
reconciles the table with the index (the compactor service runs it on a schedule,
vacuum before it deletes a table's file). :func:`delete_topic` deletes a topic with
its table. Spec §10.1.
"""

from llog.table.catalog import TableCatalog, TableInfo, TableUnavailable
from llog.table.deletion import delete_topic
from llog.table.sync import SyncResult, sync_table

__all__ = ["SyncResult", "TableCatalog", "TableInfo", "TableUnavailable", "delete_topic", "sync_table"]
