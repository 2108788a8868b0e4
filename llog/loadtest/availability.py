"""Availability as figures: from the clients' per-interval acknowledgements
(``client_samples.jsonl``) and the chaos steps (``chaos.json``), the intervals in which
nothing was acknowledged, the longest run of them, and the acknowledged rate during
each fault against the rate with no fault active, by kind of fault.

A fault's window runs from the step that injected it to the step that ended it (a
restart counts once the process answers again), plus one interval of recovery. A
leaderless log should keep acknowledging through every fault but one: with every etcd
member down (``kill:etcd-all``, ``pause:etcd-all``) nothing can commit, so zero-ack
intervals overlapping such a window are *excused*; every other zero-ack interval is
not.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Fault kinds that must stop writes: no etcd majority.
EXCUSED = frozenset({"kill:etcd-all", "pause:etcd-all"})
_ENDS = {"pause": "resume", "kill": "restart", "faults": "faults-off", "partition": "heal"}


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    target: str
    start_s: float
    end_s: float


def fault_kind(action: str, target: str, fault: str | None = None, peer: str | None = None,
               one_way: bool = False) -> str:
    """``pause:broker``, ``kill:etcd-leader``, ``kill:etcd-all``, ``pause:etcd-member``,
    ``faults:s3-drop``, ``partition:broker|etcd`` (``>`` for a one-way cut), …"""
    if action == "partition":
        return f"partition:{_side(target)}{'>' if one_way else '|'}{_side(peer or '')}"
    if target == "s3" and fault:
        return f"{action}:s3-{fault}"
    if target == "etcd":
        return f"{action}:etcd-all"
    return f"{action}:{_side(target)}"


def _side(target: str) -> str:
    if target.startswith("zone-"):
        return "zone"
    if target.startswith("etcd-") and target != "etcd-leader":
        return "etcd-member"
    return target.split("-")[0] if target.split("-")[-1].isdigit() else target


def fault_windows(events: Iterable[Mapping[str, Any]], end_s: float) -> list[FaultWindow]:
    """Pair each injecting chaos step with the step that ended it (none: the run's end)."""
    open_: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    out: list[FaultWindow] = []
    for e in events:
        if not e.get("ok", True):
            continue
        action, target = str(e["action"]), str(e["target"])
        if action in _ENDS:
            open_.setdefault((_ENDS[action], target), []).append(e)
            continue
        started = open_.get((action, target))
        if started:
            s = started.pop(0)
            out.append(FaultWindow(_kind(s, target), target,
                                   float(s["done_s"]), float(e["done_s"])))
    for (_end, target), left in open_.items():
        for s in left:
            out.append(FaultWindow(_kind(s, target), target,
                                   float(s["done_s"]), max(end_s, float(s["done_s"]))))
    return sorted(out, key=lambda w: (w.start_s, w.kind))


def _kind(step: Mapping[str, Any], target: str) -> str:
    return fault_kind(str(step["action"]), target, step.get("fault"), step.get("peer"), bool(step.get("one_way")))


def _runs(flags: Sequence[bool]) -> int:
    """The longest run of ``True``."""
    best = run = 0
    for f in flags:
        run = run + 1 if f else 0
        best = max(best, run)
    return best


def availability(
    samples: Sequence[Mapping[str, Any]], events: Iterable[Mapping[str, Any]], *, interval_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """The availability section of ``summary.json`` (see the module docstring)."""
    ends, rates = [], []
    prev = 0.0
    for s in samples:
        t = float(s["t"])
        acked = float(s["acked_records"])
        if t <= duration_s + 1e-9:
            ends.append(t)
            rates.append((acked - prev) / interval_s)
        prev = acked
    windows = fault_windows(events, duration_s)

    def overlaps(t: float, w: FaultWindow) -> bool:  # interval (t - interval, t] vs the window + recovery
        return t > w.start_s and t - interval_s < w.end_s + interval_s

    zero = [r == 0 for r in rates]
    excused = [any(overlaps(t, w) for w in windows if w.kind in EXCUSED) for t in ends]
    quiet = [r for t, r in zip(ends, rates, strict=True) if not any(overlaps(t, w) for w in windows)]
    steady = statistics.median(quiet) if quiet else None
    faults: list[dict[str, Any]] = []
    for w in windows:
        inside = [i for i, t in enumerate(ends) if overlaps(t, w)]
        rate = statistics.fmean(rates[i] for i in inside) if inside else None
        faults.append({
            "kind": w.kind, "target": w.target, "start_s": round(w.start_s, 3), "end_s": round(w.end_s, 3),
            "rate_rec_s": None if rate is None else round(rate, 1),
            "vs_steady": None if rate is None or not steady else round(rate / steady, 3),
            "zero_ack_intervals": sum(zero[i] for i in inside),
            "longest_gap_s": _runs([zero[i] for i in inside]) * interval_s,
            # Faults at the same time share the blame for what happened then.
            "overlapping": sorted({o.kind for o in windows if o is not w and o.start_s < w.end_s + interval_s
                                   and w.start_s < o.end_s + interval_s}),
        })
    by_kind: dict[str, dict[str, Any]] = {}
    for f in faults:
        k = by_kind.setdefault(f["kind"], {"windows": 0, "zero_ack_intervals": 0, "longest_gap_s": 0.0,
                                           "worst_vs_steady": None})
        k["windows"] += 1
        k["zero_ack_intervals"] += f["zero_ack_intervals"]
        k["longest_gap_s"] = max(k["longest_gap_s"], f["longest_gap_s"])
        if f["vs_steady"] is not None:
            worst = k["worst_vs_steady"]
            k["worst_vs_steady"] = f["vs_steady"] if worst is None else min(worst, f["vs_steady"])
    unexcused = [t for t, z, x in zip(ends, zero, excused, strict=True) if z and not x]
    return {
        **({"by_zone": _by_zone(samples, interval_s, duration_s)} if any("acked_by_zone" in s for s in samples)
           else {}),
        "interval_s": interval_s,
        "steady_rate_rec_s": None if steady is None else round(steady, 1),
        "zero_ack_intervals": [t for t, z in zip(ends, zero, strict=True) if z],
        "zero_ack_intervals_unexcused": unexcused,
        "longest_gap_s": _runs(zero) * interval_s,
        "longest_unexcused_gap_s": _runs([z and not x for z, x in zip(zero, excused, strict=True)]) * interval_s,
        "by_kind": by_kind,
        "faults": faults,
    }


def _by_zone(samples: Sequence[Mapping[str, Any]], interval_s: float, duration_s: float) -> dict[str, Any]:
    """Each zone's clients alone: the intervals in which they had nothing acknowledged
    (a zone cut off stops its own clients for a while, and must not stop the others')."""
    prev: dict[str, float] = {}
    zero: dict[str, list[float]] = {}
    flags: dict[str, list[bool]] = {}
    for s in samples:
        t = float(s["t"])
        for zone, acked in dict(s.get("acked_by_zone", {})).items():
            if t <= duration_s + 1e-9:
                none = float(acked) - prev.get(zone, 0.0) == 0
                flags.setdefault(zone, []).append(none)
                if none:
                    zero.setdefault(zone, []).append(t)
            prev[zone] = float(acked)
    return {zone: {"zero_ack_intervals": zero.get(zone, []), "longest_gap_s": _runs(f) * interval_s}
            for zone, f in sorted(flags.items())}
