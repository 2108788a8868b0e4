"""The write path (protocol/README.md §8), one module per step, in protocol order, behind
the :class:`~llog.writer.Writer` façade (as :mod:`llog.scan` is behind the ``Reader``):

* :mod:`~llog.write.validation` — W0: the groups and their records checked before
  anything is written; :mod:`~llog.write.backpressure` — W0's gate on partitions with
  too many uncompacted index keys (§8.8);
* :mod:`~llog.write.staging` — W1: one shared blob encoded (with each idempotent group's
  content digest) and PUT, and each group's pending value;
* :mod:`~llog.write.commit_plan` — W2: one partition's commit transaction as a value,
  and the idempotent verdict (§8.7); :mod:`~llog.write.commit_runner` — W2 and W2' (combined): a
  staged blob's commits, combined where cached; :mod:`~llog.write.partition_commit` —
  one group's commit with its retries (§8.3), fencing (§8.6) and unknown outcomes,
  which :mod:`~llog.write.resolution` settles (§8.5);
* :mod:`~llog.write.acknowledgement` — W3: what an append came to;
  :mod:`~llog.write.caches` — what a writer remembers between commits.

Sessions (:mod:`llog.state.session`) and control reads and settle
(:mod:`llog.state.control`) stay a layer below: the compactor and the readers use them
too.
"""
