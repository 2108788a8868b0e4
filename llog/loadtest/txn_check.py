"""The transactional workload's check (:mod:`llog.loadtest.transactional`): the input
and both outputs read back with the SDK, every output record traced to its input record
and its transaction, and every anomaly listed, none averaged away."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from llog.connection import Connection
from llog.groups.offsets import GroupOffsets
from llog.loadtest.transactional import OUTPUTS, TxnLog, Workload
from llog.reader import Reader

#: Anomalies listed per kind, at most this many examples each.
EXAMPLES = 20


def _input_number(value: bytes) -> int:
    return int(value.split(b"-", 1)[1])


def check(conn: Connection, w: Workload, txns: TxnLog) -> dict[str, Any]:
    """The verdict: counts, and examples of each anomaly (empty lists: none)."""
    reader = Reader(conn)
    at = {r.value: (p, r.offset) for p in range(w.partitions) for r in reader.scan(w.input, p) if r.value is not None}
    inputs = {v: p for v, (p, _o) in at.items()}
    # Past its partition's committed offset an input record is not yet processed (the
    # drain ran out), not lost: a lost write is one the group's offset moved past.
    offsets = GroupOffsets(conn, w.group)
    committed = {p: c.offset for p in range(w.partitions) if (c := offsets.get(w.input, p)) is not None}
    unprocessed = {v for v, (p, o) in at.items() if o >= committed.get(p, 0)}
    seen: dict[str, Counter[bytes]] = {}
    where: dict[str, dict[bytes, list[str]]] = {}  # output value -> "partition@offset tag" of each copy
    per_tag: dict[str, Counter[str]] = {}
    out_of_order: list[str] = []
    for which in OUTPUTS:
        seen[which], per_tag[which], where[which] = Counter(), Counter(), defaultdict(list)
        for p in range(w.partitions):
            last = -1
            for r in reader.scan(w.output(which), p):
                value, _, tag = (r.value or b"").rpartition(b"|")
                seen[which][value] += 1
                per_tag[which][tag.decode()] += 1
                where[which][value].append(f"{p}@{r.offset} {tag.decode()}")
                n = _input_number(value) if value.startswith(b"in-") else -1
                if inputs.get(value) != p or n < last:
                    out_of_order.append(f"{which}/{p}@{r.offset}: {value!r} after in-{last}")
                last = max(last, n)
    anomalies = {
        "lost": [f"{v!r} (input {at[v][0]}@{at[v][1]}, committed past it) not in {which}" for which in OUTPUTS
                 for v in inputs if seen[which][v] == 0 and v not in unprocessed],
        "duplicated": [f"{v!r} {n}x in {which}: {', '.join(where[which][v])}" for which in OUTPUTS
                       for v, n in seen[which].items() if n > 1],
        "unexpected": [f"{v!r} in {which}" for which in OUTPUTS for v in seen[which] if v not in inputs],
        "aborted_read": [f"{t} ({n} records in {which})" for which in OUTPUTS for t, n in per_tag[which].items()
                         if txns.outcomes.get(t, ("", 0))[0] == "aborted"],
        "torn": _torn(txns, per_tag),
        "out_of_order": out_of_order,
    }
    return {
        "input_records": len(inputs),
        "unprocessed_records": len(unprocessed),
        "output_records": {which: sum(seen[which].values()) for which in OUTPUTS},
        "transactions": txns.counts(),
        "anomaly_counts": {k: len(v) for k, v in anomalies.items()},
        "anomalies": {k: v[:EXAMPLES] for k, v in anomalies.items()},
        "ok": not any(anomalies.values()),
    }


def _torn(txns: TxnLog, per_tag: dict[str, Counter[str]]) -> list[str]:
    """Transactions seen in part: a committed one not whole in both outputs, any one
    whose records differ between the outputs or from what it wrote."""
    out = []
    tags: defaultdict[str, dict[str, int]] = defaultdict(dict)
    for which in OUTPUTS:
        for t, n in per_tag[which].items():
            tags[t][which] = n
    for t, (outcome, n) in txns.outcomes.items():
        got = [tags.get(t, {}).get(which, 0) for which in OUTPUTS]
        whole = got == [n] * len(OUTPUTS)
        if (outcome == "committed" and not whole) or (outcome == "unknown" and not whole and any(got)):
            out.append(f"{t} ({outcome}, {n} records): {dict(zip(OUTPUTS, got, strict=True))}")
    out += [f"{t}: written by no transaction a worker ran ({d})" for t, d in tags.items() if t not in txns.outcomes]
    return out
