"""Spark's own Kafka source and sink (``spark-sql-kafka-0-10``) against llog's Kafka
listener, in one job: read every record of one topic, upper-case the values, write
them to another, and print how many were read as JSON.

    python tests/workers/spark_kafka_job.py JARS BOOTSTRAP SOURCE_TOPIC SINK_TOPIC

A process of its own: the connector's jars go on the classpath when Spark starts
(``spark.jars``), and the suite's shared SparkSession has started without them. The
driver's JVM options come from ``PYSPARK_SUBMIT_ARGS``, as the suite's.
"""

from __future__ import annotations

import json
import sys

from llog.spark import local_session


def main() -> None:
    jars, bootstrap, source, sink = sys.argv[1:5]
    spark = local_session("llog-spark-kafka", conf={"spark.jars": jars})
    try:
        df = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", source).option("startingOffsets", "earliest").load())
        out = df.selectExpr("key", "CAST(upper(CAST(value AS STRING)) AS BINARY) AS value").cache()
        read = out.count()
        (out.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", sink).save())
        print(json.dumps({"read": read}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
