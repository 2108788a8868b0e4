"""The Kafka Java client, Kafka's command-line tools, Kafka Streams, Kafka Connect and
MirrorMaker 2 for the suite: ``kafka-clients``, ``kafka-tools``, ``kafka-streams``,
``connect-runtime``, ``connect-file`` and ``connect-mirror`` from Maven Central,
fetched with Maven into ``.cache/java`` of this checkout (once; ``make test`` installs
Maven and a JDK from Debian when missing), and ``tests/java/*.java`` compiled beside
them."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import itertools
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.build_lock import exclusive

SOURCES = Path(__file__).resolve().parent / "java"
CACHE = Path(__file__).resolve().parent.parent / ".cache" / "java"


@functools.cache
def classpath() -> str:
    """``kafka-clients`` and its dependencies, and the compiled ``JavaClient`` (a jar:
    class data sharing archives classes from jars only)."""
    for tool in ("mvn", "javac", "java", "jar"):
        if shutil.which(tool) is None:
            pytest.fail(f"the Java client tests need {tool} (make test installs maven and a JDK from Debian)")
    lib, classes = CACHE / "lib", CACHE / "classes"
    pom = SOURCES / "pom.xml"
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in [pom, *sources]) + TESTS_JAR.encode()).hexdigest()
    with exclusive("java"):
        _fetch(pom, lib, "kafka-clients")
        built = classes / ".sources"
        if not built.exists() or built.read_text() != digest:  # compiled by this run or an earlier one
            fresh = CACHE / f"classes-{os.getpid()}"
            shutil.rmtree(fresh, ignore_errors=True)
            _run(["javac", "-d", str(fresh / "out"), "-cp", f"{lib}/*", *map(str, sources)],
                 "compiling JavaClient and StreamsWordCount")
            _run(["jar", "cf", str(fresh / TESTS_JAR), "-C", str(fresh / "out"), "."], "packing the compiled classes")
            (fresh / ".sources").write_text(digest)
            shutil.rmtree(classes, ignore_errors=True)
            fresh.rename(classes)
    return os.pathsep.join((str(classes / TESTS_JAR), f"{lib}/*"))


TESTS_JAR = "llog-tests.jar"
#: The class data sharing archive of the suite's Java processes (JDK 17's dynamic
#: archive: the classes the first short run loaded, mapped by every later JVM), beside
#: the classes it was made with, so a recompile drops it.
CDS_ARCHIVE = CACHE / "classes" / "cds.jsa"


#: What Spark's Kafka connector needs beside pyspark's own jars (the rest it brings,
#: Scala and Hadoop, pyspark has already).
SPARK_KAFKA_JARS = ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-",
                    "commons-pool2-")


@functools.cache
def spark_kafka_jars() -> list[str]:
    """Spark's own Kafka source and sink (``spark-sql-kafka-0-10``) and its run-time
    dependencies, fetched with Maven into ``.cache/java/spark-kafka`` (once)."""
    if shutil.which("mvn") is None:
        pytest.fail("the Spark Kafka source test needs mvn (make test installs maven from Debian)")
    lib = CACHE / "spark-kafka"
    with exclusive("java"):
        _fetch(SOURCES / "spark-kafka" / "pom.xml", lib, "spark-sql-kafka-0-10", "-DincludeScope=runtime")
    return sorted(str(j) for j in lib.glob("*.jar") if j.name.startswith(SPARK_KAFKA_JARS))


def _fetch(pom: Path, lib: Path, what: str, *options: str) -> None:
    """``pom``'s dependencies copied into ``lib`` by Maven, unless ``lib`` holds them for
    this very ``pom`` already. The caller holds the "java" lock: one Maven at a time in
    the shared repository."""
    stamp = lib / ".pom"
    if stamp.exists() and stamp.read_bytes() == pom.read_bytes():
        return
    shutil.rmtree(lib, ignore_errors=True)
    _run(["mvn", "-q", "-B", f"-Dmaven.repo.local={CACHE / 'repo'}", "-f", str(pom), "dependency:copy-dependencies",
          *options, f"-DoutputDirectory={lib}"], f"fetching {what} with Maven")
    stamp.write_bytes(pom.read_bytes())


#: The suite's Java processes are short: the client compiler alone and the serial
#: collector start them on about two thirds of the CPU (the suite shares two cores).
#: The JVM's own warnings go to stderr, never into a tool's output the test reads.
JVM = ("java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-XX:-UsePerfData", "-Xlog:disable",
       "-Xlog:all=warning:stderr", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn")


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "none"


#: Spark's classes mapped from a class data sharing archive that :func:`spark_cds_archive`
#: makes once per checkout and pyspark version (tests/prepare.py, beside lint).
SPARK_CDS_ARCHIVE = CACHE / f"spark-{_version('pyspark')}.jsa"

#: A short job whose classes the archive holds: SQL, a shuffle, Parquet, a Python data source.
_SPARK_CDS_JOB = """
import sys
from pyspark.sql.datasource import DataSource, DataSourceReader
from llog.spark import local_session

class Rows(DataSource):
    @classmethod
    def name(cls): return "rows"
    def schema(self): return "n int"
    def reader(self, schema): return RowsReader()

class RowsReader(DataSourceReader):
    def read(self, partition): yield from ((i,) for i in range(10))

spark = local_session("llog-cds")
spark.dataSource.register(Rows)
df = spark.range(1000).selectExpr("id % 7 AS k", "id AS v")
df.groupBy("k").count().collect()
df.write.mode("overwrite").parquet(sys.argv[1])
spark.read.parquet(sys.argv[1]).count()
spark.read.format("rows").load().count()
spark.stop()
"""


def spark_driver_options(sharing: str | None = None) -> str:
    """The JVM options of the Spark drivers the suite starts: :data:`JVM`'s (a Spark
    test's CPU about 30 % less) and ``sharing``, by default, once made,
    :data:`SPARK_CDS_ARCHIVE` (a driver's start 14 → 8 CPU-seconds)."""
    if sharing is None:
        sharing = f"-XX:SharedArchiveFile={SPARK_CDS_ARCHIVE}" if SPARK_CDS_ARCHIVE.exists() else ""
    return " ".join(filter(None, (*JVM[1:6], sharing)))


def pyspark_submit_args(options: str | None = None) -> str:
    """``PYSPARK_SUBMIT_ARGS`` giving every Spark driver started from the environment
    (the documents' and examples' ``local_session()``) ``options``, by default
    :func:`spark_driver_options`."""
    return f"--driver-java-options '{options or spark_driver_options()}' pyspark-shell"


def spark_cds_archive() -> Path:
    """:data:`SPARK_CDS_ARCHIVE`, made by running a short local job with
    ``-XX:ArchiveClassesAtExit`` (once; ~17 CPU-seconds)."""
    if SPARK_CDS_ARCHIVE.exists():
        return SPARK_CDS_ARCHIVE
    dump = SPARK_CDS_ARCHIVE.with_name(f"spark-{os.getpid()}.jsa")
    options = spark_driver_options(sharing=f"-XX:ArchiveClassesAtExit={dump}")
    env = {**os.environ, "PYSPARK_SUBMIT_ARGS": pyspark_submit_args(options)}
    with tempfile.TemporaryDirectory() as tmp:
        _run([sys.executable, "-c", _SPARK_CDS_JOB, f"{tmp}/parquet"], "Spark's class data sharing archive",
             env=env)
    if not dump.exists():
        pytest.fail(f"Spark's JVM wrote no class data sharing archive to {dump}")
    dump.replace(SPARK_CDS_ARCHIVE)  # one rename: a JVM never maps a half-written archive
    return SPARK_CDS_ARCHIVE


#: Spark puts its own copies of pyspark and py4j (``pyspark/python/lib/*.zip``) first on
#: its Python workers' path, and what Python imports from a zip it compiles at every
#: start: ~0.7 CPU-seconds more per worker, and on a busy machine a streaming source's
#: runner then misses the 10 s Spark gives it to connect back (hard-coded in
#: ``PythonWorkerFactory``). This start-up hook in the venv drops them, so workers import
#: the same pyspark and py4j installed beside them, byte-compiled.
_WORKER_PATH_HOOK = (
    "import os, sys; sys.path[:] = [p for p in sys.path if not (p.endswith('.zip') and "
    "os.sep.join(('', 'pyspark', 'python', 'lib', '')) in p)]\n"
)


def spark_workers_import_installed_pyspark() -> Path:
    """Write :data:`_WORKER_PATH_HOOK` as a ``.pth`` file of this interpreter's
    site-packages (once; one rename, so no process reads half of it)."""
    pth = Path(sysconfig.get_paths()["purelib"]) / "llog_tests_spark_workers.pth"
    if not pth.exists() or pth.read_text() != _WORKER_PATH_HOOK:
        tmp = pth.with_name(f".{pth.name}.{os.getpid()}")
        tmp.write_text(_WORKER_PATH_HOOK)
        tmp.replace(pth)
    return pth


def run(*args: str, timeout: float = 120.0) -> list[str]:
    """``JavaClient args...``; its stdout lines. A failure fails the test with stderr."""
    return tool("JavaClient", *args, timeout=timeout).splitlines()


def start(*args: str, main_class: str = "JavaClient", **popen: Any) -> subprocess.Popen[str]:
    """``main_class args...`` (``JavaClient``, ``StreamsWordCount``, Connect's
    ``org.apache.kafka.connect.cli.ConnectDistributed``) in the background, its stdout a
    pipe of lines."""
    options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    cp = classpath()
    return subprocess.Popen([*JVM, *_shared_classes(), "-cp", cp, main_class, *args], text=True, **options)


def tool(main_class: str, *args: str, stdin: str | None = None, timeout: float = 120.0, check: bool = True) -> str:
    """Run ``main_class`` (a Kafka tool, ``org.apache.kafka.tools.TopicCommand`` for
    ``kafka-topics.sh``, say) with ``args``; its stdout, or with ``check=False`` its
    stdout and stderr together whatever its exit status."""
    cp = classpath()
    dump = None if CDS_ARCHIVE.exists() else CDS_ARCHIVE.with_name(f"cds-{os.getpid()}-{next(_dumps)}.jsa")
    sharing = (f"-XX:ArchiveClassesAtExit={dump}",) if dump is not None else _shared_classes()
    argv = [*JVM, *sharing, "-cp", cp, main_class, *args]
    try:
        if not check:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin)
            return proc.stdout + proc.stderr
        return _run(argv, f"{main_class} {' '.join(args)}", timeout, stdin)
    finally:
        if dump is not None and dump.exists():
            dump.replace(CDS_ARCHIVE)  # one rename: a JVM never maps a half-written archive


_dumps = itertools.count()


def _shared_classes() -> tuple[str, ...]:
    """The JVM option that maps :data:`CDS_ARCHIVE`, once a run made it."""
    return (f"-XX:SharedArchiveFile={CDS_ARCHIVE}",) if CDS_ARCHIVE.exists() else ()


def _run(argv: list[str], what: str, timeout: float = 600.0, stdin: str | None = None,
         env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=stdin, env=env)
    if proc.returncode != 0:
        pytest.fail(f"{what} failed ({proc.returncode}):\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}")
    return proc.stdout
