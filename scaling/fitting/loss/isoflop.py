"""Chinchilla approach 2: IsoFLOP profiles (Hoffmann et al. 2022, Sec. 3.2).

Runs are grouped into FLOP budgets (C equal within 5%). For each budget, a parabola in log N is
fitted to the loss of the ``window`` sizes nearest the lowest loss; its vertex is N_opt(C). A
budget whose lowest loss sits at the smallest or largest sampled size cannot locate a minimum
(the true one may lie outside), so it is flagged and left out, as is one with fewer than three
sizes or a parabola that opens downward. Power laws over the remaining budgets give a and b.

Uncertainty: a residual bootstrap. With five points per parabola a resample of the points often
has fewer than three distinct sizes, so each replicate instead adds resampled residuals (pooled
over budgets, rescaled for the parabolas' degrees of freedom) to the fitted parabolas, refits
every parabola and the power laws (Efron & Tibshirani 1993, Sec. 9.5).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaling.fitting.core.measurements import FitData, group_budgets
from scaling.fitting.loss.frontier import FrontierLaw, parabola, vertex


class ChinchillaIsoFLOP(FrontierLaw):
    """Chinchilla approach 2.

    Parameters
    ----------
    window : sizes per parabola, nearest (in rank) the lowest loss of the budget.
    rel_tol : points whose C agree within this fraction form one budget.

    Attributes
    ----------
    budgets_ : one dict per budget: C, every size and loss, the window used, the parabola
        (coefficients in x = ln N), N_opt, loss_opt, and ``status`` ("used" or why it was left out).
    params_ : a, log_kN (N_opt = kN C^a), b, log_kD, alpha_L, log_kL (L_opt = kL C^-alpha_L), curv.
    """

    method = "isoflop"
    #: Fitted: one record per budget (see above).
    budgets_: list[dict[str, Any]] = []  # noqa: RUF012 - rebound by fit/restore, never changed in place

    def __init__(self, window: int = 5, rel_tol: float = 0.05):
        self.window = window
        self.rel_tol = rel_tol

    def get_settings(self) -> dict[str, Any]:
        return {"window": self.window, "rel_tol": self.rel_tol}

    def _fit(self, data: FitData) -> None:
        pts = data.points
        labels = group_budgets(pts["C"].to_numpy(), self.rel_tol)
        budgets: list[dict[str, Any]] = []
        for lab in np.unique(labels):
            sub = pts[labels == lab].sort_values("N")
            budgets.append(self._one_budget(sub["N"].to_numpy(), sub["loss"].to_numpy(), sub["C"].to_numpy()))
        used = [b for b in budgets if b["status"] == "used"]
        flagged = [f"C={b['C']:.3g}: {b['status']}" for b in budgets if b["status"] != "used"]
        if len(flagged) > 6:  # keep the message one readable line; every budget stays in budgets_
            flagged = flagged[:5] + [f"and {len(flagged) - 5} more"]
        self._need_budgets(len(used), flagged, "approach 2 (IsoFLOP)")
        self.budgets_ = budgets
        self.params_ = self._frontier_params(
            np.array([b["C"] for b in used]), np.array([b["N_opt"] for b in used]),
            np.array([b["loss_opt"] for b in used]), np.array([b["coef"][0] for b in used]),
        )
        # Each used budget's vertex is located by its own parabola: no check of distinct sizes.
        self._check_exponent(np.array([b["C"] for b in used]), None, "approach 2 (IsoFLOP)")
        if flagged:
            self.notes_.append(f"left out {len(budgets) - len(used)} of {len(budgets)} budgets: " + "; ".join(flagged))

    def _one_budget(self, N: np.ndarray, L: np.ndarray, C: np.ndarray) -> dict[str, Any]:
        out: dict[str, Any] = {"C": float(np.exp(np.mean(np.log(C)))), "N": N.tolist(), "loss": L.tolist(),
                               "window": [], "coef": None, "N_opt": None, "loss_opt": None}
        sizes = np.unique(N)
        if len(sizes) < 3:
            out["status"] = f"too few sizes ({len(sizes)} < 3)"
            return out
        best = int(np.searchsorted(sizes, N[int(np.argmin(L))]))
        if best == 0 or best == len(sizes) - 1:
            out["status"] = "lowest loss at the " + ("smallest" if best == 0 else "largest") + " size (edge)"
            return out
        # The window is the `window` distinct sizes nearest the best one, with every point of each:
        # repeated sizes (seeds, or tokens differing within the budget's tolerance) count once.
        w = min(self.window, len(sizes))
        lo = min(max(0, best - w // 2), len(sizes) - w)
        win = np.flatnonzero((N >= sizes[lo]) & (N <= sizes[lo + w - 1]))
        coef = parabola(np.log(N[win]), L[win])
        out["window"] = win.tolist()
        if coef is None:
            out["status"] = "parabola cannot be fitted (sizes too close together to tell apart)"
            return out
        out["coef"] = coef.tolist()
        if not coef[0] > 0:
            out["status"] = "parabola opens downward"
            return out
        x, y = vertex(coef)
        out["N_opt"], out["loss_opt"] = math.exp(x), y
        if not (np.log(N[win[0]]) <= x <= np.log(N[win[-1]])):
            out["status"] = "parabola minimum outside the sampled sizes"
            return out
        out["status"] = "used"
        return out

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        used = [b for b in self.budgets_ if b["status"] == "used"]
        xs, fitted, resid = [], [], []
        for b in used:
            x = np.log(np.asarray(b["N"])[b["window"]])
            y = np.asarray(b["loss"])[b["window"]]
            f = np.polyval(b["coef"], x)
            xs.append(x)
            fitted.append(f)
            resid.append(y - f)
        r = np.concatenate(resid)
        dof = r.size - 3 * len(used)
        out = np.full((n, len(self.param_names)), np.nan)
        if dof <= 0:
            self.notes_.append("bootstrap: no residual degrees of freedom (3 sizes per budget); no intervals")
            return out
        r = (r - r.mean()) * math.sqrt(r.size / dof)
        C = np.array([b["C"] for b in used])
        # Each budget's parabola is a fixed linear map of its losses: refit all replicates at once.
        Nopt = np.full((n, len(used)), np.nan)
        Lopt = np.full((n, len(used)), np.nan)
        curv = np.full((n, len(used)), np.nan)
        for j, (x, f) in enumerate(zip(xs, fitted)):
            xm = x.mean()
            X = np.stack([(x - xm) ** 2, x - xm, np.ones_like(x)], axis=1)
            Y = f[None, :] + rng.choice(r, size=(n, f.size))
            c2, c1, c0 = (Y @ np.linalg.pinv(X).T).T  # centred coefficients
            with np.errstate(divide="ignore", invalid="ignore"):
                vx = -c1 / (2 * c2)
                ok = (c2 > 0) & (vx >= x[0] - xm) & (vx <= x[-1] - xm)  # as in the fit: vertex inside the window
            Nopt[ok, j] = np.exp(vx[ok] + xm)
            Lopt[ok, j] = c0[ok] - c1[ok] ** 2 / (4 * c2[ok])
            curv[ok, j] = c2[ok]
        for k in range(n):
            ok = np.isfinite(Nopt[k])
            if ok.sum() < 2:
                continue
            p = self._frontier_params(C[ok], Nopt[k, ok], Lopt[k, ok], curv[k, ok])
            out[k] = [p[name] for name in self.param_names]
        return out

    def _plot_extra(self) -> dict[str, Any]:
        return {"budgets": self.budgets_}

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        super()._restore_plot(plot)
        self.budgets_ = plot.get("budgets", [])
