"""Below the brokers (issue 39): etcd over TLS with client certificates and etcd's own
users, and S3 server-side encryption, as ``LlogConfig`` settings. A real etcd started
here with ``--client-cert-auth`` and auth enabled (a non-root user with read-write on
every key), the suite's S3 server; the smoke path — topic, produce, consume, compact,
vacuum, and a broker's HTTP produce and consume — runs against it."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import boto3
import pytest

from compactor.compact import compact_once
from compactor.vacuum import vacuum
from llog.config import LlogConfig
from llog.connection import Connection
from llog.devstack import LocalServer, answers, etcd_binary
from llog.errors import CoordinationError
from llog.local_ports import free_port
from llog.reader import Reader
from llog.topic.admin import Topics
from llog.writer import Writer
from tests.broker_harness import broker_process


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _pki(d: Path) -> Pki:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"),
             "-days", "1", "-subj", "/CN=llog-test-ca")
    for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(d / f"{name}.key"), "-out",
                 str(d / f"{name}.csr"), "-subj", f"/CN=llog-{name}")
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-out", str(d / f"{name}.crt"), "-days", "1", "-extfile", str(d / f"{name}.ext"))
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


class _SecureEtcd(LocalServer):
    name = "etcd-tls"

    def __init__(self, workdir: Path, pki: Pki) -> None:
        port, peer, self.metrics_port = free_port(), free_port(), free_port()
        self.endpoint = f"127.0.0.1:{port}"
        super().__init__([
            etcd_binary(), "--name", "s", "--data-dir", str(workdir / "etcd-tls-data"),
            "--listen-client-urls", f"https://{self.endpoint}", "--advertise-client-urls", f"https://{self.endpoint}",
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"s=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{self.metrics_port}",
            "--cert-file", str(pki.server_cert), "--key-file", str(pki.server_key),
            "--client-cert-auth", "--trusted-ca-file", str(pki.ca), "--log-level", "warn",
            # Tokens expire after 2 idle seconds (300 by default): llog must ask again.
            "--auth-token-ttl", "2",
        ], port, workdir)

    def ready(self) -> bool:
        return answers(f"http://127.0.0.1:{self.metrics_port}/health")


@pytest.fixture(name="secure")
def secure_fixture(config: LlogConfig, tmp_path: Path) -> Iterator[LlogConfig]:
    """``config`` on an etcd that takes only TLS clients with a certificate of its CA,
    and only authenticated users: ``llog`` (read-write on every key, not root)."""
    pki = _pki(tmp_path)
    server = _SecureEtcd(tmp_path, pki)
    try:
        server.wait_ready()
        ctl = [str(Path(etcd_binary()).parent / "etcdctl"), f"--endpoints=https://{server.endpoint}",
               f"--cacert={pki.ca}", f"--cert={pki.client_cert}", f"--key={pki.client_key}"]
        for args in (("user", "add", "root", "--new-user-password=root-secret"),
                     ("user", "add", "llog", "--new-user-password=llog-secret"),
                     ("role", "add", "llog-rw"),
                     ("role", "grant-permission", "llog-rw", "readwrite", "--from-key", ""),
                     ("user", "grant-role", "llog", "llog-rw"),
                     ("auth", "enable")):
            subprocess.run([*ctl, *args], check=True, capture_output=True, timeout=30)
        yield replace(config, etcd_endpoints=(server.endpoint,), etcd_ca_file=str(pki.ca),
                      etcd_cert_file=str(pki.client_cert), etcd_key_file=str(pki.client_key), etcd_user="llog",
                      etcd_password="llog-secret", s3_sse="AES256", compact_min_age_ms=0, vacuum_grace_s=0)
    finally:
        server.stop()


def test_the_smoke_path_on_a_secured_etcd(secure: LlogConfig) -> None:
    with Connection(secure) as conn:
        Topics(conn).create("s", 2)
        with Writer(conn) as w:
            for i in range(20):
                w.append("s", i % 2, [f"v{i}".encode()])
        with Reader(conn) as r:
            assert [x.value for x in r.scan("s", 0)] == [f"v{i}".encode() for i in range(0, 20, 2)]
        for p in range(2):
            compact_once(conn, "s", p)
        report = vacuum(conn)
        with Reader(conn) as r:
            assert [x.value for x in r.scan("s", 1)] == [f"v{i}".encode() for i in range(1, 20, 2)]
        assert report.deleted, report  # the WAL blobs the compacted ones replaced
        bucket, _, prefix = secure.object_store.removeprefix("s3://").partition("/")
        s3 = boto3.client("s3", endpoint_url=secure.s3_endpoint_url, region_name="us-east-1")
        mine = f"{prefix.strip('/')}/{secure.root_prefix}/".lstrip("/")  # the bucket is shared by the suite
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=mine)["Contents"]]
        assert keys and {s3.head_object(Bucket=bucket, Key=k).get("ServerSideEncryption") for k in keys} == {"AES256"}

    settings = {f"LLOG_{name.upper()}": str(getattr(secure, name)) for name in (
        "etcd_ca_file", "etcd_cert_file", "etcd_key_file", "etcd_user", "etcd_password", "s3_sse")}
    with broker_process(secure, **settings) as b:
        status, body = b.post("/produce", {"topic_partitions": [{"topic": "s", "partition": 0, "records": ["eA=="]}]})
        assert status == 200, json.dumps(body)
        status, body = b.post("/consume", {"topic_partitions": [{"topic": "s", "partition": 0, "fetch_offset": 10}],
                                           "max_wait_ms": 0})
        assert status == 200 and len(body["topic_partitions"][0]["records"]) == 1, json.dumps(body)


def test_wrong_etcd_credentials_are_refused_clearly(secure: LlogConfig) -> None:
    with pytest.raises(CoordinationError, match="etcd refused user 'llog'"), Connection(
        replace(secure, etcd_password="guess")
    ) as conn:
        conn.etcd.get("anything")
    # No user: the certificate's name is no etcd user, and etcd's permission check refuses.
    with pytest.raises(CoordinationError), Connection(
        replace(secure, etcd_user=None, etcd_password=None, etcd_timeout_s=3)
    ) as anonymous:
        anonymous.etcd.put("llog/x", b"y")


def test_an_expired_etcd_token_is_renewed(secure: LlogConfig) -> None:
    with Connection(secure) as conn:
        conn.etcd.put("llog/renewed", b"1")
        time.sleep(3)  # past the token's time to live (--auth-token-ttl 2): nothing to wait on but time
        assert conn.etcd.put("llog/renewed", b"2") > 0  # a write refused as unauthenticated is sent again
        kv = conn.etcd.get("llog/renewed")
        assert kv is not None and kv.value == b"2"
        asked = conn.metrics.registry.get_sample_value("llog_etcd_ops_total", {"op": "authenticate"})
        assert asked == 2  # the first call, and again once etcd said the token had expired


def test_security_settings_are_checked() -> None:
    from llog.errors import ConfigError

    for bad, why in (({"etcd_cert_file": "c.pem"}, "go together"),
                     ({"etcd_cert_file": "c.pem", "etcd_key_file": "k.pem"}, "needs etcd_ca_file"),
                     ({"etcd_user": "llog"}, "go together"),
                     ({"s3_sse": "aes"}, "AES256 or aws:kms"),
                     ({"s3_sse": "AES256", "s3_sse_kms_key_id": "k"}, "needs s3_sse=aws:kms"),
                     ({"broker_tls_cert_file": "c.pem"}, "go together")):
        with pytest.raises(ConfigError, match=why):
            LlogConfig(**bad)  # type: ignore[arg-type]
    LlogConfig(s3_sse="aws:kms", s3_sse_kms_key_id="alias/llog", etcd_ca_file="ca.pem")


def test_watches_live_through_a_renewed_token(secure: LlogConfig) -> None:
    seen: dict[str, threading.Event] = {"a": threading.Event(), "b": threading.Event()}

    def saw(name: str) -> Callable[[], None]:
        return seen[name].set

    with Connection(secure) as conn:
        cancel_a = conn.etcd.watch("llog/w/a", saw("a"))
        conn.etcd.put("llog/w/a", b"1")
        assert seen["a"].wait(10)
        time.sleep(3)  # past the token's time to live
        conn.etcd.put("llog/w/x", b"renews the token")
        seen["a"].clear()
        cancel_b = conn.etcd.watch("llog/w/b", saw("b"))  # a new stream with the new token
        conn.etcd.put("llog/w/b", b"1")
        conn.etcd.put("llog/w/a", b"2")
        assert seen["b"].wait(10) and seen["a"].wait(10)  # the new watch, and the old one still
        cancel_a()
        cancel_b()
