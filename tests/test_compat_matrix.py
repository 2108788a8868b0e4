"""The compatibility matrix of docs/kafka.md names tests that exist, and renders what
their last run says."""

from __future__ import annotations

import importlib

from tests import compat_matrix


def test_every_test_the_matrix_names_exists() -> None:
    for client, cells in compat_matrix.MATRIX.items():
        assert set(cells) <= set(compat_matrix.FEATURES), client
        for tests in cells.values():
            for nodeid in tests:
                path, name = nodeid.split("::")
                module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
                assert callable(getattr(module, name, None)), nodeid


def test_a_cell_passes_only_when_all_its_tests_passed() -> None:
    tests = compat_matrix.MATRIX["sarama 1.61"]["produce"] + compat_matrix.MATRIX["kcat (Debian)"]["produce"]
    sarama, kcat = tests[0], tests[-1]
    rows = {line.split(" | ")[0].strip("| "): line for line in compat_matrix.table({
        sarama: {"outcome": "passed"}, kcat: {"outcome": "failed"}}).splitlines()}
    assert "✅" in rows["sarama 1.61"] and "❌" in rows["kcat (Debian)"]
    assert "?" in rows["kafkajs 2.2.4"]  # not run


def test_the_docs_hold_the_matrix_of_every_client() -> None:
    text = compat_matrix.DOCS.read_text()
    block = text.split(compat_matrix.START, 1)[1].split(compat_matrix.END, 1)[0]
    for client in compat_matrix.MATRIX:
        assert f"| {client} |" in block, client


def test_the_schema_matrix_names_a_case_of_every_column_for_every_feature() -> None:
    from tests import schema_matrix
    from tests.test_schema_features import FEATURES

    case = f"{compat_matrix.CASE_CELLS}test_duckdb[{FEATURES[0].id}]"
    assert compat_matrix.tracked(case)
    rendered = schema_matrix.table({case: {"outcome": "failed"}})
    rows = rendered.splitlines()[2:]
    assert len(rows) == len(FEATURES) and "❌" in rows[0] and "❌" not in "".join(rows[1:])
    assert all(row.count("?") >= len(schema_matrix.COLUMNS) - 1 for row in rows)
    block = schema_matrix.DOCS.read_text().split(schema_matrix.START, 1)[1].split(schema_matrix.END, 1)[0]
    for f in FEATURES:
        assert f"| {schema_matrix.FORMATS[f.fmt]} | {f.name} |" in block, f.id
