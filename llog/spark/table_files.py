"""``read_table``: a table topic's Iceberg table in Spark, through the table's file list
and Spark's own Parquet reader, with the table's schema (typed columns included, spec
§7.6). Iceberg's Spark runtime is the other way in; Maven Central serves it for Spark
4.0 and 4.1 only, which does not load in the Spark 4.3 llog is tested with, so this
reads the files the table's snapshot names, as a query engine planning the table
would, under the schema the table has now (older files read nulls for fields added
since).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from llog.connection import Connection
from llog.errors import ConfigError, TableError
from llog.spark.options import parse_source_options
from llog.spark.table_read import spark_paths
from llog.table import TableCatalog


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
        schema = from_arrow_schema(schema_to_pyarrow(scan.projection(), include_field_ids=False))
        uris = [t.file.file_path for t in scan.plan_files()]
    if not uris:
        return spark.createDataFrame([], schema)
    paths = spark_paths(uris, spark)
    if paths is None:
        raise ConfigError(f"Spark cannot read {uris[0]} (an s3:// store needs the S3A filesystem, hadoop-aws)")
    return spark.read.schema(schema).parquet(*paths)
