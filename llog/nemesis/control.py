"""Client of an S3 proxy's control API (``/_nemesis/...``), for a process other than
the proxy's: the load test, a bench, a shell (``curl`` does as well)."""

from __future__ import annotations

import json
import urllib.request
from typing import Any

from llog.errors import LlogError
from llog.nemesis.faults import FaultPlan, FaultRule


class NemesisControlError(LlogError):
    """The proxy's control API could not be reached or refused a change."""


def _call(url: str, method: str, route: str, doc: Any = None, timeout: float = 10.0) -> dict[str, Any]:
    data = None if doc is None else json.dumps(doc).encode()
    req = urllib.request.Request(f"{url.rstrip('/')}/_nemesis/{route}", data=data, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            answer: dict[str, Any] = json.loads(resp.read())
            return answer
    except OSError as exc:  # URLError and HTTPError included
        raise NemesisControlError(f"S3 proxy control {method} {url}/_nemesis/{route} failed: {exc}") from exc


def proxy_state(url: str) -> dict[str, Any]:
    """Plan, latency profile, requests by operation and faults injected by kind."""
    return _call(url, "GET", "state")


def set_faults(url: str, plan: FaultPlan) -> dict[str, Any]:
    """Replace the proxy's fault plan; returns its new state."""
    return _call(url, "PUT", "faults", plan.to_json())


def set_latency(url: str, profile: str, seed: int | None = None) -> dict[str, Any]:
    """Switch the proxy's latency profile; returns its new state."""
    return _call(url, "PUT", "latency", {"profile": profile, "seed": seed})


class ProxyFaults:
    """Load-test chaos's switch (:class:`llog.loadtest.chaos.FaultSwitch`) over a proxy's
    control API: :meth:`inject` replaces the plan with one rule, :meth:`clear` restores
    the ``base`` plan the scenario started with."""

    def __init__(self, url: str, base: FaultPlan) -> None:
        self.url = url
        self.base = base

    def inject(self, fault: str, rate: float) -> None:
        set_faults(self.url, FaultPlan((*self.base.rules, FaultRule(fault, rate))))

    def clear(self) -> None:
        set_faults(self.url, self.base)
