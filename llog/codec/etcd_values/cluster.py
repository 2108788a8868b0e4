"""``{root}/_maintenance/cluster-format``: the cluster's format version as the last
``llog upgrade finalize`` raised it (spec §3.1)."""

from __future__ import annotations

from dataclasses import dataclass

from llog.codec.etcd_values.maps import field_of, pack, unpack


@dataclass(frozen=True)
class FormatRecord:
    """The format ``version``, and the release and time (ms) of the finalize that wrote it."""

    version: int
    release: str
    at_ms: int

    def encode(self) -> bytes:
        return pack({"version": self.version, "release": self.release, "at_ms": self.at_ms})

    @classmethod
    def decode(cls, raw: bytes) -> FormatRecord:
        m = unpack(raw)
        return cls(field_of(m, "version", int), field_of(m, "release", str), field_of(m, "at_ms", int))
