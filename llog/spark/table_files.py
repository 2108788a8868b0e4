"""``read_table``: a table topic's Iceberg table in Spark, through the table's file list
and Spark's own Parquet reader, with the table's schema (typed columns included, spec
§7.6). Iceberg's Spark runtime is the other way in; Maven Central serves it for Spark
4.0 and 4.1 only, which does not load in the Spark 4.3 llog is tested with, so this
reads the files the table's snapshot names, as a query engine planning the table
would, under the schema the table has now (older files read nulls for fields added
since). Spark has no time-of-day type: a table's ``time`` fields (an Avro
``time-millis``/``time-micros``) are left out of the DataFrame, where pyiceberg and DuckDB
read them (docs/schema-registry.md, "Schema features").
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llog.connection import Connection
from llog.errors import ConfigError, TableError
from llog.spark.options import parse_source_options
from llog.spark.table_read import spark_paths
from llog.table import TableCatalog

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)


def read_table(spark: Any, topic: str, options: Mapping[str, str] | None = None, *,
               snapshot_id: int | None = None, **more: str) -> Any:
    """The rows of ``topic``'s table (its current snapshot, or ``snapshot_id``) as a
    DataFrame: ``partition, offset, timestamp, key, value, headers`` and, for a topic
    with typed columns, ``fields`` and ``fields_error``. ``options``/``more``: the
    ``llog`` source's connection options (``etcdEndpoints``, ``rootPrefix``, ...).

    >>> read_table(spark, "clicks").where("fields.page = '/p1'").count()    # doctest: +SKIP
    """
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyspark.sql.pandas.types import from_arrow_schema

    opts = {**(options or {}), **more, "subscribe": topic}
    src = parse_source_options(opts, streaming=False)
    with Connection(src.config) as conn, TableCatalog(conn) as tables:
        table = tables.table(topic, create=False)
        if table is None:
            raise TableError(topic, "the topic has no table yet (is it a table topic, synced once?)")
        scan = table.scan(snapshot_id=snapshot_id)
        schema = from_arrow_schema(_without_time(schema_to_pyarrow(scan.projection(), include_field_ids=False)))
        uris = [t.file.file_path for t in scan.plan_files()]
    if not uris:
        return spark.createDataFrame([], schema)
    paths = spark_paths(uris, spark)
    if paths is None:
        raise ConfigError(f"Spark cannot read {uris[0]} (an s3:// store needs the S3A filesystem, hadoop-aws)")
    return spark.read.schema(schema).parquet(*paths)


def _without_time(schema: pa.Schema) -> pa.Schema:
    """``schema`` without its time-of-day fields, at any depth (Spark refuses the type;
    reading a Parquet file under a schema that leaves a field out skips it)."""
    import pyarrow as pa

    def keep(t: pa.DataType) -> pa.DataType | None:
        if pa.types.is_time(t):
            return None
        if pa.types.is_struct(t):
            kept = [f.with_type(k) for f in t if (k := keep(f.type)) is not None]
            return pa.struct(kept) if kept else None
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            inner = keep(t.value_type)
            return None if inner is None else pa.list_(inner)
        if pa.types.is_map(t):
            item = keep(t.item_type)
            return None if item is None else pa.map_(t.key_type, item)
        return t

    fields = []
    for f in schema:
        kept = keep(f.type)
        if kept is None:
            log.info("read_table leaves out %s: Spark has no time-of-day type", f.name)
            continue
        fields.append(f.with_type(kept))
    return pa.schema(fields)
