"""TLS for the broker's HTTP API (``LLOG_BROKER_TLS_*``): the server's certificate
checked at start, and the client side brokers use to reach each other over it (peer
reads, a broker's workers collecting each other's metrics)."""

from __future__ import annotations

import http.client
import ssl
from urllib.parse import urlsplit

from llog.config import LlogConfig
from llog.errors import ConfigError


def check_server_files(config: LlogConfig) -> None:
    """:class:`ConfigError` unless the HTTP certificate and key load (uvicorn would
    fail later, and less clearly)."""
    if config.broker_tls_cert_file is None or config.broker_tls_key_file is None:
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(config.broker_tls_cert_file,
                                                                config.broker_tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"broker TLS certificate {config.broker_tls_cert_file!r} / key "
                          f"{config.broker_tls_key_file!r}: {exc}") from exc


def peer_context(config: LlogConfig) -> ssl.SSLContext | None:
    """How a broker checks another broker's HTTPS certificate: against
    ``broker_tls_ca_file`` (host names checked), else against its own certificate
    (every broker of a deployment serving the same one; the chain checked, not the
    name, as peers are reached by host name or address). ``None`` without TLS."""
    if config.broker_tls_cert_file is None:
        return None
    if config.broker_tls_ca_file is not None:
        return ssl.create_default_context(cafile=config.broker_tls_ca_file)
    ctx = ssl.create_default_context(cafile=config.broker_tls_cert_file)
    ctx.check_hostname = False
    return ctx


def connection(url: str, timeout_s: float, context: ssl.SSLContext | None) -> http.client.HTTPConnection:
    """An HTTP or HTTPS connection (by ``url``'s scheme) to a broker."""
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    if parts.scheme == "https":
        return http.client.HTTPSConnection(host, parts.port or 443, timeout=timeout_s, context=context)
    return http.client.HTTPConnection(host, parts.port or 80, timeout=timeout_s)
