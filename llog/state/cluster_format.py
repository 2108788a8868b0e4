"""The cluster's format version (protocol/README.md §3.1): which form of the persisted
structures every process may write, raised only by the operator (``llog upgrade
finalize``), never lowered.

A release reads every format up to its own :data:`FORMAT_VERSION` and, until the
cluster's format is raised, writes the cluster's: a change that an older process would
misread is written only once every process can read it. A process whose release reads
less than the cluster's format refuses to start (:class:`FormatTooNew`), naming both.
The key is absent until the first finalize: such a cluster is at format 1, what 0.2.0
wrote.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass

import msgpack

from llog.codec.etcd_values.cluster import FormatRecord
from llog.codec.etcd_values.maps import MetaFormatError
from llog.config import LlogConfig
from llog.connection import Connection
from llog.errors import CasConflict, CoordinationError, CorruptMetadata, LlogError
from llog.etcd.auth import EtcdSecurity
from llog.etcd.client import Etcd
from llog.etcd.operations import KV, Put, absent, mod_revision_is
from llog.state.keys import KeyLayout, prefix_range_end
from llog.version import __version__

log = logging.getLogger(__name__)

#: The highest format this release reads and can write.
FORMAT_VERSION = 1
#: Each format and the release that introduced it (what an operator upgrades to).
FORMATS: dict[int, str] = {1: "0.2.0"}
#: A cluster that never finalized, and a process that does not name the formats it
#: reads (0.2.0), are at this one.
BASE_FORMAT = 1
#: How a process that does not name its release is named (it is older than 0.2.0).
UNNAMED_VERSION = "before 0.2.0"


@dataclass(frozen=True)
class ClusterFormat:
    """The cluster's format: ``version``, and the release and time of the finalize that
    raised it (``""`` and 0 for a cluster never finalized)."""

    version: int
    release: str = ""
    at_ms: int = 0
    #: The key's mod_revision (0: absent), for the raise's compare.
    revision: int = 0


@dataclass(frozen=True)
class LiveProcess:
    """A registered process, as its registration names it: ``what`` (``writer session``,
    ``compactor session``, ``HTTP broker`` or ``Kafka broker``), where, its release
    (``""``: one that does not say, before 0.2.0) and the highest format it reads."""

    what: str
    where: str
    release: str
    reads: int


class FormatTooNew(LlogError):
    """This release cannot read the cluster's format: the process must not start."""

    def __init__(self, cluster: ClusterFormat) -> None:
        by = f" (finalized by llog {cluster.release})" if cluster.release else ""
        need = cluster.release or "a newer release"
        super().__init__(
            f"llog {__version__} reads cluster formats up to {FORMAT_VERSION}, but this cluster is at format "
            f"{cluster.version}{by}: run llog {need} or later here")
        self.cluster = cluster

    def __reduce__(self) -> tuple[type[FormatTooNew], tuple[ClusterFormat]]:
        return FormatTooNew, (self.cluster,)  # the broker's parent gets it from a child (llog/broker/workers.py)


class FinalizeRefused(LlogError):
    """A live process cannot read the format asked for: finalizing would break it."""

    def __init__(self, target: int, behind: list[LiveProcess]) -> None:
        names = ", ".join(f"{p.what} {p.where} (llog {p.release or UNNAMED_VERSION}, reads up to {p.reads})"
                          for p in behind[:5])
        more = f" and {len(behind) - 5} more" if len(behind) > 5 else ""
        super().__init__(f"cannot finalize format {target}: {len(behind)} live process(es) cannot read it: "
                         f"{names}{more}; upgrade them first")
        self.target, self.behind = target, behind


def read_format(conn: Connection) -> ClusterFormat:
    """The cluster's format as etcd holds it now."""
    return _decode(conn.etcd.get(conn.keys.cluster_format()))


def _decode(kv: KV | None) -> ClusterFormat:
    if kv is None:
        return ClusterFormat(BASE_FORMAT)
    try:
        r = FormatRecord.decode(kv.value)
    except MetaFormatError as exc:
        # Unreadable is not "format 1": nothing is written to a cluster whose format is unknown.
        raise CorruptMetadata(kv.key, f"not a cluster format record ({exc})") from exc
    return ClusterFormat(r.version, r.release, r.at_ms, kv.mod_revision)


def check_can_join(conn: Connection) -> ClusterFormat:
    """The cluster's format, if this release reads it; else :class:`FormatTooNew`."""
    return _joinable(read_format(conn))


def _joinable(cluster: ClusterFormat) -> ClusterFormat:
    if cluster.version > FORMAT_VERSION:
        raise FormatTooNew(cluster)
    return cluster


#: Seconds a starting broker or compactor waits for etcd to tell it the cluster's format.
START_CHECK_BUDGET_S = 2.0


def check_at_start(config: LlogConfig) -> None:
    """Refuse to start (:class:`FormatTooNew`) in a cluster this release cannot read,
    before anything is opened. A process starts while etcd is away (alive, not ready):
    then its first session's check refuses instead, before it writes anything."""
    budget = min(config.etcd_timeout_s, START_CHECK_BUDGET_S)
    etcd = Etcd(config.etcd_endpoints, timeout=budget, keepalive_s=config.etcd_keepalive_s,
                attempt_timeout=min(config.etcd_attempt_timeout_s, budget), security=EtcdSecurity.of(config))
    try:
        _joinable(_decode(etcd.get(KeyLayout(config.root_prefix.strip("/")).cluster_format())))
    except CoordinationError as exc:
        log.warning("could not read the cluster's format at start (%s); the first session checks it", exc)
    finally:
        etcd.close()


def live_processes(conn: Connection) -> list[LiveProcess]:
    """Every registered process (sessions, HTTP and Kafka registrations) with the
    highest format it reads; a registration that does not decode is passed over."""
    out: list[LiveProcess] = []
    for kv in _scan(conn, conn.keys.sessions_prefix()):
        try:
            doc = msgpack.unpackb(kv.value)
            out.append(LiveProcess(f"{doc.get('kind', '?')} session", f"pid {doc.get('pid', '?')} on "
                                   f"{doc.get('host', '?')}", str(doc.get("version", "")),
                                   int(doc.get("format", BASE_FORMAT))))
        except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
            log.warning("session %s does not hold a session value; passed over", kv.key)
    for what, prefix in (("HTTP broker", conn.keys.http_brokers_prefix()),
                         ("Kafka broker", conn.keys.brokers_prefix())):
        for kv in _scan(conn, prefix):
            try:
                doc = json.loads(kv.value)
                where = str(doc.get("url") or f"{doc.get('host', '?')}:{doc.get('port', '?')}")
                out.append(LiveProcess(what, where, str(doc.get("version", "")), int(doc.get("format", BASE_FORMAT))))
            except (ValueError, TypeError, AttributeError):
                log.warning("registration %s does not decode; passed over", kv.key)
    return out


def finalize(conn: Connection, target: int | None = None) -> tuple[ClusterFormat, ClusterFormat]:
    """Raise the cluster's format to ``target`` (default and at most: this release's);
    returns (before, after). Refuses while a live process cannot read ``target`` (:class:`FinalizeRefused`);
    never lowers it (a lower or equal target leaves the key as it is)."""
    target = FORMAT_VERSION if target is None else target
    if not BASE_FORMAT <= target <= FORMAT_VERSION:
        raise FormatTooNew(ClusterFormat(target, FORMATS.get(target, "")))
    before = check_can_join(conn)
    if target <= before.version:
        return before, before
    behind = [p for p in live_processes(conn) if p.reads < target]
    if behind:
        raise FinalizeRefused(target, behind)
    return before, raise_format(conn, before, target)


def raise_format(conn: Connection, before: ClusterFormat, target: int) -> ClusterFormat:
    """Write format ``target`` if the key is still as ``before`` read it, else
    :class:`CasConflict` (another finalize ran in between: read again)."""
    key = conn.keys.cluster_format()
    now = int(time.time() * 1000)
    value = FormatRecord(target, __version__, now).encode()
    guard = absent(key) if before.revision == 0 else mod_revision_is(key, before.revision)
    result = conn.etcd.txn([guard], [Put(key, value)])
    if not result.succeeded:
        raise CasConflict(f"the cluster format at {key} (another finalize ran at the same time)", 1)
    log.warning("cluster format raised from %d to %d by llog %s", before.version, target, __version__)
    return ClusterFormat(target, __version__, now, result.revision)


def _scan(conn: Connection, prefix: str) -> list[KV]:
    return list(conn.etcd.scan(prefix, prefix_range_end(prefix)))
