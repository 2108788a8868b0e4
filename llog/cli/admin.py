"""``llog topics create|alter|delete|delete-records|list|describe``, ``llog fence`` and
``llog unfence``."""

from __future__ import annotations

import argparse
from typing import Any

from llog.cli import values
from llog.cli.common import connection_from_args, print_json
from llog.codec.etcd_values.topic import VALUE_SCHEMA_MODES, VALUE_VALIDATIONS
from llog.connection import Connection
from llog.errors import InvalidInput, LlogError
from llog.table import TableCatalog, delete_topic, sync_table
from llog.topic.admin import UNCHANGED, Topics


def register(subparsers: Any) -> None:
    topics = subparsers.add_parser("topics", help="create, alter, delete, list and describe topics")
    tsub = topics.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    _register_create(tsub)
    _register_alter(tsub)

    p = tsub.add_parser("delete", help="delete a topic, its offsets and its table (its data goes with vacuum)")
    p.add_argument("topic", type=values.topic)
    p.set_defaults(func=_delete)

    p = tsub.add_parser("delete-records", help="move a partition's log start offset up (Kafka's DeleteRecords)")
    p.add_argument("topic", type=values.topic)
    p.add_argument("partition", type=values.partition)
    p.add_argument("--before", type=values.non_negative_int,
                   help="delete the records below this offset (default: all, up to the next offset)")
    p.set_defaults(func=_delete_records)

    p = tsub.add_parser("list", help="list topics")
    p.set_defaults(func=_list)

    p = tsub.add_parser("describe", help="per-partition offsets, pending, index keys, compaction")
    p.add_argument("topic", type=values.topic)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--sync-table", action="store_true",
                   help="bring a table topic's Iceberg table to the index first (the compactor service does "
                        "it every LLOG_ICEBERG_SYNC_INTERVAL_S)")
    p.set_defaults(func=_describe)

    for name, helptext in (("fence", "stop appends to a partition"), ("unfence", "allow appends again")):
        p = subparsers.add_parser(name, help=helptext)
        p.add_argument("topic", type=values.topic)
        p.add_argument("partition", type=values.partition)
        p.set_defaults(func=_fence, state=name)


def _register_create(tsub: Any) -> None:
    p = tsub.add_parser("create", help="create a topic (idempotent for the same partition count)")
    p.add_argument("topic", type=values.topic)
    p.add_argument("-p", "--partitions", type=values.partition_count, default=1)
    p.add_argument("--retention-ms", type=values.positive_int, help="drop records older than this")
    p.add_argument("--retention-bytes", type=values.positive_int,
                   help="drop a partition's oldest files while what remains is at least this many bytes "
                        "(Kafka's retention.bytes)")
    p.add_argument("--compacted-format", choices=FORMATS, default="bytes-batch-v1",
                   help="what the compactor writes: llog's own bodies, or Parquet files any Parquet reader can "
                        "query (needs pyarrow where the compactor and readers run)")
    p.add_argument("--table", choices=("iceberg",),
                   help="also keep the compacted Parquet files as an Iceberg table (implies --compacted-format "
                        "parquet; catalog: LLOG_ICEBERG_CATALOG_URI)")
    p.add_argument("--cleanup-policy", choices=POLICIES, default="delete", help=POLICY_HELP)
    p.add_argument("--min-compaction-lag-ms", type=values.non_negative_int, help=LAG_HELP)
    p.add_argument("--delete-retention-ms", type=values.non_negative_int, help=TOMBSTONE_HELP)
    p.add_argument("--value-schema", choices=VALUE_SCHEMA_MODES, help=VALUE_SCHEMA_HELP)
    p.add_argument("--value-validation", choices=VALUE_VALIDATIONS, help=VALIDATION_HELP)
    p.set_defaults(func=_create)


def _register_alter(tsub: Any) -> None:
    p = tsub.add_parser("alter", help="grow a topic; change its retention, compacted format or table")
    p.add_argument("topic", type=values.topic)
    p.add_argument("-p", "--partitions", type=values.partition_count,
                   help="grow to this many partitions (never fewer; keyed records may map elsewhere after)")
    p.add_argument("--retention-ms", type=values.limit, default=UNCHANGED,
                   help="drop records older than this; none: keep them (from the compactor's next retention pass)")
    p.add_argument("--retention-bytes", type=values.limit, default=UNCHANGED,
                   help="drop a partition's oldest files while what remains is at least this many bytes; "
                        "none: no limit")
    p.add_argument("--compacted-format", choices=FORMATS)
    p.add_argument("--cleanup-policy", choices=POLICIES, help=POLICY_HELP)
    p.add_argument("--min-compaction-lag-ms", type=values.non_negative_int, default=UNCHANGED, help=LAG_HELP)
    p.add_argument("--delete-retention-ms", type=values.non_negative_int, default=UNCHANGED, help=TOMBSTONE_HELP)
    p.add_argument("--table", choices=("iceberg", "none"),
                   help="iceberg: start an Iceberg table of the compacted Parquet files; none: stop and drop it "
                        "from the catalog (the files stay, the index still names them)")
    p.add_argument("--value-schema", choices=(*VALUE_SCHEMA_MODES, "none"), help=VALUE_SCHEMA_HELP)
    p.add_argument("--value-validation", choices=(*VALUE_VALIDATIONS, "none"),
                   help=VALIDATION_HELP + " (with --value-schema; none: stop checking)")
    p.set_defaults(func=_alter)


VALIDATION_HELP = ("check produced values against the schema: refuse a batch with a bad value, or move bad "
                   "values to the dead-letter topic TOPIC~dlq")
VALUE_SCHEMA_HELP = ("how values name their schema in the registry (subject TOPIC-value): schema-id "
                     "(Confluent's serializers' wire format) or latest (no prefix); a table then has typed columns")


def _value_schema(mode: str | None) -> str:
    return {"schema-id": "carry a schema id", "latest": "use the subject's latest schema"}.get(
        mode or "", "are opaque bytes")


def _create(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        meta = Topics(conn).create(
            args.topic,
            args.partitions,
            retention_ms=args.retention_ms,
            retention_bytes=args.retention_bytes,
            compacted_format=_format(args.compacted_format),
            table=args.table,
            cleanup_policy=args.cleanup_policy,
            min_compaction_lag_ms=args.min_compaction_lag_ms,
            delete_retention_ms=args.delete_retention_ms,
            value_schema=args.value_schema,
            value_validation=args.value_validation,
        )
    print(f"topic {meta.name}: {meta.partitions} partition(s)" + (f", {meta.table} table" if meta.table else "")
          + (f", cleanup.policy {meta.cleanup_policy}" if meta.cleanup_policy else ""))
    return 0


def _alter(args: argparse.Namespace) -> int:
    settings = {name: getattr(args, name) for name in ("retention_ms", "retention_bytes", "min_compaction_lag_ms",
                                                       "delete_retention_ms") if getattr(args, name) is not UNCHANGED}
    if args.cleanup_policy is not None:
        settings["cleanup_policy"] = args.cleanup_policy
    if (args.compacted_format is None and args.table is None and args.value_schema is None
            and args.value_validation is None and not settings and args.partitions is None):
        raise InvalidInput("give --partitions, --retention-ms, --retention-bytes, --cleanup-policy, "
                           "--min-compaction-lag-ms, --delete-retention-ms, --compacted-format, --table or "
                           "--value-schema")
    with connection_from_args(args) as conn:
        topics = Topics(conn)
        if args.partitions is not None:
            meta = topics.add_partitions(args.topic, args.partitions)
            print(f"topic {meta.name}: {meta.partitions} partitions")
        if settings:
            meta = topics.configure(args.topic, **settings)
            print(f"topic {meta.name}: cleanup.policy {meta.cleanup_policy or 'delete'}, retention "
                  f"{_limit(meta.retention_ms, 'ms')}, {_limit(meta.retention_bytes, 'bytes')} per partition"
                  f"{'' if meta.retained else ' (not applied: no delete policy)'}"
                  + (f"; min.compaction.lag.ms {meta.compaction_lag_ms}, delete.retention.ms "
                     f"{meta.tombstone_retention_ms}" if meta.compacted else ""))
        if args.table == "none":
            meta = topics.set_table(args.topic, None)
            with TableCatalog(conn) as tables:
                dropped = tables.drop(args.topic)
            print(f"topic {meta.name}: no table; {tables.identifier(args.topic)} "
                  + ("dropped from the catalog" if dropped else "was not in the catalog"))
        elif args.table is not None:
            meta = topics.set_table(args.topic, args.table)
            print(f"topic {meta.name}: {meta.table} table from the next sync on")
        if args.compacted_format is not None:
            meta = topics.set_compacted_format(args.topic, _format(args.compacted_format))
        if args.value_schema is not None or args.value_validation is not None:
            current = conn.topic(args.topic, refresh=True)
            mode = current.value_schema if args.value_schema is None else args.value_schema
            check = current.value_validation if args.value_validation is None else args.value_validation
            meta = topics.set_value_schema(args.topic, None if mode == "none" else mode,
                                           None if check == "none" or mode == "none" else check)
            print(f"topic {meta.name}: values {_value_schema(meta.value_schema)}"
                  + (f", checked at produce ({meta.value_validation})" if meta.value_validation else ""))
    if args.compacted_format is not None or args.table is not None:
        print(f"topic {meta.name}: compacted ranges are written as {meta.compacted_format or 'bytes-batch-v1'} "
              "from the next compaction on")
    return 0


def _delete(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        meta = delete_topic(conn, args.topic)
    print(f"deleted topic {meta.name} ({meta.partitions} partitions); vacuum removes its data objects")
    return 0


def _delete_records(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        start = Topics(conn).delete_records(args.topic, args.partition, args.before)
    print(f"{args.topic}/{args.partition}: log start offset {start}")
    return 0


def _limit(value: int | None, unit: str) -> str:
    return f"no {unit} limit" if value is None else f"{value} {unit}"


#: ``--compacted-format`` choices; the first is the default (stored as no value).
FORMATS = ("bytes-batch-v1", "parquet")
#: ``--cleanup-policy`` choices (Kafka's ``cleanup.policy``).
POLICIES = ("delete", "compact", "compact,delete")
POLICY_HELP = ("Kafka's cleanup.policy: delete (retention only), compact (every record needs a key; the compactor "
               "keeps the latest record per key; no retention) or compact,delete")
LAG_HELP = "a compacted topic's records this new (ms) are never removed (Kafka's min.compaction.lag.ms; default 0)"
TOMBSTONE_HELP = ("how long (ms) a compacted topic keeps a tombstone once compaction passed it (Kafka's "
                  "delete.retention.ms; default 86400000)")


def _format(choice: str) -> str | None:
    return None if choice == FORMATS[0] else choice


def _list(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        for meta in Topics(conn).list():
            print(f"{meta.name}\t{meta.partitions}")
    return 0


def _table_info(conn: Connection, topic: str, sync: bool) -> dict[str, object] | None:
    """The topic's table as ``describe`` shows it, synced first if asked; a catalog that
    fails is shown as ``{"error": ...}`` beside the partitions, which need no catalog."""
    try:
        with TableCatalog(conn) as tables:
            if sync:
                sync_table(tables, topic)
            info = tables.describe(topic)
    except LlogError as exc:
        return {"error": str(exc)}
    return None if info is None else info.to_json()


def _describe(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        desc = Topics(conn).describe(args.topic)
        table = _table_info(conn, args.topic, args.sync_table) if desc.meta.table else None
    rows = [
        {
            "partition": p.partition,
            "state": p.log_state,
            "log_start_offset": p.log_start_offset,
            "next_offset": p.next_offset,
            "pending": None if p.pending is None else p.pending.append_id,
            "index_keys": p.index_keys,
            "compaction_cursor": p.compaction_cursor,
            "compaction_lag": p.compaction_lag,
            "last_compaction_ms": p.last_compaction_ms,
            "damaged": len(p.damaged),
        }
        for p in desc.partitions
    ]
    damaged: list[dict[str, Any]] = [
        {"partition": p.partition, "start_offset": d.start_offset, "end_offset": end, "data_key": d.data_key,
         "byte_offset": d.byte_offset, "byte_length": d.byte_length, "reason": d.reason,
         "found_at_ms": d.found_at_ms}
        for p in desc.partitions for end, d in p.damaged
    ]
    if args.json:
        print_json({
            "topic": desc.meta.name,
            "partitions": desc.meta.partitions,
            "retention_ms": desc.meta.retention_ms,
            "retention_bytes": desc.meta.retention_bytes,
            "cleanup_policy": desc.meta.cleanup_policy or POLICIES[0],
            "min_compaction_lag_ms": desc.meta.compaction_lag_ms,
            "delete_retention_ms": desc.meta.tombstone_retention_ms,
            "compacted_format": desc.meta.compacted_format or FORMATS[0],
            "table": table,
            "partition_info": rows,
            "damaged_ranges": damaged,
        })
        return 0
    if table is not None and "error" in table:
        print(f"table: {table['error']}")
    elif table is not None:
        print(f"table: {table['identifier']} at {table['location']}, snapshot {table['snapshot_id']}, "
              f"{table['files']} files, {table['rows']} rows, {table['bytes']} bytes (catalog {table['catalog']})")
    elif desc.meta.table:
        print("table: not created yet (the first sync creates it)")
    cols = list(rows[0]) if rows else []
    print("\t".join(cols))
    for r in rows:
        print("\t".join("-" if r[c] is None else str(r[c]) for c in cols))
    for d in damaged:  # every reader of these offsets gets CorruptBlob
        print(f"damaged: partition {d['partition']} offsets [{d['start_offset']}, {d['end_offset']}] in "
              f"{d['data_key']} bytes [{d['byte_offset']}, {d['byte_offset'] + d['byte_length']}): {d['reason']}")
    return 0


def _fence(args: argparse.Namespace) -> int:
    with connection_from_args(args) as conn:
        topics = Topics(conn)
        st = (topics.fence if args.state == "fence" else topics.unfence)(args.topic, args.partition)
    print(f"{args.topic}/{args.partition}: {st.control.log_state}")
    return 0
