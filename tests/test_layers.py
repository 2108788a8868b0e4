"""The layers docs/architecture.md states are the code's (tests/layers.py): every
module in exactly one layer, imports only from its layer and those above it, no import
cycle (type-checking and function-level imports included), and the page's table is
the one generated from the definition."""

from __future__ import annotations

from pathlib import Path

from tests import layers


def test_every_module_is_in_exactly_one_layer() -> None:
    placed = {name: layers.layer_of(path) for name, path in layers.modules().items()}
    assert {name: found for name, found in placed.items() if len(found) != 1} == {}


def test_modules_import_only_from_their_layer_and_those_above() -> None:
    known = layers.modules()
    level = {name: layers.layer_of(path)[0] for name, path in known.items()}
    upward = sorted(
        f"{name} ({layers.LAYERS[level[name]].name}) imports {target} ({layers.LAYERS[level[target]].name})"
        for name, targets in layers.graph().items() for target in targets if level[target] > level[name]
    )
    assert upward == []


def test_no_import_cycle() -> None:
    assert layers.cycles(layers.graph()) == []


def test_the_cycle_check_sees_type_checking_and_function_level_imports(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.py", tmp_path / "b.py", tmp_path / "c.py"
    a.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\n")
    b.write_text("def f() -> None:\n    from pkg.c import g\n")
    c.write_text("import pkg.a\n")
    known = {"pkg.a": a, "pkg.b": b, "pkg.c": c}
    g = {name: layers.imports(name, path, known) for name, path in known.items()}
    assert g == {"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert layers.cycles(g) == [["pkg.a", "pkg.b", "pkg.c"]]
    c.write_text("")
    assert layers.cycles({name: layers.imports(name, path, known) for name, path in known.items()}) == []


def test_the_architecture_page_shows_the_layers_as_defined() -> None:
    assert layers.documented() == layers.table(), "run `python -m tests.layers --write`"
