"""Doubts are data: whether a law is trusted follows the kinds of its doubts, never the words of a note.

A law's, curve's or power law's doubts (:mod:`scaling.fitting.doubts`) carry a kind; its messages
are what is printed. Rewording a message changes no verdict; a note that merely reads like a doubt
makes no law unreliable; the kinds survive storing; and no code in the package decides anything by
matching the text of a note (checked on the source's syntax tree).
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from scaling.fitting import ChinchillaIsoFLOP, from_dict
from scaling.fitting import synthetic as S
from scaling.fitting.doubts import Doubt, DoubtKind
from scaling.fitting.recommend import compare_laws

PACKAGE = Path(__file__).resolve().parents[2] / "scaling"
#: Words of the messages that say a law, curve or interval is not to be trusted.
TRUST_WORDS = ("unreliable", "implausible", "intervals unavailable", "outside (0, 1)", "do not determine",
               "is pinned", "fisher information", "cannot pin", "not determined")
#: The kinds of an interval (:mod:`scaling.fitting.intervals`): a field's value, not a message.
INTERVAL_KINDS = ("percentile", "pinned", "biased", "no spread", "unreliable")


def _law() -> ChinchillaIsoFLOP:
    data = S.isoflop_points(budgets=np.array([1e18, 3e18, 1e19, 3e19, 1e20]), n_sizes=7, seed=0)
    return ChinchillaIsoFLOP().fit(data).bootstrap(50, seed=0)


def test_a_verdict_follows_the_kind_not_the_words() -> None:
    law = _law()
    assert law.reliable() and not law.doubts()
    law.notes_.append("unreliable: a note that reads like a doubt is only a note")
    assert law.reliable()
    law.add_doubt(DoubtKind.FEW_POINTS, "too few points, in other words")
    assert not law.reliable() and law.doubts()[0].kind is DoubtKind.FEW_POINTS
    assert "too few points, in other words" in law.notes_  # printed among the notes
    law.drop_doubts(DoubtKind.FEW_POINTS)
    assert law.reliable() and "too few points, in other words" not in law.notes_


def test_the_kinds_survive_storing() -> None:
    law = _law()
    law.add_doubt(DoubtKind.PINNED, "worded any way at all")
    back = from_dict(law.to_dict())
    assert [(d.kind, str(d)) for d in back.doubts()] == [(DoubtKind.PINNED, "worded any way at all")]
    assert back.notes_ == law.notes_
    back.drop_doubts(DoubtKind.PINNED)  # the stored note is the doubt's own: both go
    assert back.reliable() and "worded any way at all" not in back.notes_


def test_the_recommendation_tells_a_parameter_doubt_from_a_design_doubt_by_kind() -> None:
    law = _law()
    law.add_doubt(DoubtKind.PINNED, "reworded: some parameter sits at a bound")
    rec = compare_laws({"approach2": law}, 5e19)
    assert "approach2" in rec.determined_at_budget and "approach2" not in rec.unreliable
    law.drop_doubts(DoubtKind.PINNED)
    law.add_doubt(DoubtKind.FEW_POINTS, "reworded: too few points")
    rec = compare_laws({"approach2": law}, 5e19)
    assert "approach2" in rec.unreliable


def test_a_doubt_is_its_message_and_its_kind() -> None:
    d = Doubt(DoubtKind.UNDETERMINED, "unreliable: the data do not determine A")
    assert d == "unreliable: the data do not determine A" and d.kind.about_parameters
    assert Doubt.from_dict(d.to_dict()).kind is DoubtKind.UNDETERMINED
    assert not DoubtKind.COVERAGE.about_parameters


def _text_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a string of doubt words is compared with, searched in or matched against a text."""
    found = []
    for node in ast.walk(tree):
        probes: list[ast.AST] = []
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn, ast.Eq, ast.NotEq))
                                                 for op in node.ops):
            probes = [node.left, *node.comparators]
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("startswith", "endswith", "find", "index", "count")):
            probes = list(node.args)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in ("match", "search", "fullmatch") and node.args):
            probes = [node.args[0]]
        for probe in probes:
            for leaf in ast.walk(probe):
                text = (leaf.value if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) else
                        leaf.id if isinstance(leaf, ast.Name) and leaf.id == "UNDETERMINED" else None)
                if text is None or (isinstance(node, ast.Compare) and text in INTERVAL_KINDS):
                    continue  # an interval's kind compared as a value
                if text == "UNDETERMINED" or any(w in text.lower() for w in TRUST_WORDS):
                    found.append((node.lineno, text))
    return found


def test_no_code_decides_trust_by_the_text_of_a_message() -> None:
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, text in _text_tests(ast.parse(path.read_text(), str(path))):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("source", ['if note.startswith("unreliable"): pass', 'ok = "implausible" in note',
                                    'x = [n for n in notes if n.startswith(UNDETERMINED)]'])
def test_the_check_finds_a_text_test(source: str) -> None:
    assert _text_tests(ast.parse(source))
