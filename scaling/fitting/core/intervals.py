"""What a bootstrap may claim about one quantity: its SE and 95% interval, or why it has none.

Each summary names its claim (``kind``: percentile, biased, pinned, no spread, unreliable), and an
SE that disagrees with its interval (heavy-tailed replicates) is dropped; the reasoning is in
docs/fitting.md ("In detail"). Each summary is an
:class:`~scaling.fmt.Interval`, stored as its :meth:`~scaling.fmt.Interval.to_dict` and read back by
:meth:`~scaling.fmt.Interval.of`; :meth:`~scaling.fmt.Interval.text` is the one way any output writes
one (terminal tables, the closing answer, the report, the notebook API).
"""

from __future__ import annotations

import math
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


def summarise(values: ArrayLike, point: float, *, log: bool = False, pinned: str | None = None) -> Interval:
    """Point estimate, bootstrap SE and 95% interval of one quantity, or the reason it has none.

    ``log``: the quantity is positive and fitted on a log scale (SE reported as ``se_log``).
    ``pinned``: the bound the point estimate sits at (then no interval is reported).
    """
    point = float(point)
    if pinned:
        return Interval(point, withheld=f"pinned: {pinned}", kind="pinned", pinned=str(pinned))
    v = np.asarray(values, dtype=float).ravel()
    v = v[np.isfinite(v)]
    if log:
        v = v[v > 0]
    if v.size < 2:
        return Interval(point, withheld="no interval")
    q = (1 - LEVEL) / 2
    lo, hi = (float(x) for x in np.quantile(v, [q, 1 - q]))
    if hi - lo <= ZERO_WIDTH * max(abs(point), abs(lo), abs(hi), 1e-300):
        return Interval(point, withheld="every bootstrap replicate refits to the same value", kind="no spread")
    if not lo <= point <= hi:
        below = float((np.sum(v < point) + 0.5 * np.sum(v == point)) / v.size)
        note = ((f"the estimate lies above {100 * below:.3g}% of its bootstrap replicates: the bootstrap does "
                 "not reproduce the fit, so no interval is given") if below > 0.5 else
                (f"the estimate lies below {100 * (1 - below):.3g}% of its bootstrap replicates: the bootstrap "
                 "does not reproduce the fit, so no interval is given"))
        return Interval(point, withheld=note, kind="biased", quantile=below)
    with np.errstate(over="ignore", invalid="ignore"):
        se: float | None = float(np.std(v, ddof=1))
    normal_se = (hi - lo) / (2 * norm.ppf(1 - q))
    se_note = None
    if not se <= SE_TAIL_FACTOR * normal_se:
        se, se_note = None, "replicates too heavy-tailed for a linear SE"
    se_log = None
    if log:
        se_log = float(np.std(np.log(v), ddof=1))
        normal_se_log = math.log(hi / lo) / (2 * norm.ppf(1 - q))
        if not se_log <= SE_TAIL_FACTOR * normal_se_log:
            se_log, se_note = None, se_note or "replicates too heavy-tailed (in log) for an SE"
    return Interval(point, lo, hi, se, kind="percentile", se_log=se_log, se_note=se_note)


def withheld(iv: Interval, why: str) -> Interval:
    """``iv`` without its interval and SEs, kind ``unreliable`` and ``why`` the reason; the value stays.

    A pinned parameter keeps saying so: it had no interval to withhold.
    """
    return iv.without_interval(why)


def orders_of_magnitude(iv: Interval) -> float:
    """How many decades a positive quantity's interval spans (NaN without one)."""
    if iv.lo is None or iv.hi is None or not (math.isfinite(iv.lo) and math.isfinite(iv.hi)) or iv.lo <= 0 \
            or iv.hi <= 0:
        return math.nan
    return math.log10(iv.hi / iv.lo)


def widen_log(iv: Interval, half_width: float, why: str) -> Interval:
    """``iv`` with its interval widened by a factor exp(``half_width``) each side (positive quantities).

    Keeps the parameter-only interval as ``lo_param``/``hi_param`` and says why in ``widened``.
    """
    if not (half_width > 0 and math.isfinite(half_width)):
        return iv
    lo, hi = iv.lo, iv.hi
    if lo is None or hi is None:
        if iv.kind in ("pinned", "biased") or not (iv.value > 0):
            return iv
        lo = hi = iv.value  # no bootstrap interval: the model-error term alone
    if lo <= 0 or hi <= 0:
        return iv
    factor = math.exp(min(half_width, 709.0))  # beyond float range the end becomes inf (no interval shown)
    return iv.widen(lo / factor, hi * factor, why)


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
