"""PySpark support: the ``llog`` data source (batch and streaming reads, writes).

Needs the ``spark`` extra (``pip install 'llog[spark]'``: PySpark >= 4.2, pyarrow).

    >>> from llog.spark import register                            # doctest: +SKIP
    >>> register(spark)                 # or: spark = llog.spark.local_session()
    >>> spark.read.format("llog").option("topic", "orders").load().count()

``read_topic(spark, "events")`` reads Parquet-compacted history with Spark's own
Parquet reader and the rest through the source; ``read_table(spark, "events")`` reads a
table topic's Iceberg table (typed columns included). See docs/spark.md for the options,
the schema and examples.
"""

from __future__ import annotations

from llog.spark.session import local_session
from llog.spark.source import LlogDataSource, register
from llog.spark.table_files import read_table
from llog.spark.table_read import read_topic

__all__ = ["LlogDataSource", "local_session", "read_table", "read_topic", "register"]
