"""The size limits of the code, measured: small functions and modules, few parameters typed ``Any``.

- no function over :data:`MAX_FUNCTION_LINES` lines in ``fitting/``, ``reports/``, ``cli/``,
  ``orchestrator/`` and ``layout.py`` (decorators and docstring included: what a reader has to hold
  at once);
- no module over :data:`MAX_MODULE_LINES` lines anywhere in ``scaling/``;
- fewer than :data:`MAX_ANY_PARAMETERS` parameters annotated plain ``Any`` in ``scaling/`` (``*args``
  and ``**kwargs`` left out): a parameter says what it takes.

The measuring itself is tested on small sources.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SCALING = Path(__file__).resolve().parents[1] / "scaling"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 800
MAX_ANY_PARAMETERS = 100


def modules(under: str = "") -> list[Path]:
    """The modules of a package of ``scaling/`` (``""``: all), or the one module ``under`` names."""
    return [SCALING / under] if under.endswith(".py") else sorted((SCALING / under).rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, lines) of each function or method of ``source`` longer than ``limit`` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            lines = node.end_lineno - first + 1 if node.end_lineno is not None else 0
            if lines > limit:
                found.append((node.name, lines))
    return found


def any_parameters(source: str) -> list[str]:
    """The parameters of ``source``'s functions annotated plain ``Any`` (``*args``/``**kwargs`` aside)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            for arg in a.posonlyargs + a.args + a.kwonlyargs:
                ann = arg.annotation
                if (isinstance(ann, ast.Name) and ann.id == "Any") or (isinstance(ann, ast.Constant)
                                                                      and ann.value == "Any"):
                    found.append(f"{node.name}({arg.arg})")
    return found


def test_the_measures_count_what_they_say() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    assert not long_functions(f"def f():\n{body}\n")  # 80 lines: at the limit
    assert long_functions(f"@decorated\ndef f():\n{body}\n") == [("f", 81)]
    assert long_functions(f"class C:\n    def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n        return 1\n")
    source = ("from typing import Any\n"
              "def f(a: Any, b: 'Any', c: int, *args: Any, d: Any = None, **kw: Any) -> Any: ...\n"
              "def g(x: list[Any], y: Any | None) -> None: ...\n")
    assert any_parameters(source) == ["f(a)", "f(b)", "f(d)"]


def _long_in(under: str) -> list[str]:
    return [f"{path.relative_to(SCALING.parent)}: {name} ({lines} lines)"
            for path in modules(under) for name, lines in long_functions(path.read_text(encoding="utf-8"))]


@pytest.mark.parametrize("under", ["cli", "orchestrator", "layout.py"])
def test_no_long_function(under: str) -> None:
    found = _long_in(under)
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


@pytest.mark.parametrize("under", ["fitting", "reports"])
def test_no_long_function_in_fitting_and_reports(under: str) -> None:
    found = _long_in(under)
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def _long_modules(inside_fitting: bool) -> list[str]:
    out = []
    for path in modules():
        if (SCALING / "fitting" in path.parents) != inside_fitting:
            continue
        lines = path.read_text(encoding="utf-8").count("\n")
        if lines > MAX_MODULE_LINES:
            out.append(f"{path.relative_to(SCALING.parent)}: {lines} lines")
    return out


def test_no_long_module() -> None:
    found = _long_modules(inside_fitting=False)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(found)


def test_no_long_module_in_fitting() -> None:
    found = _long_modules(inside_fitting=True)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(found)


def test_few_parameters_are_typed_any() -> None:
    found = [f"{path.relative_to(SCALING.parent)}: {p}" for path in modules()
             for p in any_parameters(path.read_text(encoding="utf-8"))]
    assert len(found) < MAX_ANY_PARAMETERS, f"{len(found)} parameters typed Any:\n" + "\n".join(found)


#: Where every parameter says what it takes (no new ``Any`` may appear there), and the two left, each
#: with its reason: a Lifecycle's store is a Store, which imports lifecycle (its name would be a
#: cycle); FieldProblem reads a pydantic error duck-typed, so that the errors leaf imports no pydantic.
TYPED = ("db", "orchestrator", "cli", "trainer/spec.py", "trainer/sections.py", "trainer/resolve.py",
         "trainer/adhoc.py", "trainer/simulate.py", "trainer/recorder.py", "fmt.py", "schema.py", "safe_yaml.py",
         "errors.py", "rules.py", "accounting.py", "communication.py", "memory.py", "layout.py", "naming.py",
         "vocab.py", "userfiles.py")
ANY_KEPT = {"scaling/db/lifecycle.py: __init__(store)", "scaling/errors.py: __init__(exc)"}


def test_the_typed_parts_take_no_new_any() -> None:
    paths = [p for part in TYPED for p in modules(part)]
    found = {f"{path.relative_to(SCALING.parent)}: {p}" for path in paths
             for p in any_parameters(path.read_text(encoding="utf-8"))}
    assert found <= ANY_KEPT, "say what these parameters take:\n" + "\n".join(sorted(found - ANY_KEPT))
