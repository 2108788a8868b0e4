"""msgpack values stored in etcd (protocol/README.md, "etcd values"), a module per kind:
a partition's control, pending append and index entries (:mod:`.partition`), a topic's
definition (:mod:`.topic`), the compactor's cursors and records (:mod:`.compaction`),
consumer groups' values (:mod:`.groups`), idempotent producers' state
(:mod:`.producers`), transactional producers' records (:mod:`.transaction`), the
cluster's format version (:mod:`.cluster`); what they share (:mod:`.maps`).

Each value is a msgpack map with its class's fields, written in its order so the bytes
are deterministic (the golden vectors pin them). Unknown fields are ignored on read,
so later versions can add fields.
"""
