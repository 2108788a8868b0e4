"""The authorizer (``LLOG_AUTH_ACLS``): Kafka's decision over the ACLs in etcd, held
in memory by every broker and re-read on every change (an etcd watch of the prefix:
a change applies within a second on every broker).

A decision, as Kafka's ``StandardAuthorizer`` makes it: a super user may do
everything; otherwise the ACLs whose pattern names the resource (its literal name,
the literal ``*``, or a prefix of it), whose principal is the caller's or ``User:*``
and whose host is the caller's or ``*`` decide — any Deny of the operation (or of
All) refuses; else an Allow of it (or of All, or of an operation implying it:
:data:`~llog.auth.acls.IMPLIED_BY`) admits; else it is refused: **deny by default**.
Refusals are logged (principal, operation, resource, address) and counted in
``llog_authorization_denials_total``."""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from llog.auth.acl_store import AclStore
from llog.auth.acls import (
    CLUSTER_NAME,
    IMPLIED_BY,
    WILDCARD,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    camel,
    check_principal,
)
from llog.connection import Connection
from llog.errors import NotAuthorized
from llog.state.watched import ReloadOnChange

log = logging.getLogger(__name__)

#: Decisions remembered between ACL changes, before the memo starts over.
_MEMO_ENTRIES = 65_536


@dataclass(frozen=True)
class Caller:
    """Who asks: a principal (``User:alice``) from an address, on a listener."""

    principal: str
    host: str
    listener: str = "kafka"
    #: Authenticated by the broker token (``LLOG_BROKER_TOKEN``): a super user.
    token: bool = False


def client_host(address: str) -> str:
    """A client's address as ACLs name it: an IPv4 client of a dual-stack listener
    (``::ffff:10.0.0.1``) as its IPv4 address, as Kafka does."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    mapped = getattr(ip, "ipv4_mapped", None)
    return str(mapped) if mapped is not None else address


#: Attribute names as RFC 2253 (and Java's ``X500Principal``, Kafka's) writes them.
_RDN_NAMES = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU", "countryName": "C",
              "localityName": "L", "stateOrProvinceName": "ST", "streetAddress": "STREET",
              "domainComponent": "DC", "userId": "UID"}


def certificate_principal(subject: tuple[tuple[tuple[str, str], ...], ...]) -> str:
    """A client certificate's principal as Kafka's default ``ssl.principal.mapping.rules``
    names it: ``User:`` and the subject's distinguished name, most specific part first
    (``User:CN=alice,OU=payments,O=acme``). ``subject`` as :meth:`ssl.SSLSocket.getpeercert`
    gives it."""

    def escaped(value: str) -> str:
        out = "".join("\\" + c if c in ',+"\\<>;=' else c for c in value)
        return "\\" + out if out.startswith(("#", " ")) else out

    rdns = ["+".join(f"{_RDN_NAMES.get(k, k)}={escaped(v)}" for k, v in rdn) for rdn in reversed(subject)]
    return "User:" + ",".join(rdns)


def parse_super_users(text: str) -> frozenset[str]:
    """``LLOG_AUTH_SUPER_USERS``: principals separated by ``;``, as Kafka's ``super.users``
    (a certificate's principal holds commas: ``User:CN=ops,O=acme``)."""
    return frozenset(check_principal(p.strip()) for p in text.split(";") if p.strip())


class AclIndex:
    """Decisions over one set of ACLs (pure: no etcd)."""

    def __init__(self, bindings: Iterable[AclBinding]) -> None:
        #: By resource type: literal ACLs by name, prefixed ACLs by prefix.
        self._literal: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[AclBinding]]] = {}
        self.size = 0
        for b in bindings:
            by = self._literal if b.pattern_type == PatternType.LITERAL else self._prefixed
            by.setdefault(b.resource_type, {}).setdefault(b.resource_name, []).append(b)
            self.size += 1

    def _applying(self, rtype: ResourceType, name: str) -> list[AclBinding]:
        literal = self._literal.get(rtype, {})
        out = [*literal.get(name, ()), *(literal.get(WILDCARD, ()) if name != WILDCARD else ())]
        prefixed = self._prefixed.get(rtype)
        if prefixed:
            for i in range(1, len(name) + 1):
                out.extend(prefixed.get(name[:i], ()))
        return out

    def allows(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        acls = [b for b in self._applying(rtype, name)
                if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and b.operation in (op, Operation.ALL) for b in acls):
            return False
        admits = IMPLIED_BY.get(op, frozenset({op})) | {Operation.ALL}
        return any(b.permission == Permission.ALLOW and b.operation in admits for b in acls)

    def allows_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Whether some resource of ``rtype`` lets the caller ``op`` (Kafka's
        ``authorizeByResourceType``: an Allow not undone by a Deny covering it)."""
        mine = [b for by in (self._literal, self._prefixed) for acls in by.get(rtype, {}).values() for b in acls
                if b.principal in (principal, "User:*") and b.host in (host, WILDCARD)
                and b.operation in (op, Operation.ALL)]
        denies = [b for b in mine if b.permission == Permission.DENY]

        def denied(a: AclBinding) -> bool:
            for d in denies:
                if d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD:
                    return True
                if (d.pattern_type == PatternType.LITERAL and a.pattern_type == PatternType.LITERAL
                        and d.resource_name == a.resource_name):
                    return True
                if d.pattern_type == PatternType.PREFIXED and a.resource_name.startswith(d.resource_name):
                    return True
            return False

        return any(b.permission == Permission.ALLOW and not denied(b) for b in mine)


class _Decisions:
    """One set of ACLs and the decisions made by it: replaced whole at each reload, so a
    decision never pairs one set's index with another's memo."""

    def __init__(self, index: AclIndex) -> None:
        self.index = index
        self.memo: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}


class Authorizer:
    """One broker's authorizer over the deployment's ACLs, kept current by a watch
    (:class:`~llog.state.watched.ReloadOnChange`)."""

    def __init__(self, conn: Connection, super_users: frozenset[str]) -> None:
        self._conn = conn
        self._store = AclStore(conn)
        self.super_users = super_users
        self._decisions = _Decisions(AclIndex(()))
        self._watch = ReloadOnChange(
            conn.etcd, conn.keys.acls_prefix(), self.reload, name="ACLs",
            counted=lambda ok: conn.metrics.acl_reloads.labels("ok" if ok else "failed").inc(),
            held=lambda: f"deciding by the {self._decisions.index.size} held")

    def start(self) -> None:
        """Watch, then read (a change made in between is read again, never missed);
        :class:`LlogError` if the first read fails: a broker cannot authorize without."""
        self._watch.start()

    def close(self) -> None:
        self._watch.close()

    def reload(self) -> None:
        """Read every ACL and decide by them from now on (an entry that does not decode
        is left out, with a warning: it allows nothing)."""
        bindings, corrupt = self._store.read_all()
        for key in corrupt:
            log.warning("ACL key %s does not hold an ACL; ignored (llog acls remove --all deletes it)", key)
        self._decisions = _Decisions(AclIndex(bindings))
        self._conn.metrics.acls.set(len(bindings))
        log.debug("authorizer holds %d ACLs", len(bindings))

    def allows(self, caller: Caller, op: Operation, rtype: ResourceType, name: str, *, audit: bool = True) -> bool:
        """Whether ``caller`` may ``op`` the resource; a refusal is logged and counted
        unless ``audit`` is off (a listing that leaves out what the caller may not see)."""
        if caller.token or caller.principal in self.super_users:
            return True
        key = (caller.principal, caller.host, op, rtype, name)
        decisions = self._decisions
        memo = decisions.memo
        ok = memo.get(key)
        if ok is None:
            ok = decisions.index.allows(caller.principal, caller.host, op, rtype, name)
            if len(memo) >= _MEMO_ENTRIES:
                memo.clear()
            memo[key] = ok
        if not ok and audit:
            self._denied(caller, op, rtype, name)
        return ok

    def check(self, caller: Caller, op: Operation, rtype: ResourceType, name: str) -> None:
        """:class:`NotAuthorized` unless ``caller`` may ``op`` the resource."""
        if not self.allows(caller, op, rtype, name):
            raise NotAuthorized(caller.principal, camel(op), camel(rtype), name)

    def may_create(self, caller: Caller, topic: str, *, audit: bool = False) -> bool:
        """Create on the cluster or on ``topic``: what creating a topic takes (a refusal
        audited, if ``audit``, as one of Create on the topic)."""
        return self.allows(caller, Operation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME, audit=False) or self.allows(
            caller, Operation.CREATE, ResourceType.TOPIC, topic, audit=audit)

    def allows_any(self, caller: Caller, op: Operation, rtype: ResourceType) -> bool:
        if caller.token or caller.principal in self.super_users:
            return True
        return self._decisions.index.allows_any(caller.principal, caller.host, op, rtype)

    def _denied(self, caller: Caller, op: Operation, rtype: ResourceType, name: str) -> None:
        self._conn.metrics.authorization_denials.labels(camel(op), camel(rtype), caller.listener).inc()
        log.info("denied: %s from %s may not %s %s %r (%s)", caller.principal, caller.host, camel(op), camel(rtype),
                 name, caller.listener)
