"""Binary codecs: record bodies (``batch``), shared WAL blobs (``blob``) and the
msgpack values stored in etcd (``etcd_values``). Pure code, no I/O."""
