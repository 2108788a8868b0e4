"""Aborting transactions past their timeout (spec §15.2, "Expiry"). A transaction's age
is judged by this process's monotonic clock from the sweep that first saw it ongoing,
never by the clock of the host that began it: a skewed host cannot have a young
transaction aborted, and a restarted process only starts its ages over (later aborts,
never earlier). The abort bumps the epoch, fencing the producer, as Kafka does."""

from __future__ import annotations

import logging
import threading
import time

from llog.codec.etcd_values.transaction import ONGOING, TxnRecord
from llog.errors import LlogError
from llog.txn.coordinator import Coordinator

log = logging.getLogger(__name__)

#: What names one transaction: producer id, epoch and number.
_Instance = tuple[int, int, int]


class TxnExpiry:
    """Sweeps every ``interval_s`` on a thread between :meth:`start` and :meth:`close`;
    :meth:`sweep` runs one pass."""

    def __init__(self, coordinator: Coordinator, interval_s: float) -> None:
        self.coordinator = coordinator
        self.interval_s = interval_s
        self._seen: dict[str, tuple[_Instance, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="llog-txn-expiry", daemon=True)
        self._thread.start()

    def sweep(self, now: float | None = None) -> list[str]:
        """Abort the ongoing transactions seen ongoing for at least their timeout by
        ``now`` (monotonic seconds), and forget the ids seen unchanged and idle for
        ``LLOG_TXN_ID_TTL_S``; the ids aborted."""
        now = time.monotonic() if now is None else now
        aborted = []
        listed = set()
        for txid, r, rev in self.coordinator.list():
            listed.add(txid)
            try:
                if r.state != ONGOING:
                    self._idle(txid, rev, now)
                elif self._expired(txid, r, now):
                    aborted.append(txid)
            except LlogError as exc:  # this id only: the others are still looked at
                log.warning("transaction %r: expiry: %s", txid, exc)
        for gone in set(self._seen) - listed:
            del self._seen[gone]
        return aborted

    def _expired(self, txid: str, r: TxnRecord, now: float) -> bool:
        instance = (r.producer_id, r.epoch, r.number)
        first = self._seen.get(txid)
        if first is None or first[0] != instance:
            self._seen[txid] = (instance, now)
            return False
        if now - first[1] < r.timeout_ms / 1000:
            return False
        self._seen.pop(txid, None)
        if not self.coordinator.abort(txid, r.producer_id, r.epoch, number=r.number, bump=True):
            return False
        log.warning("transaction %r (producer %d, epoch %d) aborted: ongoing for longer than its timeout of %d ms; "
                    "the producer is fenced", txid, r.producer_id, r.epoch, r.timeout_ms)
        self.coordinator.conn.metrics.transactions.labels("expired").inc()
        return True

    def _idle(self, txid: str, revision: int, now: float) -> None:
        """Forget the id once its record has stayed at ``revision`` for the TTL."""
        key = (-1, -1, revision)  # an idle record is named by its revision
        first = self._seen.get(txid)
        if first is None or first[0] != key:
            self._seen[txid] = (key, now)
        elif now - first[1] >= self.coordinator.conn.config.txn_id_ttl_s and self.coordinator.delete_idle(
                txid, revision):
            log.info("transactional id %r forgotten: idle for %.0f s", txid, now - first[1])
            del self._seen[txid]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.sweep()
            except LlogError as exc:  # etcd away: the next pass tries again
                log.warning("transaction expiry pass failed: %s", exc)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
