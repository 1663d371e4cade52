"""When two rows are the same point: the one rounding every reader and fit compares N, D, C and U with.

Numbers written by people and computed by programs differ in their last digits (4e8 and
400000000.00000006); rows whose values agree to :data:`DIGITS` significant digits are one point,
whether the question is which seeds to average (:func:`scaling.fitting.core.measurements.prepare`) or which runs
form a hyperparameter group (:func:`scaling.fitting.hyperparams.hparams.assign_groups`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

#: Significant digits two values of one point agree to.
DIGITS = 6


def rounded(values: ArrayLike) -> np.ndarray:
    """``values`` rounded to :data:`DIGITS` significant digits (0, NaN and inf as they are)."""
    v = np.asarray(values, dtype=float)
    with np.errstate(all="ignore"):
        scale = 10.0 ** (DIGITS - 1 - np.floor(np.log10(np.abs(v))))
        return np.where(np.isfinite(scale) & (v != 0), np.round(v * scale) / scale, v)


def point_keys(rows: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> pd.DataFrame:
    """One column per name in ``columns``, rounded as :func:`rounded` does: rows with equal keys are
    the same point (group by these)."""
    return pd.DataFrame({c: rounded(rows[c].to_numpy(dtype=float)) for c in columns}, index=rows.index)

