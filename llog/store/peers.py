"""Reading a WAL blob from the broker that wrote it, before S3 (protocol/README.md §9
step 9, "peer reads").

A broker that PUTs a shared blob keeps it in its blob cache (write-through) and
serves ranges of it at ``GET /blobs`` from memory only. Its writer session's value in
etcd (``_sessions/{id}``) carries the broker's ``peer_url``, and a blob's key names
the session that wrote it, so another broker's reader finds the writer of any blob
with one etcd read per session (sessions live minutes; the answer is remembered). A
peer read that fails, times out, or finds the blob evicted falls back to S3: peers
are an optimisation, never a source of truth, and asked only for a blob the index or a
pending names when the read resolves it. A broker with a zone (``LLOG_ZONE``) asks only
peers whose session names the same zone: a GET from the regional object store crosses
no billed zone boundary, a peer's answer from another zone would (docs/zones.md). What they serve is still checked: each
body carries its CRC (§7), and a blob found corrupt is read from storage afterwards.
"""

from __future__ import annotations

import http.client
import logging
import ssl
import threading
from urllib.parse import quote

import msgpack

from llog.bounded import BoundedCache
from llog.etcd.client import Etcd
from llog.metrics import Metrics
from llog.state.keys import KeyLayout
from llog.tls import connection

log = logging.getLogger(__name__)


#: What :meth:`PeerBlobs._owner` remembers for a writer in another zone (never asked).
_OTHER_ZONE = "other-zone:"


class _Refused(Exception):
    """A peer answered 401 or 403: this broker may not read its blobs."""


class PeerBlobs:
    """Fetches ranges of blobs from the brokers that wrote them; ``own_url`` (this
    process's ``peer_url``) is never asked, nor, when ``zone`` is given, a peer not in it."""

    def __init__(
        self, etcd: Etcd, keys: KeyLayout, metrics: Metrics, *, own_url: str | None, timeout_s: float,
        token: str | None, tls: ssl.SSLContext | None = None, zone: str | None = None,
    ) -> None:
        self._etcd = etcd
        self._zone = zone
        self._tls = tls
        self._keys = keys
        self._own = own_url
        self._timeout_s = timeout_s
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._owners: BoundedCache[str, str | None] = BoundedCache(4096)
        self._lock = threading.Lock()
        #: Blobs found damaged: read from storage only from then on.
        self._storage_only: BoundedCache[str, bool] = BoundedCache(4096)
        self._requests = metrics.read_peer_requests
        self._refused_by: BoundedCache[str, bool] = BoundedCache(1024)

    def fetch(self, key: str, offset: int, length: int) -> bytes | None:
        """Up to ``length`` bytes of ``key`` at ``offset`` from the broker that wrote
        it (fewer where the blob ends), or ``None``: no such broker, it no longer holds
        the blob, or it did not answer in time."""
        with self._lock:
            if key in self._storage_only:
                return None
        url = self._owner(key)
        if url is None or url == self._own:
            return None
        if url == _OTHER_ZONE:
            self._requests.labels("other_zone").inc()
            return None
        if self._tls is not None and not url.startswith("https://"):
            return None  # with TLS on, the token never crosses to a peer in clear
        try:
            data = self._get(url, key, offset, length)
        except (OSError, http.client.HTTPException, _Refused) as exc:
            log.debug("peer %s did not serve %s: %s", url, key, exc)
            self._requests.labels("error").inc()
            return None
        self._requests.labels("miss" if data is None else "hit").inc()
        return data

    def distrust(self, key: str) -> None:
        """``key`` was found damaged: never ask a peer for it again."""
        with self._lock:
            self._storage_only[key] = True

    def _owner(self, key: str) -> str | None:
        session = self._keys.session_of(key)
        if session is None:
            return None
        with self._lock:
            if session in self._owners:
                return self._owners.get(session)
        kv = self._etcd.get(self._keys.session(session))
        url: str | None = None
        if kv is not None:
            try:
                value = msgpack.unpackb(kv.value)
                got = value.get("peer_url") if isinstance(value, dict) else None
                url = got if isinstance(got, str) else None
                if url is not None and self._zone is not None and value.get("zone") != self._zone:
                    url = _OTHER_ZONE  # a peer without a zone may be anywhere: not asked either
            except (ValueError, msgpack.UnpackException):
                url = None
        with self._lock:
            self._owners[session] = url
        return url

    def _get(self, url: str, key: str, offset: int, length: int) -> bytes | None:
        conn = connection(url, self._timeout_s, self._tls)
        try:
            conn.request("GET", f"/blobs?key={quote(key, safe='')}&offset={offset}&length={length}",
                         headers=self._headers)
            resp = conn.getresponse()
            body = resp.read()
        finally:
            conn.close()
        if resp.status in (401, 403):
            with self._lock:
                first = url not in self._refused_by
                self._refused_by[url] = True
            if first:  # once per peer: each read falls back to storage, which is correct but slower
                log.warning("peer %s refused this broker's blob reads (%d): peer reads need the broker token "
                            "(LLOG_BROKER_TOKEN) where brokers authenticate users or run the authorizer",
                            url, resp.status)
            raise _Refused(resp.status)
        if resp.status == 200 and body:
            return body
        return None
