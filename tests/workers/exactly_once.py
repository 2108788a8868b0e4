"""The exactly-once recipe, run as a child process (see examples/exactly_once_sqlite.py).

    python tests/workers/exactly_once.py GROUP TOPIC DB_PATH

Output and offsets are stored in one SQLite transaction; on start the consumer takes
a fresh epoch (fencing any zombie) and seeks to the offsets stored in the database.
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import threading

import llog
from llog.groups import Consumer


def main() -> None:
    group, topic, db_path = sys.argv[1:4]
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    db = sqlite3.connect(db_path, isolation_level=None)
    db.execute(
        "create table if not exists output (topic, partition, offset, value, primary key (topic, partition, offset))"
    )
    db.execute("create table if not exists offsets (topic, partition, next_offset, primary key (topic, partition))")
    with llog.connect() as conn, Consumer(conn, group, [topic], exclusive=True) as consumer:
        for t, p, nxt in db.execute("select topic, partition, next_offset from offsets"):
            consumer.seek(t, p, nxt)
        print("started", flush=True)
        while not stop.is_set():
            recs = consumer.poll(max_records=20, timeout_s=0.2)
            if not recs:
                continue
            db.execute("begin immediate")
            for r in recs:
                db.execute(
                    "insert into output values (?, ?, ?, ?)", (r.topic, r.partition, r.offset, r.value)
                )
                db.execute(
                    "insert into offsets values (?, ?, ?) on conflict (topic, partition)"
                    " do update set next_offset = excluded.next_offset",
                    (r.topic, r.partition, r.offset + 1),
                )
            db.execute("commit")
            consumer.commit()


if __name__ == "__main__":
    main()
