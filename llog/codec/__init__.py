"""Binary codecs: record bodies (``batch``), shared WAL blobs (``blob``) and the
msgpack metadata values stored in etcd (``meta``). Pure code, no I/O."""
