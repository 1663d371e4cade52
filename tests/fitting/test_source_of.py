"""One path from what a user names (``--db``/``db``, ``--sweep``/``sweep``, ``--csv``/``csv``) to what is
analysed: :func:`scaling.fitting.source_of`, shared by `scaling fit`, `scaling recommend` and the notebook API."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from scaling.fitting import CsvSource, SweepSource, source_of

ROOT = Path(__file__).resolve().parents[2]


def test_a_csv_is_read_with_its_options_and_a_sweep_from_the_database_named(monkeypatch: pytest.MonkeyPatch,
                                                                            tmp_path: Path) -> None:
    assert source_of(None, None, tmp_path / "p.csv", flops_convention="given", loss_units="bits") == CsvSource(
        str(tmp_path / "p.csv"), flops_convention="given", loss_units="bits")
    monkeypatch.setenv("SCALING_DB", f"sqlite:///{tmp_path / 'env.db'}")
    assert source_of(None, "s") == SweepSource(f"sqlite:///{tmp_path / 'env.db'}", "s")
    assert source_of(f"sqlite:///{tmp_path / 'cli.db'}", None) == SweepSource(f"sqlite:///{tmp_path / 'cli.db'}")
    with pytest.raises(TypeError, match="read a CSV only"):
        source_of(None, "s", flops_convention="given")


@pytest.mark.parametrize("path", ["scaling/api.py", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "scaling/cli").glob("*.py"))])
def test_the_cli_and_the_api_name_no_source_by_hand(path: str) -> None:
    """Neither the CLI nor the API builds a CsvSource or a SweepSource itself: both go through source_of."""
    tree = ast.parse((ROOT / path).read_text())
    built = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
             and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) in ("CsvSource", "SweepSource")]
    assert not built, f"{path}: lines {built} build a source by hand (use scaling.fitting.source_of)"
