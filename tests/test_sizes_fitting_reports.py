"""fitting/ and reports/ stay readable: no function over 80 lines, no module over 800 (measured on the source)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "scaling"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800


def _modules(folder: str) -> list[Path]:
    return sorted((PACKAGE / folder).rglob("*.py"))


def _long_functions(source: str) -> list[tuple[str, int]]:
    return [(node.name, node.end_lineno - node.lineno + 1) for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


@pytest.mark.parametrize("folder", ["fitting", "reports"])
def test_no_function_or_module_is_too_long(folder: str) -> None:
    too_long = []
    for path in _modules(folder):
        source = path.read_text()
        lines = len(source.splitlines())
        where = path.relative_to(PACKAGE.parent)
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{where}: {lines} lines (at most {MAX_MODULE_LINES})")
        too_long += [f"{where}: {name}() is {n} lines (at most {MAX_FUNCTION_LINES})"
                     for name, n in _long_functions(source)]
    assert not too_long, "\n".join(too_long)


def test_the_measure_finds_a_long_function() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    assert _long_functions(f"def f():\n{body}\n") == [("f", MAX_FUNCTION_LINES + 1)]
