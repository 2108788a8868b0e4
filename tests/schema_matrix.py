"""The schema-feature matrix of docs/schema-registry.md: one row per feature of
tests/test_schema_features.py, one column per test function there, each cell one case
(``test_{column}[{format}:{feature}]``). Outcomes are kept in the same record as the
Kafka client matrix (tests/compat_matrix.py); ``make matrix`` runs the tests and
rewrites the table between the markers."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from tests import compat_matrix

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs" / "schema-registry.md"
START, END = "<!-- schema-matrix:start -->", "<!-- schema-matrix:end -->"
#: Column heading -> the test function whose cases fill it.
COLUMNS = {"register": "test_register", "round trip": "test_round_trip", "typed column": "test_typed_column",
           "pyiceberg": "test_pyiceberg", "DuckDB": "test_duckdb", "Spark `read_table`": "test_spark"}
FORMATS = {"avro": "Avro", "json": "JSON Schema", "protobuf": "Protobuf"}


def cell(data: Mapping[str, Mapping[str, str]], function: str, case: str) -> str:
    got = data.get(f"{compat_matrix.CASE_CELLS}{function}[{case}]", {}).get("outcome")
    return {"passed": "✅", "failed": "❌", "skipped": "⏭"}.get(got or "", "?")


def table(data: Mapping[str, Mapping[str, str]]) -> str:
    """The matrix as Markdown: a row per feature, its column type and fallback last."""
    from tests.test_schema_features import FEATURES

    lines = ["| format | feature | " + " | ".join(COLUMNS) + " | column | fallback |",
             "|---|---|" + "---|" * (len(COLUMNS) + 2)]
    for f in FEATURES:
        cells = " | ".join(cell(data, fn, f.id) for fn in COLUMNS.values())
        lines.append(f"| {FORMATS[f.fmt]} | {f.name} | {cells} | `{f.column}` | {f.fallback} |")
    return "\n".join(lines)


def write_docs(run_at: str | None = None) -> None:
    data = compat_matrix.recorded()
    mine = {k: v for k, v in data.items() if k.startswith(compat_matrix.CASE_CELLS)}
    compat_matrix.render(DOCS, START, END, table(data), mine, run_at)


if __name__ == "__main__":
    import sys

    write_docs(sys.argv[1] if len(sys.argv) > 1 else None)
