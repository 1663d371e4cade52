"""Chinchilla approach 3: L(N, D) = E + A/N^alpha + B/D^beta (Hoffmann et al. 2022, Sec. 3.3).

Fitted as Besiroglu et al. (Epoch AI, 2024) replicate it: parameters (a, b, e) = log(A, B, E)
and alpha, beta; the prediction written as log-sum-exp(a - alpha log N, b - beta log D, e); the
objective is the sum of Huber losses (delta = 1e-3) between predicted and observed log loss;
L-BFGS from a grid of 4,500 starts, the best kept. Here every start runs at once
(:func:`scaling.fitting.core.optim.batch_lbfgs` with an analytic gradient), the best few are polished
with scipy's L-BFGS-B, and bootstrap refits run batched from the full-data optimum.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import minimize

from scaling.errors import FitError
from scaling.fitting.core.base import Law, Params, check_spread
from scaling.fitting.core.measurements import FitData
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.core.optim import batch_lbfgs, max_batch
from scaling.fitting.core.resample import BLB_THRESHOLD, little_bootstraps, multinomial_counts
from scaling.fitting.core.resample import NOTE_PREFIX as BLB_NOTE, note as blb_note

#: Epoch AI's grid of starts (Besiroglu et al. 2024, Sec. 2): 5 x 5 x 5 x 6 x 6 = 4,500.
EPOCH_GRID: dict[str, list[float]] = {
    "alpha": [0.0, 0.5, 1.0, 1.5, 2.0],
    "beta": [0.0, 0.5, 1.0, 1.5, 2.0],
    "e": [-1.0, -0.5, 0.0, 0.5, 1.0],
    "a": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
    "b": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
}
#: A 3 x 3 x 3 x 4 x 4 = 432-start grid over the same ranges, for repeated fits (tests, replicates).
COARSE_GRID: dict[str, list[float]] = {
    "alpha": [0.2, 0.6, 1.2],
    "beta": [0.2, 0.6, 1.2],
    "e": [-0.5, 0.25, 1.0],
    "a": [0.0, 7.0, 14.0, 21.0],
    "b": [0.0, 7.0, 14.0, 21.0],
}
#: 2 x 2 x 2 x 3 x 3 = 72 starts, for many repeated fits of well-sampled data (coverage tests).
SMALL_GRID: dict[str, list[float]] = {
    "alpha": [0.3, 1.0],
    "beta": [0.3, 1.0],
    "e": [0.0, 1.0],
    "a": [2.0, 10.0, 18.0],
    "b": [2.0, 10.0, 18.0],
}
GRIDS = {"epoch": EPOCH_GRID, "coarse": COARSE_GRID, "small": SMALL_GRID}
ORDER = ("a", "b", "e", "alpha", "beta")  # the optimiser's parameter vector
#: How the optimum is searched: ``grid`` (the starts of ``grid``, the best polished; Epoch AI's
#: recipe) or ``ladder`` (the step-1 recipe of OLMo's model ladder, Bhagia et al. 2024: one start,
#: every parameter >= 0, scipy's L-BFGS-B, bootstrap refits under the same bounds).
RECIPES = ("grid", "ladder")
#: The ladder's start, (a, b, alpha, beta, E) = (3, 6, 0.1, 0.2, 1), in :data:`ORDER` (e = log E = 0).
LADDER_START = (3.0, 6.0, 0.0, 0.1, 0.2)
#: The ladder's bounds in :data:`ORDER`: a, b, alpha, beta >= 0 (so A, B >= 1); E = exp(e) > 0 needs none.
LADDER_BOUNDS = ((0.0, None), (0.0, None), (None, None), (0.0, None), (0.0, None))
#: The ladder code's L-BFGS-B settings: no stop on the objective's change (ftol 0), only on a projected
#: gradient below 1e-10 or a million iterations; scipy's defaults stop far earlier, well above the optimum.
LADDER_OPTIONS = {"ftol": 0.0, "gtol": 1e-10, "maxiter": 1_000_000}
#: What a ladder bound means for the reported parameter, by position in :data:`ORDER`.
LADDER_PINNED = {0: ("A", "lower bound 1 (a = log A >= 0)"), 1: ("B", "lower bound 1 (b = log B >= 0)"),
                 3: ("alpha", "lower bound 0"), 4: ("beta", "lower bound 0")}
#: Grid starts still this many times worse than the best after 100 iterations are stopped
#: (see :func:`scaling.fitting.core.optim.batch_lbfgs`); the best few are polished regardless.
PRUNE_FACTOR = 10.0
#: Above this many points the grid of starts runs on a seeded random subset of this size (it
#: only has to find the basin of the optimum); the best grid optima are polished on every point.
GRID_POINTS = 1_000
#: E below this fraction of the lowest loss is the fit's bound E = 0 (reached as e = log E runs to -inf;
#: a share of the loss that small is below any realistic noise, so e stops moving before it gets there).
E_PINNED = 1e-3
#: Above this condition number of the column-scaled Jacobian of log L, the Fisher information is
#: near-singular: some combination of the five parameters moves the fit almost not at all.
FISHER_CONDITION_MAX = 1e4


def start_grid(grid: str = "epoch") -> np.ndarray:
    """The (S, 5) array of starts in :data:`ORDER`."""
    if grid not in GRIDS:
        raise FitError(f"unknown grid {grid!r} (use one of {sorted(GRIDS)})")
    g = GRIDS[grid]
    mesh = np.meshgrid(*(np.asarray(g[k]) for k in ORDER), indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1)


class HuberLogObjective:
    """Sum of Huber(log-sum-exp prediction - log L) over points, for many parameter vectors.

    ``weights`` (R, n) gives per-replicate point weights (bootstrap counts); a batch row r uses
    row ``idx[r]`` of it. Without weights every point counts once.
    """

    def __init__(self, N: np.ndarray, D: np.ndarray, loss: np.ndarray, delta: float, weights: np.ndarray | None = None):
        self.logN = np.log(np.asarray(N, float))[None, :]
        self.logD = np.log(np.asarray(D, float))[None, :]
        self.logL = np.log(np.asarray(loss, float))[None, :]
        self.delta = float(delta)
        self.weights = weights

    @property
    def n_points(self) -> int:
        return int(self.logN.shape[1])

    def subset(self, idx: np.ndarray, weights: np.ndarray | None = None) -> "HuberLogObjective":
        """The same objective on the points ``idx`` only."""
        out = HuberLogObjective.__new__(HuberLogObjective)
        out.logN, out.logD, out.logL = self.logN[:, idx], self.logD[:, idx], self.logL[:, idx]
        out.delta, out.weights = self.delta, weights
        return out

    def __call__(self, X: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(all="ignore"):  # an overflow gives an infinite objective: the line search backtracks
            return self._evaluate(X, idx)

    def _evaluate(self, X: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a, b, e, al, be = (X[:, i : i + 1] for i in range(5))
        # The terms are exponentiated without a max-shift (fewer array passes); see __call__.
        e1 = np.exp(a - al * self.logN)  # A / N^alpha
        e2 = np.exp(b - be * self.logD)  # B / D^beta
        e3 = np.exp(e)  # E, (k, 1): the same for every point
        tot = e1 + e2
        tot += e3
        r = np.log(tot)
        r -= self.logL
        psi = np.clip(r, -self.delta, self.delta)  # Huber derivative
        # Huber loss = psi * (r - psi / 2): r^2/2 inside delta, delta (|r| - delta/2) outside.
        if self.weights is not None:
            w = self.weights[idx]
            f = np.einsum("kn,kn,kn->k", w, psi, r) - 0.5 * np.einsum("kn,kn,kn->k", w, psi, psi)
            psi *= w
        else:
            f = np.einsum("kn,kn->k", psi, r) - 0.5 * np.einsum("kn,kn->k", psi, psi)
        psi /= tot  # d log(tot) / d t_k = e_k / tot
        grad = np.empty((X.shape[0], 5))
        grad[:, 0] = np.einsum("kn,kn->k", psi, e1)
        grad[:, 1] = np.einsum("kn,kn->k", psi, e2)
        grad[:, 2] = psi.sum(axis=1) * e3[:, 0]
        e1 *= self.logN
        e2 *= self.logD
        grad[:, 3] = -np.einsum("kn,kn->k", psi, e1)
        grad[:, 4] = -np.einsum("kn,kn->k", psi, e2)
        f[~np.isfinite(f)] = np.inf
        return f, grad

    def single(self, x: np.ndarray, row: int = 0) -> tuple[float, np.ndarray]:
        """One parameter vector, for scipy (bootstrap weights of row ``row`` if any)."""
        f, g = self(np.asarray(x, float)[None, :], np.array([row]))
        return float(f[0]), g[0]


class ChinchillaParametric(Law):
    """Chinchilla approach 3: L(N, D) = E + A/N^alpha + B/D^beta.

    Parameters
    ----------
    delta : Huber threshold on the log-loss residual (Hoffmann et al. use 1e-3).
    grid : ``"epoch"`` (4,500 starts), ``"coarse"`` (432) or ``"small"`` (72, for many repeated fits).
    n_polish : how many of the best distinct grid optima scipy's L-BFGS-B refines.
    recipe : ``"grid"`` (the grid of starts) or ``"ladder"`` (OLMo's step-1 recipe; see :data:`RECIPES`).

    Attributes
    ----------
    params_ : E, A, B, alpha, beta.
    objective_ : the minimised Huber objective.
    replicates_ : bootstrap replicates of the parameters after :meth:`bootstrap`.
    """

    law = "chinchilla"
    method = "parametric"
    param_names = ("E", "A", "B", "alpha", "beta")
    derived_names = ("a", "b", "G")
    log_names = ("E", "A", "B", "G")
    scale_names = ("E", "A", "B")
    exponent_names = ("alpha", "beta")
    #: Fitted: the optimiser's vector (log A, log B, log E, alpha, beta) and the minimised objective.
    theta_: np.ndarray | None = None
    objective_: float | None = None

    def __init__(self, delta: float = 1e-3, grid: str = "epoch", n_polish: int = 5, recipe: str = "grid"):
        if recipe not in RECIPES:
            raise FitError(f"unknown recipe {recipe!r} for the Chinchilla form (use one of {', '.join(RECIPES)})")
        self.delta = delta
        self.grid = grid
        self.n_polish = n_polish
        self.recipe = recipe

    def get_settings(self) -> dict[str, Any]:
        out: dict[str, Any] = {"delta": self.delta, "grid": self.grid, "n_polish": self.n_polish}
        if self.recipe != "grid":  # stored fits of the default recipe keep their settings
            out["recipe"] = self.recipe
        return out

    # -- fitting -------------------------------------------------------------------------------
    def _validate(self, data: FitData) -> None:
        pts = data.points
        check_spread(pts, "approach 3 needs")
        if len(pts) <= len(self.param_names):
            raise FitError(
                f"approach 3 needs more points than its 5 parameters (E, A, B, alpha, beta); got {len(pts)}"
            )

    def _fit(self, data: FitData) -> None:
        self._validate(data)
        pts = data.points
        obj = HuberLogObjective(pts["N"], pts["D"], pts["loss"], self.delta)
        x = self._minimise(obj)
        self.theta_ = x
        self.objective_ = obj.single(x)[0]
        self.params_ = _to_params(x)
        self._check_identifiable(pts)
        self._check_points(len(pts), len(self.param_names), "approach 3")
        for name in ("alpha", "beta"):
            v = self.params_[name]
            if not 0.0 < v < 2.0:  # published fits lie near 0.3; far outside, the data do not pin the law
                self.add_doubt(DoubtKind.IMPLAUSIBLE, f"{name} = {v:.3g} is implausible: the data do not pin down this law "
                                   f"({len(pts)} points, {pts['N'].nunique()} sizes)")

    def _check_identifiable(self, pts: Any) -> None:
        """Note a bound reached (E = 0) and a near-singular Fisher information at the optimum."""
        lowest = float(pts["loss"].min())
        if self.params_["E"] < E_PINNED * lowest:
            self.pinned_["E"] = "lower bound 0"
            self.add_unreliable(DoubtKind.PINNED, f"E is pinned at its bound 0 (fitted {self.params_['E']:.3g}): the data do not "
                               "separate the irreducible loss from the power-law terms")
        cond = fisher_condition(self.theta_, pts["N"].to_numpy(float), pts["D"].to_numpy(float))
        self.fisher_condition_ = cond
        if "E" not in self.pinned_ and not cond <= FISHER_CONDITION_MAX:
            self.add_unreliable(DoubtKind.ILL_CONDITIONED, f"the Fisher information at the optimum is near-singular (condition number "
                               f"{cond:.3g} of the scaled Jacobian): some combination of E, A, B, alpha and beta "
                               "is not determined by these points")

    def _minimise(self, obj: HuberLogObjective) -> np.ndarray:
        if self.recipe == "ladder":
            return self._ladder_fit(obj)
        starts = start_grid(self.grid)
        grid_obj = obj
        if obj.n_points > GRID_POINTS:
            idx = np.sort(np.random.default_rng(0).choice(obj.n_points, GRID_POINTS, replace=False))
            grid_obj = obj.subset(idx)
            self.notes_.append(f"grid of starts run on a random {GRID_POINTS:,} of the {obj.n_points:,} points; "
                               "its best optima polished on all of them")
        res = batch_lbfgs(grid_obj, starts, prune_factor=PRUNE_FACTOR, batch=max_batch(grid_obj.n_points))
        self.n_starts_ = int(len(starts))
        self.grid_result_ = res
        return self._polish(obj, res.x, res.fun)

    def _ladder_fit(self, obj: HuberLogObjective) -> np.ndarray:
        """OLMo's ladder recipe: L-BFGS-B from its one start under its bounds; a bound reached is pinned."""
        self.n_starts_ = 1
        x = self._bounded(obj.single, np.asarray(LADDER_START))
        if x is None:
            raise FitError("approach 3 (ladder recipe): L-BFGS-B from the ladder's start found no finite optimum")
        for i, (name, bound) in LADDER_PINNED.items():
            if x[i] <= LADDER_BOUNDS[i][0] + 1e-8:
                self.pinned_[name] = bound
                self.add_unreliable(DoubtKind.PINNED, f"{name} is pinned at its {bound}: the data do not determine it "
                                   "within the ladder recipe's bounds")
        return x

    @staticmethod
    def _bounded(f: Any, x0: np.ndarray) -> np.ndarray | None:
        """scipy's L-BFGS-B under the ladder's bounds from ``x0``, with the ladder code's tolerances
        (:data:`LADDER_OPTIONS`); None without a finite optimum."""
        r = minimize(f, x0, jac=True, method="L-BFGS-B", bounds=LADDER_BOUNDS, tol=0.0, options=dict(LADDER_OPTIONS))
        return np.asarray(r.x, float) if np.isfinite(r.fun) else None

    def _polish(self, obj: HuberLogObjective, xs: np.ndarray, fs: np.ndarray) -> np.ndarray:
        """Refine the best distinct grid optima with scipy's L-BFGS-B; keep the lowest.

        Only optima within 1% of the best objective are worth it: a start that ended far worse
        (typically one crawling along a flat valley) will not overtake the best by polishing.
        """
        finite = np.where(np.isfinite(fs), fs, np.inf)
        order = np.argsort(finite)
        if not np.isfinite(finite[order[0]]):
            raise FitError("approach 3: the objective is not finite at any start (check the losses)")
        cutoff = finite[order[0]] * 1.01
        picked: list[np.ndarray] = []
        for i in order:
            if finite[i] > cutoff or len(picked) >= self.n_polish:
                break
            if all(np.max(np.abs(xs[i] - p)) > 1e-3 for p in picked):
                picked.append(xs[i])
        best_x, best_f = picked[0], obj.single(picked[0])[0]
        for x0 in picked:
            r = minimize(obj.single, x0, jac=True, method="L-BFGS-B", options={"ftol": 1e-14, "gtol": 1e-12, "maxiter": 500})
            if np.isfinite(r.fun) and r.fun < best_f:
                best_x, best_f = r.x, float(r.fun)
        return np.asarray(best_x, float)

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        """Pairs bootstrap: resample points with replacement; all refits batched, started at the optimum."""
        pts = data.points
        m = len(pts)
        full = HuberLogObjective(pts["N"], pts["D"], pts["loss"], self.delta)
        self.notes_ = [t for t in self.notes_ if not t.startswith(BLB_NOTE)]
        if m > BLB_THRESHOLD:
            return self._little_bootstraps(full, n, rng)
        return self._params_of(self._refit(full, np.arange(m), n, m, rng, self.theta_))

    def _refit(self, full: HuberLogObjective, idx: np.ndarray, n: int, draws: int, rng: np.random.Generator,
               start: np.ndarray) -> np.ndarray:
        """``n`` refits of the points ``idx`` weighted by multinomial(draws) counts, in memory-bounded chunks.

        Returns the optimiser's vectors (n, 5), NaN where a refit failed.
        """
        b = len(idx)
        out = np.full((n, 5), np.nan)
        if self.recipe == "ladder":  # each refit under the ladder's bounds, as the fit
            sub = full.subset(idx, multinomial_counts(draws, b, n, rng))
            for r in range(n):
                x = self._bounded(lambda v, r=r: sub.single(v, r), np.asarray(start, float))
                if x is not None:
                    out[r] = x
            return out
        chunk = max(1, max_batch(b) // 2)  # the weights are one more (replicates, points) array
        for lo in range(0, n, chunk):
            k = min(chunk, n - lo)
            counts = multinomial_counts(draws, b, k, rng)
            res = batch_lbfgs(full.subset(idx, counts), np.tile(start, (k, 1)), max_iter=1000)
            ok = np.isfinite(res.fun)
            out[lo : lo + k][ok] = res.x[ok]
        return out

    def _little_bootstraps(self, full: HuberLogObjective, n: int, rng: np.random.Generator) -> np.ndarray:
        """Bag of little bootstraps (:mod:`scaling.fitting.core.resample`), recentred in the optimiser's log parameters."""

        def fit_subset(idx: np.ndarray) -> np.ndarray | None:
            if self.recipe == "ladder":
                return self._bounded(full.subset(idx).single, self.theta_)
            r = minimize(full.subset(idx).single, self.theta_, jac=True, method="L-BFGS-B",
                         options={"ftol": 1e-14, "gtol": 1e-12, "maxiter": 500})
            return r.x if np.isfinite(r.fun) else None

        def refit(idx: np.ndarray, k: int, draws: int, g: np.random.Generator, start: np.ndarray) -> np.ndarray:
            return self._refit(full, idx, k, draws, g, start)

        out = little_bootstraps(full.n_points, n, self.theta_, rng, fit_subset, refit)
        self.notes_.append(blb_note(full.n_points))
        return self._params_of(out)

    @staticmethod
    def _params_of(thetas: np.ndarray) -> np.ndarray:
        out = np.full((len(thetas), 5), np.nan)
        ok = np.isfinite(thetas).all(axis=1)
        out[ok] = np.array([list(_to_params(x).values()) for x in thetas[ok]]).reshape(-1, 5)
        return out

    # -- the law ----------------------------------------------------------------------------
    def _predict(self, p: Params, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        # An undetermined law (a backtest refit, a bootstrap replicate) can take wild exponents:
        # N^alpha then over- or underflows to a loss of inf or nan, which every caller judges.
        with np.errstate(all="ignore"):
            return p["E"] + p["A"] / N ** p["alpha"] + p["B"] / D ** p["beta"]

    def _derived(self, p: Params) -> dict[str, Any]:
        al, be = np.asarray(p["alpha"]), np.asarray(p["beta"])
        with np.errstate(all="ignore"):  # alpha + beta = 0 or a ratio past a float: nan or inf, judged by callers
            G = (al * np.asarray(p["A"]) / (be * np.asarray(p["B"]))) ** (1.0 / (al + be))
            return {"a": be / (al + be), "b": al / (al + be), "G": G}

    def _optimal(self, p: Params, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Closed form (Hoffmann et al. eq. 4) with C = k N D: N* = G (C/k)^a, D* = (C/k)^b / G."""
        d = self._derived(p)
        x = np.asarray(C, float) / self.k_
        with np.errstate(all="ignore"):
            N = d["G"] * x ** d["a"]
            D = x ** d["b"] / d["G"]
        return N, D, self._predict(p, N, D)

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        super()._restore_plot(plot)
        p = self.params_  # the optimiser's vector, so bootstraps of a restored fit start at its optimum
        self.theta_ = np.array([math.log(p["A"]), math.log(p["B"]), math.log(p["E"]), p["alpha"], p["beta"]])
        self.objective_ = plot.get("objective")

    def _plot_extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"objective": self.objective_}
        if self.data_ is not None:
            pts = self.data_.points
            out["points"] = {c: pts[c].tolist() for c in ("N", "D", "C", "loss")}
        return out


def fisher_condition(theta: np.ndarray, N: np.ndarray, D: np.ndarray) -> float:
    """Condition number of the Jacobian of log L(N, D) in (a, b, e, alpha, beta), columns scaled to unit norm.

    Its square is the condition number of the Gauss-Newton Fisher information of the log-loss
    fit; scaling the columns makes it independent of the parameters' units. A column that
    vanishes (a term driven to 0) or two that are nearly parallel (a term whose exponent and
    coefficient trade off over the sampled range) make it large.
    """
    a, b, e, al, be = (float(v) for v in theta)
    logN, logD = np.log(np.asarray(N, float)), np.log(np.asarray(D, float))
    with np.errstate(all="ignore"):
        t = np.stack([a - al * logN, b - be * logD, np.full_like(logN, e)])
        w = np.exp(t - t.max(axis=0))
        w /= w.sum(axis=0)  # each term's share of the predicted loss
        J = np.stack([w[0], w[1], w[2], -w[0] * logN, -w[1] * logD], axis=1)
        norms = np.linalg.norm(J, axis=0)
        if not np.all(norms > 1e-12 * max(float(norms.max()), 1e-300)):
            return math.inf
        s = np.linalg.svd(J / norms, compute_uv=False)
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def _to_params(x: np.ndarray) -> dict[str, float]:
    a, b, e, al, be = (float(v) for v in x)
    with np.errstate(over="ignore"):
        return {"E": math.exp(e), "A": _exp(a), "B": _exp(b), "alpha": al, "beta": be}


def _exp(v: float) -> float:
    return math.exp(v) if v < 700 else math.inf
