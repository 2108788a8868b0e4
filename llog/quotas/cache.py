"""One broker's view of the client quotas, kept current by a watch
(:class:`~llog.state.watched.ReloadOnChange`): :meth:`Quotas.limit` is a dictionary
lookup per kind, with no I/O, for the event loop."""

from __future__ import annotations

import logging

from llog.connection import Connection
from llog.quotas.entities import QuotaEntity, QuotaKind, resolve
from llog.quotas.store import QuotaStore
from llog.state.watched import ReloadOnChange

log = logging.getLogger(__name__)


class Quotas:
    """Every quota of the deployment (:meth:`start` to :meth:`close`)."""

    def __init__(self, conn: Connection) -> None:
        self._store = QuotaStore(conn)
        self._conn = conn
        self._held: dict[QuotaEntity, dict[str, float]] = {}
        self._watch = ReloadOnChange(
            conn.etcd, conn.keys.quotas_prefix(), self.reload, name="client quotas",
            counted=lambda ok: conn.metrics.quota_reloads.labels("ok" if ok else "failed").inc(),
            held=lambda: f"the {len(self._held)} entities' quotas held")

    def start(self) -> None:
        """Read them and watch for changes (a broker starts while etcd is away: none are
        held until it answers)."""
        self._watch.start(required=False)

    def close(self) -> None:
        self._watch.close()

    @property
    def any(self) -> bool:
        """Whether any quota is set (none: nothing to measure)."""
        return bool(self._held)

    def reload(self) -> None:
        held, corrupt = self._store.read_all()
        for key in corrupt:
            log.warning("quota key %s does not hold client quotas; ignored", key)
        self._held = held
        self._conn.metrics.quota_entities.set(len(held))

    def limit(self, user: str | None, client_id: str, kind: QuotaKind) -> tuple[QuotaEntity, float] | None:
        """The quota of ``kind`` a client is held to, and the entity that sets it."""
        return resolve(self._held, user, client_id, kind)
