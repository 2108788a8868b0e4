"""A thin layer over the ``etcd3`` module: exactly what the protocol needs.

get, range scans, ceiling lookup, transactions with revision compares, delete range,
leases and watches, with typed results, metrics, and failover across endpoints:

- :mod:`~llog.etcd.operations`: what a request says and what it returns — ``KV``, the
  compares, the transaction's operations and its ``TxnResult``, built into etcd's own
  protobuf messages (so a transaction returns its header revision, the new
  ``mod_revision`` of what it wrote, which callers cache to make their next
  compare-and-swap without a read);
- :mod:`~llog.etcd.client`: the ``Etcd`` client and how it fails over;
- :mod:`~llog.etcd.members`: its members, which to try next and what a failure proves;
- :mod:`~llog.etcd.auth`: TLS and etcd's users (``EtcdSecurity``), a token per member;
- :mod:`~llog.etcd.watches`: watches that move from member to member;
- :mod:`~llog.etcd.maintenance`: history compaction, defragmentation, alarms.
"""
