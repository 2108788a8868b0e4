"""An etcd value is a msgpack map, its fields written in the spec's order so the bytes
are deterministic: packing and unpacking one, reading its fields, and the error a value
that does not decode raises (:class:`MetaFormatError`)."""

from __future__ import annotations

from typing import Any

import msgpack


class MetaFormatError(ValueError):
    """An etcd value does not decode to the expected schema."""


def pack(obj: dict[str, Any]) -> bytes:
    out: bytes = msgpack.packb(obj)
    return out


def unpack(raw: bytes) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(raw)
    except (ValueError, msgpack.UnpackException) as exc:
        raise MetaFormatError(f"not msgpack: {exc}") from exc
    if not isinstance(obj, dict):
        raise MetaFormatError(f"expected a map, got {type(obj).__name__}")
    return obj


def field_of(obj: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    try:
        v = obj[name]
    except KeyError:
        raise MetaFormatError(f"missing field {name!r}") from None
    if not isinstance(v, kind) or (kind is int and isinstance(v, bool)):
        raise MetaFormatError(f"field {name!r} has type {type(v).__name__}")
    return v


def optional_str(obj: dict[str, Any], name: str) -> str | None:
    v = obj.get(name)
    if v is not None and not isinstance(v, str):
        raise MetaFormatError(f"field {name!r} has type {type(v).__name__}")
    return v
