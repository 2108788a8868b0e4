"""The compactor service's table job: sync every table topic's Iceberg table with its
index (:mod:`llog.table.sync`), so compactions and retention reach the table within
``iceberg_sync_interval_s``."""

from __future__ import annotations

import logging

from compactor.metrics import CompactorMetrics
from llog.connection import Connection
from llog.errors import LlogError
from llog.table import TableCatalog, sync_table
from llog.topic.admin import Topics

log = logging.getLogger(__name__)


class TableSyncer:
    """Syncs the table topics of one connection; opens the catalog on first need."""

    def __init__(self, conn: Connection, metrics: CompactorMetrics) -> None:
        self.conn = conn
        self.metrics = metrics
        self._catalog = TableCatalog(conn)

    def run(self) -> int:
        """Sync each table topic once; return how many syncs committed."""
        committed = 0
        for meta in Topics(self.conn).list():
            if meta.table is None:
                continue
            try:
                r = sync_table(self._catalog, meta.name)
            except LlogError as exc:
                self.metrics.table_synced(None)
                log.warning("table sync of %s failed: %s", meta.name, exc)
                continue
            self.metrics.table_synced(r)
            committed += r.committed
        return committed

    def close(self) -> None:
        self._catalog.close()
