"""Exactly-once processing with llog and SQLite.

The recipe: store the application's output AND the next offset to read in ONE
database transaction; on start, take a fresh exclusive epoch (which fences any zombie
still running) and continue from the offsets in the database. A crash anywhere either
loses the whole transaction (the records are read again) or keeps it (they are not):
every record lands in the output exactly once.

Run it against a running stack (``LLOG_*`` variables set), or with no variables and it
starts a throw-away local etcd + file store itself:

    python examples/exactly_once_sqlite.py
"""

from __future__ import annotations

import os
import sqlite3
import tempfile

import llog
from llog.devstack import EtcdServer, scratch_dir
from llog.groups import Consumer

TOPIC, GROUP = "payments", "ledger"


def process(conn: llog.Connection, db: sqlite3.Connection, max_batches: int | None = None) -> int:
    """Consume until caught up (or ``max_batches``); return rows written."""
    db.execute("create table if not exists output (partition, offset, amount, primary key (partition, offset))")
    db.execute("create table if not exists offsets (topic, partition, next_offset, primary key (topic, partition))")
    written = batches = 0
    with Consumer(conn, GROUP, [TOPIC], exclusive=True) as consumer:
        for topic, partition, nxt in db.execute("select topic, partition, next_offset from offsets"):
            consumer.seek(topic, partition, nxt)
        while max_batches is None or batches < max_batches:
            records = consumer.poll(max_records=100, timeout_s=0.5)
            if not records:
                break
            with db:  # one transaction: output + offsets
                for r in records:
                    db.execute("insert into output values (?, ?, ?)", (r.partition, r.offset, int(r.value)))
                    db.execute(
                        "insert into offsets values (?, ?, ?) on conflict (topic, partition) "
                        "do update set next_offset = excluded.next_offset",
                        (r.topic, r.partition, r.offset + 1),
                    )
            consumer.commit()  # informational for `llog groups describe`; the DB is the truth
            written += len(records)
            batches += 1
    return written


def main() -> None:
    server = None
    if "LLOG_ETCD_ENDPOINTS" not in os.environ:
        work = scratch_dir("llog-example-")
        server = EtcdServer(work)
        server.wait_ready()
        config = llog.LlogConfig(etcd_endpoints=(server.endpoint,), object_store=f"file://{work}/store")
    else:
        config = llog.LlogConfig.from_env()
    try:
        with llog.connect(config) as conn:
            llog.Topics(conn).create(TOPIC, 4)
            with llog.Writer(conn) as w:
                for p in range(4):
                    w.append(TOPIC, p, [str(i).encode() for i in range(250)])
            db = sqlite3.connect(os.path.join(tempfile.mkdtemp(), "ledger.db"))
            first = process(conn, db, max_batches=3)  # "crash" after three batches
            second = process(conn, db)  # restart: fresh epoch, resume from the DB
            total, distinct = db.execute(
                "select count(*), count(distinct partition || '/' || offset) from output"
            ).fetchone()
            print(f"first run {first} rows, restart {second} rows; output {total} rows, {distinct} distinct")
            assert total == distinct == 1000, "every record exactly once"
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
