"""A lean local SparkSession with the ``llog`` format registered: for the example
pipeline, the benchmark, the tests and notebooks on one machine."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from llog.errors import ConfigError


def java_available() -> bool:
    """Whether a ``java`` binary can be found (``JAVA_HOME`` or PATH)."""
    home = os.environ.get("JAVA_HOME")
    if home and os.path.exists(os.path.join(home, "bin", "java")):
        return True
    return shutil.which("java") is not None


def local_session(app_name: str = "llog", *, cores: int = 2, conf: Mapping[str, str] | None = None) -> Any:
    """A ``local[cores]`` SparkSession (UI off, ``cores`` shuffle partitions, quiet
    logs) whose Python workers run this interpreter, with ``llog`` registered. Extra
    Spark settings go in ``conf`` (``{"spark.driver.memory": "2g"}``). Stop it with
    ``.stop()``."""
    if not java_available():
        raise ConfigError("Spark needs Java 17+: install a JDK or set JAVA_HOME")
    from pyspark.sql import SparkSession

    from llog.spark.source import register

    # Workers must import the same llog (and pyarrow) as the driver.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(cores))
        # Python workers over Unix sockets (Spark 4.1+; older ones ignore it): over
        # loopback TCP every Python task waits ~40 ms for its last bytes (delayed ACKs).
        .config("spark.python.unix.domain.socket.enabled", "true")
    )
    for k, v in (conf or {}).items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
