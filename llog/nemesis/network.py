"""Network partitions between the processes of one machine, the fault Jepsen leads
with: each node (an etcd member, a broker, the compactor, the S3 server) runs in a
network namespace of its own, with one end of a veth pair and an address on a private
/24; the other ends join a bridge in the host's namespace, where the clients (the load
generators, the orchestrator) stay, at ``.1``.

A cut drops packets silently, as a real partition does: in the sending node's
namespace the other side's address is routed to a gateway whose MAC address is
permanently one nobody has, so the frames go out and nobody takes them (TCP
retransmits, connects time out; nothing is refused). A cut is one-way; cutting both
ways is two of them. Healing deletes the route. Needs root and iproute2 (``ip``); the
kernel needs no module beyond veth and bridge (no iptables, no tc classifier).
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from llog.errors import LlogError

log = logging.getLogger(__name__)

#: The clients' node: the host's own namespace.
CLIENTS = "clients"
_BLACKHOLE_HOST = 254
_BLACKHOLE_MAC = "02:00:00:00:00:fe"


class NetworkError(LlogError):
    """The private network could not be set up or changed (not root, no ``ip``, a name
    taken)."""


@dataclass(frozen=True)
class Node:
    name: str
    netns: str | None  # None: the host's namespace (CLIENTS)
    device: str
    address: str


class Hosts(Protocol):
    """Where nodes run: what :mod:`llog.devstack` needs of a :class:`Network` (or a
    :class:`~llog.nemesis.region.Region`) to start its servers in their places."""

    def address(self, node: str) -> str: ...

    def wrap(self, node: str, argv: Sequence[str]) -> list[str]: ...


def available() -> str | None:
    """Why a private network cannot be made here, or ``None`` if it can."""
    if os.geteuid() != 0:
        return "network partitions need root (network namespaces)"
    if shutil.which("ip") is None:
        return "network partitions need iproute2's `ip`"
    return None


class Network:
    """A bridge and one namespace per node of ``nodes``; :meth:`up` makes them,
    :meth:`down` removes them (and heals nothing: it takes the cuts with it)."""

    def __init__(self, nodes: Sequence[str], *, tag: str | None = None) -> None:
        if len(nodes) > 200:
            raise NetworkError(f"{len(nodes)} nodes: at most 200 fit the private /24")
        self.tag = tag or f"{random.randrange(16**4):04x}"
        self.subnet = f"10.{random.randrange(100, 250)}.{random.randrange(256)}"
        self.bridge = f"ll{self.tag}br"
        self.nodes: dict[str, Node] = {CLIENTS: Node(CLIENTS, None, self.bridge, f"{self.subnet}.1")}
        for i, name in enumerate(nodes):
            self.nodes[name] = Node(name, f"llog-{self.tag}-{name}", "eth0", f"{self.subnet}.{10 + i}")
        self._cuts: set[tuple[str, str]] = set()
        #: What :meth:`up` made ("netns" or "link", name), all :meth:`down` removes: a
        #: network that failed on a name already taken leaves its owner's alone.
        self._made: list[tuple[str, str]] = []

    def address(self, node: str) -> str:
        return self.nodes[node].address

    def wrap(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``node``'s namespace (``ip netns exec`` execs it: the pid
        is the program's own)."""
        ns = self.nodes[node].netns
        return list(argv) if ns is None else ["ip", "netns", "exec", ns, *argv]

    def up(self) -> Network:
        why = available()
        if why is not None:
            raise NetworkError(why)
        try:
            self._ip("link", "add", self.bridge, "type", "bridge")
            self._made.append(("link", self.bridge))
            self._ip("addr", "add", f"{self.address(CLIENTS)}/24", "dev", self.bridge)
            self._ip("link", "set", self.bridge, "up")
            self._blackhole_gateway(None, self.bridge)
            for i, node in enumerate(n for n in self.nodes.values() if n.netns is not None):
                self._node(i, node)
        except BaseException:
            self.down()
            raise
        log.info("private network %s.0/24 on bridge %s: %s", self.subnet, self.bridge,
                 ", ".join(f"{n.name}={n.address}" for n in self.nodes.values()))
        return self

    def _node(self, i: int, node: Node) -> None:
        assert node.netns is not None
        host_end, ns_end = f"ll{self.tag}h{i}", f"ll{self.tag}n{i}"
        self._ip("netns", "add", node.netns)
        self._made.append(("netns", node.netns))
        self._ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        self._ip("link", "set", host_end, "master", self.bridge, "up")
        self._ip("link", "set", ns_end, "netns", node.netns)
        ns = ["-n", node.netns]
        self._ip(*ns, "link", "set", ns_end, "name", node.device)
        self._ip(*ns, "addr", "add", f"{node.address}/24", "dev", node.device)
        self._ip(*ns, "link", "set", node.device, "up")
        self._ip(*ns, "link", "set", "lo", "up")
        self._blackhole_gateway(node.netns, node.device)

    def _blackhole_gateway(self, netns: str | None, device: str) -> None:
        ns = ["-n", netns] if netns else []
        self._ip(*ns, "neigh", "replace", f"{self.subnet}.{_BLACKHOLE_HOST}", "lladdr", _BLACKHOLE_MAC,
                 "dev", device, "nud", "permanent")

    def cut(self, frm: Iterable[str], to: Iterable[str]) -> None:
        """Drop every packet from each node of ``frm`` to each of ``to``."""
        for a in frm:
            for b in to:
                if a == b or (a, b) in self._cuts:
                    continue
                src = self.nodes[a]
                ns = ["-n", src.netns] if src.netns else []
                self._ip(*ns, "route", "add", f"{self.address(b)}/32", "via", f"{self.subnet}.{_BLACKHOLE_HOST}",
                         "dev", src.device)
                self._cuts.add((a, b))

    def heal(self, frm: Iterable[str] | None = None, to: Iterable[str] | None = None) -> None:
        """Undo the cuts from ``frm`` to ``to`` (``None``: every node)."""
        frm_set = None if frm is None else set(frm)
        to_set = None if to is None else set(to)
        for a, b in sorted(self._cuts):
            if (frm_set is None or a in frm_set) and (to_set is None or b in to_set):
                src = self.nodes[a]
                ns = ["-n", src.netns] if src.netns else []
                with contextlib.suppress(NetworkError):
                    self._ip(*ns, "route", "del", f"{self.address(b)}/32")
                self._cuts.discard((a, b))

    def cuts(self) -> list[tuple[str, str]]:
        return sorted(self._cuts)

    def down(self) -> None:
        """Remove the namespaces (their veths go with them) and the bridge; the
        processes in them must have stopped."""
        self.heal()
        for kind, name in reversed(self._made):
            with contextlib.suppress(NetworkError):
                self._ip(kind, "del", name)
        self._made.clear()

    @staticmethod
    def remove(netns: Iterable[str], bridge: str) -> None:
        """Remove a network another process made (``llog loadtest down`` after ``up``),
        by the names its layout recorded; what is already gone is skipped."""
        for name in netns:
            with contextlib.suppress(NetworkError):
                Network._ip("netns", "del", name)
        with contextlib.suppress(NetworkError):
            Network._ip("link", "del", bridge)

    @staticmethod
    def _ip(*args: str) -> None:
        run_tool("ip", *args)


def run_tool(tool: str, *args: str) -> str:
    """``tool args`` (``ip``, ``tc``, ``ip netns exec …``): its output, or a
    :class:`NetworkError` naming the command and what it said."""
    try:
        return subprocess.run([tool, *args], check=True, capture_output=True, text=True, timeout=30).stdout
    except subprocess.CalledProcessError as exc:
        raise NetworkError(f"{tool} {' '.join(args)}: {exc.stderr.strip() or exc.returncode}") from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"{tool} {' '.join(args)}: {exc}") from None
