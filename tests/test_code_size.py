"""Issue 18's size limits on ``llog/`` and ``compactor/``: no class over 300 lines, no
function over 60 (``end_lineno - lineno + 1`` of the AST node, decorators not counted)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MAX_CLASS_LINES = 300
MAX_FUNCTION_LINES = 60


def _oversized(root: Path) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                limit = MAX_CLASS_LINES
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                limit = MAX_FUNCTION_LINES
            else:
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > limit:
                out.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.name}: {lines} lines > {limit}")
    return out


def test_no_class_or_function_in_llog_or_compactor_over_the_limit() -> None:
    assert _oversized(REPO / "llog") + _oversized(REPO / "compactor") == []
