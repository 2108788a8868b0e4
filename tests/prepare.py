"""Builds what the suite's clients need before the tests start: the Java client's
classpath (Maven, javac), Spark's Kafka connector jars, the Go clients (franz-go and
sarama, compiled) and kafkajs' ``node_modules``, each into ``.cache/`` of this checkout
as the first test to need it would.

``make test`` runs ``python -m tests.prepare`` beside lint, which leaves a core idle:
on a clean clone that is ~100 CPU-seconds of compiling the tests no longer wait for
(the tests' own builds find everything built, by the same stamps and locks). Whatever
cannot be built is reported and left to the tests that need it, which fail with the
reason; this never fails the run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import pytest


def _steps() -> list[tuple[str, Callable[[], object]]]:
    from tests import java_client
    from tests.test_kafka_go import _binary
    from tests.test_kafka_js import _node_modules

    return [
        ("the Go clients (franz-go)", _binary),
        ("the Go clients (sarama)", lambda: _binary("./sarama")),
        ("the Java client's classpath", java_client.classpath),
        ("Spark's Kafka connector", java_client.spark_kafka_jars),
        ("Spark's Python workers' path", java_client.spark_workers_import_installed_pyspark),
        ("Spark's class data sharing archive", java_client.spark_cds_archive),
        ("kafkajs", _node_modules),
    ]


def main() -> int:
    for what, build in _steps():
        t0 = time.monotonic()
        try:
            build()
        except (pytest.fail.Exception, OSError) as exc:  # reported; the tests that need it fail with the reason
            print(f"prepare: {what}: not built: {exc}", file=sys.stderr, flush=True)
            continue
        print(f"prepare: {what} in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
