"""Deleting a topic with its table: :meth:`llog.topic.admin.Topics.delete` removes the
topic's etcd state (spec §4.5), and a table topic's Iceberg table is then dropped
from the catalog, its metadata files deleted (its data files are the topic's objects,
which vacuum deletes). What ``llog topics delete`` and Kafka's DeleteTopics run."""

from __future__ import annotations

import logging

from llog.codec.etcd_values.topic import TopicMeta
from llog.connection import Connection
from llog.table.catalog import TableCatalog
from llog.topic.admin import Topics

log = logging.getLogger(__name__)


def delete_topic(conn: Connection, name: str) -> TopicMeta:
    """Delete topic ``name`` (:meth:`Topics.delete`) and, for a table topic, its table;
    returns the definition it had. The topic is gone whatever the catalog does: a
    table that cannot be dropped is logged, for the operator to drop."""
    meta = Topics(conn).delete(name)
    if meta.table is not None:
        try:
            with TableCatalog(conn) as tables:
                tables.drop(name, metadata=True)
        except Exception as exc:  # pyiceberg and the catalog driver raise their own
            log.warning("topic %s is deleted, but its Iceberg table is still in the catalog (%s); drop it there",
                        name, exc)
    return meta
