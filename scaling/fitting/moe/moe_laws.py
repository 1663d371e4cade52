"""Laws of sparsity: loss as a function of active size N, tokens D and how the experts are cut.

Two forms, both L = c + K(x) / N^alpha + b / D^beta with N the active parameters:

- :class:`GranularityLaw`, Krajewski et al. 2024 ("Scaling Laws for Fine-Grained Mixture of
  Experts"): K(G) = g / G^gamma + a, G the granularity (dense feed-forward width over an expert's);
- :class:`SparsityLaw`, a sparsity term on the active-parameter coefficient as Clark et al. 2022
  and Abnar et al. 2025 study it: K(S) = a (1 - S)^delta, S the inactive share of the parameters,
  so that delta > 0 is the gain from more, inactive, parameters at the same active size; S = 0 is
  the dense model (Chinchilla's law).

Fitted as approach 3 is (:mod:`scaling.fitting.loss.parametric`): Huber loss (delta 1e-3) on log
loss, batched L-BFGS from a grid of starts, the best polished with scipy, a pairs bootstrap of
batched refits from the optimum. A sweep that does not vary x, or varies it only together with
N or D, cannot separate the MoE term: the law is then fitted on the sweep's own path (Chinchilla's
form in active N), the parameters that path cannot show are reported *not identified* (no value,
no SE) and the law is flagged, so nothing is recommended from it. Docs: docs/moe-laws.md.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np
from scipy.optimize import minimize

from scaling.errors import FitError
from scaling.fmt import Interval
from scaling.fitting.core.base import Law, Params, check_spread, jsonable
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.core.intervals import summarise, widen_log, withheld
from scaling.fitting.core.measurements import FitData
from scaling.fitting.core.optim import batch_lbfgs, max_batch
from scaling.fitting.core.resample import multinomial_counts
from scaling.fitting.loss.parametric import FISHER_CONDITION_MAX, ChinchillaParametric
from scaling.fitting.moe.moe_data import MoEData, distinct
from scaling.fitting.moe.moe_objective import MoEObjective, condition_number

#: The irreducible loss below this fraction of the lowest loss is its bound 0 (as in approach 3).
C_PINNED = 1e-3
#: A granularity term below this fraction of the constant a at the coarsest measured G is its bound 0.
G_PINNED = 1e-3
#: The MoE variable is tied to N and D when its residual after regressing on (1, log N, log D) has
#: a standard deviation below this (in its log units; 1% of G or of the dense fraction 1 - S moves the
#: N term by delta or gamma times 1%, below any run's noise): the sweep's path does not separate them.
TIED_SD = 0.01
#: |gamma| or |delta| beyond this is not a law of experts but a fit that ran away.
MAX_MOE_EXPONENT = 3.0
#: Grids of starts per optimiser position; ``small`` for many repeated fits (tests, coverage).
GRIDS: dict[str, dict[str, list[float]]] = {
    "default": {"a": [0.0, 5.0, 10.0, 15.0], "b": [0.0, 5.0, 10.0, 15.0], "c": [-0.5, 0.5], "beta": [0.2, 0.6],
                "alpha": [0.2, 0.6], "g": [0.0, 5.0, 10.0], "gamma": [0.3, 1.0], "delta": [0.0, 0.3, 0.8]},
    "small": {"a": [2.0, 8.0], "b": [2.0, 8.0, 14.0], "c": [0.0, 0.7], "beta": [0.3], "alpha": [0.3],
              "g": [2.0, 8.0], "gamma": [0.5], "delta": [0.0, 0.5]},
}
#: The bootstrap's refits stop when the gradient vanishes, no step lowers the objective or after
#: REFIT_MAX_ITER iterations, never on a small relative decrease (``ftol`` 0): on these objectives an
#: iteration of tiny decrease comes long before the optimum, and a refit stopped there sits between the fit
#: it started from and its own optimum, which makes the replicates and the percentile intervals too narrow
#: (measured in docs/moe-laws.md).
REFIT_FTOL = 0.0
REFIT_MAX_ITER = 1000


class MoELaw(Law):
    """What both forms share: reading x, the identification checks, fit, bootstrap, predictions.

    Subclasses give ``variable`` (a column of :class:`MoEData` points), ``dense`` (x of the
    comparison model), ``moe_names`` (the parameters of K beyond a), ``extra`` (their optimiser
    names, after the shared a, b, c, beta, alpha), :meth:`_z`, :meth:`_n_term` and :meth:`_K`.
    """

    method = "parametric"
    variable: ClassVar[str] = ""
    variable_text: ClassVar[str] = ""
    dense: ClassVar[float] = 0.0
    dense_text: ClassVar[str] = ""
    moe_names: ClassVar[tuple[str, ...]] = ()
    extra: ClassVar[tuple[str, ...]] = ()
    #: Distinct values of x the N term needs to be identified.
    min_levels: ClassVar[int] = 2
    log_names = ("c", "a", "b", "g")
    scale_names = ("c", "a", "b")
    exponent_names = ("alpha", "beta")
    #: Fitted: the range of x measured, the parameters x does not identify (with why), the path along
    #: which alpha was fitted instead (None: the full form), the form fitted and its objective.
    x_range_: tuple[float, float] = (math.nan, math.nan)
    unidentified_: dict[str, str] = {}  # noqa: RUF012 - rebound by fit/restore before it is filled
    path_: str | None = None
    mode_: str = "full"
    objective_: float | None = None

    def __init__(self, delta: float = 1e-3, grid: str = "default", n_polish: int = 3):
        if grid not in GRIDS:
            raise FitError(f"unknown grid {grid!r} (use one of {', '.join(GRIDS)})")
        self.delta = delta
        self.grid = grid
        self.n_polish = n_polish

    def get_settings(self) -> dict[str, Any]:
        return {"delta": self.delta, "grid": self.grid, "n_polish": self.n_polish}

    # -- what each form defines ----------------------------------------------------------------
    def _z(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _n_term(self, X: np.ndarray, logN: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        raise NotImplementedError

    def _K(self, p: Params, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _from_theta(self, x: np.ndarray) -> dict[str, float]:
        raise NotImplementedError

    # -- fitting -------------------------------------------------------------------------------
    def fit(self, data: MoEData) -> "MoELaw":  # type: ignore[override]
        """Fit to ``data`` (:class:`MoEData`: points with N active, D, loss and this form's variable)."""
        if not isinstance(data, MoEData):
            raise TypeError(f"fit() takes MoEData, not {type(data).__name__}")
        x = data.values(self.variable)
        if not np.isfinite(x).all():
            raise FitError(f"{data.source or 'the data'}: the {self.law} law needs {self.variable_text} for every "
                           f"point ({self.variable_hint()})")
        self.k_ = float(data.flops_per_param_token)
        self.conventions_ = Conventions.of(data)
        self.n_points_ = int(len(data.points))
        C = data.values("C")
        self.c_range_ = (float(C.min()), float(C.max()))
        self.x_range_ = (float(x.min()), float(x.max()))
        self.extrapolation_ = None
        self.pinned_: dict[str, str] = {}
        self.unidentified_: dict[str, str] = {}
        self.path_: str | None = None
        self.replicates_ = None
        self.bootstrap_info_ = None
        self.plot_ = None
        self.backtest_ = None
        self.notes_ = list(data.notes)
        self.doubts_ = []
        self.data_ = data
        self._fit(data)
        with np.errstate(all="ignore"):
            r = np.log(self.predict(data.values("N"), data.values("D"), x) / data.values("loss"))
        r = r[np.isfinite(r)]
        self.residual_sd_ = float(np.sqrt(np.mean(r ** 2))) if r.size else math.nan
        return self

    def variable_hint(self) -> str:
        return ""

    def _fit(self, data: FitData) -> None:
        pts = data.points
        check_spread(pts, f"the {self.law} law needs")
        n_params = len(self.param_names)
        x = pts[self.variable].to_numpy(float)
        z = self._z(x)
        tied = self._tied(z, pts)
        if tied is not None:
            self._fit_path(data, *tied)
            return
        if len(pts) <= n_params:
            raise FitError(f"the {self.law} law needs more points than its {n_params} parameters; got {len(pts)}")
        self.mode_ = "full"
        obj = self._objective(data)
        theta = self._minimise(obj)
        self.theta_ = theta
        self.objective_ = obj.single(theta)[0]
        self.params_ = self._from_theta(theta)
        levels = distinct(x)
        if levels < self.min_levels:
            for name in ("a",) + self.moe_names:
                self.unidentified_[name] = f"{levels} distinct {self.variable_text} values cannot separate " \
                                           f"{', '.join(('a',) + self.moe_names)} (the term needs {self.min_levels})"
            self.add_doubt(DoubtKind.IDENTIFICATION, f"unreliable: the sweep has only {levels} distinct "
                           f"{self.variable_text} values: {', '.join(('a',) + self.moe_names)} are not identified "
                           f"(at least {self.min_levels} are needed); nothing is recommended from this law")
        self._checks(obj, pts)

    def _tied(self, z: np.ndarray, pts: Any) -> tuple[str, bool] | None:
        """Why the sweep's x cannot be told apart from its sizes and tokens, and whether it moves with the
        active size (so that the size exponent is not the law's either); None when it can be."""
        if distinct(np.exp(z)) < 2:
            return (f"every point has the same {self.variable_text} "
                    f"({self.variable} = {float(pts[self.variable].iloc[0]):.4g})"), False
        A = np.column_stack([np.ones(len(z)), np.log(pts["N"].to_numpy(float)), np.log(pts["D"].to_numpy(float))])
        coef, *_ = np.linalg.lstsq(A, z, rcond=None)
        resid = z - A @ coef
        if float(np.std(resid)) < TIED_SD:
            with_n = abs(coef[1]) > 1e-6
            return (f"{self.variable_text} moves in lockstep with " + ("the active size" if with_n else "the tokens")
                    + (" (every run has about the same total parameters)" if with_n and self.variable == "S" else "")), with_n
        return None

    def _fit_path(self, data: FitData, why: str, with_size: bool) -> None:
        """The sweep's own path: Chinchilla's law in active N; the MoE term reported not identified."""
        self.mode_ = "path"
        inner = ChinchillaParametric(delta=self.delta, grid="coarse" if self.grid == "small" else "epoch")
        inner.fit(FitData(points=data.points[["N", "D", "C", "loss", "loss_std", "n_seeds"]].copy(),
                          flops_per_param_token=data.flops_per_param_token, source=data.source))
        self.inner_ = inner
        p = inner.params_
        self.params_ = {"c": p["E"], "a": p["A"], "b": p["B"], "alpha": p["alpha"], "beta": p["beta"],
                        **{name: 0.0 for name in self.moe_names}}
        self.theta_ = None
        self.objective_ = inner.objective_
        hidden = ("a", "alpha") + self.moe_names if with_size else ("a",) + self.moe_names
        for name in hidden:
            self.unidentified_[name] = why
        self.path_ = why
        for doubt in inner.doubts():
            self.add_doubt(doubt.kind, doubt.message.replace("E, A, B", "c, a, b").replace("E is", "c is"))
        if "E" in inner.pinned():
            self.pinned_["c"] = inner.pinned()["E"]
        shown = ", ".join(hidden)
        self.add_doubt(DoubtKind.IDENTIFICATION, f"unreliable: {why}: the sweep cannot show how loss depends on "
                       f"{self.variable_text}; {shown} are not identified (fitted along the sweep's path as Chinchilla's "
                       "law in active parameters); nothing is recommended from this law")

    def _objective(self, data: FitData, weights: np.ndarray | None = None) -> MoEObjective:
        pts = data.points
        return MoEObjective(self._n_term, len(self.param_names), pts["N"], pts["D"], pts["loss"],
                            self._z(pts[self.variable].to_numpy(float)), self.delta, weights)

    def starts(self) -> np.ndarray:
        """The grid of starts, one row per start, in the optimiser's order."""
        g = GRIDS[self.grid]
        order = ("a", "b", "c", "beta", "alpha") + self.extra
        mesh = np.meshgrid(*(np.asarray(g[k]) for k in order), indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def _minimise(self, obj: MoEObjective) -> np.ndarray:
        starts = self.starts()
        res = batch_lbfgs(obj, starts, prune_factor=10.0, batch=max_batch(obj.n_points))
        fs = np.where(np.isfinite(res.fun), res.fun, np.inf)
        order = np.argsort(fs)
        if not np.isfinite(fs[order[0]]):
            raise FitError(f"the {self.law} law: the objective is not finite at any start (check the losses)")
        best_x, best_f = res.x[order[0]], float(fs[order[0]])
        for i in order[: self.n_polish]:
            if not np.isfinite(fs[i]):
                break
            r = minimize(obj.single, res.x[i], jac=True, method="L-BFGS-B",
                         options={"ftol": 1e-14, "gtol": 1e-12, "maxiter": 1000})
            if np.isfinite(r.fun) and r.fun < best_f:
                best_x, best_f = np.asarray(r.x, float), float(r.fun)
        return np.asarray(best_x, float)

    def _checks(self, obj: MoEObjective, pts: Any) -> None:
        p = self.params_
        if p["c"] < C_PINNED * float(pts["loss"].min()):
            self.pinned_["c"] = "lower bound 0"
            self.add_doubt(DoubtKind.PINNED, f"unreliable: c is pinned at its bound 0 (fitted {p['c']:.3g}): the data do "
                           "not separate the irreducible loss from the power-law terms")
        self._check_moe_term(pts)
        self.fisher_condition_ = condition_number(obj.jacobian(self.theta_))
        if not self.pinned_ and not self.unidentified_ and not self.fisher_condition_ <= FISHER_CONDITION_MAX:
            self.add_doubt(DoubtKind.ILL_CONDITIONED, f"unreliable: the Fisher information at the optimum is near-singular "
                           f"(condition number {self.fisher_condition_:.3g} of the scaled Jacobian): some combination of "
                           f"{', '.join(self.param_names)} is not determined by these points")
        self._check_points(len(pts), len(self.param_names), f"the {self.law} law")
        for name in ("alpha", "beta"):
            if not 0.0 < p[name] < 2.0:
                self.add_doubt(DoubtKind.IMPLAUSIBLE, f"{name} = {p[name]:.3g} is implausible: the data do not pin down "
                               f"this law ({len(pts)} points)")
        for name in self.moe_names:
            if name in ("gamma", "delta") and not abs(p[name]) < MAX_MOE_EXPONENT:
                self.add_doubt(DoubtKind.IMPLAUSIBLE, f"{name} = {p[name]:.3g} is implausible (|{name}| >= "
                               f"{MAX_MOE_EXPONENT:g}): the fit ran away rather than measured the experts' effect")

    def _check_moe_term(self, pts: Any) -> None:
        """Form-specific bounds of the N term (a vanishing granularity term)."""

    # -- the bootstrap -------------------------------------------------------------------------
    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        """Pairs bootstrap: the path fit's own, or batched refits of the full law from its optimum."""
        names = self.param_names
        if self.mode_ == "path":
            self.inner_.bootstrap(n, int(rng.integers(2**31)))
            reps = np.asarray(self.inner_.replicates_, float)
            cols = {"c": reps[:, 0], "a": reps[:, 1], "b": reps[:, 2], "alpha": reps[:, 3], "beta": reps[:, 4]}
            return np.column_stack([cols.get(name, np.zeros(len(reps))) for name in names])
        m = self._objective(data).n_points
        out = np.full((n, len(names)), np.nan)
        chunk = max(1, max_batch(m) // 2)
        for lo in range(0, n, chunk):
            k = min(chunk, n - lo)
            thetas = self.refit(multinomial_counts(m, m, k, rng))
            for j in range(k):
                if np.isfinite(thetas[j]).all():
                    p = self._from_theta(thetas[j])
                    out[lo + j] = [p[name] for name in names]
        return out

    def refit(self, counts: np.ndarray) -> np.ndarray:
        """The full law refitted from its optimum with each row of ``counts`` (k, points) as the points'
        weights, as the bootstrap refits a resample: (k, optimiser parameters), a row of NaN where a refit
        failed. Each runs to its own optimum (:data:`REFIT_FTOL`)."""
        if self.theta_ is None or self.data_ is None:
            raise FitError(f"the {self.law} law has no full-law optimum and points to refit (fitted along the "
                           "sweep's path, or restored without its points)")
        counts = np.atleast_2d(np.asarray(counts, float))
        res = batch_lbfgs(self.objective(counts), np.tile(self.theta_, (len(counts), 1)), ftol=REFIT_FTOL,
                          max_iter=REFIT_MAX_ITER)
        return np.where(np.isfinite(res.fun)[:, None], res.x, np.nan)

    def objective(self, weights: np.ndarray | None = None) -> MoEObjective:
        """The fit's objective on its points (Huber on log loss, in the optimiser's parameters), each row of
        ``weights`` a set of point weights."""
        if self.data_ is None:
            raise FitError(f"the {self.law} law was restored without its points: it has no objective")
        return self._objective(self.data_, weights)

    # -- the law -------------------------------------------------------------------------------
    def _predict(self, p: Params, N: np.ndarray, D: np.ndarray, x: Any = None) -> np.ndarray:  # type: ignore[override]
        if x is None:
            raise FitError(f"the {self.law} law predicts at a given {self.variable_text} ({self.variable})")
        with np.errstate(all="ignore"):
            return p["c"] + self._K(p, np.asarray(x, float)) / N ** p["alpha"] + p["b"] / D ** p["beta"]

    def predict(self, N: Any, D: Any, x: Any = None) -> np.ndarray:  # type: ignore[override]
        """Predicted loss of a model with N active parameters, trained on D tokens, at x (G or S)."""
        self.check_fitted()
        if x is None:
            raise FitError(f"the {self.law} law predicts at a given {self.variable_text} ({self.variable})")
        x = np.asarray(x, float)
        if self.unidentified_:
            lo, hi = self.x_range_
            off = ~((x >= lo * (1 - 1e-9)) & (x <= hi * (1 + 1e-9)))
            if np.any(off):
                raise FitError(f"the {self.law} law did not identify how loss depends on {self.variable_text}: "
                               f"it predicts only at the sweep's {self.variable} ({lo:.4g} to {hi:.4g})")
        return self._predict(self.params_, np.asarray(N, float), np.asarray(D, float), x)

    def optimal(self, C: Any, x: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[override]
        """(N_active*, D*, loss) minimising loss at compute C = k N D with the experts cut as x."""
        self.check_fitted()
        return self.optimal_at(self.params_, np.asarray(C, float), np.asarray(x, float))

    def optimal_at(self, p: Params, C: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Closed form (Hoffmann et al. eq. 4) with A = K(x): N* = G (C/k)^(beta/(alpha+beta)), D* = C/(k N*)."""
        al, be = np.asarray(p["alpha"]), np.asarray(p["beta"])
        with np.errstate(all="ignore"):
            K = self._K(p, x)
            G = (al * K / (be * np.asarray(p["b"]))) ** (1.0 / (al + be))
            N = G * (C / self.k_) ** (be / (al + be))
            D = C / (self.k_ * N)
            return N, D, self._predict(p, N, D, x)

    def _optimal(self, p: Params, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise FitError(f"the {self.law} law's optimum depends on {self.variable_text}: use "
                       "scaling.fitting.moe.recommend_moe")

    def predict_interval(self, N: Any, D: Any, x: Any = None) -> list[Interval]:  # type: ignore[override]
        """Predicted loss of each (N, D, x) with a 95% interval for a measured loss there: the parameters'
        bootstrap spread widened by the fit's scatter of one point about the law (in log loss)."""
        self.predict(N, D, x)  # refuses an x the law did not identify
        N, D, x = np.broadcast_arrays(np.atleast_1d(np.asarray(N, float)), np.atleast_1d(np.asarray(D, float)),
                                      np.atleast_1d(np.asarray(x, float)))
        reps = self._replicate_params()
        sd = self.residual_sd_
        out = []
        for n, d, v in zip(N, D, x):
            point = float(self._predict(self.params_, n, d, v))
            rl = self._predict(reps, n, d, v) if reps else np.array([])
            iv = summarise(rl, point, log=True)
            out.append(widen_log(iv, 1.96 * sd if math.isfinite(sd) else 0.0,
                                 "widened by the scatter of one measured point about the law"))
        return out

    # -- intervals and storage ----------------------------------------------------------------
    def require_fitted(self) -> None:
        """NotFittedError unless the law has been fitted (or restored)."""
        self.check_fitted()

    def replicate_params(self) -> Params | None:
        """Each parameter's usable bootstrap replicates (arrays of one length), None without them."""
        return self._replicate_params()

    def intervals(self) -> dict[str, Interval]:
        """:meth:`Law.intervals`; a parameter the sweep does not identify says so, and with the experts changing
        along the sweep's path, ``alpha_path`` is the exponent of loss against active size along it."""
        out = super().intervals()
        for name, why in self.unidentified_.items():
            out[name] = Interval(math.nan, withheld=f"not identified: {why}", kind="not identified")
        if self.path_ and "alpha" in self.unidentified_:
            reps = self._replicate_params()
            out["alpha_path"] = summarise(reps["alpha"] if reps else np.array([]), self.params_["alpha"])
        return out

    def reported_intervals(self) -> dict[str, Interval]:
        """:meth:`Law.reported_intervals`, except that a law doubted only for what the sweep does not vary
        keeps the intervals of what it does identify; a parameter not identified says so either way."""
        ivs = self.intervals()
        if not self.doubts() or all(d.kind is DoubtKind.IDENTIFICATION for d in self.doubts()):
            return ivs
        why = "the law is flagged unreliable: " + next(d for d in self.doubts() if d.kind is not DoubtKind.IDENTIFICATION)
        return {name: iv if iv.kind == "not identified" else withheld(iv, why) for name, iv in ivs.items()}

    def x_grid(self, n: int = 65) -> np.ndarray:
        """Values of x across the measured range (where the recommendation may choose)."""
        lo, hi = self.x_range_
        return np.unique(np.concatenate([self._x_line(lo, hi, n), [lo, hi]]))

    def _x_line(self, lo: float, hi: float, n: int) -> np.ndarray:
        return np.linspace(lo, hi, n)

    def _plot_extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {"objective": self.objective_, "x_range": list(self.x_range_),
                               "unidentified": dict(self.unidentified_), "path": self.path_,
                               "mode": self.mode_}
        if self.data_ is not None:
            pts = self.data_.points
            out["points"] = {c: pts[c].tolist() for c in ("N", "D", "C", "loss", self.variable)}
        return jsonable(out)

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        super()._restore_plot(plot)
        self.x_range_ = tuple(float(v) for v in plot.get("x_range") or (math.nan, math.nan))
        self.unidentified_ = {str(k): str(v) for k, v in (plot.get("unidentified") or {}).items()}
        self.path_ = plot.get("path")
        self.mode_ = plot.get("mode") or "full"
        self.objective_ = plot.get("objective")
        self.theta_ = self._to_theta(self.params_) if self.mode_ == "full" else None

    def _to_theta(self, p: Params) -> np.ndarray:
        raise NotImplementedError


class GranularityLaw(MoELaw):
    """Krajewski et al. 2024: L(N, D, G) = c + (g / G^gamma + a) / N^alpha + b / D^beta, N active.

    Their sweeps hold the expansion rate (total over active expert parameters) fixed and vary G;
    a sweep that also varies the number of experts is outside what this form describes.
    """

    law = "moe-granularity"
    variable = "G"
    variable_text = "granularity"
    dense = 1.0
    dense_text = "G = 1 (experts as wide as the dense feed-forward layer)"
    param_names = ("c", "a", "b", "g", "alpha", "beta", "gamma")
    moe_names = ("g", "gamma")
    extra = ("g", "gamma")
    min_levels = 3
    exponent_names = ("alpha", "beta", "gamma")

    def variable_hint(self) -> str:
        return "a column granularity or G"

    def _z(self, x: np.ndarray) -> np.ndarray:
        return np.log(np.asarray(x, float))

    def _n_term(self, X: np.ndarray, logN: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        u1 = X[:, 0:1]
        u2 = X[:, 5:6] - X[:, 6:7] * z
        T = np.logaddexp(u1, u2)
        s1, s2 = np.exp(u1 - T), np.exp(u2 - T)
        return T - X[:, 4:5] * logN, {0: s1, 5: s2, 6: -s2 * z, 4: -logN}

    def _K(self, p: Params, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(p["g"]) / x ** np.asarray(p["gamma"]) + np.asarray(p["a"])

    def _from_theta(self, x: np.ndarray) -> dict[str, float]:
        a, b, c, be, al, g, ga = (float(v) for v in x)
        return {"c": _exp(c), "a": _exp(a), "b": _exp(b), "g": _exp(g), "alpha": al, "beta": be, "gamma": ga}

    def _to_theta(self, p: Params) -> np.ndarray:
        return np.array([_log(p["a"]), _log(p["b"]), _log(p["c"]), p["beta"], p["alpha"], _log(p["g"]), p["gamma"]])

    def _x_line(self, lo: float, hi: float, n: int) -> np.ndarray:
        return np.geomspace(lo, hi, n)

    def _check_moe_term(self, pts: Any) -> None:
        p = self.params_
        coarsest = float(pts["G"].min())
        if p["g"] / coarsest ** p["gamma"] < G_PINNED * p["a"] and not self.unidentified_:
            self.pinned_["g"] = "lower bound 0"
            self.add_doubt(DoubtKind.PINNED, f"unreliable: g is pinned at its bound 0 (g / G^gamma is below "
                           f"{G_PINNED:g} of a across the measured granularities): the data show no effect of "
                           "granularity, so gamma is not determined")


class SparsityLaw(MoELaw):
    """L(N, D, S) = c + a (1 - S)^delta / N^alpha + b / D^beta, N active, S the inactive share.

    S = 0 is the dense model, where the law is Chinchilla's; delta > 0 says more experts at the
    same active size lower the loss, by the factor (1 - S)^delta = (N_active / N_total)^delta on
    the active-parameter term.
    """

    law = "moe-sparsity"
    variable = "S"
    variable_text = "sparsity"
    dense = 0.0
    dense_text = "S = 0 (the dense model)"
    param_names = ("c", "a", "b", "delta", "alpha", "beta")
    moe_names = ("delta",)
    extra = ("delta",)
    min_levels = 2

    def variable_hint(self) -> str:
        return "columns N_total, or n_experts and top_k"

    def _z(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log1p(-np.asarray(x, float))

    def _tied(self, z: np.ndarray, pts: Any) -> tuple[str, bool] | None:
        if not np.isfinite(z).all():
            raise FitError("the sparsity law needs S < 1 at every point (some active parameters)")
        if distinct(pts["S"].to_numpy(float)) < 2:  # z = log(1 - S) is 0 for every dense point: compare S itself
            return f"every point has the same sparsity (S = {float(pts['S'].iloc[0]):.4g})", False
        return super()._tied(z, pts)

    def _n_term(self, X: np.ndarray, logN: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        return X[:, 0:1] + X[:, 5:6] * z - X[:, 4:5] * logN, {0: np.ones_like(z), 5: z, 4: -logN}

    def _K(self, p: Params, x: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(p["a"]) * (1.0 - x) ** np.asarray(p["delta"])

    def _from_theta(self, x: np.ndarray) -> dict[str, float]:
        a, b, c, be, al, de = (float(v) for v in x)
        return {"c": _exp(c), "a": _exp(a), "b": _exp(b), "delta": de, "alpha": al, "beta": be}

    def _to_theta(self, p: Params) -> np.ndarray:
        return np.array([_log(p["a"]), _log(p["b"]), _log(p["c"]), p["beta"], p["alpha"], p["delta"]])


#: The forms, by the name ``--law`` takes.
FORMS: dict[str, type[MoELaw]] = {"granularity": GranularityLaw, "sparsity": SparsityLaw}


def _exp(v: float) -> float:
    return math.exp(v) if v < 700 else math.inf


def _log(v: float) -> float:
    return math.log(v) if v > 0 else -745.0
