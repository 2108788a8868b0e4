"""etcd key and object key layout (protocol/README.md, "Key layout").

Every key llog writes is built here, so the layout lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

OFFSET_DIGITS = 20
_COMPACTED_MARK = "/data/compacted/"
#: Reserved name under the root that holds consumer-group state (never a topic name).
GROUPS = "_groups"
#: Reserved name under the root that holds llog's own maintenance state.
MAINTENANCE = "_maintenance"
#: Reserved name under the root that holds the writers' and compactors' session keys.
SESSIONS = "_sessions"
#: Reserved name under the root that holds the live brokers' Kafka listener addresses.
BROKERS = "_brokers"
#: Reserved name under the root that holds the users' SCRAM credentials.
USERS = "_users"
#: Reserved name under the root that holds the access control lists.
ACLS = "_acls"
#: Reserved name under the root that holds the client quotas.
QUOTAS = "_quotas"
SCHEMAS = "_schemas"
#: Reserved name under the root that holds the transactional producers' records (spec §15).
TRANSACTIONS = "_transactions"
#: Reserved name under the root that holds the transactional Spark sinks' progress (spec §15.5).
SINKS = "_sinks"


@dataclass(frozen=True)
class KeyLayout:
    """Keys under one root prefix (``LLOG_ROOT_PREFIX``, default ``llog``)."""

    root: str = "llog"

    # -- etcd ------------------------------------------------------------------
    def topic_prefix(self, topic: str) -> str:
        return f"{self.root}/{topic}/"

    def topic_meta(self, topic: str) -> str:
        return f"{self.root}/{topic}/meta/topic"

    def partition_prefix(self, topic: str, partition: int) -> str:
        return f"{self.root}/{topic}/partitions/{partition}/"

    def control(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}meta/control"

    def compaction_cursor(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}meta/compaction-cursor"

    def clean_cursor(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}meta/clean-cursor"

    def compaction(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}meta/compaction"

    def compactor_claim(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}meta/compactor-claim"

    def damaged(self, topic: str, partition: int, end_offset: int) -> str:
        """A WAL entry the compactor passed because its body does not decode (§10 K3')."""
        return f"{self.damaged_prefix(topic, partition)}{end_offset:020d}"

    def damaged_prefix(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}damaged/"

    def producer(self, topic: str, partition: int, producer_id: str) -> str:
        return f"{self.partition_prefix(topic, partition)}producers/{producer_id}"

    def index_prefix(self, topic: str, partition: int) -> str:
        return f"{self.partition_prefix(topic, partition)}index/"

    def index(self, topic: str, partition: int, end_offset: int) -> str:
        return f"{self.index_prefix(topic, partition)}{end_offset:0{OFFSET_DIGITS}d}"

    def index_range_end(self, topic: str, partition: int) -> str:
        """Exclusive etcd range end for every index key of the partition."""
        return prefix_range_end(self.index_prefix(topic, partition))

    @staticmethod
    def end_offset_of(index_key: str) -> int:
        return int(index_key.rsplit("/", 1)[1])

    # -- consumer groups (under the reserved name "_groups") ----------------------
    def group_prefix(self, group: str) -> str:
        return f"{self.root}/{GROUPS}/{group}/"

    def groups_prefix(self) -> str:
        return f"{self.root}/{GROUPS}/"

    def group_offset_prefix(self, group: str) -> str:
        return f"{self.group_prefix(group)}offsets/"

    def group_offset(self, group: str, topic: str, partition: int) -> str:
        return f"{self.group_offset_prefix(group)}{topic}/{partition}"

    def group_epoch(self, group: str) -> str:
        return f"{self.group_prefix(group)}epoch"

    def group_generation(self, group: str) -> str:
        """A Kafka consumer group's completed generation (:class:`GroupGeneration`)."""
        return f"{self.group_prefix(group)}kafka-generation"

    def group_member_prefix(self, group: str) -> str:
        return f"{self.group_prefix(group)}members/"

    def group_member(self, group: str, member_id: str) -> str:
        return f"{self.group_member_prefix(group)}{member_id}"

    def group_owner_prefix(self, group: str) -> str:
        return f"{self.group_prefix(group)}owners/"

    def group_owner(self, group: str, topic: str, partition: int) -> str:
        return f"{self.group_owner_prefix(group)}{topic}/{partition}"

    def group_transactions_prefix(self, group: str) -> str:
        """The transactions with offsets of the group staged (spec §15.1)."""
        return f"{self.group_prefix(group)}transactions/"

    def group_transaction(self, group: str, transactional_id: str) -> str:
        return f"{self.group_transactions_prefix(group)}{quote(transactional_id, safe='')}"

    # -- transactions (under the reserved name "_transactions", spec §15) -------
    def transactions_prefix(self) -> str:
        return f"{self.root}/{TRANSACTIONS}/"

    def transaction(self, transactional_id: str) -> str:
        """A transactional id's record (any string is an id: percent-encoded)."""
        return f"{self.transactions_prefix()}{quote(transactional_id, safe='')}"

    def sink_progress(self, transactional_id: str) -> str:
        """A transactional Spark sink's last committed micro-batch (spec §15.5)."""
        return f"{self.root}/{SINKS}/{quote(transactional_id, safe='')}"

    def revision_clock(self) -> str:
        """The compactor's persisted revision-to-time samples (compactor/revision_clock.py)."""
        return f"{self.root}/{MAINTENANCE}/revision-clock"

    def cluster_format(self) -> str:
        """The cluster's format version (llog/state/cluster_format.py, spec §3.1)."""
        return f"{self.root}/{MAINTENANCE}/cluster-format"

    def etcd_compaction_record(self) -> str:
        """The last compaction of etcd's history the compactor service made."""
        return f"{self.root}/{MAINTENANCE}/etcd-compaction"

    # -- sessions (under the reserved name "_sessions") -------------------------
    def sessions_prefix(self) -> str:
        return f"{self.root}/{SESSIONS}/"

    def session(self, session_id: str) -> str:
        return f"{self.sessions_prefix()}{session_id}"

    # -- users (under the reserved name "_users") ------------------------------
    def users_prefix(self) -> str:
        return f"{self.root}/{USERS}/"

    def user(self, name: str) -> str:
        """A user's SCRAM credentials (the name percent-encoded: any string is a name)."""
        return f"{self.users_prefix()}{quote(name, safe='')}"

    # -- the schema registry (under the reserved name "_schemas", spec §14) ---------
    def schemas_prefix(self) -> str:
        return f"{self.root}/{SCHEMAS}/"

    def schema(self, schema_id: int) -> str:
        return f"{self.schemas_prefix()}ids/{schema_id:010d}"

    def schema_ids_prefix(self) -> str:
        return f"{self.schemas_prefix()}ids/"

    def schema_fingerprint(self, fingerprint: str) -> str:
        return f"{self.schemas_prefix()}fingerprints/{fingerprint}"

    def schema_next_id(self) -> str:
        return f"{self.schemas_prefix()}next-id"

    def schema_subjects_prefix(self) -> str:
        return f"{self.schemas_prefix()}subjects/"

    def schema_subject_prefix(self, subject: str) -> str:
        return f"{self.schema_subjects_prefix()}{quote(subject, safe='')}/"

    def schema_subject_version(self, subject: str, version: int) -> str:
        return f"{self.schema_subject_prefix(subject)}{version:010d}"

    def schema_config(self, subject: str | None = None) -> str:
        """The compatibility level of ``subject``, or the registry's (``None``)."""
        if subject is None:
            return f"{self.schemas_prefix()}config"
        return f"{self.schemas_prefix()}subject-config/{quote(subject, safe='')}"

    # -- ACLs (under the reserved name "_acls") ---------------------------------
    def acls_prefix(self) -> str:
        return f"{self.root}/{ACLS}/"

    def acl(self, resource_type: str, pattern_type: str, resource: str, principal: str, host: str,
            operation: str, permission: str) -> str:
        """One ACL, one key: adding it twice is one ACL (names percent-encoded)."""
        parts = (resource_type, pattern_type, resource, principal, host, operation, permission)
        return self.acls_prefix() + "/".join(quote(p, safe="") for p in parts)

    # -- client quotas (under the reserved name "_quotas") -------------------------
    def quotas_prefix(self) -> str:
        return f"{self.root}/{QUOTAS}/"

    def quota(self, entity_path: str) -> str:
        """One quota entity's quotas (``users/alice``, ``users/<default>/clients/etl``)."""
        return f"{self.quotas_prefix()}{entity_path}"

    # -- brokers (under the reserved name "_brokers") ----------------------------
    def brokers_prefix(self) -> str:
        return f"{self.root}/{BROKERS}/nodes/"

    def broker(self, node_id: int) -> str:
        """A live broker's Kafka node id and listener address, under its lease."""
        return f"{self.brokers_prefix()}{node_id}"

    def http_brokers_prefix(self) -> str:
        return f"{self.root}/{BROKERS}/http/"

    def http_broker(self, instance: str) -> str:
        """A live broker's HTTP address and zone (``GET /brokers``), under its lease."""
        return f"{self.http_brokers_prefix()}{instance}"

    def kafka_producer_ids(self) -> str:
        """Written once per Kafka InitProducerId: its etcd revision is the new producer id."""
        return f"{self.root}/{BROKERS}/producer-ids"

    def all_prefix(self) -> str:
        return f"{self.root}/"

    # -- object store ----------------------------------------------------------
    def wal_prefix(self) -> str:
        return f"{self.root}/wal-shared/"

    def wal_blob(self, session_id: str, blob_id: str) -> str:
        return f"{self.wal_prefix()}{session_id}/{blob_id}"

    def compacted_prefix(self, topic: str, partition: int) -> str:
        return f"{self.root}/{topic}/partitions/{partition}/data/compacted/"

    def compacted_blob(self, topic: str, partition: int, session_id: str, blob_id: str) -> str:
        return f"{self.compacted_prefix(topic, partition)}{session_id}/{blob_id}"

    def table_location(self, topic: str) -> str:
        """Where a table topic's Iceberg metadata lives (its data files stay where the
        compactor put them, under ``compacted_prefix``)."""
        return f"{self.root}/{topic}/table"

    def table_identity(self, topic: str) -> str:
        """The UUID of the table topic's Iceberg table, recorded when the table is
        created: a catalog holding another table under the name is refused (spec §10.1)."""
        return f"{self.root}/{topic}/meta/table"

    def topic_of_compacted(self, object_key: str) -> str | None:
        """The topic of a compacted object's key; ``None`` for any other key."""
        head, mark, _ = object_key.partition("/partitions/")
        if not mark or _COMPACTED_MARK not in object_key or not head.startswith(self.all_prefix()):
            return None
        return head[len(self.all_prefix()):]

    def session_of(self, object_key: str) -> str | None:
        """The session id in a data object's key; ``None`` for a key of the layout
        before sessions (``…/wal-shared/{blob_id}``, ``…/data/compacted/{blob_id}``)."""
        wal = self.wal_prefix()
        tail = object_key[len(wal):] if object_key.startswith(wal) else object_key.partition(_COMPACTED_MARK)[2]
        session_id, sep, _ = tail.partition("/")
        return session_id if sep else None


def prefix_range_end(prefix: str) -> str:
    """Exclusive range end covering every key that starts with ``prefix``."""
    raw = prefix.encode()
    return (raw[:-1] + bytes([raw[-1] + 1])).decode()
