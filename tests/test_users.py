"""Users and SCRAM: RFC 7677's test vector against the server side, the credentials in
etcd (never the password), ``llog users``, and real Kafka clients (confluent-kafka)
authenticating to a broker with ``LLOG_AUTH_USERS`` by SCRAM-SHA-256, SCRAM-SHA-512 and
PLAIN; a wrong password, an unknown user and a deleted one refused."""

from __future__ import annotations

import base64
import hashlib
import hmac
import subprocess
from typing import Any

import pytest

from llog.auth.scram import ScramCredential, ScramFailure, ScramServer, derive, password_matches
from llog.auth.users import Users
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput, UnknownUser, UserExists
from tests import forked_llog
from tests.broker_harness import conn_with_topic_t  # noqa: F401 (the fixture conn, with topic t)
from tests.conftest import config_env
from tests.test_kafka import kafka_broker

# RFC 7677, section 3: user "user", password "pencil".
_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
_NONCE = "rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
_CLIENT_FINAL = b"c=biws,r=" + _NONCE.encode() + b",p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def _rfc_exchange(cred: ScramCredential | None) -> bytes:
    server = ScramServer("SCRAM-SHA-256")
    assert server.first(_CLIENT_FIRST) == "user"
    server._nonce = _NONCE  # the RFC's server nonce, in place of a random one
    assert server.challenge(cred, "user") == f"r={_NONCE},s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096".encode() or cred is None
    return server.final(_CLIENT_FINAL)


def test_the_rfc_7677_exchange() -> None:
    cred = derive("SCRAM-SHA-256", "pencil", salt=_SALT)
    assert _rfc_exchange(cred) == _SERVER_FINAL
    assert password_matches(cred, "pencil") and not password_matches(cred, "pencil2")
    with pytest.raises(ScramFailure, match="wrong password"):
        _rfc_exchange(derive("SCRAM-SHA-256", "crayon", salt=_SALT))
    with pytest.raises(ScramFailure, match="unknown user"):
        _rfc_exchange(None)


def test_malformed_scram_messages_fail_the_exchange() -> None:
    for first in (b"p=tls-unique,,n=u,r=x", b"n,,r=x", b"n,,n=u", b"\xff", b"n,a=other,n=u,r=x", b"n,,n=a=b,r=x"):
        with pytest.raises(ScramFailure):
            ScramServer("SCRAM-SHA-512").first(first)
    server = ScramServer("SCRAM-SHA-256")
    server.first(_CLIENT_FIRST)
    server.challenge(derive("SCRAM-SHA-256", "pencil"), "user")
    for final in (b"c=biws,r=wrong,p=AAAA", b"c=biws,r=x", b"c=cD10bHMtdW5pcXVlLCw=,r=" + server._nonce.encode()
                  + b",p=AAAA", b"c=biws,r=" + server._nonce.encode() + b",p=!!"):
        with pytest.raises(ScramFailure):
            server.final(final)


def test_credentials_in_etcd_never_hold_the_password(conn: Connection) -> None:
    users = Users(conn)
    users.add("alice", "correct horse", iterations=4096)
    users.add("bob,=/é", "x", mechanisms=["SCRAM-SHA-512"])  # any printable name, percent-encoded in the key
    with pytest.raises(UserExists):
        users.add("alice", "again")
    stored = conn.etcd.get(conn.keys.user("alice"))
    assert stored is not None and b"correct horse" not in stored.value
    assert [(u.name, u.mechanisms) for u in users.list()] == [
        ("alice", {"SCRAM-SHA-256": 4096, "SCRAM-SHA-512": 4096}), ("bob,=/é", {"SCRAM-SHA-512": 4096})]
    cred = users.credentials("alice")["SCRAM-SHA-512"]
    assert password_matches(cred, "correct horse")
    salted = hashlib.pbkdf2_hmac("sha512", b"correct horse", cred.salt, cred.iterations)
    assert cred.server_key == hmac.digest(salted, b"Server Key", "sha512")
    users.set_password("alice", "battery staple")
    assert password_matches(users.credentials("alice")["SCRAM-SHA-256"], "battery staple")
    users.delete("alice")
    assert users.credentials("alice") == {}
    for bad in (lambda: users.delete("alice"), lambda: users.set_password("alice", "x")):
        with pytest.raises(UnknownUser):
            bad()
    for name in ("", "a\nb", "x" * 256):
        with pytest.raises(InvalidInput):
            users.add(name, "pw")
    with pytest.raises(InvalidInput):
        users.add("carol", "")


def _llog(config: LlogConfig, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return forked_llog.run([*args], config_env(config), input=stdin, timeout=60)


def _authenticates(bootstrap: str, mechanism: str, user: str, password: str) -> bool:
    """Whether a confluent-kafka client gets Metadata authenticating so (``False`` only
    for an authentication error, which its error callback must report)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    admin = AdminClient({"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT",
                         "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                         "error_cb": errors.append})
    try:
        admin.list_topics(timeout=5)
        return True
    except KafkaException:
        admin.poll(1)
        assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
        return False


def test_kafka_clients_authenticate_as_users(config: LlogConfig, conn: Connection) -> None:
    from confluent_kafka import Consumer, Producer

    added = _llog(config, "users", "add", "alice", "--password-stdin", stdin="wonderland\n")
    assert added.returncode == 0 and "added user alice" in added.stdout, added.stderr
    assert _llog(config, "users", "add", "bob", "--mechanism", "SCRAM-SHA-256", stdin="builder\n").returncode == 0
    again = _llog(config, "users", "add", "alice", stdin="x\n")
    assert again.returncode == 1 and "already exists" in again.stderr
    listed = _llog(config, "users", "list")
    assert listed.stdout.splitlines() == ["alice\tSCRAM-SHA-256(iterations=4096) SCRAM-SHA-512(iterations=4096)",
                                          "bob\tSCRAM-SHA-256(iterations=4096)"]

    with kafka_broker(config, LLOG_AUTH_USERS="true") as kb:
        sasl = {"bootstrap.servers": kb.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                "sasl.username": "alice", "sasl.password": "wonderland"}
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"):
            producer = Producer({**sasl, "sasl.mechanism": mechanism})
            producer.produce("t", f"as alice by {mechanism}".encode(), partition=0)
            assert producer.flush(30) == 0
        consumer = Consumer({**sasl, "sasl.mechanism": "SCRAM-SHA-512", "group.id": "alices",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["t"])
        got: list[bytes] = []
        while len(got) < 3:
            msg = consumer.poll(30)
            assert msg is not None and msg.error() is None, msg and msg.error()
            got.append(msg.value())
        consumer.close()
        assert got == [b"as alice by SCRAM-SHA-512", b"as alice by SCRAM-SHA-256", b"as alice by PLAIN"]

        assert _authenticates(kb.bootstrap, "SCRAM-SHA-256", "bob", "builder")
        assert not _authenticates(kb.bootstrap, "SCRAM-SHA-512", "bob", "builder")  # no SHA-512 credential
        assert not _authenticates(kb.bootstrap, "SCRAM-SHA-512", "alice", "looking-glass")
        assert not _authenticates(kb.bootstrap, "PLAIN", "alice", "looking-glass")
        assert not _authenticates(kb.bootstrap, "SCRAM-SHA-256", "mallory", "wonderland")
        assert _llog(config, "users", "passwd", "alice", stdin="looking-glass\n").returncode == 0
        assert _authenticates(kb.bootstrap, "SCRAM-SHA-512", "alice", "looking-glass")
        assert _llog(config, "users", "delete", "alice").returncode == 0  # the next authentication fails
        assert not _authenticates(kb.bootstrap, "SCRAM-SHA-512", "alice", "looking-glass")
        assert kb.http.request("GET", "/metrics")[0] == 401  # HTTP asks for a user too
        kb.http.headers = {"authorization": "Basic " + base64.b64encode(b"bob:builder").decode()}
        assert kb.http.metric("llog_kafka_authentications_total", mechanism="SCRAM-SHA-512", result="ok") >= 2
        assert kb.http.metric("llog_kafka_authentications_total", result="failed") >= 5
    gone = _llog(config, "users", "delete", "alice")
    assert gone.returncode == 1 and "unknown user 'alice'" in gone.stderr


def test_the_broker_token_still_opens_plain_beside_users(config: LlogConfig, conn: Connection) -> None:
    Users(conn).add("alice", "wonderland")
    with kafka_broker(config, LLOG_AUTH_USERS="true", LLOG_BROKER_TOKEN="s3cret") as kb:
        assert _authenticates(kb.bootstrap, "PLAIN", "anyone", "s3cret")
        assert _authenticates(kb.bootstrap, "SCRAM-SHA-256", "alice", "wonderland")
        assert not _authenticates(kb.bootstrap, "SCRAM-SHA-256", "alice", "s3cret")
