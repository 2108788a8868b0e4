"""Transactions (protocol/README.md §15): appends to many partitions and consumer-group
offset commits made visible all at once, in one etcd transaction, or never. One module
per step, in protocol order:

* :mod:`~llog.txn.records` — reading a transactional id's record and changing it by CAS;
* :mod:`~llog.txn.coordinator` — T0 init (epochs, fencing zombies), T1 add, T2' offsets,
  T4 abort and the end of a transaction;
* :mod:`~llog.txn.staging` — T2: a staged blob's groups recorded in the ongoing
  transaction, each batch judged by its producer sequence; :mod:`~llog.txn.pipeline`
  — a producer's concurrent requests staged in order, together;
* :mod:`~llog.txn.commit` — T3: the commit point, one etcd transaction for every
  partition and group offset (of one transactional id, or of several as one), and
  T3', folding a large transaction's batches first;
* :mod:`~llog.txn.expiry` — aborting transactions past their timeout, forgetting idle ids;
* :mod:`~llog.txn.transaction` — the SDK's ``Transaction`` (§15.5), with the
  ``Consumer`` the exactly-once consume-transform-produce loop.
"""
