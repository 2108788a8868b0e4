"""Access control lists in Kafka's model (protocol/README.md, "Principals and ACLs"):
an ACL binds a resource pattern (a topic, group, the cluster or a transactional id,
named literally or by prefix) to an entry (a principal, a host, an operation, allow or
deny). The enums carry Kafka's wire codes, so CreateAcls/DescribeAcls/DeleteAcls and
``kafka-acls.sh`` speak them unchanged; :class:`AclFilter` is what those APIs and
``llog acls list/remove`` select with."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

from llog.errors import InvalidInput

#: The one name the cluster resource has (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: A literal resource name, principal or host that matches every one.
WILDCARD = "*"
#: The principal of a client that did not authenticate (an open listener).
ANONYMOUS = "User:ANONYMOUS"

E = TypeVar("E", bound=IntEnum)


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: Operations another allows, as in Kafka: any of Read, Write, Delete, Alter lets a
#: principal Describe; AlterConfigs lets it DescribeConfigs. All allows everything.
IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset({Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE,
                                   Operation.ALTER}),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS}),
}


def camel(value: IntEnum) -> str:
    """An enum value as Kafka names it (``TRANSACTIONAL_ID`` → ``TransactionalId``)."""
    return "".join(part.capitalize() for part in value.name.split("_"))


def parse_enum(kind: type[E], text: str) -> E:
    """``text`` as a member of ``kind``, by Kafka's name (``IdempotentWrite``), the
    enum's (``IDEMPOTENT_WRITE``) or any case and separator in between."""
    key = text.strip().replace("-", "").replace("_", "").lower()
    for member in kind:
        if member.name.replace("_", "").lower() == key:
            return member
    names = ", ".join(camel(m) for m in kind if m.name not in ("UNKNOWN", "ANY", "MATCH"))
    raise InvalidInput(f"unknown {kind.__name__.lower()} {text!r}: one of {names}")


def check_principal(principal: str) -> str:
    """``principal`` if it is ``Type:name`` (``User:alice``, ``User:*``)."""
    kind, sep, name = principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidInput(f"principal {principal!r} is not Type:name (User:alice, User:*)")
    return principal


@dataclass(frozen=True)
class AclBinding:
    """One ACL: who (``principal`` from ``host``) may or may not (``permission``) do
    ``operation`` on the resources ``pattern`` names."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def check(self) -> AclBinding:
        """This binding if it can be stored, else :class:`InvalidInput` saying why."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
            raise InvalidInput(f"an ACL names one resource type, not {camel(self.resource_type)}")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise InvalidInput(f"an ACL's pattern type is Literal or Prefixed, not {camel(self.pattern_type)}")
        if self.operation in (Operation.UNKNOWN, Operation.ANY):
            raise InvalidInput(f"an ACL names one operation, not {camel(self.operation)}")
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            raise InvalidInput(f"an ACL allows or denies, not {camel(self.permission)}")
        if not self.resource_name:
            raise InvalidInput("an ACL's resource name is not empty (* names every resource)")
        if self.resource_type == ResourceType.CLUSTER and (
            self.resource_name != CLUSTER_NAME or self.pattern_type != PatternType.LITERAL
        ):
            raise InvalidInput(f"the cluster resource is named {CLUSTER_NAME!r}, literally")
        if self.pattern_type == PatternType.PREFIXED and self.resource_name == WILDCARD:
            raise InvalidInput("a prefixed pattern of '*' means nothing: use the literal '*'")
        check_principal(self.principal)
        if not self.host:
            raise InvalidInput("an ACL's host is an address or * (any)")
        return self

    def describe(self) -> str:
        """As ``kafka-acls.sh`` lists it, one line."""
        return (f"{camel(self.permission)} {self.principal} {camel(self.operation)} on "
                f"{camel(self.resource_type)}:{camel(self.pattern_type)}:{self.resource_name} from {self.host}")


@dataclass(frozen=True)
class AclFilter:
    """Selects ACLs: ``None`` or ``ANY`` matches every value of a field. A ``MATCH``
    pattern type selects the patterns that apply to ``resource_name``: the literal name,
    the literal ``*`` and every prefix of it."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(b):
            return False
        return ((self.principal is None or b.principal == self.principal)
                and (self.host is None or b.host == self.host)
                and (self.operation == Operation.ANY or b.operation == self.operation)
                and (self.permission == Permission.ANY or b.permission == self.permission))

    def _pattern_matches(self, b: AclBinding) -> bool:
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is None:
                return True
            if b.pattern_type == PatternType.LITERAL:
                return b.resource_name in (self.resource_name, WILDCARD)
            return self.resource_name.startswith(b.resource_name)
        if self.pattern_type not in (PatternType.ANY, b.pattern_type):
            return False
        return self.resource_name is None or b.resource_name == self.resource_name

    def check(self) -> AclFilter:
        """This filter if it can select, else :class:`InvalidInput` saying why."""
        for value in (self.resource_type, self.pattern_type, self.operation, self.permission):
            if value == 0:
                raise InvalidInput(f"an ACL filter cannot select {type(value).__name__} Unknown")
        return self
