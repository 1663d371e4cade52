"""The uncertainty of predicted points carried into a law's bootstrap.

Points whose loss is predicted (the cooldowns of trunks, by the curve law across sizes) are uncertain
beyond their scatter: the law that predicted them has its own bootstrap, and its error moves every
predicted point of a replicate together. A law fitted to them as if measured resamples only the
scatter, so its intervals on N*, D* are too narrow. Here the law is refitted once per replicate of
the predicting law (the predicted losses replaced by that replicate's, the measured ones kept), and
each of its own bootstrap replicates is moved by one such refit's departure from the fit (replicate b
by refit b mod K, in log for a parameter positive in both, else as a difference). The two sources
are independent (the points' scatter, the predicting law's error), so on the log scale of N* their
variances add, as a nested bootstrap's would, to first order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from scaling.errors import FitError

if TYPE_CHECKING:
    from scaling.fitting.core.base import Law
    from scaling.fitting.core.measurements import FitData

#: Refits of a law on the predicting law's replicates at most (each a full fit of the law).
PREDICTED_REFITS = 10


def predicted_rows(data: "FitData") -> np.ndarray:
    """The positions in ``data.points`` of its predicted points, in the order of ``data.predicted_draws``'s
    columns (an empty array where a predicted point is missing among the points: nothing is propagated)."""
    if data.predicted_draws is None:
        return np.zeros(0, np.int64)
    keys, _ = data.predicted_draws
    N, D = data.points["N"].to_numpy(float), data.points["D"].to_numpy(float)
    rows = []
    for n, d in keys:
        hit = np.flatnonzero(np.isclose(N, n, rtol=1e-9) & np.isclose(D, d, rtol=1e-9))
        if hit.size != 1:
            return np.zeros(0, np.int64)
        rows.append(int(hit[0]))
    return np.array(rows, np.int64)


def refits(law: "Law", data: "FitData", refit: Callable[["FitData"], "Law"], limit: int = PREDICTED_REFITS) -> np.ndarray:
    """The law's parameters (rows, in ``law.param_names``' order) refitted on each of the first ``limit`` finite
    replicates of the predicted losses; no rows where ``data`` has none."""
    rows = predicted_rows(data)
    names = law.param_names
    if not rows.size:
        return np.zeros((0, len(names)))
    _, draws = data.predicted_draws  # type: ignore[misc]
    draws = draws[np.isfinite(draws).all(axis=1) & (draws > 0).all(axis=1)][:limit]
    out = []
    for losses in draws:
        points = data.points.copy()
        points.loc[rows, "loss"] = losses
        try:
            fitted = refit(replace(data, points=points, predicted_draws=None))
        except FitError:
            continue
        out.append([float(fitted.params_[n]) for n in names])  # type: ignore[index]
    return np.array(out, float).reshape(-1, len(names))


def propagate(law: "Law", data: "FitData", refit: Callable[["FitData"], "Law"], limit: int = PREDICTED_REFITS) -> int:
    """Widen ``law``'s bootstrap replicates by the predicted points' uncertainty (see the module); returns
    how many refits moved them (0: nothing predicted, no bootstrap, or no refit succeeded)."""
    if law.replicates_ is None or not len(law.replicates_) or data.predicted_draws is None:
        return 0
    moved = refits(law, data, refit, limit)
    if len(moved) < 2:
        why = ("they are not each one fitted point (several seeds or recounted tokens)" if not predicted_rows(data).size
               else "fewer than 2 refits on their replicates succeeded")
        law.notes_.append(f"bootstrap: the uncertainty of the {data.predicted_draws[1].shape[1]} predicted point(s) is "
                          f"not carried in ({why}): the intervals treat them as measured")
        return 0
    centre = np.array([float(law.params_[n]) for n in law.param_names])  # type: ignore[index]
    if np.allclose(moved, centre, rtol=1e-9, atol=0.0):  # a law that does not read the points' losses
        return 0
    reps = np.asarray(law.replicates_, float).copy()
    pick = moved[np.arange(len(reps)) % len(moved)]
    with np.errstate(all="ignore"):
        positive = (centre > 0) & (pick > 0) & (reps > 0)
        scaled = reps * (pick / centre)
        shifted = reps + (pick - centre)
    law.replicates_ = np.where(positive, scaled, shifted)
    law.notes_.append(f"bootstrap: the uncertainty of the {data.predicted_draws[1].shape[1]} predicted point(s) carried "
                      f"in: each replicate moved by a refit on one of {len(moved)} replicates of the predicting law")
    law.judge_replicates()
    return len(moved)
