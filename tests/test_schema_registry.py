"""The schema registry (llog/registry/, spec §12) on a real broker, etcd and S3, driven
by confluent-kafka's own ``SchemaRegistryClient`` and its Avro, JSON Schema and
Protobuf serializers producing through the broker's Kafka listener: records round-trip;
compatibility levels are enforced on register; ids are global, dense and shared by
equal schemas, also under concurrent registration from two brokers' stores; bad
requests get Confluent's error codes and change nothing."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import IncompatibleSchema, InvalidSchema
from llog.registry import Compatibility, SchemaRegistry
from llog.topic.admin import Topics
from tests.test_kafka import KafkaBroker, kafka_broker

sr = pytest.importorskip("confluent_kafka.schema_registry")

USER_V1 = {"type": "record", "name": "User", "namespace": "t",
           "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": [*USER_V1["fields"], {"name": "city", "type": "string"}]}  # no default
ORDER_JSON = {"type": "object", "additionalProperties": False, "required": ["id"],
              "properties": {"id": {"type": "integer"}, "item": {"type": "string"}}}
PROTO = """syntax = "proto3";
package t;
import "google/protobuf/timestamp.proto";
message Reading { string sensor = 1; double value = 2; google.protobuf.Timestamp at = 3; }
"""


@pytest.fixture(name="kb1", scope="module")
def kb1_fixture(servers: Any) -> Iterator[KafkaBroker]:
    cfg = LlogConfig(etcd_endpoints=(servers.etcd_endpoint,), object_store="s3://llog-test",
                     s3_endpoint_url=servers.s3_endpoint, root_prefix=f"t-{uuid.uuid4().hex[:12]}")
    with kafka_broker(cfg, LLOG_AUTO_CREATE_TOPICS="true") as b:
        yield b


def _client(kb: KafkaBroker) -> Any:
    return sr.SchemaRegistryClient({"url": kb.http.url})


def _subject() -> str:
    return f"s{uuid.uuid4().hex[:8]}"


def _round_trip(kb: KafkaBroker, topic: str, serializer: Any, deserializer: Any, values: list[Any]) -> list[Any]:
    """Produce ``values`` through ``serializer`` and the Kafka listener; consume them
    back through ``deserializer``."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    p = Producer({"bootstrap.servers": kb.bootstrap, "linger.ms": 5})
    for v in values:
        p.produce(topic, value=serializer(v, SerializationContext(topic, MessageField.VALUE)))
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": kb.bootstrap, "group.id": f"g{uuid.uuid4().hex[:6]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[Any] = []
    try:
        while len(out) < len(values):
            msg = c.poll(10)
            assert msg is not None, f"the consumer stopped after {len(out)} records"
            assert msg.error() is None, msg.error()
            out.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
    finally:
        c.close()
    return out


def test_avro_records_round_trip_through_confluent_s_serializers(kb1: KafkaBroker, conn: Connection) -> None:
    from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

    client = _client(kb1)
    topic = f"users{uuid.uuid4().hex[:6]}"
    values = [{"name": f"user-{i}", "age": i % 90} for i in range(500)]
    got = _round_trip(kb1, topic, AvroSerializer(client, json.dumps(USER_V1)), AvroDeserializer(client), values)
    assert got == values
    latest = client.get_latest_version(f"{topic}-value")
    assert latest.version == 1 and json.loads(latest.schema.schema_str) == USER_V1
    # A compatible change (an optional field with a default) is a new version and id.
    v2 = client.register_schema(f"{topic}-value", sr.Schema(json.dumps(USER_V2), "AVRO"))
    assert v2 != latest.schema_id and client.get_versions(f"{topic}-value") == [1, 2]
    with pytest.raises(sr.SchemaRegistryError) as err:
        client.register_schema(f"{topic}-value", sr.Schema(json.dumps(USER_BAD), "AVRO"))
    assert (err.value.http_status_code, err.value.error_code) == (409, 409)
    assert client.get_versions(f"{topic}-value") == [1, 2]  # the refusal changed nothing


def test_json_schema_and_protobuf_records_round_trip(kb1: KafkaBroker, tmp_path: Path) -> None:
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

    client = _client(kb1)
    topic = f"orders{uuid.uuid4().hex[:6]}"
    orders = [{"id": i, "item": f"item-{i}"} for i in range(200)]
    got = _round_trip(kb1, topic, JSONSerializer(json.dumps(ORDER_JSON), client),
                      JSONDeserializer(json.dumps(ORDER_JSON)), orders)
    assert got == orders
    reading = _proto_class(tmp_path)
    topic = f"readings{uuid.uuid4().hex[:6]}"
    msgs = [reading(sensor=f"s{i}", value=i / 4) for i in range(200)]
    conf = {"use.deprecated.format": False}
    got = _round_trip(kb1, topic, ProtobufSerializer(reading, client, conf), ProtobufDeserializer(reading, conf), msgs)
    assert got == msgs
    registered = client.get_latest_version(f"{topic}-value")
    assert registered.schema.schema_type == "PROTOBUF"


def _proto_class(tmp_path: Path) -> Any:
    """The ``Reading`` message class, generated by protoc from :data:`PROTO`."""
    (tmp_path / "reading.proto").write_text(PROTO)
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{tmp_path}", f"--python_out={tmp_path}",
                    "reading.proto"], check=True, capture_output=True)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module("reading_pb2").Reading
    finally:
        sys.path.remove(str(tmp_path))


def test_compatibility_levels_are_enforced_for_each_schema_type(kb1: KafkaBroker) -> None:
    client = _client(kb1)
    s = _subject()
    client.register_schema(s, sr.Schema(json.dumps(USER_V1), "AVRO"))
    assert client.test_compatibility(s, sr.Schema(json.dumps(USER_V2), "AVRO")) is True
    assert client.test_compatibility(s, sr.Schema(json.dumps(USER_BAD), "AVRO")) is False
    assert client.set_compatibility(s, "NONE") == {"compatibility": "NONE"}
    client.register_schema(s, sr.Schema(json.dumps(USER_BAD), "AVRO"))  # NONE: anything goes
    assert client.get_compatibility(s) == "NONE"
    # JSON Schema: a closed content model may not lose a property (BACKWARD, the default).
    j = _subject()
    client.register_schema(j, sr.Schema(json.dumps(ORDER_JSON), "JSON"))
    more = {**ORDER_JSON, "properties": {**ORDER_JSON["properties"], "qty": {"type": "integer"}}}
    client.register_schema(j, sr.Schema(json.dumps(more), "JSON"))  # added to a closed writer: fine
    fewer = {**ORDER_JSON, "properties": {"id": {"type": "integer"}}}
    with pytest.raises(sr.SchemaRegistryError) as err:
        client.register_schema(j, sr.Schema(json.dumps(fewer), "JSON"))
    assert err.value.http_status_code == 409 and "removed from a closed content model" in err.value.error_message
    # Protobuf: a field number may not change to an incompatible type.
    p = _subject()
    client.register_schema(p, sr.Schema(PROTO, "PROTOBUF"))
    changed = PROTO.replace("string sensor = 1", "int64 sensor = 1")
    with pytest.raises(sr.SchemaRegistryError) as err:
        client.register_schema(p, sr.Schema(changed, "PROTOBUF"))
    assert err.value.http_status_code == 409 and "field 1" in err.value.error_message
    added = PROTO.replace("google.protobuf.Timestamp at = 3;", "google.protobuf.Timestamp at = 3; int32 unit = 4;")
    client.register_schema(p, sr.Schema(added, "PROTOBUF"))
    assert client.get_versions(p) == [1, 2]


def test_transitive_levels_check_every_version(conn: Connection) -> None:
    reg = SchemaRegistry(conn)
    s = _subject()
    reg.set_compatibility(Compatibility.BACKWARD_TRANSITIVE, s)
    f1 = {"name": "f1", "type": "int"}
    a = {"type": "record", "name": "R", "fields": [f1]}
    b = {"type": "record", "name": "R", "fields": [f1, {"name": "f2", "type": "int", "default": 0}]}
    c = {"type": "record", "name": "R", "fields": [{"name": "f2", "type": "int"}]}
    reg.register(s, json.dumps(a))
    reg.register(s, json.dumps(b))
    # A reader of c reads b's data (it has f2), not a's (no f2, and c gives no default):
    # only the transitive level looks as far back as a.
    with pytest.raises(IncompatibleSchema, match="BACKWARD"):
        reg.register(s, json.dumps(c))
    assert reg.versions(s) == [1, 2]
    reg.set_compatibility("BACKWARD", s)
    assert reg.register(s, json.dumps(c)).version == 3


def test_ids_are_global_dense_and_shared_under_concurrent_registration(config: LlogConfig) -> None:
    """Eight threads on two stores (two brokers) register 24 schemas, each under two
    subjects: every schema gets one id, ids are dense, every subject's versions dense."""
    names = [f"f{i}" for i in range(24)]
    subjects = [_subject(), _subject()]
    errors: list[BaseException] = []
    with Connection(config) as c1, Connection(config) as c2:
        regs = [SchemaRegistry(c1), SchemaRegistry(c2)]
        for s in subjects:
            regs[0].set_compatibility("NONE", s)
        base = regs[0].register(_subject(), '"string"').schema_id

        def work(k: int) -> None:
            try:
                for i in range(k, len(names), 4):
                    for s in subjects:
                        schema = {"type": "record", "name": "R", "fields": [{"name": names[i], "type": "long"}]}
                        regs[k % 2].register(s, json.dumps(schema))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(k % 4,)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        ids = [[regs[0].version(s, v).schema_id for v in regs[0].versions(s)] for s in subjects]
        assert [len(x) for x in ids] == [24, 24]  # each schema once per subject, however often sent
        assert sorted(ids[0]) == sorted(ids[1]) == list(range(base + 1, base + 25))


def test_bad_requests_get_confluent_s_error_codes_and_change_nothing(kb1: KafkaBroker) -> None:
    h = kb1.http
    s = _subject()
    assert h.request("GET", f"/subjects/{s}/versions")[1]["error_code"] == 40401
    status, body = h.request("POST", f"/subjects/{s}/versions", {"schema": "{not json"})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = h.request("POST", f"/subjects/{s}/versions", {"schema": '{"type": "nope"}'})
    assert (status, body["error_code"]) == (422, 42201)
    status, body = h.request("POST", f"/subjects/{s}/versions", {"schema": "x", "schemaType": "XML"})
    assert (status, body["error_code"]) == (422, 42201)
    assert h.request("GET", "/subjects")[1].count(s) == 0
    assert h.request("POST", f"/subjects/{s}/versions", {"schema": '"string"'})[0] == 200
    assert h.request("GET", f"/subjects/{s}/versions/7")[1]["error_code"] == 40402
    assert h.request("GET", f"/subjects/{s}/versions/0")[1]["error_code"] == 42202
    assert h.request("GET", f"/subjects/{s}/versions/abc")[1]["error_code"] == 42202
    assert h.request("GET", "/schemas/ids/99999999")[1]["error_code"] == 40403
    assert h.request("PUT", f"/config/{s}", {"compatibility": "SIDEWAYS"})[1]["error_code"] == 42203
    assert h.request("GET", f"/config/{s}")[1]["error_code"] == 40408
    assert h.request("GET", f"/config/{s}?defaultToGlobal=true")[1] == {"compatibilityLevel": "BACKWARD"}
    assert h.request("DELETE", f"/subjects/{s}?permanent=true")[1]["error_code"] == 40405
    assert h.request("DELETE", f"/subjects/{s}/versions/1?permanent=true")[1]["error_code"] == 40407
    assert h.request("DELETE", f"/subjects/{s}/anything/1")[0] == 404  # only .../versions/{v}
    assert h.request("GET", "/schemas/ids/%C2%B2")[1]["error_code"] == 40403  # "²": a digit, not an id
    assert h.request("PUT", f"/config/{s}", {})[1]["error_code"] == 42203  # no level: not NONE
    assert h.request("PUT", f"/config/{s}", {"compatibilityLevel": "full"}) == (200, {"compatibility": "FULL"})
    deep = {"schema": "[" * 100_000 + "]" * 100_000}
    assert h.request("POST", f"/subjects/{s}/versions", deep)[1]["error_code"] == 42201
    assert h.request("DELETE", f"/subjects/{s}") == (200, [1])
    assert h.request("DELETE", f"/subjects/{s}")[1]["error_code"] == 40404  # soft-deleted already
    assert h.request("GET", f"/subjects/{s}/versions")[1]["error_code"] == 40401
    assert h.request("GET", f"/subjects/{s}/versions?deleted=true") == (200, [1])
    assert h.request("DELETE", f"/subjects/{s}?permanent=true") == (200, [1])
    assert s not in h.request("GET", "/subjects?deleted=true")[1]
    assert h.request("GET", "/schemas/types")[1] == ["JSON", "PROTOBUF", "AVRO"]


def test_references_resolve_and_a_referenced_schema_cannot_be_deleted(kb1: KafkaBroker) -> None:
    client = _client(kb1)
    addr, person = _subject(), _subject()
    address = {"type": "record", "name": "Address", "namespace": "t", "fields": [{"name": "city", "type": "string"}]}
    client.register_schema(addr, sr.Schema(json.dumps(address), "AVRO"))
    p = {"type": "record", "name": "Person", "namespace": "t",
         "fields": [{"name": "name", "type": "string"}, {"name": "home", "type": "t.Address"}]}
    pid = client.register_schema(person, sr.Schema(json.dumps(p), "AVRO", [sr.SchemaReference("t.Address", addr, 1)]))
    got = client.get_schema(pid)
    assert [r.subject for r in got.references] == [addr]
    status, body = kb1.http.request("GET", f"/subjects/{addr}/versions/1/referencedby")
    assert (status, body) == (200, [pid])
    status, body = kb1.http.request("DELETE", f"/subjects/{addr}")
    assert (status, body["error_code"]) == (422, 42206)
    # Once no subject holds the referencing schema, the reference pins nothing.
    client.delete_subject(person)
    client.delete_subject(person, permanent=True)
    assert client.delete_subject(addr) == [1]
    # A check against a subject that does not exist yet: compatible, as Confluent answers.
    assert client.test_compatibility(_subject(), sr.Schema(json.dumps(address), "AVRO")) is True


def test_the_sdk_refuses_bad_schemas_with_typed_errors(conn: Connection) -> None:
    reg = SchemaRegistry(conn)
    with pytest.raises(InvalidSchema, match="not JSON"):
        reg.register(_subject(), "{")
    with pytest.raises(InvalidSchema, match="Expected"):
        reg.register(_subject(), 'syntax = "proto3"; message A { int32 x = 1 }', "PROTOBUF")
    with pytest.raises(InvalidSchema):
        reg.register(_subject(), json.dumps({"type": 12}), "JSON")
    assert Topics(conn).list() == []


def test_the_cli_registers_checks_shows_and_deletes(config: LlogConfig, tmp_path: Path) -> None:
    from tests.test_cli import llog_cli

    s = _subject()
    v1, v2, bad = tmp_path / "v1.avsc", tmp_path / "v2.avsc", tmp_path / "bad.avsc"
    v1.write_text(json.dumps(USER_V1))
    v2.write_text(json.dumps(USER_V2))
    bad.write_text(json.dumps(USER_BAD))
    assert "version 1: schema id" in llog_cli(config, "schemas", "register", s, "--file", str(v1)).stdout
    assert llog_cli(config, "schemas", "check", s, "--file", str(v2)).stdout.startswith("compatible (BACKWARD)")
    out = llog_cli(config, "schemas", "check", s, "--file", str(bad), ok=False)
    assert out.returncode == 1 and "city" in out.stdout
    out = llog_cli(config, "schemas", "register", s, "--file", str(bad), ok=False)
    assert out.returncode != 0 and "incompatible" in out.stderr
    assert s in llog_cli(config, "schemas", "list").stdout.split()
    shown = json.loads(llog_cli(config, "schemas", "show", s).stdout)
    assert (shown["version"], json.loads(shown["schema"])) == (1, USER_V1)
    assert "NONE" in llog_cli(config, "schemas", "compatibility", s, "--set", "none").stdout
    assert "soft-deleted" in llog_cli(config, "schemas", "delete", s).stdout
    assert s not in llog_cli(config, "schemas", "list").stdout.split()
