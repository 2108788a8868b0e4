"""State read whole from etcd and read again after every change to it: a watch of the
prefix wakes one reload thread, which re-reads everything (however many changes came at
once) and, when the read fails, tries again, backing off, holding what it read last.
The authorizer's ACLs and the client quotas are kept current this way."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from llog.errors import LlogError
from llog.etcd.client import Etcd

log = logging.getLogger(__name__)


class ReloadOnChange:
    """Runs ``reload`` at :meth:`start` (its failure raises there) and after every change
    under ``prefix`` until :meth:`close`; ``counted(ok)`` after each reload on change,
    ``held()`` says what is kept while a reload fails (for the warning)."""

    def __init__(self, etcd: Etcd, prefix: str, reload: Callable[[], None], *, name: str,
                 counted: Callable[[bool], None], held: Callable[[], str]) -> None:
        self._etcd, self._prefix, self._reload = etcd, prefix, reload
        self._name, self._counted, self._held = name, counted, held
        self._changed = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._cancel: Callable[[], None] | None = None

    def start(self, *, required: bool = True) -> None:
        """Watch, then read (a change made in between is read again, never missed). A
        failure raises when ``required``; otherwise both are tried again, backing off."""
        try:
            self._cancel = self._etcd.watch(self._prefix, self._changed.set, prefix=True)
            self._reload()
        except LlogError as exc:
            if required:
                self.close()
                raise
            log.warning("could not read the %s (%s); trying again", self._name, exc)
            self._changed.set()
        self._thread = threading.Thread(target=self._reloads, name=f"llog-{self._name.replace(' ', '-')}-reload",
                                        daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()
        self._changed.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._cancel is not None:
            self._cancel()
            self._cancel = None

    def _reloads(self) -> None:
        backoff = 0.1
        while self._changed.wait() and not self._stopping.is_set():
            self._changed.clear()
            try:
                if self._cancel is None:  # the first watch failed: etcd was away
                    self._cancel = self._etcd.watch(self._prefix, self._changed.set, prefix=True)
                self._reload()
            except LlogError as exc:
                self._counted(False)
                log.warning("could not re-read the %s after a change (%s); keeping %s, trying again in %.1f s",
                            self._name, exc, self._held(), backoff)
                self._changed.set()
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            self._counted(True)
            backoff = 0.1
