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
