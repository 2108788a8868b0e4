"""``parquet-v1``: a compacted range of one partition as a Parquet file (spec §7.6).

A topic created with ``--compacted-format parquet`` has the compactor write each
compacted run as a Parquet file instead of a ``bytes-batch-v1`` body, so the history
is readable by any Parquet reader (DuckDB, polars, Spark, pyarrow) straight from the
object store, while llog's own readers serve its offsets from it like any body.

Columns, in this order: ``partition`` int32, ``offset`` int64, ``timestamp`` int64
(ms since the epoch), ``key`` binary (nullable), ``value`` binary (nullable: tombstones), ``headers``
list<struct<key: string, value: binary>>; zstd, offsets and timestamps delta-packed;
row groups of about ``ROW_GROUP_BYTES`` of values and keys. A Parquet file starts and
ends with ``PAR1``, which is how a reader tells it from the other encodings. Decoding
hands the Arrow buffers to an :class:`ArrowBatch` without a per-record loop (the two
layouts are Arrow's), and Arrow turns its values and keys into ``bytes``.

pyarrow is an optional dependency (``pip install 'llog[parquet]'``): a process that
meets a Parquet body without it raises :class:`ParquetUnavailable` naming the fix.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from llog.codec import batch
from llog.codec.batch import BatchFormatError
from llog.errors import LlogError

if TYPE_CHECKING:
    import pyarrow as pa

ENCODING = "parquet-v1"
MAGIC = b"PAR1"
#: Target bytes of values and keys per row group: a reader of a range GETs whole row
#: groups, so they stay a few MiB; Parquet's default (1M rows) would be one huge group.
ROW_GROUP_BYTES = 4 * 1024 * 1024
COLUMNS = ("partition", "offset", "timestamp", "key", "value", "headers")
#: Uncompressed bytes of the row groups read from which decoding uses Arrow's threads.
THREADED_DECODE_BYTES = 4 * 1024 * 1024


class ParquetUnavailable(LlogError):
    """A Parquet body, or a topic that asks for them, in a process without pyarrow."""

    def __init__(self) -> None:
        super().__init__("Parquet bodies need pyarrow: pip install 'llog[parquet]' (or pyarrow)")


@dataclass(frozen=True)
class ArrowBatch(batch.Batch):
    """A Parquet body's :class:`~llog.codec.batch.Batch`, which also keeps the Arrow
    arrays of its values and keys: :meth:`columns` has Arrow convert them to ``bytes``
    (0.2 ms for 10,000 values, against 1.2 ms to split the buffer in Python), the edge
    that makes a scan of a Parquet body faster than of a ``bytes-batch-v1`` one."""

    value_array: Any
    key_array: Any  # None when every key is null

    def columns(self, start: int = 0, stop: int | None = None) -> batch.Columns:
        stop = self.count if stop is None else min(stop, self.count)
        if start >= stop:
            return [], None, [], None
        n = stop - start
        keys = None if self.key_array is None else self.key_array.slice(start, n).to_pylist()
        return (self.timestamps[start:stop].tolist(), keys, self.value_array.slice(start, n).to_pylist(),
                self._headers(start, stop))


def _pa() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise ParquetUnavailable() from None
    return pyarrow


@functools.cache
def schema() -> pa.Schema:
    """The file schema (built once: encode and decode both compare against it)."""
    pa = _pa()
    return pa.schema([
        ("partition", pa.int32()), ("offset", pa.int64()), ("timestamp", pa.int64()),
        ("key", pa.binary()), ("value", pa.binary()),
        ("headers", pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    ])


def encode(cols: batch.RecordColumns, partition: int, start_offset: int,
           extra: dict[str, Any] | None = None) -> bytes:
    """Records given as columns (timestamps, keys or None, values, headers or None),
    the first at ``start_offset``, as one Parquet file. ``extra``: more columns after
    those (Arrow arrays, one row per record): a table topic's typed values (§7.6),
    which llog's readers never read."""
    pa = _pa()
    stamps, keys, values, headers = cols
    n = len(values)
    if n == 0:
        raise BatchFormatError("a body holds at least one record")
    table = pa.table({
        "partition": pa.array([partition] * n, pa.int32()),
        "offset": pa.array(range(start_offset, start_offset + n), pa.int64()),
        "timestamp": pa.array(stamps, pa.int64()),
        "key": pa.array([None] * n if keys is None else keys, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "headers": pa.array([[] for _ in range(n)] if headers is None else
                            [[{"key": k, "value": v} for k, v in h] for h in headers], schema().field("headers").type),
    }, schema=schema())
    for name, column in (extra or {}).items():
        table = table.append_column(name, column)
    size = sum(len(v) for v in values if v is not None) + sum(len(k) for k in keys or () if k is not None)
    rows = max(1, min(n, n * ROW_GROUP_BYTES // max(1, size)))
    sink = pa.BufferOutputStream()
    # Dictionaries only for the constant partition: values and stamps are mostly
    # unique, and decoding a dictionary page before falling back costs readers time.
    # Offsets and timestamps rise by small steps: delta-packed they are a few bits a row
    # (a third of the file's bytes) and decode faster than plain.
    pa.parquet.write_table(table, sink, compression="zstd", row_group_size=rows, use_dictionary=["partition"],
                           column_encoding={"offset": "DELTA_BINARY_PACKED", "timestamp": "DELTA_BINARY_PACKED"})
    return bytes(sink.getvalue())


def decode(body: bytes | bytearray | memoryview) -> batch.Batch:
    """The file's records as a :class:`~llog.codec.batch.Batch` over Arrow's buffers;
    :class:`BatchFormatError` for anything that is not such a file."""
    return decode_from(body, 0)[0]


def decode_from(body: bytes | bytearray | memoryview, skip_rows: int) -> tuple[batch.Batch, int]:
    """``(records from the row group holding row skip_rows on, that group's first
    row)``: only those row groups are read, so ``body`` may be a sparse copy holding
    just them and the footer (:func:`row_group_start`)."""
    f = _open(body)
    first_group, first_row = _group_of(f.metadata, skip_rows)
    return _read_groups(f, range(first_group, f.metadata.num_row_groups)), first_row


def footer(body: bytes | memoryview) -> Any:
    """The file's footer (``pyarrow.parquet.FileMetaData``), for :func:`row_group_rows`
    and :func:`decode_group`."""
    return _open(body).metadata


def row_group_rows(metadata: Any) -> list[int]:
    """The rows of each of the file's row groups."""
    return [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]


def decode_group(body: bytes | memoryview, group: int, metadata: Any) -> batch.Batch:
    """The records of row group ``group`` alone (the body may be a sparse copy holding
    it and the footer), given the file's :func:`footer`. Thread-safe: each call reads
    through a reader of its own, and pyarrow lets go of the GIL while it decodes."""
    return _read_groups(_open(body, metadata), range(group, group + 1))


def _open(body: bytes | bytearray | memoryview, metadata: Any = None) -> Any:
    """The body as a ``pyarrow.parquet.ParquetFile`` (over the same memory, no copy);
    with its footer already read, the footer is not parsed again."""
    pa = _pa()
    if len(body) < 12 or bytes(body[:4]) != MAGIC or bytes(body[-4:]) != MAGIC:
        raise BatchFormatError("not a Parquet file (PAR1 magic missing)")
    try:
        # ParquetFile, not read_table: the dataset layer costs ~2.5 ms a file in set-up.
        return pa.parquet.ParquetFile(pa.BufferReader(pa.py_buffer(body)), metadata=metadata)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BatchFormatError(f"Parquet file does not read: {exc}") from None


def _read_groups(f: Any, groups: range) -> ArrowBatch:
    pa = _pa()
    try:
        cols = _columns_to_read(f.metadata, groups)
        # Arrow's thread pool pays for itself only on large row groups: below a few MiB
        # its dispatch costs more than it saves (0.38 against 0.23 ms for 2,000 rows).
        threads = sum(f.metadata.row_group(g).total_byte_size for g in groups) >= THREADED_DECODE_BYTES
        table = f.read_row_groups(groups, columns=cols, use_threads=threads)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BatchFormatError(f"Parquet file does not read: {exc}") from None
    if table.schema != _schema_of(tuple(cols)):
        raise BatchFormatError(f"unexpected Parquet schema: {table.schema}")
    if table.num_rows == 0:
        raise BatchFormatError("empty Parquet file")
    return _batch(pa, table.combine_chunks())


@functools.cache
def _schema_of(cols: tuple[str, ...]) -> pa.Schema:
    """The file schema's fields ``cols``, what reading just those columns gives."""
    return _pa().schema([schema().field(c) for c in cols])


def _columns_to_read(md: Any, groups: range) -> list[str]:
    """timestamp and value, plus key and headers unless the row groups' statistics
    say every key is null and every header list empty (reading them costs a quarter
    of the decode)."""
    cols = ["timestamp", "value"]
    leaves = {md.row_group(groups[0]).column(i).path_in_schema: i for i in range(md.num_columns)}
    for name, leaf in (("key", "key"), ("headers", "headers.list.element.key")):
        i = leaves.get(leaf)
        if i is None or not all(_all_null(md.row_group(g).column(i)) for g in groups):
            cols.append(name)
    return sorted(cols, key=COLUMNS.index)


def _all_null(chunk: Any) -> bool:
    st = chunk.statistics
    return st is not None and st.has_null_count and st.null_count == chunk.num_values


def _group_of(md: Any, row: int) -> tuple[int, int]:
    """``(row group holding row, its first row)``; the last group for a row past the end."""
    first = 0
    for g in range(md.num_row_groups):
        n = md.row_group(g).num_rows
        if row < first + n or g == md.num_row_groups - 1:
            return g, first
        first += n
    return 0, 0


def footer_length(tail: bytes) -> int:
    """Bytes of a Parquet file's footer (metadata, its length and ``PAR1``) from the
    file's last bytes; :class:`BatchFormatError` if they do not end a Parquet file."""
    if len(tail) < 8 or tail[-4:] != MAGIC:
        raise BatchFormatError("not a Parquet file (PAR1 magic missing at its end)")
    return int.from_bytes(tail[-8:-4], "little") + 8


def row_group_start(sparse: bytes | bytearray, skip_rows: int) -> int | None:
    """For a buffer of the file's size holding its footer at the end: where the row
    group holding row ``skip_rows`` starts (its first column chunk), or ``None`` if that
    is the first group (nothing to skip)."""
    pa = _pa()
    try:
        md = pa.parquet.ParquetFile(pa.BufferReader(sparse)).metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise BatchFormatError(f"Parquet footer does not read: {exc}") from None
    group, _ = _group_of(md, skip_rows)
    if group == 0:
        return None
    rg = md.row_group(group)
    return int(min(
        c.dictionary_page_offset if c.has_dictionary_page and c.dictionary_page_offset else c.data_page_offset
        for c in (rg.column(i) for i in range(rg.num_columns))
    ))


def _batch(pa: Any, table: Any) -> ArrowBatch:
    """The columns' Arrow buffers as a Batch (same layouts: spec §7.4)."""
    n = table.num_rows

    def single(name: str) -> Any:
        """The column's one chunk (combined, at least one row); None if not read."""
        if name not in table.column_names:
            return None
        arr = table.column(name).chunk(0)
        return arr if arr.offset == 0 else pa.concat_arrays([arr])

    ts, key, value, hdr = (single(c) for c in ("timestamp", "key", "value", "headers"))
    if ts.null_count:
        raise BatchFormatError("null timestamps in a Parquet body")
    timestamps = memoryview(ts.buffers()[1]).cast("B")[: 8 * n].cast("q")
    v_off = memoryview(value.buffers()[1]).cast("B")[: 4 * (n + 1)].cast("i")
    values = memoryview(value.buffers()[2] or b"").cast("B")
    value_validity = memoryview(value.buffers()[0]).cast("B") if value.null_count else None
    key_validity = key_offsets = keys = None
    if key is not None and key.null_count < n:
        bits = key.buffers()[0]
        key_validity = memoryview(bits).cast("B") if bits is not None else memoryview(b"\xff" * ((n + 7) // 8))
        key_offsets = memoryview(key.buffers()[1]).cast("B")[: 4 * (n + 1)].cast("i")
        keys = memoryview(key.buffers()[2] or b"").cast("B")
    h_off = hko = hk = hvo = hv = None
    flat = hdr.values if hdr is not None else None
    if flat is not None and len(flat):
        if flat.offset:
            flat = pa.concat_arrays([flat])
        h_off = memoryview(hdr.buffers()[1]).cast("B")[: 4 * (n + 1)].cast("i")
        hkeys, hvals = flat.field("key"), flat.field("value")
        h = len(flat)
        hko = memoryview(hkeys.buffers()[1]).cast("B")[: 4 * (h + 1)].cast("i")
        hk = memoryview(hkeys.buffers()[2] or b"").cast("B")
        hvo = memoryview(hvals.buffers()[1]).cast("B")[: 4 * (h + 1)].cast("i")
        hv = memoryview(hvals.buffers()[2] or b"").cast("B")
    return ArrowBatch(n, timestamps, v_off, values, key_validity, key_offsets, keys, h_off, hko, hk, hvo, hv,
                      value_validity, None, value, key if keys is not None else None)
