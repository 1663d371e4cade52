"""The safe rule evaluator: values, whitelist, and that plan text never reaches eval."""

from __future__ import annotations

import pytest

from scaling import rules


def test_expression_values() -> None:
    assert rules.evaluate("3e-3 * (N / 1e6) ** -0.25", N=1e6, D=1, C=1) == pytest.approx(3e-3)
    assert rules.evaluate("max(2048, 0.5 * sqrt(D))", N=1, D=1e8, C=1) == pytest.approx(5000)
    assert rules.evaluate("log(C) - log(6 * N * D)", N=10, D=20, C=1200) == pytest.approx(0, abs=1e-12)
    assert rules.evaluate("-N + +D", N=1, D=3, C=0) == 2
    assert rules.evaluate(0.001, N=1, D=1, C=1) == 0.001


def test_power_law_mapping() -> None:
    rule = {"coef": 2.0, "exponent": -0.5, "of": "N", "reference": 100}
    assert rules.evaluate(rule, N=400, D=1, C=1) == pytest.approx(1.0)
    with pytest.raises(rules.RuleError, match="unknown power-law field"):
        rules.evaluate({"coef": 1, "expo": 2}, N=1, D=1, C=1)
    with pytest.raises(rules.RuleError, match="'of'"):
        rules.evaluate({"coef": 1, "of": "X"}, N=1, D=1, C=1)


@pytest.mark.parametrize(
    "text, match",
    [
        ("__import__('os').system('true')", "only the functions"),
        ("open('/etc/passwd')", "only the functions"),
        ("N.__class__", "Attribute"),
        ("[N for N in (1,)]", "ListComp"),
        ("lambda: 1", "Lambda"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("N if D else C", "IfExp"),
        ("N // 2", "FloorDiv"),
        ("N < 2", "Compare"),
        ("max(N, key=abs)", "keyword"),
        ("N +", "cannot parse"),
        ("", "non-empty"),
        ("True + 1", "only numbers"),
    ],
)
def test_rejected(text: str, match: str) -> None:
    with pytest.raises(rules.RuleError, match=match):
        rules.evaluate(text, N=1, D=1, C=1)


def test_no_value() -> None:
    with pytest.raises(rules.RuleError, match="no value"):
        rules.evaluate("1 / (N - N)", N=1, D=1, C=1)
    with pytest.raises(rules.RuleError):
        rules.evaluate("N ** 2000", N=2, D=1, C=1)
    with pytest.raises(rules.RuleError, match="no value"):
        rules.evaluate("log(N - N)", N=1, D=1, C=1)


def test_no_real_value_is_a_rule_error_not_a_traceback() -> None:
    with pytest.raises(rules.RuleError, match="no real value"):
        rules.evaluate("(-8) ** 0.5", N=1, D=1, C=1)
    with pytest.raises(rules.RuleError, match="no real value"):
        rules.evaluate("(1 - N) ** 0.25", N=5, D=1, C=1)
    assert rules.evaluate("(-8) ** 2", N=1, D=1, C=1) == 64


def test_rules_is_a_leaf() -> None:
    """The rules know nothing of plans: sizing a run from a plan is the orchestrator's (expand.size_run)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(rules.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    assert not {m for m in imported if m and m.startswith("scaling")}, imported
