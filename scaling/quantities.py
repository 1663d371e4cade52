"""What a measured quantity can be: one rule per quantity, whatever it is read from.

A CSV cell, a metric stored in the database, a run's final loss in ``scaling runs``: each reader
asks :func:`broken` which values break the quantity's rule and says :attr:`Rule.says` in its own
one line (naming the row, or the run). NaN is "not measured", never a break; an infinity always
is. The bounds are the quantity's own (an accuracy is a fraction), not a display's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd


@dataclass(frozen=True)
class Rule:
    """A finite value in [lo, hi] (an open end where ``lo_open`` / ``hi_open``)."""

    lo: float
    hi: float
    lo_open: bool
    hi_open: bool
    #: The rule in words, as a message ends: "an accuracy must lie in [0, 1] (...)".
    says: str

    def allows(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.lo if self.lo_open else value >= self.lo
        below = value < self.hi if self.hi_open else value <= self.hi
        return above and below


_FRACTION = (0.0, 1.0, False, False)
RULES: dict[str, Rule] = {
    "acc": Rule(*_FRACTION, "an accuracy must lie in [0, 1] (a fraction, not a percentage)"),
    "acc_norm": Rule(*_FRACTION, "an accuracy must lie in [0, 1] (a fraction, not a percentage)"),
    "err": Rule(*_FRACTION, "an error rate must lie in [0, 1] (a fraction, not a percentage)"),
    "bpb": Rule(0.0, math.inf, True, True, "bits per byte must be positive"),
    "loss": Rule(0.0, math.inf, True, True, "a loss must be positive and finite"),
    "chance": Rule(0.0, 1.0, False, True, "a chance level is a fraction in [0, 1) (0.25 for four choices)"),
}


def broken(kind: str, values: np.ndarray) -> np.ndarray:
    """Where ``values`` break ``kind``'s rule: an infinity, or a finite value outside its bounds (NaN never)."""
    rule = RULES[kind]
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        above = v > rule.lo if rule.lo_open else v >= rule.lo
        below = v < rule.hi if rule.hi_open else v <= rule.hi
    return np.isinf(v) | (np.isfinite(v) & ~(above & below))


def possible_losses(runs: pd.DataFrame, columns: Sequence[str]) -> tuple[pd.DataFrame, Optional[str]]:
    """A runs table (a DataFrame with ``run_key``) with each stored loss in ``columns`` that breaks
    the loss rule blanked (NaN), and one line naming the first such run (None when there is none):
    what a listing or a figure shows instead of an impossible number."""
    first, count = None, 0
    for col in columns:
        if col not in runs:
            continue
        values = runs[col].to_numpy(dtype=float, na_value=np.nan)
        bad = broken("loss", values)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            first = first or f"run {runs['run_key'].iloc[i]}: {col} {float(values[i])!r} in the database"
            count += int(bad.sum())
            runs = runs.assign(**{col: np.where(bad, np.nan, values)})
    if first is None:
        return runs, None
    return runs, f"{first}: {RULES['loss'].says}; {count} such value(s) left blank"
