"""The scan pipeline behind :class:`llog.reader.Reader` (protocol/README.md §9), in
the order a record passes through it:

* :mod:`.resolution`: a partition's control and index page, the plan of its scan, the
  index walk into slices, and the re-resolution after a vacuumed blob;
* :mod:`.slices`: index slices and their coalescing into range GETs;
* :mod:`.partition`: one partition's scan as it goes (its range, how far it yielded);
* :mod:`.fetching`: the range GETs in flight, a window running across partitions;
* :mod:`.read_ahead`: how many GETs that window holds, adapting to the store's latency;
* the blob cache and peer reads below it (:mod:`llog.store.blob_cache`,
  :mod:`llog.store.peers`, held by the connection): chunks of shared WAL blobs, so
  partitions reading one blob share its GETs, asked of the broker that wrote them first;
* :mod:`.iteration`: fetched bytes decoded into batches, then records, in offset order.
"""
