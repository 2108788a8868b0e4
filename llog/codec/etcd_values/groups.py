"""Consumer groups' values under ``_groups/{group}/``: committed offsets, the epoch of
exclusive consumers, a Kafka group's generation and its members."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llog.codec.etcd_values.maps import MetaFormatError, field_of, pack, unpack


@dataclass(frozen=True)
class GroupOffset:
    """``_groups/{group}/offsets/{topic}/{partition}``: the group's committed offset —
    the next offset the group will consume."""

    offset: int
    epoch: int
    member: str
    updated_at_ms: int

    def encode(self) -> bytes:
        return pack(
            {
                "offset": self.offset,
                "epoch": self.epoch,
                "member": self.member,
                "updated_at_ms": self.updated_at_ms,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> GroupOffset:
        m = unpack(raw)
        return cls(
            offset=field_of(m, "offset", int),
            epoch=field_of(m, "epoch", int),
            member=field_of(m, "member", str),
            updated_at_ms=field_of(m, "updated_at_ms", int),
        )


@dataclass(frozen=True)
class GroupEpoch:
    """``_groups/{group}/epoch``: bumped by every exclusive consumer that starts; commits
    carrying an older epoch are rejected."""

    epoch: int
    owner: str
    started_at_ms: int

    def encode(self) -> bytes:
        return pack({"epoch": self.epoch, "owner": self.owner, "started_at_ms": self.started_at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> GroupEpoch:
        m = unpack(raw)
        return cls(
            epoch=field_of(m, "epoch", int),
            owner=field_of(m, "owner", str),
            started_at_ms=field_of(m, "started_at_ms", int),
        )


@dataclass(frozen=True)
class GroupMember:
    """One member of a Kafka consumer group's generation (:class:`GroupGeneration`)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    #: The protocols it joined with (name, metadata), and its assignment from the leader.
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes

    def to_map(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.group_instance_id,
                "client_id": self.client_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms,
                "protocols": [[n, md] for n, md in self.protocols], "assignment": self.assignment}

    @classmethod
    def from_map(cls, m: Any) -> GroupMember:
        if not isinstance(m, dict):
            raise MetaFormatError(f"a group member is a map, got {type(m).__name__}")
        instance = m.get("group_instance_id")
        if instance is not None and not isinstance(instance, str):
            raise MetaFormatError("field 'group_instance_id' must be a string or nil")
        protocols = field_of(m, "protocols", list)
        if not all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], bytes)
                   for p in protocols):
            raise MetaFormatError("field 'protocols' must be [name, metadata] pairs")
        return cls(field_of(m, "member_id", str), instance, field_of(m, "client_id", str),
                   field_of(m, "session_timeout_ms", int), field_of(m, "rebalance_timeout_ms", int),
                   tuple((p[0], p[1]) for p in protocols), field_of(m, "assignment", bytes))


@dataclass(frozen=True)
class GroupGeneration:
    """``_groups/{group}/kafka-generation``: a Kafka consumer group's generation as its
    coordinator completed it (the epoch it bumped, the protocol, the leader, every
    member with its assignment), so that another broker taking over coordination
    carries on with the same generation instead of making every member join again."""

    epoch: int
    protocol_type: str
    protocol: str
    leader: str
    members: tuple[GroupMember, ...]

    def encode(self) -> bytes:
        return pack({"epoch": self.epoch, "protocol_type": self.protocol_type, "protocol": self.protocol,
                      "leader": self.leader, "members": [m.to_map() for m in self.members]})

    @classmethod
    def decode(cls, raw: bytes) -> GroupGeneration:
        m = unpack(raw)
        return cls(field_of(m, "epoch", int), field_of(m, "protocol_type", str), field_of(m, "protocol", str),
                   field_of(m, "leader", str), tuple(GroupMember.from_map(x) for x in field_of(m, "members", list)))
