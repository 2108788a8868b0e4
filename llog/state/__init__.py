"""The state llog keeps in etcd, shared by writers, readers and compactors: the key
layout, etcd's and the object store's (:mod:`.keys`); a partition's control record,
materialization and settle (:mod:`.control`); the lease-bound writer and compactor
sessions (:mod:`.session`)."""
