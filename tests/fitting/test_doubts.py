"""Doubts are data: whether a law is trusted follows the kinds of its doubts, never the words of a note.

A law's, curve's or power law's doubts (:mod:`scaling.fitting.core.doubts`) carry a kind; its messages
are what is printed. Rewording a message changes no verdict; a note that merely reads like a doubt
makes no law unreliable; the kinds survive storing; no code in the package decides anything by
matching the text of a note, and no class keeps its doubts as a list of messages or makes
``reliable`` a property (both checked on the source's syntax tree).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

from scaling.fitting import ChinchillaIsoFLOP, from_dict
from scaling.fitting.loss import synthetic as S
from scaling.fitting.core.doubts import Doubt, DoubtKind
from scaling.fmt import Interval
from scaling.fitting.hyperparams.hparams import GroupOptimum, PowerLaw, fit_law
from scaling.fitting.recommend import compare_laws

PACKAGE = Path(__file__).resolve().parents[2] / "scaling"
#: Words of the messages that say a law, curve or interval is not to be trusted.
TRUST_WORDS = ("unreliable", "implausible", "intervals unavailable", "outside (0, 1)", "do not determine",
               "is pinned", "fisher information", "cannot pin", "not determined")
#: The kinds of an interval (:mod:`scaling.fitting.core.intervals`): a field's value, not a message.
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


def _power_law() -> PowerLaw:
    """lr*(C) over five groups whose optima scatter by 100x: its exponent is not determined."""
    def group(C: float, lr: float) -> GroupOptimum:
        iv = Interval(lr, lr / 1.1, lr * 1.1, kind="percentile")
        return GroupOptimum("g", 1e8, C / 6e8, C, 9, 9, "fitted", "", Interval(3.0), iv, Interval(1e5))

    pairs = ((1e18, 1e-3), (1e18, 1e-1), (2.5e18, 1e-1), (2.5e18, 1e-3), (2.5e18, 1e-2))
    return fit_law("lr_C", [group(C, lr) for C, lr in pairs], 200)


def test_a_hyperparameter_laws_verdict_and_stored_form_follow_its_typed_doubts() -> None:
    law = _power_law()
    assert not law.reliable() and law.doubts() and all(isinstance(d, Doubt) for d in law.doubts())
    kinds = [d.kind for d in law.doubts()]
    back = PowerLaw.from_dict(json.loads(json.dumps(law.to_dict())))
    assert [(d.kind, str(d)) for d in back.doubts()] == [(d.kind, str(d)) for d in law.doubts()]
    assert not back.reliable() and back.predict_interval(C=1e19).kind == "unreliable"
    back.drop_doubts(*kinds)  # the verdict follows the kinds: without doubts the law is trusted
    assert back.reliable() and back.predict_interval(C=1e19).kind != "unreliable"
    law.notes.append("unreliable: a note that reads like a doubt is only a note")
    back = PowerLaw.from_dict(dict(law.to_dict(), doubts=[]))
    assert back.reliable()


def test_a_hyperparameter_law_stored_with_bare_messages_loads_untrusted() -> None:
    message = "a's 95% interval is wider than 2: worded any way"
    back = PowerLaw.from_dict(json.loads(json.dumps(dict(_power_law().to_dict(), doubts=[message]))))
    assert [(d.kind, str(d)) for d in back.doubts()] == [(DoubtKind.STORED, message)]
    assert not back.reliable()


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


@functools.cache
def _package() -> tuple[tuple[Path, ast.AST], ...]:
    """Each module of the package with its syntax tree, parsed once for the checks below."""
    return tuple((path, ast.parse(path.read_text(), str(path))) for path in sorted(PACKAGE.rglob("*.py")))


def test_no_code_decides_trust_by_the_text_of_a_message() -> None:
    offenders = []
    for path, tree in _package():
        for line, text in _text_tests(tree):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {text!r}")
    assert not offenders, "\n".join(offenders)


#: Names of what holds a note's or a doubt's text (``note``, ``rec.notes``, ``why``, ``law.doubts()[0]``, ``reason``).
NOTE_NAMES = re.compile(r"note|doubt|why|reason", re.IGNORECASE)
#: Methods that read a text's words.
TEXT_METHODS = ("startswith", "endswith", "removeprefix", "removesuffix", "split", "rsplit", "partition",
                "rpartition", "find", "rfind", "index", "count")
#: Regular-expression functions, called on ``re`` or a compiled pattern.
REGEX_CALLS = ("match", "search", "fullmatch", "sub", "subn", "findall", "finditer", "split")


def _names_a_note(expr: ast.AST) -> bool:
    return any(NOTE_NAMES.search(leaf.id if isinstance(leaf, ast.Name) else leaf.attr)
               for leaf in ast.walk(expr) if isinstance(leaf, (ast.Name, ast.Attribute)))


def _note_text_tests(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a note's or a doubt's text is searched (``"x" in note``), its words read (``note.startswith``,
    ``why.removeprefix``, ``note.split``) or matched by a regular expression: any decision by the words."""
    found = []
    for node in ast.walk(tree):
        hit = False
        if isinstance(node, ast.Compare) and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            text = isinstance(node.left, ast.JoinedStr) or (isinstance(node.left, ast.Constant)
                                                             and isinstance(node.left.value, str))
            hit = text and any(_names_a_note(c) for c in node.comparators)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            hit = (f.attr in TEXT_METHODS and _names_a_note(f.value)) or (
                f.attr in REGEX_CALLS and isinstance(f.value, ast.Name) and (f.value.id == "re" or f.value.id.isupper()
                                                                         or f.value.id.startswith("_"))
                and any(_names_a_note(a) for a in node.args))
        if hit:
            found.append((node.lineno, ast.unparse(node)[:100]))
    return found


def test_no_code_reads_the_words_of_a_note_or_a_doubt() -> None:
    """Recommendation notes and doubts carry kinds (and a doubt its reason without its verdict): no code
    in the package decides, strips or parses anything by a note's or a doubt's words."""
    offenders = [f"{path.relative_to(PACKAGE.parent)}:{line}: {text}"
                 for path, tree in _package() for line, text in _note_text_tests(tree)]
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("source", ['if note.startswith("the choice"): pass', 'ok = "left out" in rec.notes[0]',
                                    'm = re.match(r"(.+?) is left out: (.*)$", note)', 'why.removeprefix("unreliable: ")',
                                    'x = law.doubts()[0].split(": do not trust")[0]', 'PATTERN.search(note)'])
def test_the_check_finds_a_note_read_by_its_words(source: str) -> None:
    assert _note_text_tests(ast.parse(source))


def _untyped_verdicts(tree: ast.AST) -> list[tuple[int, str]]:
    """Where a class makes ``reliable`` a property or keeps ``doubts`` as an attribute (a list of
    messages) instead of the methods of :class:`~scaling.fitting.core.doubts.Doubtful`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if (isinstance(item, ast.FunctionDef) and item.name == "reliable"
                        and any(isinstance(d, ast.Name) and d.id in ("property", "cached_property")
                                or isinstance(d, ast.Attribute) and d.attr == "cached_property"
                                for d in item.decorator_list)):
                    found.append((item.lineno, f"{node.name}.reliable is a property"))
                target = item.target if isinstance(item, ast.AnnAssign) else None
                targets = [target] if target is not None else item.targets if isinstance(item, ast.Assign) else []
                found += [(item.lineno, f"{node.name}.doubts is an attribute") for t in targets
                          if isinstance(t, ast.Name) and t.id == "doubts"]
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [(node.lineno, "self.doubts is assigned") for t in targets
                      if isinstance(t, ast.Attribute) and t.attr == "doubts"
                      and isinstance(t.value, ast.Name) and t.value.id == "self"]
    return found


def test_every_law_keeps_typed_doubts_and_one_reliable_method() -> None:
    offenders = []
    for path, tree in _package():
        for line, what in _untyped_verdicts(tree):
            offenders.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {what}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("source", [
    "class L:\n    @property\n    def reliable(self) -> bool:\n        return True",
    "@dataclass\nclass L:\n    doubts: list[str] = field(default_factory=list)",
    "class L:\n    def fit(self):\n        self.doubts = []"])
def test_the_check_finds_an_untyped_verdict(source: str) -> None:
    assert _untyped_verdicts(ast.parse(source))


@pytest.mark.parametrize("source", ['if note.startswith("unreliable"): pass', 'ok = "implausible" in note',
                                    'x = [n for n in notes if n.startswith(UNDETERMINED)]'])
def test_the_check_finds_a_text_test(source: str) -> None:
    assert _text_tests(ast.parse(source))
