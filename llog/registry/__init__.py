"""A schema registry with Confluent's REST API, kept in etcd (spec §14): subjects,
versions, global ids, compatibility levels checked on register, for Avro, JSON Schema
and Protobuf. :class:`SchemaRegistry` is the store (the SDK's API); the broker serves
it over HTTP (``llog/broker/routes/schema_registry.py``), so confluent-kafka's
``SchemaRegistryClient`` and serializers work against a broker unchanged."""

from llog.registry.model import (
    AVRO,
    JSON_SCHEMA,
    PROTOBUF,
    Compatibility,
    Reference,
    RegisteredSchema,
    Schema,
    SubjectVersion,
)
from llog.registry.store import SchemaRegistry

__all__ = ["AVRO", "JSON_SCHEMA", "PROTOBUF", "Compatibility", "Reference", "RegisteredSchema", "Schema",
           "SchemaRegistry", "SubjectVersion"]
