"""Free loopback ports for local servers, picked so that nothing else takes them first.

The usual way — bind port 0, read the port, close the socket, hand the number to a
server that binds it a moment later — loses a race under load: the kernel picks the
number from the *ephemeral* range, the same range it draws every outgoing
connection's source port from, so any client connecting in between can take it
("Address already in use", seen in CI when a test's S3 server lost its port to one of
the suite's thousands of client connections). Two callers can also be handed the
same number once the first has closed its probe socket.

:func:`free_port` therefore picks a port outside the ephemeral range
(``net.ipv4.ip_local_port_range``), where no connection's source port lands, checks
that it can be bound, and reserves it for :data:`RESERVATION_S` with a file made with
``O_EXCL`` in a per-user directory under ``/tmp``, so no other caller on this host — another
process, another test worker — is given it while its server starts or restarts.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

#: The lowest port handed out: below it are well-known services' registered ports.
FLOOR = 10_000
#: The fewest ports a range outside the ephemeral one must hold to be used.
MIN_SPAN = 2_000
#: How long a handed-out port stays reserved: long enough for a server to start,
#: be killed and be restarted on it, as the fault-injection tests do.
RESERVATION_S = 3_600.0
#: Attempts before falling back to the kernel's choice.
ATTEMPTS = 500
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def ephemeral_range(path: Path = EPHEMERAL_RANGE) -> tuple[int, int]:
    """The kernel's range for outgoing connections' source ports (Linux's default if unknown)."""
    try:
        low, high = (int(p) for p in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32_768, 60_999


def quiet_range(ephemeral: tuple[int, int]) -> range | None:
    """The ports outside ``ephemeral`` to pick from, or None if neither side has room."""
    low, high = ephemeral
    if low - FLOOR >= MIN_SPAN:
        return range(FLOOR, low)
    if 65_535 - high >= MIN_SPAN:
        return range(high + 1, 65_536)
    return None


def reservations_dir() -> Path:
    """Host-wide, whatever a process's ``TMPDIR``: ports are the host's, not a process's."""
    base = Path("/tmp")
    return (base if base.is_dir() else Path(tempfile.gettempdir())) / f"llog-ports-{os.getuid()}"


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def reserve(port: int, directory: Path, now: float, ttl_s: float = RESERVATION_S) -> bool:
    """Claim ``port`` in ``directory``; False if a live reservation holds it.

    A reservation older than ``ttl_s`` is removed (and the claim still fails, so the
    caller moves on to another random port rather than racing whoever removed it too).
    """
    path = directory / str(port)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        try:
            if now - path.stat().st_mtime > ttl_s:
                path.unlink()
        except FileNotFoundError:
            pass
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    return True


def kernel_port(span: int = 1) -> int:
    """The kernel's pick (and, for ``span`` > 1, one whose next ports are free too)."""
    for _ in range(ATTEMPTS):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + span <= 65_536 and all(bindable(p) for p in range(port + 1, port + span)):
            return port
    raise OSError(errno.EADDRINUSE, f"no {span} consecutive free ports")


def free_port(*, span: int = 1, directory: Path | None = None, ports: Sequence[int] | None = None) -> int:
    """A loopback port no one listens on, reserved on this host for :data:`RESERVATION_S`.

    With ``span`` > 1, the ports from the one returned to it + ``span`` - 1 are all free
    and reserved (a broker's ``--workers N`` listen on a port + the worker's index).
    ``ports`` are the candidates (default: :func:`quiet_range` of this host's
    ephemeral range), ``directory`` the reservations (default: :func:`reservations_dir`).
    """
    if ports is None:
        ports = quiet_range(ephemeral_range())
    if not ports:
        return kernel_port(span)
    directory = directory or reservations_dir()
    try:
        directory.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        log.warning("no port reservations (%s): picking from the kernel's range", e)
        return kernel_port(span)
    for _ in range(ATTEMPTS):
        port = random.choice(ports)
        if port + span > 65_536 or not all(bindable(p) for p in range(port, port + span)):
            continue
        try:
            if all(reserve(p, directory, time.time()) for p in range(port, port + span)):
                return port
        except OSError as e:
            if e.errno not in (errno.EACCES, errno.EROFS, errno.ENOSPC):
                raise
            log.warning("no port reservations (%s): picking from the kernel's range", e)
            return kernel_port(span)
    log.warning("no free reservable port in %s after %d attempts", ports, ATTEMPTS)
    return kernel_port(span)
