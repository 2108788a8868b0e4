"""A cloud region on one machine: a network namespace per zone and one for the region's
own services (the object store), joined pairwise by veth links whose byte counters
are what each zone pair sends the other, split by cause (``tc`` HTB classes matched on
TCP ports). What stays inside a zone never leaves its namespace (loopback), so the
zone↔zone links carry exactly the inter-zone bytes a cloud bills.

Each place (``region`` and every zone) has one address, on its loopback device, and a
host route to every other place over their link. The machine's own namespace (the
operator: the bench, its health checks) reaches every place through the region's
namespace, which forwards; its traffic crosses only region↔zone links, never a
zone↔zone one. Needs root, iproute2 and tc (sch_htb, cls_u32).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from llog.nemesis.network import NetworkError, available, run_tool

log = logging.getLogger(__name__)

#: The place of the region's own services (the object store).
REGION = "region"
#: The operator's namespace (the host's own): reaches every place through the region.
OPERATOR = "operator"
#: The cause of bytes no port of :meth:`Region.count` matched.
OTHER = "other"
_SENT = re.compile(r"^class htb 1:(\d+) .*?\n\s*Sent (\d+) bytes", re.M | re.S)


@dataclass(frozen=True)
class Link:
    """The veth pair between places ``a`` and ``b``: ``to-<b>`` in ``a``, ``to-<a>`` in ``b``."""

    a: str
    b: str

    @property
    def inter_zone(self) -> bool:
        return REGION not in (self.a, self.b)

    def __str__(self) -> str:
        return f"{self.a}-{self.b}"


class Region:
    """Zones ``zones`` and the region, as namespaces (:meth:`up` to :meth:`down`).
    ``placement`` names where other nodes run (``{"etcd-m0": "a", "s3": "region"}``),
    so a :class:`Region` serves :mod:`llog.devstack` as a :class:`Network` does:
    :meth:`address` and :meth:`wrap` take a place or a node placed."""

    def __init__(self, zones: Sequence[str], placement: Mapping[str, str] | None = None, *,
                 tag: str | None = None) -> None:
        if len(set(zones)) != len(zones) or REGION in zones or not zones:
            raise NetworkError(f"zones must be distinct names other than {REGION!r}: {list(zones)}")
        self.zones = tuple(zones)
        self.places = (REGION, *self.zones)
        self.placement = dict(placement or {})
        self.tag = tag or f"{random.randrange(16**4):04x}"
        net = f"10.{random.randrange(100, 250)}"
        self._address = {p: f"{net}.{i + 1}.1" for i, p in enumerate(self.places)}
        self._address[OPERATOR] = f"{net}.0.1"
        self.links = [Link(a, b) for a, b in itertools.combinations(self.places, 2)]
        #: Cause -> its HTB class on every link end; :data:`OTHER` is the default class.
        self._causes: dict[str, int] = {OTHER: 1}
        self._made: list[tuple[str, ...]] = []

    def netns(self, place: str) -> str:
        return f"llz{self.tag}-{place}"

    def place(self, node: str) -> str:
        """The place a node runs in (a place is its own)."""
        place = self.placement.get(node, node)
        if place not in self.places:
            raise NetworkError(f"{node!r} is placed nowhere in the region (places: {', '.join(self.places)})")
        return place

    def address(self, node: str) -> str:
        return self._address[self.place(node)]

    def wrap(self, node: str, argv: Sequence[str]) -> list[str]:
        """``argv`` run in the namespace of ``node``'s place."""
        return ["ip", "netns", "exec", self.netns(self.place(node)), *argv]

    def up(self) -> Region:
        why = available()
        if why is not None:
            raise NetworkError(why)
        try:
            for p in self.places:
                ns = self.netns(p)
                _ip("netns", "add", ns)
                self._made.append(("netns", "del", ns))
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{self._address[p]}/32", "dev", "lo")
            for link in self.links:
                self._link(link)
            self._operator()
        except BaseException:
            self.down()
            raise
        log.info("region %s: %s", self.tag, ", ".join(f"{p}={self._address[p]}" for p in self.places))
        return self

    def _link(self, link: Link) -> None:
        na, nb = self.netns(link.a), self.netns(link.b)
        _ip("-n", na, "link", "add", f"to-{link.b}", "type", "veth", "peer", "name", f"to-{link.a}", "netns", nb)
        for ns, here, there in ((na, link.a, link.b), (nb, link.b, link.a)):
            dev = f"to-{there}"
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "route", "add", f"{self._address[there]}/32", "dev", dev, "src", self._address[here])
            # A class per cause, none limiting: 40 Gbit/s is far above a veth on one host.
            _tc("-n", ns, "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "1")
            _tc("-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", *_UNLIMITED)

    def _operator(self) -> None:
        """A link from the host's namespace to the region's, which forwards to the zones."""
        host_end, region = f"llz{self.tag}op", self.netns(REGION)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", "to-operator", "netns", region)
        self._made.append(("link", "del", host_end))
        _ip("link", "set", host_end, "up")
        _ip("addr", "add", f"{self._address[OPERATOR]}/32", "dev", host_end)
        prefix = self._address[REGION].rsplit(".", 2)[0]
        # Through the region's address (``onlink``): only an address a namespace holds gets an ARP answer.
        _ip("route", "add", f"{prefix}.0.0/16", "via", self._address[REGION], "dev", host_end, "onlink",
            "src", self._address[OPERATOR])
        _ip("-n", region, "link", "set", "to-operator", "up")
        _ip("-n", region, "route", "add", f"{self._address[OPERATOR]}/32", "dev", "to-operator",
            "src", self._address[REGION])
        _ip("netns", "exec", region, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        for z in self.zones:
            _ip("-n", self.netns(z), "route", "add", f"{self._address[OPERATOR]}/32", "via", self._address[REGION],
                "dev", f"to-{REGION}", "onlink", "src", self._address[z])

    def count(self, cause: str, ports: Iterable[int]) -> None:
        """Count the bytes to or from any of ``ports`` (TCP or UDP) as ``cause`` from now
        on, on every link (a port of two causes counts for the first)."""
        if cause not in self._causes:
            self._causes[cause] = 10 + len(self._causes)
        classid = f"1:{self._causes[cause]}"
        for link in self.links:
            for ns, dev in ((self.netns(link.a), f"to-{link.b}"), (self.netns(link.b), f"to-{link.a}")):
                with contextlib.suppress(NetworkError):  # the class of a cause counted before
                    _tc("-n", ns, "class", "add", "dev", dev, "parent", "1:", "classid", classid, *_UNLIMITED)
                for port in ports:
                    for field in ("sport", "dport"):
                        _tc("-n", ns, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1",
                            "u32", "match", "ip", field, str(port), "0xffff", "flowid", classid)

    def counters(self) -> dict[str, dict[str, int]]:
        """Bytes each link carried so far, both directions, by cause (``total`` too)."""
        names = {v: k for k, v in self._causes.items()}
        out: dict[str, dict[str, int]] = {}
        for link in self.links:
            row = dict.fromkeys(self._causes, 0)
            for ns, dev in ((self.netns(link.a), f"to-{link.b}"), (self.netns(link.b), f"to-{link.a}")):
                text = run_tool("tc", "-n", ns, "-s", "class", "show", "dev", dev)
                for classid, sent in _SENT.findall(text):
                    row[names.get(int(classid), OTHER)] += int(sent)
            row["total"] = sum(row.values())
            out[str(link)] = row
        return out

    def down(self) -> None:
        """Remove the namespaces (their links go with them) and the operator's link; the
        processes in them must have stopped."""
        for kind, verb, name in reversed(self._made):
            with contextlib.suppress(NetworkError):
                _ip(kind, verb, name)
        self._made.clear()

    def __enter__(self) -> Region:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()


def inter_zone(counters: Mapping[str, Mapping[str, int]], links: Iterable[Link]) -> dict[str, int]:
    """The bytes of ``counters`` (:meth:`Region.counters`) on zone↔zone links, by cause."""
    out: dict[str, int] = {}
    for link in links:
        if link.inter_zone:
            for cause, n in counters[str(link)].items():
                out[cause] = out.get(cause, 0) + n
    return out


def delta(after: Mapping[str, Mapping[str, int]], before: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    """What the links carried between two :meth:`Region.counters` readings."""
    return {link: {cause: n - before.get(link, {}).get(cause, 0) for cause, n in row.items()}
            for link, row in after.items()}


_UNLIMITED = ("htb", "rate", "40gbit", "ceil", "40gbit", "burst", "4mb", "cburst", "4mb", "quantum", "200000")


def _ip(*args: str) -> None:
    run_tool("ip", *args)


def _tc(*args: str) -> None:
    run_tool("tc", *args)
