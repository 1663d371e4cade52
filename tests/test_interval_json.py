"""An interval's JSON form: what :func:`summarise` gives, and any summary stored by older code, reads
back to the same :class:`Interval`, and written again keeps its keys (value, se, lo, hi, kind, note...)."""

from __future__ import annotations

import ast
import json
import math

import numpy as np
import pytest
from pathlib import Path

from scaling.fitting.core.base import jsonable
from scaling.fitting.core.intervals import summarise, widen_log, withheld
from scaling.fmt import Interval

RNG = np.random.default_rng(0)
DRAWS = RNG.lognormal(0.0, 0.2, 400)


def stored(d: dict) -> dict:
    """``d`` through JSON as the fits table stores it (NaN as null)."""
    return json.loads(json.dumps(jsonable(d)))


@pytest.mark.parametrize("summary", [
    summarise(DRAWS, 1.0, log=True),
    summarise(DRAWS, 1.0),
    summarise(DRAWS, 50.0),  # biased
    summarise(np.ones(10), 1.0),  # no spread
    summarise([], 1.0, pinned="upper bound 2"),
    summarise([], 1.0),  # no replicates
    withheld(summarise(DRAWS, 1.0), "the law is flagged unreliable: few points"),
    widen_log(summarise(DRAWS, 1.0, log=True), 0.5, "widened for extrapolating"),
    widen_log(summarise([], 1.0), 0.5, "widened by the scatter of one point"),
    widen_log(summarise(np.ones(10), 1.0), 0.5, "widened around replicates that do not vary"),
], ids=["log", "linear", "biased", "no spread", "pinned", "none", "unreliable", "widened", "widened alone",
        "widened no spread"])
def test_a_summary_reads_back_the_same_through_json(summary: Interval) -> None:
    assert isinstance(summary, Interval)
    iv = Interval.from_dict(stored(summary))
    assert iv == summary or (math.isnan(iv.value) and iv.to_dict().keys() == summary.to_dict().keys())
    again = Interval.from_dict(stored(iv.to_dict()))
    assert again == iv
    assert again.text(4) == summary.text(4)
    assert (iv.interval is None) == (summary.kind != "percentile" and not summary.widened)


#: Summaries as older versions stored them: NaN numbers as null, the reason under ``note`` (or ``reason``),
#: a log SE too heavy-tailed to give stored as null with ``se_log_note``, no ``kind`` without replicates.
OLD_STORED = [
    ({"value": 1.0, "se": 0.1, "lo": 0.8, "hi": 1.2, "kind": "percentile", "se_log": None,
      "se_log_note": "replicates too heavy-tailed (in log) for an SE"}, "1 [0.8, 1.2]"),
    ({"value": 2.0, "se": None, "lo": None, "hi": None, "kind": "pinned", "pinned": "upper bound 2"},
     "2 (pinned: upper bound 2)"),
    ({"value": 1.5, "se": None, "lo": None, "hi": None}, "1.5 (no interval)"),
    ({"value": 1.5, "se": None, "lo": None, "hi": None, "kind": "unreliable", "note": "the law is flagged"},
     "1.5 (no interval: unreliable)"),
    ({"value": 3.0, "se": 0.2, "lo": 1.0, "hi": 9.0, "kind": "percentile", "lo_param": 2.0, "hi_param": 4.0,
      "widened": "widened for extrapolating"}, "3 [1, 9]"),
]


@pytest.mark.parametrize("old, text", OLD_STORED, ids=["heavy log", "pinned", "none", "unreliable", "widened"])
def test_a_summary_stored_by_older_code_reads_back(old: dict, text: str) -> None:
    iv = Interval.of(old)
    assert iv.text(3) == text
    assert Interval.of(stored(iv.to_dict())) == iv
    if old.get("note"):
        assert iv.withheld == old["note"]
    if old.get("widened"):
        assert (iv.lo_param, iv.hi_param) == (2.0, 4.0) and iv.covers(2.5, bootstrap=True)


def test_a_withheld_interval_keeps_its_reason_and_no_bounds() -> None:
    iv = summarise(DRAWS, 1.0).without_interval("the law is flagged unreliable: few points")
    assert iv.interval is None and iv.se is None and iv.kind == "unreliable"
    assert Interval.from_dict(stored(iv.to_dict())).withheld == "the law is flagged unreliable: few points"
    assert "unreliable" in iv.text()


def test_the_reason_is_read_under_either_stored_key() -> None:
    for key in ("note", "reason"):
        iv = Interval.from_dict({"value": 0.3, "lo": None, "hi": None, "kind": "no interval", key: "no replicates"})
        assert iv.withheld == "no replicates" and iv.interval is None


def test_a_widened_interval_keeps_the_bootstraps_own_bounds() -> None:
    base = summarise(DRAWS, 1.0, log=True)
    wide = base.widen(base.lo / 2, base.hi * 2, "widened for extrapolating")
    assert (wide.lo_param, wide.hi_param) == (base.lo, base.hi) and wide.widened
    assert Interval.from_dict(stored(wide.to_dict())) == wide
    beyond = base.widen(0.0, math.inf, "widened far")
    assert beyond.interval is None and beyond.withheld == "no interval"


def test_not_an_interval_is_refused() -> None:
    with pytest.raises(TypeError, match="an interval is a mapping"):
        Interval.from_dict([1.0, 2.0])  # type: ignore[arg-type]


# -- one value type: no module reads an interval's keys ------------------------------------------------
#: The keys of an interval's JSON form (:meth:`Interval.to_dict`, older stored summaries, a chained accuracy's).
#: ``value``, ``kind``, ``reason`` and ``pinned`` are left out: other records have them too (an event's kind, a
#: decision's reason, a law's map of pinned parameters), and an interval's value and kind are read with its bounds.
INTERVAL_KEYS = frozenset({"lo", "hi", "se", "se_log", "se_note", "se_log_note", "lo_param", "hi_param", "quantile",
                           "widened", "withheld", "note", "form_spread", "determined_at_point", "backtest_error"})
#: The functions that turn an interval into its JSON form and back, and so must read and write its keys.
SERIALISERS = frozenset({"of", "from_dict", "to_dict"})
SCALING = Path(__file__).resolve().parents[1] / "scaling"


def key_reads(source: str) -> list[tuple[int, str]]:
    """(line, key) of each ``x["lo"]`` (read, not assigned) or ``x.get("lo")`` of an interval key in
    ``source``, outside the serialisers."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, inside: bool) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside = inside or node.name in SERIALISERS
        if not inside:
            if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) \
                    and isinstance(node.slice, ast.Constant) and node.slice.value in INTERVAL_KEYS:
                found.append((node.lineno, node.slice.value))
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("get", "pop", "setdefault") and node.args \
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value in INTERVAL_KEYS:
                found.append((node.lineno, node.args[0].value))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(ast.parse(source), False)
    return found


@pytest.mark.parametrize("line", ['iv["lo"]', 'x.get("widened")', 'rec.per_law[k]["N"]["hi"]', 'iv.get("se", 0.0)'])
def test_the_guard_sees_a_key_read(line: str) -> None:
    assert key_reads(line)


@pytest.mark.parametrize("line", ['iv.lo', 'row["lo"] = 1.0', 'def to_dict(self):\n    return self.d["lo"]',
                                  'd.get("value")'])
def test_the_guard_passes_what_reads_no_interval_key(line: str) -> None:
    assert not key_reads(line)


def test_no_module_reads_an_intervals_keys() -> None:
    """An interval is a :class:`~scaling.fmt.Interval` everywhere: read by its attributes. Only its JSON form's
    own functions (``to_dict``, ``from_dict``, ``of``) may touch the keys it is stored under."""
    found = [f"{path.relative_to(SCALING.parent)}:{line}: {key!r}"
             for path in sorted(SCALING.rglob("*.py")) for line, key in key_reads(path.read_text(encoding="utf-8"))]
    assert not found, "read these through scaling.fmt.Interval's attributes:\n" + "\n".join(found)
