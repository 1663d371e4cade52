"""What a bootstrap may claim about one quantity: its SE and 95% interval, or why it has none.

Each summary names its claim (``kind``: percentile, biased, pinned, no spread, unreliable), and an
SE that disagrees with its interval (heavy-tailed replicates) is dropped; the reasoning is in
docs/fitting.md ("In detail"). Summaries are stored and passed as plain dicts (JSON); an
:class:`~scaling.fmt.Interval` is the typed view of one, and :meth:`~scaling.fmt.Interval.text` the
one way any output writes one (terminal tables, the closing answer, the report, the notebook API).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import norm

from scaling.fmt import NO_INTERVAL, Interval, interval_text

__all__ = ["LEVEL", "NO_INTERVAL", "Interval", "add_model_error", "interval_text", "orders_of_magnitude", "summarise",
           "widen_log", "withheld"]

#: The two-sided level of every reported interval.
LEVEL = 0.95
#: A linear SE larger than this many times the interval's normal-theory SE is not reported.
SE_TAIL_FACTOR = 2.0
#: Relative width below which an interval counts as zero-width.
ZERO_WIDTH = 1e-9


def summarise(values: ArrayLike, point: float, *, log: bool = False, pinned: str | None = None) -> dict[str, Any]:
    """Point estimate, bootstrap SE and 95% interval of one quantity, or the reason it has none.

    ``log``: the quantity is positive and fitted on a log scale (SE reported as ``se_log``).
    ``pinned``: the bound the point estimate sits at (then no interval is reported).
    """
    point = float(point)
    out: dict[str, Any] = {"value": point, "se": math.nan, "lo": math.nan, "hi": math.nan}
    if pinned:
        out.update(kind="pinned", pinned=pinned)
        return out
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if log:
        v = v[v > 0]
    if v.size < 2:
        return out
    q = (1 - LEVEL) / 2
    lo, hi = (float(x) for x in np.quantile(v, [q, 1 - q]))
    if hi - lo <= ZERO_WIDTH * max(abs(point), abs(lo), abs(hi), 1e-300):
        out.update(kind="no spread", note="every bootstrap replicate refits to the same value")
        return out
    if not lo <= point <= hi:
        below = float((np.sum(v < point) + 0.5 * np.sum(v == point)) / v.size)
        out.update(kind="biased", quantile=below,
                   note=(f"the estimate lies above {100 * below:.3g}% of its bootstrap replicates: the bootstrap does "
                         "not reproduce the fit, so no interval is given") if below > 0.5 else
                   (f"the estimate lies below {100 * (1 - below):.3g}% of its bootstrap replicates: the bootstrap "
                    "does not reproduce the fit, so no interval is given"))
        return out
    out.update(lo=lo, hi=hi, kind="percentile")
    with np.errstate(over="ignore", invalid="ignore"):
        se = float(np.std(v, ddof=1))
    normal_se = (hi - lo) / (2 * norm.ppf(1 - q))
    if not se <= SE_TAIL_FACTOR * normal_se:
        out["se_note"] = "replicates too heavy-tailed for a linear SE"
    else:
        out["se"] = se
    if log:
        se_log = float(np.std(np.log(v), ddof=1))
        normal_se_log = math.log(hi / lo) / (2 * norm.ppf(1 - q))
        if se_log <= SE_TAIL_FACTOR * normal_se_log:
            out["se_log"] = se_log
        else:
            out["se_log"] = math.nan
            out["se_log_note"] = "replicates too heavy-tailed (in log) for an SE"
    return out


def withheld(iv: dict[str, Any], why: str) -> dict[str, Any]:
    """``iv`` without its interval and SEs, kind ``unreliable`` and ``why`` as its note; the value stays.

    A pinned parameter keeps saying so: it had no interval to withhold.
    """
    if iv.get("kind") == "pinned":
        return dict(iv)
    return {"value": iv["value"], "se": math.nan, "lo": math.nan, "hi": math.nan, "kind": "unreliable", "note": why}


def orders_of_magnitude(iv: dict[str, Any]) -> float:
    """How many decades a positive quantity's interval spans (NaN without one)."""
    lo, hi = iv.get("lo", math.nan), iv.get("hi", math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo <= 0 or hi <= 0:
        return math.nan
    return math.log10(hi / lo)


def widen_log(iv: dict[str, Any], half_width: float, why: str) -> dict[str, Any]:
    """``iv`` with its interval widened by a factor exp(``half_width``) each side (positive quantities).

    Keeps the parameter-only interval as ``lo_param``/``hi_param`` and says why in ``widened``.
    """
    out = dict(iv)
    if not (half_width > 0 and math.isfinite(half_width)):
        return out
    v, lo, hi = out["value"], out.get("lo", math.nan), out.get("hi", math.nan)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        if out.get("kind") in ("pinned", "biased") or not (v > 0):
            return out
        lo = hi = v  # no bootstrap interval: the model-error term alone
    if lo <= 0 or hi <= 0:
        return out
    out["lo_param"], out["hi_param"] = iv.get("lo", math.nan), iv.get("hi", math.nan)
    factor = math.exp(min(half_width, 709.0))  # beyond float range the end becomes inf (no interval shown)
    out["lo"], out["hi"] = lo / factor, hi * factor
    out["widened"] = why
    return out



def add_model_error(value: ArrayLike, lo: ArrayLike, hi: ArrayLike, sigma_log: float) -> tuple[np.ndarray, np.ndarray]:
    """95% intervals ``lo``..``hi`` of positive predictions ``value`` (a bootstrap's: the parameters' uncertainty)
    with a model error of SD ``sigma_log`` (in log) added: on a log scale each side's distance from the
    value combined in quadrature with z * ``sigma_log`` (independent errors: their variances add).

    The curve laws' model error is their held-out error beyond noise; an interval withheld (NaN) stays withheld.
    """
    value, lo, hi = (np.asarray(x, dtype=float) for x in (value, lo, hi))
    if not (sigma_log > 0 and math.isfinite(sigma_log)):
        return lo, hi
    extra = (norm.ppf(1 - (1 - LEVEL) / 2) * sigma_log) ** 2
    with np.errstate(all="ignore"):
        below = np.sqrt(np.log(value / lo) ** 2 + extra)
        above = np.sqrt(np.log(hi / value) ** 2 + extra)
        return value * np.exp(-below), value * np.exp(above)
