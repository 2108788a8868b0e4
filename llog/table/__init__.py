"""Topic = table: a table topic's compacted Parquet files as an Iceberg table.

:class:`TableCatalog` opens the catalog and a topic's table; :func:`sync_table`
reconciles the table with the index (the compactor service runs it on a schedule,
vacuum before it deletes a table's file). Spec §10.1.
"""

from llog.table.catalog import TableCatalog, TableInfo, TableUnavailable
from llog.table.sync import SyncResult, sync_table

__all__ = ["SyncResult", "TableCatalog", "TableInfo", "TableUnavailable", "sync_table"]
