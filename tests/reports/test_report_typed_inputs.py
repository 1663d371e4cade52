"""The report's sections read typed values (a ReportData, a Page, an Analysis and its parts): none probes
what it was handed with ``getattr`` or ``hasattr``, which would let a section quietly skip a part whose
name changed. A syntax-tree scan, so a comment or a string naming them does not count."""

from __future__ import annotations

import ast
from pathlib import Path

REPORTS = Path(__file__).resolve().parents[2] / "scaling" / "reports"
PROBES = {"getattr", "hasattr"}


def probes(path: Path) -> list[str]:
    """``file:line name`` of each call of a probe in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.name}:{node.lineno} {node.func.id}" for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PROBES]


def test_no_report_module_probes_what_it_was_handed() -> None:
    found = [hit for path in sorted(REPORTS.rglob("*.py")) for hit in probes(path)]
    assert not found, found


def test_the_scan_sees_a_probe(tmp_path: Path) -> None:
    probe = tmp_path / "section.py"
    probe.write_text("def f(data):\n    # getattr(data, 'x') in a comment is no call\n    return hasattr(data, 'sweep_fit')\n")
    assert probes(probe) == ["section.py:3 hasattr"]
