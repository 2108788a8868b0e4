"""Range GETs of a Parquet file's row groups: a scan that starts inside a compacted
Parquet file (a consumer resuming mid-range, a fetch by offset) reads the footer and
the row groups from the one holding its first offset, not the whole file (spec §9
step 9, §7.6).

The bytes come back as a **sparse copy**: a buffer of the file's size holding ``PAR1``,
those row groups and the footer at their places, zeros elsewhere, which
:func:`llog.codec.parquet_body.decode_from` reads like the file.
"""

from __future__ import annotations

from llog.codec import parquet_body
from llog.codec.batch import BatchFormatError
from llog.errors import CorruptBlob
from llog.store import ObjectStore

#: Bytes read from the file's end in the first GET: the footer of a compacted file
#: (6 columns, a few row groups) is a few KiB.
TAIL_BYTES = 64 * 1024


def worth_it(size: int, count: int, skip_rows: int) -> bool:
    """Whether the rows skipped likely fill a row group (else one whole GET is cheaper
    than the footer GET and the span GET)."""
    return size > 2 * parquet_body.ROW_GROUP_BYTES and skip_rows * size >= parquet_body.ROW_GROUP_BYTES * count


def fetch_from(store: ObjectStore, key: str, size: int, skip_rows: int) -> tuple[bytes, int]:
    """``(the file, or its sparse copy from the row group holding row skip_rows on,
    bytes fetched)``. Two GETs (footer, then the row groups), or a whole-file GET when
    the footer shows nothing to skip; three if the footer is larger than the first."""
    tail_len = min(size, TAIL_BYTES)
    tail = store.get_range(key, size - tail_len, tail_len)
    try:
        need = parquet_body.footer_length(tail)
    except BatchFormatError as exc:
        raise CorruptBlob(key, size - tail_len, tail_len, str(exc)) from exc
    if need > size:
        raise CorruptBlob(key, 0, size, f"footer of {need} bytes in a file of {size}")
    if need > tail_len:
        tail_len = need
        tail = store.get_range(key, size - tail_len, tail_len)
    sparse = bytearray(size)
    sparse[:4] = parquet_body.MAGIC
    sparse[size - tail_len:] = tail
    try:
        start = parquet_body.row_group_start(sparse, skip_rows)
    except BatchFormatError as exc:
        raise CorruptBlob(key, size - need, need, str(exc)) from exc
    if start is None:
        return store.get(key), size + tail_len
    end = size - need  # the row groups run up to the footer
    if not 4 <= start < end:
        raise CorruptBlob(key, start, max(0, end - start), "row groups outside the file's data")
    sparse[start:end] = store.get_range(key, start, end - start)
    return bytes(sparse), tail_len + end - start
