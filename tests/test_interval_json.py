"""An interval's JSON form: what :func:`summarise` gives, and any summary stored by older code, reads
back to the same :class:`Interval`, and written again keeps its keys (value, se, lo, hi, kind, note...)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

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
], ids=["log", "linear", "biased", "no spread", "pinned", "none", "unreliable", "widened", "widened alone"])
def test_a_summary_reads_back_the_same_through_json(summary: dict) -> None:
    iv = Interval.from_dict(stored(summary))
    again = Interval.from_dict(stored(iv.to_dict()))
    assert again == iv or (math.isnan(iv.value) and again.to_dict().keys() == iv.to_dict().keys())
    assert again.text(4) == Interval.of(summary).text(4)
    assert (iv.interval is None) == (summary.get("kind") != "percentile" and not summary.get("widened"))
    kept = {k for k, v in summary.items() if not (isinstance(v, float) and math.isnan(v))}
    assert kept <= set(iv.to_dict()) | {"se_log_note"}, kept - set(iv.to_dict())


def test_a_withheld_interval_keeps_its_reason_and_no_bounds() -> None:
    iv = Interval.of(summarise(DRAWS, 1.0)).without_interval("the law is flagged unreliable: few points")
    assert iv.interval is None and iv.se is None and iv.kind == "unreliable"
    assert Interval.from_dict(stored(iv.to_dict())).withheld == "the law is flagged unreliable: few points"
    assert "unreliable" in iv.text()


def test_the_reason_is_read_under_either_stored_key() -> None:
    for key in ("note", "reason"):
        iv = Interval.from_dict({"value": 0.3, "lo": None, "hi": None, "kind": "no interval", key: "no replicates"})
        assert iv.withheld == "no replicates" and iv.interval is None


def test_a_widened_interval_keeps_the_bootstraps_own_bounds() -> None:
    base = Interval.of(summarise(DRAWS, 1.0, log=True))
    wide = base.widen(base.lo / 2, base.hi * 2, "widened for extrapolating")
    assert (wide.lo_param, wide.hi_param) == (base.lo, base.hi) and wide.widened
    assert Interval.from_dict(stored(wide.to_dict())) == wide
    beyond = base.widen(0.0, math.inf, "widened far")
    assert beyond.interval is None and beyond.withheld == "no interval"


def test_not_an_interval_is_refused() -> None:
    with pytest.raises(TypeError, match="an interval is a mapping"):
        Interval.from_dict([1.0, 2.0])  # type: ignore[arg-type]
