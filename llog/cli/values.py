"""Argument types for the ``llog`` command line: every value is checked while the
command line is parsed, before anything connects, so a typo is a usage error (exit 2)
that names the argument instead of a failure halfway through a command."""

from __future__ import annotations

import argparse
import ipaddress
import os
import re
from collections.abc import Callable

from llog.errors import InvalidInput
from llog.name_rules import ZONE_PATTERN, ZONE_RE
from llog.names import MAX_PARTITIONS, check_group, check_topic

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_DOTTED_NUMBERS = re.compile(r"[0-9.]+")


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def positive_int(text: str) -> int:
    """An integer > 0."""
    value = _int(text, "a positive integer")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def workers(text: str) -> int:
    """A positive integer, or ``auto``: one per core of this host."""
    if text.strip().lower() == "auto":
        return os.cpu_count() or 1
    return positive_int(text)


def limit(text: str) -> int | None:
    """A positive integer, or ``none`` (no limit)."""
    return None if text.strip().lower() == "none" else positive_int(text)


def non_negative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer >= 0")
    return value


def partition(text: str) -> int:
    """A partition number: 0 up to llog's partition limit."""
    value = _int(text, "a partition number (an integer >= 0)")
    if not 0 <= value < MAX_PARTITIONS:
        raise argparse.ArgumentTypeError(f"partition {text!r} must be in 0..{MAX_PARTITIONS - 1}")
    return value


def partition_count(text: str) -> int:
    """A topic's partition count: 1 up to llog's partition limit."""
    value = _int(text, "a partition count")
    if not 1 <= value <= MAX_PARTITIONS:
        raise argparse.ArgumentTypeError(f"partition count {text!r} must be in 1..{MAX_PARTITIONS}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds, > 0."""
    value = _float(text, "a duration in seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be > 0 seconds")
    return value


def seconds_or_zero(text: str) -> float:
    """A duration in seconds, >= 0 (0 usually turns something off)."""
    value = _float(text, "a duration in seconds")
    if value < 0:
        raise argparse.ArgumentTypeError(f"duration {text!r} must be >= 0 seconds")
    return value


def rate_or_zero(text: str) -> float:
    """A rate per second, >= 0 (0 turns a limit off)."""
    value = _float(text, "a rate per second")
    if value < 0:
        raise argparse.ArgumentTypeError(f"rate {text!r} must be >= 0 per second")
    return value


def port(text: str) -> int:
    """A TCP port, 1..65535."""
    value = _int(text, "a port number")
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} must be in 1..65535")
    return value


def listen_port(text: str) -> int:
    """A TCP port to listen on, 1..65535, or 0 for any free one."""
    value = _int(text, "a port number")
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {text!r} must be in 1..65535 (or 0: any free port)")
    return value


def zone(text: str) -> str:
    """A zone's name (``us-east-1a``, ``use1-az1``)."""
    if ZONE_RE.fullmatch(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a zone name ({ZONE_PATTERN})")
    return text


def zone_listener(text: str) -> str:
    """``zone=port``: a Kafka listener for the clients of a zone (port 0: any free one)."""
    name, _, port = text.partition("=")
    zone(name)
    listen_port(port)
    return f"{name}={int(port)}"


def host(text: str) -> str:
    """A host name or an IPv4/IPv6 address (``::1`` or ``[::1]``)."""
    name = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        return str(ipaddress.ip_address(name))
    except ValueError:
        pass
    labels = name.rstrip(".").split(".")
    if (
        not name
        or len(name) > 253
        or _DOTTED_NUMBERS.fullmatch(name)  # 999.1.1.1: meant as an address, and not one
        or not all(_HOST_LABEL.fullmatch(label) for label in labels)
    ):
        raise argparse.ArgumentTypeError(f"{text!r} is not a host name or IP address")
    return name


def endpoint(text: str) -> str:
    """``host:port`` (``[v6]:port`` for an IPv6 address)."""
    name, sep, num = text.strip().rpartition(":")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"endpoint {text!r} is not host:port")
    host(name)
    port(num)
    return text.strip()


def endpoints(text: str) -> str:
    """Comma-separated ``host:port`` endpoints (kept as text; the config splits it)."""
    parts = [p for p in (x.strip() for x in text.split(",")) if p]
    if not parts:
        raise argparse.ArgumentTypeError("no endpoint given")
    for p in parts:
        endpoint(p)
    return ",".join(parts)


def store_uri(text: str) -> str:
    """``s3://bucket[/prefix]``, ``file:///path`` or a plain directory path."""
    if text.startswith("s3://"):
        if not text[len("s3://"):].partition("/")[0]:
            raise argparse.ArgumentTypeError(f"object store {text!r} names no bucket (s3://bucket[/prefix])")
    elif text.startswith("file://"):
        if not text[len("file://"):]:
            raise argparse.ArgumentTypeError(f"object store {text!r} names no directory (file:///path)")
    elif "://" in text or not text:
        raise argparse.ArgumentTypeError(f"object store {text!r}: use s3://bucket[/prefix] or file:///path")
    return text


def root_prefix(text: str) -> str:
    """One non-empty path segment."""
    if not text.strip("/") or "/" in text.strip("/"):
        raise argparse.ArgumentTypeError(f"root prefix {text!r} must be one non-empty path segment")
    return text


def _named(check: Callable[[str], str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        try:
            return check(text)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


#: A topic name (``llog.names`` rules).
topic = _named(check_topic)
#: A consumer group name (``llog.names`` rules).
group = _named(check_group)


def reset_target(text: str) -> str:
    """``groups reset --to``: earliest, latest, an offset >= 0 or ``ts:EPOCH_MS``."""
    rest = text[3:] if text.startswith("ts:") else text
    if text in ("earliest", "latest") or re.fullmatch(r"[0-9]+", rest):
        return text
    raise argparse.ArgumentTypeError(f"{text!r} is not earliest, latest, an offset or ts:EPOCH_MS")
