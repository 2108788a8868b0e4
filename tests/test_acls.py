"""ACLs and the authorizer (issue 39): Kafka's decision rules on pure data, the store in
etcd and ``llog acls``, and real brokers with ``LLOG_AUTH_ACLS`` judged through real
clients — confluent-kafka (SCRAM-SHA-512 and PLAIN), its admin client's
CreateAcls/DescribeAcls/DeleteAcls — and the HTTP API with users' Basic credentials."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest

from llog.auth.acl_store import AclStore
from llog.auth.acls import (
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from llog.auth.authorizer import AclIndex, client_host, parse_super_users
from llog.auth.users import Users
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import InvalidInput
from llog.reader import Reader
from llog.topic.admin import Topics
from tests import forked_llog
from tests.broker_harness import broker_process, conn_with_topic_t  # noqa: F401 (the fixture conn, with topic t)
from tests.conftest import config_env
from tests.test_kafka import KafkaBroker, kafka_broker

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def _acl(rtype: ResourceType, name: str, op: Operation, principal: str = "User:alice", *, pattern: PatternType = LIT,
         permission: Permission = ALLOW, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


# -- the decision, on pure data ---------------------------------------------------

def test_no_acl_denies_and_an_allow_admits_only_what_it_names() -> None:
    index = AclIndex([_acl(T, "orders", Op.READ)])
    assert not AclIndex([]).allows("User:alice", "10.0.0.1", Op.READ, T, "orders")  # deny by default
    assert index.allows("User:alice", "10.0.0.1", Op.READ, T, "orders")
    assert index.allows("User:alice", "10.0.0.1", Op.DESCRIBE, T, "orders")  # Read implies Describe
    assert not index.allows("User:alice", "10.0.0.1", Op.WRITE, T, "orders")
    assert not index.allows("User:alice", "10.0.0.1", Op.READ, T, "orders2")
    assert not index.allows("User:bob", "10.0.0.1", Op.READ, T, "orders")
    assert not index.allows("User:alice", "10.0.0.1", Op.READ, G, "orders")  # another resource type


def test_wildcards_prefixes_hosts_and_deny_over_allow() -> None:
    index = AclIndex([
        _acl(T, "*", Op.DESCRIBE, "User:*"),
        _acl(T, "raw.", Op.WRITE, pattern=PRE),
        _acl(T, "raw.secret", Op.WRITE, permission=DENY),
        _acl(G, "etl-", Op.ALL, pattern=PRE, host="10.0.0.9"),
        _acl(C, "kafka-cluster", Op.ALTER_CONFIGS),
    ])
    assert index.allows("User:anyone", "h", Op.DESCRIBE, T, "whatever")
    assert not index.allows("User:anyone", "h", Op.READ, T, "whatever")
    assert index.allows("User:alice", "h", Op.WRITE, T, "raw.events")
    assert not index.allows("User:alice", "h", Op.WRITE, T, "raw.secret")  # a deny wins
    assert index.allows("User:alice", "h", Op.DESCRIBE, T, "raw.secret")  # it denies Write only
    assert not index.allows("User:alice", "h", Op.WRITE, T, "ra")
    assert index.allows("User:alice", "10.0.0.9", Op.READ, G, "etl-daily")  # All, from its host
    assert not index.allows("User:alice", "10.0.0.8", Op.READ, G, "etl-daily")
    assert index.allows("User:alice", "h", Op.DESCRIBE_CONFIGS, C, "kafka-cluster")  # implied by AlterConfigs
    assert not index.allows("User:alice", "h", Op.DESCRIBE, C, "kafka-cluster")


def test_allows_any_follows_kafkas_authorize_by_resource_type() -> None:
    assert AclIndex([_acl(T, "a", Op.WRITE)]).allows_any("User:alice", "h", Op.WRITE, T)
    assert not AclIndex([_acl(T, "a", Op.READ)]).allows_any("User:alice", "h", Op.WRITE, T)
    assert not AclIndex([_acl(T, "a", Op.WRITE), _acl(T, "*", Op.WRITE, permission=DENY)]).allows_any(
        "User:alice", "h", Op.WRITE, T)
    assert not AclIndex([_acl(T, "ab", Op.WRITE), _acl(T, "a", Op.WRITE, pattern=PRE, permission=DENY)]).allows_any(
        "User:alice", "h", Op.WRITE, T)
    assert AclIndex([_acl(T, "ab", Op.WRITE), _acl(T, "b", Op.WRITE, pattern=PRE, permission=DENY)]).allows_any(
        "User:alice", "h", Op.WRITE, T)
    # A literal deny cancels a literal allow of that name only, not a prefixed one.
    assert AclIndex([_acl(T, "x", Op.WRITE, pattern=PRE), _acl(T, "x", Op.WRITE, permission=DENY)]).allows_any(
        "User:alice", "h", Op.WRITE, T)
    assert client_host("::ffff:10.0.0.1") == "10.0.0.1" and client_host("::1") == "::1"
    assert client_host("unix") == "unix"


def test_filters_select_as_kafkas_do() -> None:
    lit, wild, pre = _acl(T, "orders", Op.READ), _acl(T, "*", Op.READ), _acl(T, "ord", Op.READ, pattern=PRE)
    other = _acl(G, "orders", Op.READ, "User:bob")
    everything = [lit, wild, pre, other]
    assert [b for b in everything if AclFilter().matches(b)] == everything
    assert [b for b in everything if AclFilter(T, "orders", PatternType.MATCH).matches(b)] == [lit, wild, pre]
    assert [b for b in everything if AclFilter(T, "orders", PatternType.ANY).matches(b)] == [lit]
    assert [b for b in everything if AclFilter(principal="User:bob").matches(b)] == [other]
    assert [b for b in everything if AclFilter(pattern_type=PRE).matches(b)] == [pre]


def test_invalid_acls_and_names_are_refused() -> None:
    for bad in (_acl(ResourceType.ANY, "a", Op.READ), _acl(T, "a", Op.ANY), _acl(T, "a", Op.READ, "alice"),
                _acl(T, "", Op.READ), _acl(C, "other", Op.ALTER), _acl(T, "*", Op.READ, pattern=PRE),
                _acl(T, "a", Op.READ, permission=Permission.ANY), _acl(T, "a", Op.READ, pattern=PatternType.MATCH)):
        with pytest.raises(InvalidInput):
            bad.check()
    assert parse_enum(Operation, "IdempotentWrite") == Op.IDEMPOTENT_WRITE
    assert parse_enum(Operation, "describe-configs") == Op.DESCRIBE_CONFIGS
    with pytest.raises(InvalidInput, match="unknown operation 'Steal'"):
        parse_enum(Operation, "Steal")
    assert parse_super_users("User:admin; User:CN=ops,O=acme") == {"User:admin", "User:CN=ops,O=acme"}
    with pytest.raises(InvalidInput):
        parse_super_users("admin")


# -- the store and the command line ------------------------------------------------

def _llog(config: LlogConfig, *args: str) -> subprocess.CompletedProcess[str]:
    return forked_llog.run([*args], config_env(config), timeout=60)


def test_the_store_and_llog_acls(config: LlogConfig, conn: Connection) -> None:
    store = AclStore(conn)
    store.add([_acl(T, "a", Op.READ), _acl(T, "a", Op.READ)])  # twice: one ACL
    assert store.list() == [_acl(T, "a", Op.READ)]
    with pytest.raises(InvalidInput):
        store.add([_acl(T, "b", Op.READ), _acl(T, "c", Op.READ, "nobody")])  # one invalid: none stored
    assert len(store.list()) == 1

    added = _llog(config, "acls", "add", "--principal", "User:bob", "--operation", "Read", "--operation", "Describe",
                  "--topic", "logs.", "--prefixed", "--group", "bobs")
    assert added.returncode == 0, added.stderr
    assert "added: Allow User:bob Read on Topic:Prefixed:logs. from *" in added.stdout
    listed = _llog(config, "acls", "list", "--principal", "User:bob", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 4
    assert _llog(config, "acls", "list", "--topic", "logs.", "--prefixed").stdout.count("\n") == 2
    refused = _llog(config, "acls", "add", "--principal", "bob", "--operation", "Read", "--topic", "x")
    assert refused.returncode == 1 and "not Type:name" in refused.stderr
    assert _llog(config, "acls", "add", "--principal", "User:bob", "--operation", "Steal", "--topic", "x"
                 ).returncode == 2
    assert _llog(config, "acls", "remove").returncode == 1  # nothing named: not everything
    removed = _llog(config, "acls", "remove", "--principal", "User:bob", "--group", "bobs", "--prefixed")
    assert removed.returncode == 0 and removed.stdout.count("removed:") == 2, removed.stdout
    assert {b.principal for b in store.list()} == {"User:alice", "User:bob"}
    conn.etcd.put(conn.keys.acls_prefix() + "garbage", b"not json")  # ignored, and removed with --all
    assert len(store.list()) == 3 and len(store.read_all()[1]) == 1
    assert _llog(config, "acls", "remove", "--all").stdout.count("removed:") == 3
    assert store.list() == [] and store.read_all() == ([], [])


# -- real brokers and clients -------------------------------------------------------

PASSWORDS = {"admin": "admin-secret", "alice": "wonderland", "bob": "builder"}


@contextmanager
def _secured(config: LlogConfig, conn: Connection, *, brokers: int = 1) -> Iterator[list[KafkaBroker]]:
    """Brokers with users, the authorizer on and ``User:admin`` a super user."""
    users = Users(conn)
    for name, password in PASSWORDS.items():
        if not users.credentials(name):
            users.add(name, password, iterations=4096)
    with ExitStack() as stack:
        yield [stack.enter_context(kafka_broker(config, LLOG_AUTH_USERS="true", LLOG_AUTH_ACLS="true",
                                                LLOG_AUTH_SUPER_USERS="User:admin"))
               for _ in range(brokers)]


def _client_conf(kb: KafkaBroker, user: str, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return {"bootstrap.servers": kb.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": PASSWORDS[user]}


def _produce(kb: KafkaBroker, user: str, topic: str, mechanism: str = "SCRAM-SHA-512",
             conf: dict[str, Any] | None = None) -> str | None:
    """Produce one record (as ``user``, or with the client settings ``conf``); the
    error's name, or None when it was stored."""
    from confluent_kafka import Producer

    errors: list[str] = []
    producer = Producer({**(conf or _client_conf(kb, user, mechanism)), "message.timeout.ms": 10_000, "retries": 0})
    producer.produce(topic, b"x", partition=0,
                     on_delivery=lambda err, _msg: errors.append(err.name()) if err is not None else None)
    producer.flush(30)
    return errors[0] if errors else None


def _topics(kb: KafkaBroker, user: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient(_client_conf(kb, user)).list_topics(timeout=10).topics)


def _read(kb: KafkaBroker, user: str, topic: str, group: str, count: int) -> list[bytes] | str:
    """``count`` values of ``topic`` read (committing) in ``group``, or the first error's name."""
    from confluent_kafka import Consumer

    consumer = Consumer({**_client_conf(kb, user), "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is None:
                continue
            if msg.error() is not None:
                return str(msg.error().name())
            got.append(msg.value())
        consumer.commit(asynchronous=False)
        return got
    except Exception as exc:  # the commit's refusal
        return str(exc.args[0].name() if exc.args and hasattr(exc.args[0], "name") else exc)
    finally:
        consumer.close()


def test_a_reader_of_one_topic_reads_it_and_nothing_else(config: LlogConfig, conn: Connection) -> None:
    topics = Topics(conn)
    topics.create("a", 1)
    topics.create("b", 1)
    AclStore(conn).add([_acl(T, "a", Op.READ), _acl(G, "readers", Op.READ)])
    with _secured(config, conn) as (kb,):
        kb.http.headers = _basic("admin")
        assert _produce(kb, "admin", "a") is None and _produce(kb, "admin", "b") is None  # a super user
        assert _read(kb, "alice", "a", "readers", 1) == [b"x"]
        assert _topics(kb, "alice") == {"a"}  # Metadata shows no b
        assert _produce(kb, "alice", "a", "PLAIN") == "TOPIC_AUTHORIZATION_FAILED"  # Read, not Write
        assert _produce(kb, "alice", "b") == "TOPIC_AUTHORIZATION_FAILED"
        assert _read(kb, "alice", "b", "readers", 1) == "TOPIC_AUTHORIZATION_FAILED"
        assert _read(kb, "alice", "a", "others", 1) == "GROUP_AUTHORIZATION_FAILED"
        assert _topics(kb, "bob") == set() and _produce(kb, "bob", "a") == "TOPIC_AUTHORIZATION_FAILED"
        # Alice's Write of a reached Produce; the others stopped at Metadata, denied Describe.
        assert kb.http.metric("llog_authorization_denials_total", operation="Write", resource_type="Topic",
                              listener="kafka") == 1
        assert kb.http.metric("llog_authorization_denials_total", operation="Describe", resource_type="Topic",
                              listener="kafka") >= 2
        assert kb.http.metric("llog_acls") == 2


def test_acls_change_through_the_admin_api_and_apply_on_a_second_broker(config: LlogConfig,
                                                                       conn: Connection) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AclBinding as KAclBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        ResourceType as KResourceType,
    )
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import ClusterAuthorizationFailedError

    Topics(conn).create("a", 1)
    with _secured(config, conn, brokers=2) as (first, second):
        admin = AdminClient(_client_conf(first, "admin"))
        write_a = KAclBinding(KResourceType.TOPIC, "a", ResourcePatternType.LITERAL, "User:alice", "*",
                              AclOperation.WRITE, AclPermissionType.ALLOW)
        for fut in admin.create_acls([write_a]).values():
            fut.result(10)
        every = AclBindingFilter(KResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                                 AclPermissionType.ANY)
        described = admin.describe_acls(every).result(10)
        assert [(b.name, b.principal, b.operation) for b in described] == [("a", "User:alice", AclOperation.WRITE)]
        assert _eventually(lambda: _produce(second, "alice", "a") is None)

        # Alice may not manage ACLs: CLUSTER_AUTHORIZATION_FAILED (librdkafka drops
        # DescribeAcls' top-level error: kafka-python shows it).
        alices = AdminClient(_client_conf(first, "alice"))
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            next(iter(alices.create_acls([write_a]).values())).result(10)
        with pytest.raises(ClusterAuthorizationFailedError):
            KafkaAdminClient(bootstrap_servers=first.bootstrap, security_protocol="SASL_PLAINTEXT",
                             sasl_mechanism="PLAIN", sasl_plain_username="alice",
                             sasl_plain_password=PASSWORDS["alice"]).describe_acls(
                ACLFilter(None, None, ACLOperation.ANY, ACLPermissionType.ANY,
                          ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY)))

        removed_at = time.monotonic()
        deleted = next(iter(admin.delete_acls([every]).values())).result(10)
        assert [b.name for b in deleted] == ["a"]
        assert _eventually(lambda: _produce(second, "alice", "a") == "TOPIC_AUTHORIZATION_FAILED")
        print(f"an ACL's removal applied on the second broker after {time.monotonic() - removed_at:.2f} s")


def _eventually(condition: Callable[[], bool], timeout_s: float = 15.0) -> bool:
    """Whether ``condition`` holds within ``timeout_s`` (tried again as soon as it returns)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False


def test_wrong_passwords_and_nobody_but_super_users_without_acls(config: LlogConfig, conn: Connection) -> None:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    with _secured(config, conn) as (kb,):
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):  # kafka-python: it gives up, and closes
            with pytest.raises(KafkaError):  # it retries the refused login until its bootstrap timeout
                KafkaAdminClient(bootstrap_servers=kb.bootstrap, security_protocol="SASL_PLAINTEXT",
                                 sasl_mechanism=mechanism, sasl_plain_username="alice",
                                 sasl_plain_password="guess", request_timeout_ms=5_000, bootstrap_timeout_ms=3_000)
        kb.http.headers = _basic("admin")
        for mechanism in ("SCRAM-SHA-512", "PLAIN"):
            assert kb.http.metric("llog_kafka_authentications_total", mechanism=mechanism, result="failed") >= 1
        assert _topics(kb, "alice") == set() and _produce(kb, "alice", "t") == "TOPIC_AUTHORIZATION_FAILED"
        assert _read(kb, "bob", "t", "g", 1) in ("TOPIC_AUTHORIZATION_FAILED", "GROUP_AUTHORIZATION_FAILED")
        assert _topics(kb, "admin") >= {"t"} and _produce(kb, "admin", "t") is None


# -- HTTP -----------------------------------------------------------------------------

def _basic(user: str, password: str | None = None) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password or PASSWORDS[user]}".encode()).decode()
    return {"authorization": f"Basic {token}"}


def _http(url: str, path: str, body: dict[str, Any] | None = None, user: str | None = None,
          password: str | None = None) -> tuple[int, Any]:
    headers = {"content-type": "application/json", **({} if user is None else _basic(user, password))}
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers=headers, method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_http_users_and_acls(config: LlogConfig, conn: Connection) -> None:
    Topics(conn).create("a", 1)
    AclStore(conn).add([_acl(T, "a", Op.READ), _acl(T, "a", Op.WRITE, "User:bob"), _acl(G, "readers", Op.READ)])
    produce = {"topic_partitions": [{"topic": "a", "partition": 0, "records": [{"value": "aGk="}]}]}
    with _secured(config, conn) as (kb,):
        url = kb.http.url
        assert _http(url, "/produce", produce)[0] == 401  # no credentials
        assert _http(url, "/produce", produce, "bob", "wrong")[0] == 401
        status, body = _http(url, "/produce", produce, "bob")
        assert status == 200, body
        status, body = _http(url, "/produce", produce, "alice")
        assert status == 403 and body["results"][0]["error_type"] == "NotAuthorized", body
        assert "User:alice may not Write Topic 'a'" in body["results"][0]["error"]
        consume = {"topic_partitions": [{"topic": "a", "partition": 0, "fetch_offset": 0}], "max_wait_ms": 0}
        status, body = _http(url, "/consume", consume, "alice")
        assert status == 200 and len(body["topic_partitions"][0]["records"]) == 1, body
        assert _http(url, "/consume", consume, "bob")[0] == 403  # Write, not Read
        commit = {"group": "readers", "offsets": [{"topic": "a", "partition": 0, "offset": 1}]}
        assert _http(url, "/commit", commit, "alice")[0] == 200
        assert _http(url, "/commit", {**commit, "group": "others"}, "alice")[0] == 403
        assert _http(url, "/offsets?group=readers", None, "alice")[0] == 200  # Read implies Describe
        assert _http(url, "/offsets?group=readers", None, "bob")[0] == 403
        assert _http(url, "/health")[0] == 200  # public
        kb.http.headers = _basic("admin")
        assert kb.http.metric("llog_http_authentications_total", result="failed") >= 1
        assert kb.http.metric("llog_http_authentications_total", result="ok") >= 3  # bob, alice, admin
        assert kb.http.metric("llog_http_authentications_total", result="refused") >= 2
        assert kb.http.metric("llog_authorization_denials_total", listener="http") >= 3


def test_the_schema_registry_with_users_and_acls(config: LlogConfig, conn: Connection) -> None:
    """Reading schemas needs a user; registering under ``{topic}-value`` needs Write on
    the topic, under another subject Alter on the cluster; levels, AlterConfigs."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, SchemaRegistryError

    AclStore(conn).add([_acl(T, "a", Op.WRITE)])
    schema = Schema('{"type": "string"}', "AVRO")
    with _secured(config, conn) as (kb,):
        def client(user: str) -> SchemaRegistryClient:
            return SchemaRegistryClient({"url": kb.http.url, "basic.auth.user.info": f"{user}:{PASSWORDS[user]}"})

        def refused(fn: Callable[[], object]) -> tuple[int, int]:
            with pytest.raises(SchemaRegistryError) as err:
                fn()
            return err.value.http_status_code, err.value.error_code

        assert client("alice").register_schema("a-value", schema) >= 1
        assert refused(lambda: client("bob").register_schema("a-value", schema)) == (403, 40301)
        assert refused(lambda: client("alice").register_schema("com.example.Click", schema)) == (403, 40301)
        assert client("bob").get_latest_version("a-value").version == 1  # reading: any user
        assert _http(kb.http.url, "/subjects")[0] == 401  # but a user
        assert refused(lambda: client("alice").set_compatibility("a-value", "NONE")) == (403, 40301)
        assert client("admin").set_compatibility("a-value", "NONE") == {"compatibility": "NONE"}


# -- Kafka's own tools and the Java client ----------------------------------------------

ACL_COMMAND = "org.apache.kafka.tools.AclCommand"
CONFIG_COMMAND = "kafka.admin.ConfigCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"


def _java_config(tmp_path: Path, user: str, mechanism: str = "SCRAM-SHA-512") -> str:
    module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
    path = tmp_path / f"{user}-{mechanism}.properties"
    path.write_text(f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism={mechanism}\n"
                    f"sasl.jaas.config=org.apache.kafka.common.security.{module} required "
                    f'username="{user}" password="{PASSWORDS[user]}";\n')
    return str(path)


def test_kafka_acls_kafka_configs_and_the_java_client(config: LlogConfig, conn: Connection, tmp_path: Path) -> None:
    from tests import java_client

    Topics(conn).create("a", 1)
    Topics(conn).create("b", 1)
    with _secured(config, conn) as (kb,):
        admin = ["--bootstrap-server", kb.bootstrap, "--command-config", _java_config(tmp_path, "admin")]
        java_client.tool(ACL_COMMAND, *admin, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                         "--topic", "a", "--group", "readers")
        listed = java_client.tool(ACL_COMMAND, *admin, "--list")
        assert "User:alice" in listed and "name=a" in listed and "name=readers" in listed, listed
        assert {(b.resource_type, b.resource_name, b.operation) for b in AclStore(conn).list()} == {
            (T, "a", Op.READ), (G, "readers", Op.READ)}

        # kafka-configs.sh makes a user (AlterUserScramCredentials), and shows it.
        java_client.tool(CONFIG_COMMAND, *admin, "--alter", "--entity-type", "users", "--entity-name", "carol",
                         "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carols-secret]")
        PASSWORDS["carol"] = "carols-secret"
        described = java_client.tool(CONFIG_COMMAND, *admin, "--describe", "--entity-type", "users",
                                     "--entity-name", "carol")
        assert "SCRAM-SHA-512=iterations=8192" in described, described
        assert _topics(kb, "carol") == set()  # she authenticates, and may see nothing

        _produce(kb, "admin", "a")
        alice = _java_config(tmp_path, "alice", "PLAIN")
        read = java_client.tool(CONSOLE_CONSUMER, "--bootstrap-server", kb.bootstrap, "--consumer.config", alice,
                                "--topic", "a", "--group", "readers", "--from-beginning", "--max-messages", "1",
                                "--timeout-ms", "30000")
        assert read.split() == ["x"]
        # An idempotent producer (the default) asks InitProducerId first: without Write on
        # any topic or IdempotentWrite on the cluster, Kafka's answer is a cluster refusal.
        refused = java_client.tool(CONSOLE_PRODUCER, "--bootstrap-server", kb.bootstrap, "--producer.config", alice,
                                   "--topic", "a", "--sync", stdin="nope\n", check=False)
        assert "ClusterAuthorizationException" in refused, refused
        refused = java_client.tool(CONSOLE_PRODUCER, "--bootstrap-server", kb.bootstrap, "--producer.config", alice,
                                   "--producer-property", "enable.idempotence=false", "--topic", "a", "--sync",
                                   stdin="nope\n", check=False)
        assert "TopicAuthorizationException" in refused, refused
        denied = java_client.tool(CONSOLE_CONSUMER, "--bootstrap-server", kb.bootstrap, "--consumer.config", alice,
                                  "--topic", "b", "--group", "readers", "--from-beginning", "--max-messages", "1",
                                  "--timeout-ms", "10000", check=False)
        assert "TopicAuthorizationException" in denied or "Not authorized to access topics" in denied, denied

        java_client.tool(ACL_COMMAND, *admin, "--remove", "--allow-principal", "User:alice", "--operation", "Read",
                         "--topic", "a", "--force")
        assert [b.resource_type for b in AclStore(conn).list()] == [G]
        java_client.tool(CONFIG_COMMAND, *admin, "--alter", "--entity-type", "users", "--entity-name", "carol",
                         "--delete-config", "SCRAM-SHA-512")
        assert Users(conn).credentials("carol") == {}


def test_scram_user_apis_without_the_authorizer_are_for_the_token_only(config: LlogConfig, conn: Connection,
                                                                       tmp_path: Path) -> None:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    from tests import java_client

    Users(conn).add("alice", PASSWORDS["alice"], iterations=4096)
    with kafka_broker(config, LLOG_AUTH_USERS="true", LLOG_BROKER_TOKEN="tok") as kb:
        # kafka-configs.sh (librdkafka 2.16 aborts on this refusal, a request-level error).
        refused = java_client.tool(CONFIG_COMMAND, "--bootstrap-server", kb.bootstrap, "--command-config",
                                   _java_config(tmp_path, "alice"), "--describe", "--entity-type", "users",
                                   "--entity-name", "alice", check=False)
        assert "ClusterAuthorizationException" in refused, refused
        alice = AdminClient(_client_conf(kb, "alice"))
        sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
        with pytest.raises(KafkaException, match="CLUSTER_AUTHORIZATION_FAILED"):
            alice.alter_user_scram_credentials([UserScramCredentialUpsertion("alice", sha512, b"mine now")])[
                "alice"].result(10)

        token = AdminClient({"bootstrap.servers": kb.bootstrap, "security.protocol": "SASL_PLAINTEXT",
                             "sasl.mechanism": "PLAIN", "sasl.username": "ops", "sasl.password": "tok"})
        described = token.describe_user_scram_credentials(["alice"])["alice"].result(10)
        assert [(c.mechanism, c.iterations) for c in described.scram_credential_infos] == [
            (ScramMechanism.SCRAM_SHA_256, 4096), (ScramMechanism.SCRAM_SHA_512, 4096)]
        # A user's changes apply together or not at all: the deletion of a credential
        # dave does not have fails the upsertion beside it.
        both = token.alter_user_scram_credentials([
            UserScramCredentialUpsertion("dave", sha512, b"dave's"),
            UserScramCredentialDeletion("dave", ScramMechanism.SCRAM_SHA_256)])
        with pytest.raises(KafkaException, match="RESOURCE_NOT_FOUND"):
            both["dave"].result(10)
        assert Users(conn).credentials("dave") == {}
        token.alter_user_scram_credentials([UserScramCredentialUpsertion("dave", sha512, b"dave's")])[
            "dave"].result(10)
        assert list(Users(conn).credentials("dave")) == ["SCRAM-SHA-512"]
        assert Users(conn).verify("dave", "dave's")


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    cert, key = tmp_path / "http.crt", tmp_path / "http.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


def test_http_over_tls_with_users_acls_and_workers(config: LlogConfig, conn: Connection, tmp_path: Path) -> None:
    import ssl

    cert, key = _certificate(tmp_path)
    Topics(conn).create("a", 1)
    AclStore(conn).add([_acl(T, "a", Op.WRITE, "User:bob")])
    Users(conn).add("bob", PASSWORDS["bob"], iterations=4096)
    tls = {"LLOG_BROKER_TLS_CERT_FILE": str(cert), "LLOG_BROKER_TLS_KEY_FILE": str(key)}
    with broker_process(config, "--workers", "2", LLOG_AUTH_USERS="true", LLOG_AUTH_ACLS="true", **tls) as b:
        assert b.url.startswith("https://127.0.0.1:"), b.url
        b.tls = ssl.create_default_context(cafile=str(cert))  # the client checks the broker's certificate
        produce = {"topic_partitions": [{"topic": "a", "partition": 0, "records": ["eA=="]}]}
        assert b.post("/produce", produce)[0] == 401
        b.headers = _basic("bob")
        status, body = b.post("/produce", produce)
        assert status == 200, body
        # Both workers' metrics, the other one's fetched over HTTPS with the workers' secret.
        assert b.metric("llog_broker_worker_up") == 2
        with pytest.raises(ssl.SSLError):  # a client that does not trust the certificate
            b.tls = ssl.create_default_context()
            b.request("GET", "/health")
        plain = urllib.request.Request(b.url.replace("https://", "http://") + "/health")
        with pytest.raises((urllib.error.URLError, ConnectionError)):
            urllib.request.urlopen(plain, timeout=10)

    refused = subprocess.run([sys.executable, "-m", "llog", "broker", "--port", "0"], capture_output=True, text=True,
                             env={**config_env(config), "LLOG_BROKER_TLS_CERT_FILE": str(key),
                                  "LLOG_BROKER_TLS_KEY_FILE": str(key)}, timeout=60)
    assert refused.returncode != 0 and "broker TLS certificate" in refused.stderr, refused.stderr


def test_mutual_tls_names_the_principal(config: LlogConfig, conn: Connection, tmp_path: Path) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    from tests.test_etcd_security import _pki

    pki = _pki(tmp_path)  # the client certificate's subject: CN=llog-client
    Topics(conn).create("a", 1)
    Topics(conn).create("b", 1)
    AclStore(conn).add([_acl(T, "a", Op.WRITE, "User:CN=llog-client")])
    tls = {"LLOG_KAFKA_TLS_CERT_FILE": str(pki.server_cert), "LLOG_KAFKA_TLS_KEY_FILE": str(pki.server_key),
           "LLOG_KAFKA_TLS_CLIENT_CA_FILE": str(pki.ca)}
    with kafka_broker(config, LLOG_AUTH_ACLS="true", **tls) as kb:
        conf = {"bootstrap.servers": kb.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
                "ssl.certificate.location": str(pki.client_cert), "ssl.key.location": str(pki.client_key)}
        assert _produce(kb, "", "a", conf=conf) is None
        assert _produce(kb, "", "b", conf=conf) == "TOPIC_AUTHORIZATION_FAILED"
        with pytest.raises(KafkaError):  # no client certificate: no connection
            KafkaProducer(bootstrap_servers=kb.bootstrap, security_protocol="SSL", ssl_cafile=str(pki.ca),
                          max_block_ms=5000, api_version=(2, 6)).send("a", b"no", partition=0).get(
                timeout=10)
    with Reader(conn) as r:
        assert [x.value for x in r.scan("a", 0)] == [b"x"]
