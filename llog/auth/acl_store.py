"""ACLs in etcd (protocol/README.md, "Key layout": ``{root}/_acls/...``), one key per
ACL named by all its fields, so adding an ACL twice stores it once and removing one
is deleting a key. The value is the binding as JSON, read back by every broker's
:class:`~llog.auth.authorizer.Authorizer` through a watch of the prefix."""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterable, Sequence

from llog.auth.acls import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType, camel
from llog.connection import Connection
from llog.errors import CorruptMetadata
from llog.etcd.operations import KV, Delete, Put
from llog.state.keys import prefix_range_end

#: Operations in one etcd transaction (etcd's default ``--max-txn-ops`` is 128).
_OPS_PER_TXN = 100


def _key(conn: Connection, b: AclBinding) -> str:
    return conn.keys.acl(camel(b.resource_type), camel(b.pattern_type), b.resource_name, b.principal, b.host,
                         camel(b.operation), camel(b.permission))


def encode(b: AclBinding) -> bytes:
    return json.dumps({"resource_type": b.resource_type.name, "resource_name": b.resource_name,
                       "pattern_type": b.pattern_type.name, "principal": b.principal, "host": b.host,
                       "operation": b.operation.name, "permission": b.permission.name}, sort_keys=True).encode()


def decode(kv: KV) -> AclBinding:
    try:
        d = json.loads(kv.value)
        return AclBinding(ResourceType[d["resource_type"]], str(d["resource_name"]), PatternType[d["pattern_type"]],
                          str(d["principal"]), str(d["host"]), Operation[d["operation"]],
                          Permission[d["permission"]])
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptMetadata(kv.key, f"not an ACL: {exc}") from exc


class AclStore:
    """The ACLs of one deployment (its root prefix)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Store ``bindings`` (each checked first: none is stored if one is invalid)."""
        puts = {_key(self.conn, b.check()): encode(b) for b in bindings}  # one put per key: etcd refuses two
        self._apply([Put(key, value) for key, value in puts.items()])

    def list(self, selector: AclFilter | None = None) -> list[AclBinding]:
        """Every ACL ``selector`` matches (all without one), in key order."""
        return [b for _, b in self._matching(selector) if b is not None]

    def remove(self, selector: AclFilter) -> builtins.list[AclBinding]:
        """Delete every ACL ``selector`` matches (with one that matches everything,
        also keys that hold no ACL); the ACLs it deleted."""
        found = self._matching(selector.check())
        self._apply([Delete(key) for key, _ in found])
        return [b for _, b in found if b is not None]

    def read_all(self) -> tuple[builtins.list[AclBinding], builtins.list[str]]:
        """Every ACL, and the keys under the prefix that do not hold one."""
        bindings, corrupt = [], []
        for kv in self._scan():
            try:
                bindings.append(decode(kv))
            except CorruptMetadata:
                corrupt.append(kv.key)
        return bindings, corrupt

    def _scan(self) -> Iterable[KV]:
        prefix = self.conn.keys.acls_prefix()
        return self.conn.etcd.scan(prefix, prefix_range_end(prefix))

    def _matching(self, selector: AclFilter | None) -> builtins.list[tuple[str, AclBinding | None]]:
        """``(key, ACL)`` of every ACL ``selector`` matches; a key that holds no ACL
        (``None``) only for a selector that matches everything, so it can be removed."""
        everything = selector is None or selector == AclFilter()
        out: builtins.list[tuple[str, AclBinding | None]] = []
        for kv in self._scan():
            try:
                b = decode(kv)
            except CorruptMetadata:
                if everything:
                    out.append((kv.key, None))
                continue
            if selector is None or selector.matches(b):
                out.append((kv.key, b))
        return out

    def _apply(self, ops: Sequence[Put | Delete]) -> None:
        for i in range(0, len(ops), _OPS_PER_TXN):
            self.conn.etcd.txn([], list(ops[i:i + _OPS_PER_TXN]))
