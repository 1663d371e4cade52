"""What Chinchilla approaches 1 and 2 share: power laws over per-budget optima.

Both end with one point per FLOP budget C: the compute-optimal size N_opt(C), its loss L_opt(C)
and the curvature of loss in log N around it. Over budgets, N_opt = k_N C^a (Hoffmann et al.
2022, Sec. 3.1-3.2), D_opt = C / (k N_opt) = k_D C^b with b = 1 - a, and L_opt = k_L C^-alpha_L.
Near the frontier a model of size N at C = k N D is predicted as
L_opt(C) + curv * (log N - log N_opt(C))^2, the IsoFLOP parabola with the median curvature.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np

from scaling.errors import FitError
from scaling.fmt import bounds
from scaling.fitting.core.base import Law, Params, coverage_reasons, fit_line
from scaling.fitting.core.doubts import DoubtKind


def parabola(x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Least-squares (c2, c1, c0) of y = c2 x^2 + c1 x + c0, with x centred for conditioning.

    None when the points cannot determine a parabola: fewer than three distinct x, or x so close
    together (or y so wild) that the least-squares problem is rank-deficient or does not converge.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or np.unique(x).size < 3:
        return None
    xm = x.mean()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", np.exceptions.RankWarning)
            c2, c1, c0 = np.polyfit(x - xm, y, 2)
    except (np.linalg.LinAlgError, np.exceptions.RankWarning):
        return None
    # Undo the centring: c2 (x - xm)^2 + c1 (x - xm) + c0.
    return np.array([c2, c1 - 2 * c2 * xm, c2 * xm * xm - c1 * xm + c0])


def vertex(coef: np.ndarray) -> tuple[float, float]:
    """(x, y) at the parabola's minimum."""
    c2, c1, c0 = coef
    x = -c1 / (2 * c2)
    return float(x), float(c0 - c1 * c1 / (4 * c2))


def loss_frontier(logC: np.ndarray, L: np.ndarray) -> tuple[float, float, float]:
    """(E, slope, intercept) of log(L - E) = intercept + slope log C, least squares, E profiled.

    With fewer than four budgets E is not identifiable and stays 0 (a pure power law).
    """
    def sse(E: float) -> tuple[float, float, float]:
        slope, icpt = fit_line(logC, np.log(L - E))
        return float(np.sum((np.log(L - E) - icpt - slope * logC) ** 2)), slope, icpt

    if not (np.isfinite(L).all() and (L > 0).all()):
        return math.nan, math.nan, math.nan  # no power law through a non-positive loss (a failed refit)
    if L.size < 4:
        return (0.0, *sse(0.0)[1:])
    from scipy.optimize import minimize_scalar

    hi = 0.999 * float(L.min())
    r = minimize_scalar(lambda E: sse(E)[0], bounds=(0.0, hi), method="bounded", options={"xatol": 1e-6})
    E = float(r.x) if r.success and sse(float(r.x))[0] <= sse(0.0)[0] else 0.0
    _, slope, icpt = sse(E)
    return E, slope, icpt


#: Values of a (N_opt ~ C^a) outside this range are noted as implausible.
A_PLAUSIBLE = (0.1, 0.9)
#: Fewer distinct model sizes deciding the kept optima cannot measure a slope.
MIN_SIZES = 3
#: With fewer kept budgets than this, E_L is not fitted (held at 0; see :func:`loss_frontier`).
MIN_BUDGETS_E = 4


class FrontierLaw(Law):
    """Base of approaches 1 and 2: the power laws over budgets and the parabola prediction."""

    law = "chinchilla"
    param_names = ("a", "log_kN", "b", "log_kD", "alpha_L", "log_kL", "E_L", "curv")
    derived_names = ("kN", "kD")
    log_names = ("kN", "kD")

    def _frontier_params(self, C: np.ndarray, N_opt: np.ndarray, L_opt: np.ndarray, curv: np.ndarray) -> dict[str, float]:
        logC = np.log(C)
        a, log_kN = fit_line(logC, np.log(N_opt))
        D_opt = C / (self.k_ * N_opt)
        b, log_kD = fit_line(logC, np.log(D_opt))
        E_L, sL, log_kL = loss_frontier(logC, np.asarray(L_opt, float))

        c = np.asarray(curv, float)
        c = c[np.isfinite(c) & (c > 0)]
        return {"a": a, "log_kN": log_kN, "b": b, "log_kD": log_kD, "alpha_L": -sL, "log_kL": log_kL,
                "E_L": E_L, "curv": float(np.median(c)) if c.size else np.nan}

    def _check_exponent(self, C: np.ndarray | None = None, sizes: np.ndarray | None = None, what: str = "") -> None:
        """Note a frontier the kept budgets cannot pin down, so a table and report say so.

        N_opt must grow with C but slower than C (else D_opt shrinks): a outside (0, 1) is
        impossible, and outside :data:`A_PLAUSIBLE` implausible (published values lie in about
        0.45-0.9). Independently of the value, too few budgets or budgets spanning too little
        compute (:func:`~scaling.fitting.core.base.coverage_reasons`), or optima decided by fewer than
        :data:`MIN_SIZES` distinct model sizes, cannot measure a slope, however tight its bootstrap
        interval looks.
        """
        if C is not None and len(C) < MIN_BUDGETS_E:
            self.pinned_["E_L"] = f"fixed at 0 (not fitted with fewer than {MIN_BUDGETS_E} budgets)"
        elif not self.params_["E_L"] > 0.0:
            self.pinned_["E_L"] = "lower bound 0"
        a = self.params_["a"]
        if not 0.0 < a < 1.0:
            self.add_doubt(DoubtKind.IMPLAUSIBLE, f"a = {a:.3g} is outside (0, 1): the budgets do not locate a consistent optimum")
        reasons = []
        if 0.0 < a < 1.0 and not A_PLAUSIBLE[0] <= a <= A_PLAUSIBLE[1]:
            reasons.append(f"a = {a:.3g} is outside the plausible {A_PLAUSIBLE[0]:g}-{A_PLAUSIBLE[1]:g}")
        if sizes is not None and np.unique(np.asarray(sizes, float)).size < MIN_SIZES:
            reasons.append(f"the kept optima come from {np.unique(np.asarray(sizes, float)).size} model size(s) "
                           f"(fewer than {MIN_SIZES})")
        if not self.params_["alpha_L"] > 0.0:
            reasons.append(f"the lowest loss does not fall with compute over the kept budgets (alpha_L = "
                           f"{self.params_['alpha_L']:.3g}): they show no scaling")
        if C is not None:
            reasons += coverage_reasons(len(C), C, "a line through the optima has no residual to test the power "
                                        "law or measure its error by")
        if reasons:
            self.add_unreliable(DoubtKind.COVERAGE, f"the data cannot pin {what or 'this law'} down ({'; '.join(reasons)}); "
                               "do not trust a, b or the frontier it implies")

    def bootstrap(self, n: int = 200, seed: int = 0) -> "FrontierLaw":
        """As :meth:`Law.bootstrap`, and a note when a's interval reaches outside (0, 1) or alpha_L's includes 0."""
        super().bootstrap(n, seed)
        self.drop_doubts(DoubtKind.WIDE_INTERVAL)
        iv = self.intervals()["a"]
        if iv.interval is not None and (iv.lo <= 0.0 or iv.hi >= 1.0):
            self.add_unreliable(DoubtKind.WIDE_INTERVAL, f"the 95% interval of a, {bounds(iv.lo, iv.hi)}, reaches outside "
                               "(0, 1): the data do not determine how N_opt grows with C")
        iv = self.intervals()["alpha_L"]
        if self.params_["alpha_L"] > 0.0 and iv.lo is not None and iv.lo <= 0.0:
            self.add_unreliable(DoubtKind.WIDE_INTERVAL, f"the 95% interval of alpha_L, {bounds(iv.lo, iv.hi)}, includes 0: "
                               "the lowest loss need not fall with compute, so the budgets show no scaling")
        return self

    @staticmethod
    def _need_budgets(n_used: int, flagged: list[str], what: str) -> None:
        if n_used < 2:
            detail = "; ".join(flagged) if flagged else "none found"
            raise FitError(f"{what} needs at least two usable FLOP budgets, found {n_used} ({detail})")

    def _predict(self, p: Params, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        C = self.k_ * N * D
        logN_opt = p["log_kN"] + p["a"] * np.log(C)
        L_opt = p["E_L"] + np.exp(p["log_kL"] - p["alpha_L"] * np.log(C))
        curv = np.nan_to_num(np.asarray(p["curv"], float), nan=0.0)
        return L_opt + curv * (np.log(N) - logN_opt) ** 2

    def _optimal(self, p: Params, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        logC = np.log(C)
        N = np.exp(p["log_kN"] + p["a"] * logC)
        D = np.asarray(C) / (self.k_ * N)
        return N, D, p["E_L"] + np.exp(p["log_kL"] - p["alpha_L"] * logC)

    def _derived(self, p: Params) -> dict[str, Any]:
        return {"kN": np.exp(p["log_kN"]), "kD": np.exp(p["log_kD"])}
