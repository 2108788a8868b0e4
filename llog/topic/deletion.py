"""Deleting a topic's etcd state (spec §4.5, "Deletion"): the topic record, every key
of its partitions and every group's committed offsets for it, in one transaction
guarded by the record's ``create_revision``. The data objects are vacuum's (§11)."""

from __future__ import annotations

import logging

from llog.codec.etcd_values.topic import TopicMeta
from llog.connection import Connection, topic_of
from llog.errors import CasConflict
from llog.etcd.operations import Compare, Delete, Op
from llog.group_names import list_groups
from llog.names import check_topic
from llog.state.keys import prefix_range_end
from llog.topic.guard import TopicGuard

log = logging.getLogger(__name__)

#: Groups whose committed offsets for a topic go in the transaction that deletes it
#: (etcd allows 128 operations in one; the rest are deleted right after).
OFFSET_RANGES_PER_DELETE = 120


def remove_topic(conn: Connection, name: str) -> TopicMeta:
    """Delete topic ``name``'s etcd state (:meth:`llog.topic.admin.Topics.delete` documents
    it); the definition it had."""
    check_topic(name)
    keys = conn.keys
    key, prefix = keys.topic_meta(name), keys.topic_prefix(name)
    first = list_groups(conn)[:OFFSET_RANGES_PER_DELETE]
    ranges = [prefix, *(keys.group_offset_prefix(g) + f"{name}/" for g in first)]
    for _ in range(conn.config.commit_max_attempts):
        conn.forget_topic(name)
        meta = topic_of(name, conn.etcd.get(key))
        deletes: list[Op] = [Delete(r, prefix_range_end(r)) for r in ranges]
        r = conn.etcd.txn([TopicGuard(name, key, meta.revision).compare()], deletes, [])
        if r.succeeded:
            break
    else:  # created again between the read and the transaction, every time
        raise CasConflict(f"deleting topic {name!r}", conn.config.commit_max_attempts)
    _forget_offsets(conn, name, r.revision, set(first))
    log.info("deleted topic %s (%d partitions)", name, meta.partitions)
    return meta


def _forget_offsets(conn: Connection, name: str, deleted_at: int, done: set[str]) -> None:
    """The offsets for deleted topic ``name`` in groups the deletion's transaction
    did not cover (beyond the first :data:`OFFSET_RANGES_PER_DELETE`, or created
    meanwhile): each key last written before revision ``deleted_at`` (the topic
    guard keeps any later commit to the topic created again since)."""
    keys = conn.keys
    for g in list_groups(conn):
        if g in done:
            continue
        start = keys.group_offset_prefix(g) + f"{name}/"
        for kv in conn.etcd.scan(start, prefix_range_end(start)):
            if kv.mod_revision < deleted_at:
                conn.etcd.txn([Compare(kv.key, "mod", "<", deleted_at)], [Delete(kv.key)], [])
