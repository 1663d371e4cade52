"""Backtest: refit without the largest-compute runs and score the predictions for them.

Held out: the largest IsoFLOP budget when it has at least three points, otherwise the points at
or above the 90th percentile of compute. Each law is refitted (same settings, no bootstrap) on
the rest and scored by the relative error of its predicted loss on each held-out point, and,
where the held-out budget is an IsoFLOP slice with an interior minimum, by the relative error of
its N_opt at that budget against the slice's own parabola.

The errors, per unit of ln C extrapolated (from the largest fitted budget to the held-out one),
become the law's model-error rates (kept by the law as ``extrapolation_``; for N*, where the held-out runs
measure no optimum, how far N* at their budget moves between the refit and the full fit): how fast its predictions drift from
the truth as it extrapolates. :meth:`scaling.fitting.core.base.Law.optimal_interval` and
:meth:`~scaling.fitting.core.base.Law.predict_interval` widen intervals beyond the fitted range by them.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from scaling.errors import FitError, UserError
from scaling.fitting.core.base import NUMERICAL_FAILURES, Law, jsonable
from scaling.fitting.core.measurements import FitData, group_budgets


def split(data: FitData, rel_tol: float = 0.05) -> tuple[FitData, np.ndarray]:
    """(training data without the largest-compute points, boolean mask of the held-out points)."""
    pts = data.points
    C = pts["C"].to_numpy()
    labels = group_budgets(C, rel_tol)
    held = labels == labels.max()
    if held.sum() < 3:
        held = C >= np.quantile(C, 0.9)
    if held.all() or (~held).sum() < 3:
        raise FitError("backtest needs points left to fit after holding out the largest-compute runs")
    train = pts[~held].reset_index(drop=True)
    curves = data.curves
    if curves is not None:
        # Drop the held-out runs' curves: a run is held out when its size and final tokens match.
        last = curves.groupby("run_key").agg(N=("N", "first"), tokens=("tokens", "max"))
        out_keys = []
        for key, row in last.iterrows():
            close = np.isclose(pts.loc[held, "N"], row["N"], rtol=1e-6) & np.isclose(
                pts.loc[held, "D"], row["tokens"], rtol=0.02)
            if close.any():
                out_keys.append(key)
        curves = curves[~curves["run_key"].isin(out_keys)]
    return replace(data, points=train, curves=curves), held


def backtest(law: Law, data: FitData) -> tuple[dict[str, Any], dict[str, float] | None]:
    """Refit a copy of ``law`` without the largest-compute runs: (the scores, the model-error rates per
    unit of ln C, None where the held-out runs lie at no larger budget). Nothing is stored: the law keeps
    them itself (:meth:`~scaling.fitting.core.base.Law.keep_backtest`).

    A refit the held-in data cannot support, or a score that fails numerically, is recorded as the
    backtest's ``error``, never raised: the full fit stands without it."""
    try:
        return _scores(law, data)
    except (UserError, *NUMERICAL_FAILURES) as exc:
        return {"error": " ".join(str(exc).split()) or type(exc).__name__}, None


def _scores(law: Law, data: FitData) -> tuple[dict[str, Any], dict[str, float] | None]:
    from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP

    train, held = split(data)
    refit = type(law)(**law.get_settings()).fit(train)
    pts = data.points[held]
    pred = refit.predict(pts["N"].to_numpy(), pts["D"].to_numpy())
    rel = (pred - pts["loss"].to_numpy()) / pts["loss"].to_numpy()
    rows = [
        {"N": n, "D": d, "C": c, "loss": l, "predicted": p, "rel_error": r}
        for n, d, c, l, p, r in zip(pts["N"], pts["D"], pts["C"], pts["loss"], pred, rel)
    ]
    result = {
        "held_out": rows,
        "n_train": int(len(train.points)),
        "mean_abs_rel_error": float(np.mean(np.abs(rel))),
        "max_abs_rel_error": float(np.max(np.abs(rel))),
        "N_opt": None,
    }
    # An optimum is measured only where the held-out runs are one IsoFLOP slice (one budget), not
    # the top decile of compute spread over several budgets.
    order = np.argsort(pts["N"].to_numpy(), kind="stable")
    one_budget = np.unique(group_budgets(pts["C"].to_numpy())).size == 1
    slice_ = ChinchillaIsoFLOP()._one_budget(pts["N"].to_numpy()[order], pts["loss"].to_numpy()[order],
                                             pts["C"].to_numpy()[order]) if one_budget else {"status": "several budgets"}
    if slice_["status"] == "used":
        n_pred = float(np.asarray(refit.optimal(slice_["C"])[0]))
        result["N_opt"] = {"C": slice_["C"], "observed": slice_["N_opt"], "predicted": n_pred,
                           "rel_error": (n_pred - slice_["N_opt"]) / slice_["N_opt"]}
    rates: dict[str, float] | None = None
    distance = math.log(float(np.exp(np.mean(np.log(pts["C"].to_numpy())))) / float(train.points["C"].max()))
    if distance > 0:
        abs_log = np.abs(np.log(pred / pts["loss"].to_numpy()))
        rates = {"loss": float(np.mean(abs_log)) / distance, "distance": distance}
        with np.errstate(all="ignore"):  # an N* that under- or overflows to 0 or inf moves by no finite rate
            if result["N_opt"] is not None:
                moved = np.log(np.float64(result["N_opt"]["predicted"]) / result["N_opt"]["observed"])
            else:  # no measured optimum there: how far N* moves when the largest runs are left out
                C_held = float(np.exp(np.mean(np.log(pts["C"].to_numpy()))))
                moved = np.log(np.float64(np.asarray(refit.optimal(C_held)[0])) / np.asarray(law.optimal(C_held)[0]))
        if np.isfinite(moved):
            rates["N"] = abs(float(moved)) / distance
    return jsonable(result), rates
