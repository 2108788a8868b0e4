"""The Kafka compatibility matrix of docs/kafka.md: which tests prove which client can
do what against llog's Kafka listener. ``tests/conftest.py`` records the outcome of
these tests in ``.cache/compat-matrix.json`` on every run (a cell keeps the result of
the last run that ran its tests); ``make matrix`` runs them all and rewrites the table
between the markers in docs/kafka.md from that record."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / ".cache" / "compat-matrix.json"
DOCS = ROOT / "docs" / "kafka.md"
START, END = "<!-- compat-matrix:start -->", "<!-- compat-matrix:end -->"

FEATURES = ("admin", "produce", "codecs", "idempotent", "consume", "groups", "compacted")

_K = "tests/test_kafka.py::"
_COMPACTED = "tests/test_compacted_topics.py::"
_DELETE = "tests/test_delete_topics.py::test_kafka_admin_clients_and_kafka_topics_delete"
_CONNECT = ("tests/test_kafka_connect.py::test_connect_distributed_copies_a_file_through_a_topic_and_resumes",)
#: client -> feature -> the tests (node ids; a parametrized test stands for all its cases).
MATRIX: dict[str, dict[str, tuple[str, ...]]] = {
    "librdkafka (confluent-kafka)": {
        "admin": (f"{_K}test_admin_client_describes_configs_cluster_and_groups",
                  f"{_K}test_list_offsets_and_create_topics",
                  "tests/test_kafka_configs.py::test_incremental_alter_configs_sets_and_deletes_retention", _DELETE),
        "produce": (f"{_K}test_confluent_kafka_produces_100k_records_with_every_codec",),
        "codecs": (f"{_K}test_confluent_kafka_produces_100k_records_with_every_codec",),
        "idempotent": (f"{_K}test_idempotent_producer_across_a_broker_kill_writes_each_record_once",),
        "consume": (f"{_K}test_confluent_kafka_reads_what_the_sdk_wrote",),
        "groups": (f"{_K}test_consumer_group_rebalances_when_a_member_is_killed",),
        "compacted": (f"{_COMPACTED}test_kafka_clients_create_alter_and_produce_to_compacted_topics",
                      f"{_COMPACTED}test_a_million_records_over_ten_thousand_keys_compact_to_the_latest_of_each"),
    },
    "kafka-python": {
        "admin": ("tests/test_kafka_configs.py::test_kafka_python_alter_configs_keeps_what_it_does_not_name", _DELETE),
        "produce": (f"{_K}test_kafka_python_produce_and_fetch_round_trip",),
        "idempotent": (f"{_K}test_kafka_producer_ids_count_sequences_in_records",),
        "consume": (f"{_K}test_kafka_python_produce_and_fetch_round_trip",),
        "groups": (f"{_K}test_kafka_python_group_of_two_shares_the_partitions",),
    },
    "aiokafka": {
        "produce": (f"{_K}test_aiokafka_produces_and_consumes_in_a_group",),
        "consume": (f"{_K}test_aiokafka_produces_and_consumes_in_a_group",),
        "groups": (f"{_K}test_aiokafka_produces_and_consumes_in_a_group",),
    },
    "Java client (kafka-clients 4.1.1)": {
        "admin": ("tests/test_kafka_java.py::test_java_admin_creates_a_topic_the_sdk_sees",),
        "produce": ("tests/test_kafka_java.py::test_java_producer_writes_what_the_sdk_reads",),
        "codecs": ("tests/test_kafka_java.py::test_java_producer_writes_what_the_sdk_reads",),
        "idempotent": ("tests/test_kafka_java.py::test_java_producer_writes_what_the_sdk_reads",),
        "consume": ("tests/test_kafka_java.py::test_java_consumer_group_reads_what_the_sdk_wrote_and_commits",),
        "groups": ("tests/test_kafka_java.py::test_java_consumer_group_reads_what_the_sdk_wrote_and_commits",
                   "tests/test_kafka_java.py::test_java_consumers_share_a_topic_with_the_cooperative_sticky_assignor"),
        "compacted": (f"{_COMPACTED}test_a_million_records_over_ten_thousand_keys_compact_to_the_latest_of_each",),
    },
    "Kafka's tools (4.1.1)": {
        "admin": ("tests/test_kafka_tools.py::test_topics_producer_consumer_and_offsets",
                  "tests/test_kafka_tools.py::test_kafka_configs_alters_retention_and_the_cleanup_policy",
                  "tests/test_add_partitions.py::test_create_partitions_through_kafka", _DELETE),
        "produce": ("tests/test_kafka_tools.py::test_verifiable_producer_consumer_and_producer_perf_test",),
        "idempotent": (
            "tests/test_kafka_tools.py::test_kafka_transactions_describes_a_partitions_idempotent_producers",),
        "consume": ("tests/test_kafka_tools.py::test_topics_producer_consumer_and_offsets",),
        "groups": ("tests/test_kafka_tools.py::test_consumer_groups_list_describe_reset_and_delete",),
        "compacted": ("tests/test_kafka_tools.py::test_kafka_configs_alters_retention_and_the_cleanup_policy",),
    },
    "Kafka Streams (4.1.1)": {
        "produce": ("tests/test_kafka_streams.py::test_streams_word_count_matches_python",),
        "consume": ("tests/test_kafka_streams.py::test_streams_word_count_matches_python",),
        "groups": ("tests/test_kafka_streams.py::test_streams_word_count_matches_python",),
        "compacted": ("tests/test_kafka_streams.py::test_streams_word_count_matches_python",),
    },
    "Kafka Connect (4.1.1, distributed)": dict.fromkeys(("admin", "produce", "consume", "groups", "compacted"),
                                                        _CONNECT),
    "Spark's Kafka source and sink (4.2.0)": {
        "produce": ("tests/test_spark_kafka.py::test_spark_kafka_source_and_sink_in_one_job",),
        "consume": ("tests/test_spark_kafka.py::test_spark_kafka_source_and_sink_in_one_job",),
    },
    "franz-go 1.22 (kadm)": {
        "admin": ("tests/test_kafka_go.py::test_franz_go_admin_produce_group_and_lag",),
        "produce": ("tests/test_kafka_go.py::test_franz_go_admin_produce_group_and_lag",),
        "codecs": ("tests/test_kafka_go.py::test_franz_go_admin_produce_group_and_lag",),
        "consume": ("tests/test_kafka_go.py::test_franz_go_admin_produce_group_and_lag",),
        "groups": ("tests/test_kafka_go.py::test_franz_go_admin_produce_group_and_lag",),
    },
    "sarama 1.61": {
        "admin": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
        "produce": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
        "codecs": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
        "idempotent": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
        "consume": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
        "groups": ("tests/test_kafka_go.py::test_sarama_admin_idempotent_produce_and_group",),
    },
    "kafkajs 2.2.4": {
        "admin": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
        "produce": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
        "codecs": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
        "idempotent": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
        "consume": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
        "groups": ("tests/test_kafka_js.py::test_kafkajs_admin_produce_and_group",),
    },
    "kcat (Debian)": {
        "admin": ("tests/test_kcat.py::test_kcat_metadata_produce_consume_group_and_offsets",),
        "produce": ("tests/test_kcat.py::test_kcat_metadata_produce_consume_group_and_offsets",),
        "codecs": ("tests/test_kcat.py::test_kcat_metadata_produce_consume_group_and_offsets",),
        "consume": ("tests/test_kcat.py::test_kcat_metadata_produce_consume_group_and_offsets",),
        "groups": ("tests/test_kcat.py::test_kcat_metadata_produce_consume_group_and_offsets",),
    },
}


def files() -> list[str]:
    """The test files the matrix draws on."""
    return sorted({t.split("::", 1)[0] for cells in MATRIX.values() for tests in cells.values() for t in tests})


#: The schema-feature matrix's tests (tests/schema_matrix.py): one cell a case, kept
#: case by case in the same record.
CASE_CELLS = "tests/test_schema_features.py::"


def tracked(nodeid: str) -> bool:
    """Whether ``nodeid`` (a case of a parametrized test too) is one of a matrix's."""
    base = nodeid.split("[", 1)[0]
    return nodeid.startswith(CASE_CELLS) or any(base in tests for cells in MATRIX.values() for tests in cells.values())


def record(outcomes: Mapping[str, str]) -> None:
    """Merge this run's outcomes (``passed``, ``failed``, ``skipped`` by node id) into
    the record, each test's cases folded into one (any failure fails it) but for the
    schema matrix's, which are cells each."""
    if not outcomes:
        return
    data = json.loads(RECORD.read_text()) if RECORD.exists() else {}
    folded: dict[str, str] = {}
    for nodeid, outcome in outcomes.items():
        base = nodeid if nodeid.startswith(CASE_CELLS) else nodeid.split("[", 1)[0]
        if folded.get(base) != "failed" and (folded.get(base) != "passed" or outcome == "failed"):
            folded[base] = outcome
    commit = _commit()
    data.update({k: {"outcome": v, "at": _now(), "commit": commit} for k, v in folded.items()})
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(data, indent=1, sort_keys=True))


def table(data: Mapping[str, Mapping[str, str]]) -> str:
    """The matrix as Markdown: ✅ every test of the cell passed in its last run, ❌ one
    failed, ⏭ skipped, ? not run yet, blank: not covered."""
    def cell(tests: tuple[str, ...] | None) -> str:
        if not tests:
            return ""
        got = [data.get(t, {}).get("outcome") for t in tests]
        if "failed" in got:
            return "❌"
        if None in got:
            return "?"
        return "⏭" if "skipped" in got else "✅"

    lines = ["| client | " + " | ".join(FEATURES) + " |", "|---|" + "---|" * len(FEATURES)]
    lines += [f"| {client} | " + " | ".join(cell(cells.get(f)) for f in FEATURES) + " |"
              for client, cells in MATRIX.items()]
    return "\n".join(lines)


def recorded() -> dict[str, dict[str, str]]:
    """The record: each tracked test's (or schema-matrix case's) last outcome."""
    return json.loads(RECORD.read_text()) if RECORD.exists() else {}


def render(docs: Path, start: str, end: str, rendered: str, data: Mapping[str, Mapping[str, str]],
           run_at: str | None = None) -> None:
    """Put ``rendered`` (a matrix as Markdown) between the markers of ``docs``, saying
    which commits its results ran at (``run_at`` for results recorded without)."""
    commits = sorted({str(v.get("commit") or run_at or _commit()) for v in data.values()})
    text = docs.read_text()
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    block = (f"{start}\n{rendered}\n\nRendered by `make matrix` on {_now()[:10]} from the suite's last run of "
             f"each test (at commit {', '.join(commits)}; ✅ passed, ❌ failed, ⏭ skipped; blank: not covered)."
             f"\n{end}")
    docs.write_text(head + block + tail)


def write_docs(run_at: str | None = None) -> None:
    """Rewrite the table between the markers of docs/kafka.md from the record."""
    data = recorded()
    kafka = {k: v for k, v in data.items() if not k.startswith(CASE_CELLS)}
    render(DOCS, START, END, table(data), kafka, run_at)


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


if __name__ == "__main__":
    import sys

    write_docs(sys.argv[1] if len(sys.argv) > 1 else None)
