"""A writer process for the concurrency acceptance test.

    python tests/workers/append_worker.py CHILD_ID THREADS GROUPS SEED TOPIC:PARTITIONS...

Opens one connection (``LLOG_*`` environment), prints ``ready`` and waits for a line
on stdin, so every child starts appending at once. Then ``THREADS`` threads share one
:class:`llog.Writer` and append ``GROUPS`` groups in total through ``append_shared``:
half the calls carry one group, the rest several groups (sometimes two for one
partition) in one shared blob; each group holds 1..``MAX_GROUP`` records with unique
payloads (:func:`payload`). Finally prints one JSON line per outcome:
``{"t", "p", "s", "e", "ids"}`` for an acknowledged group, ``{"t", "p", "error",
"ids"}`` for a failed one, then ``done``.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import zlib

import llog

MAX_GROUP = 8
MAX_GROUPS_PER_CALL = 5


def payload(record_id: str) -> tuple[bytes, bytes | None]:
    """The (value, key) a record id stands for: unique, of varying length, keyed or not."""
    h = zlib.crc32(record_id.encode())
    value = record_id.encode() + b"|" + bytes([h & 0xFF]) * (h % 200)
    return value, (b"k" + record_id.encode() if h & 1 else None)


def _thread(writer: llog.Writer, child: str, tid: int, groups: int, seed: int,
            partitions: list[tuple[str, int]], out: list[dict[str, object]]) -> None:
    rnd = random.Random(seed * 1000 + tid)
    seq = 0
    left = groups
    while left > 0:
        n = 1 if rnd.random() < 0.5 else rnd.randint(2, MAX_GROUPS_PER_CALL)
        n = min(n, left)
        left -= n
        call: list[llog.AppendGroup] = []
        ids: list[list[str]] = []
        for _ in range(n):
            topic, p = rnd.choice(partitions)
            group_ids = [f"{child}.{tid}.{seq}.{j}" for j in range(rnd.randint(1, MAX_GROUP))]
            seq += 1
            recs = [llog.Record(*payload(i)) for i in group_ids]
            call.append(llog.AppendGroup(topic, p, recs))
            ids.append(group_ids)
        for g, res, group_ids in zip(call, writer.append_shared(call), ids, strict=True):
            if isinstance(res, llog.AppendResult):
                out.append({"t": g.topic, "p": g.partition, "s": res.start_offset,
                            "e": res.end_offset, "ids": group_ids})
            else:
                out.append({"t": g.topic, "p": g.partition, "error": repr(res.error), "ids": group_ids})


def main() -> None:
    child, threads, groups, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    partitions = [
        (topic, p)
        for spec in sys.argv[5:]
        for topic, count in [spec.rsplit(":", 1)]
        for p in range(int(count))
    ]
    outs: list[list[dict[str, object]]] = [[] for _ in range(threads)]
    with llog.connect() as conn, llog.Writer(conn, commit_workers=8) as writer:
        for topic, p in partitions:
            conn.check_partition(topic, p)  # warm the topic cache before the start line
        print("ready", flush=True)
        sys.stdin.readline()
        share = [groups // threads + (1 if t < groups % threads else 0) for t in range(threads)]
        workers = [
            threading.Thread(target=_thread, args=(writer, child, t, share[t], seed, partitions, outs[t]))
            for t in range(threads)
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    for o in outs:
        for line in o:
            sys.stdout.write(json.dumps(line) + "\n")
    print("done", flush=True)


if __name__ == "__main__":
    main()
