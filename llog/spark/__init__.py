"""PySpark support: the ``llog`` data source (batch and streaming reads, writes).

Needs the ``spark`` extra (``pip install 'llog[spark]'``: PySpark >= 4.2, pyarrow).

    >>> from llog.spark import register                            # doctest: +SKIP
    >>> register(spark)                 # or: spark = llog.spark.local_session()
    >>> spark.read.format("llog").option("topic", "orders").load().count()

``read_topic(spark, "events")`` reads Parquet-compacted history with Spark's own
Parquet reader and the rest through the source. See docs/spark.md for the options,
the schema and examples.
"""

from __future__ import annotations

from typing import Any

from llog.spark.session import local_session
from llog.spark.source import LlogDataSource
from llog.spark.table_read import read_topic


def register(spark: Any) -> None:
    """Register the ``llog`` format with ``spark`` (a ``SparkSession``)."""
    spark.dataSource.register(LlogDataSource)


__all__ = ["LlogDataSource", "local_session", "read_topic", "register"]
