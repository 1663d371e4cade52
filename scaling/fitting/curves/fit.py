"""The curve law: both published forms fitted to a few runs' curves, the one that predicts held-out curves better chosen.

Each form is fitted by least squares on the Huber loss of log residuals (threshold 1e-3, as Luo et
al.), from several starts (a power law in the summed rate first, then the loss drop from a small
grid), to at most :data:`MAX_FIT_POINTS` evaluations per curve after warmup, evenly spread. Each
form's held-out error is measured by leaving one curve out, fitting the others and predicting it;
the form with the lower mean held-out error is chosen and the other is shown beside it. Intervals
come from a bootstrap over whole curves: each replicate weighs the curves by Dirichlet(1) weights
(the Bayesian bootstrap, which keeps every schedule in every replicate) and redraws each curve's
residuals in blocks, then refits; an interval is the replicates' 2.5-97.5% range
(:func:`scaling.fitting.core.intervals.summarise`). A prediction's interval adds the law's model error
(:meth:`CurveLaw.model_error`: how far curves left out of the fit lie from their prediction, beyond the
noise of their evaluations), as the loss laws widen theirs by their backtest's error: the bootstrap
only moves the parameters, and the few curves a law is fitted on leave shapes of the law near the
best fit that predict other schedules differently (:func:`~scaling.fitting.core.intervals.add_model_error`).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.stats import norm

from scaling.curve_forms import FORMS, MULTI_POWER, Areas, areas, warmup_end
from scaling.errors import FitError
from scaling.fitting.core.doubts import Doubtful, DoubtKind, restore, stored
from scaling.fitting.core.base import MAX_DECADES
from scaling.fitting.core.intervals import LEVEL, add_model_error, orders_of_magnitude, summarise
from scaling.fitting.curves.data import Curve, Schedule, schedules_from_frame
from scaling.fitting.curves.laws import DROP_STARTS, Form, first_stage, form, huber_residuals, pinned_at
from scaling.fmt import Interval, num

__all__ = ["MAX_FIT_POINTS", "CurveLaw", "CurveLaws", "block_resample", "fit_curves", "fit_form"]

#: Evaluations per curve a fit uses at most (evenly spread in steps after warmup).
MAX_FIT_POINTS = 100
#: Steps predicted directly at most; beyond, the law is evaluated at this many knots and interpolated.
MAX_DIRECT_POINTS = 1500
#: Steps each bootstrap replicate is evaluated at most (beyond, at knots, interpolated): a band is smooth.
INTERVAL_POINTS = 400
#: A prediction whose 95% interval is wider than this share of the loss is not determined by the curves.
UNDETERMINED_WIDTH = 0.05
#: Function evaluations each start gets before the best one is run to convergence.
SCOUT_EVALUATIONS = 25
#: Below this share of bootstrap replicates refitted, no interval is given.
MIN_OK_FRACTION = 0.5


def fit_points(curve: Curve, limit: int = MAX_FIT_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """The steps (after warmup) and losses a fit uses: at most ``limit``, evenly spread in steps."""
    keep = curve.steps >= warmup_end(curve.lr)
    steps, loss = curve.steps[keep], curve.loss[keep]
    if steps.size > limit:
        idx = np.unique(np.searchsorted(steps, np.linspace(steps[0], steps[-1], limit)))
        steps, loss = steps[idx], loss[idx]
    return steps, loss


def percentile_bounds(draws: np.ndarray, value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each column's 95% percentile interval of bootstrap ``draws`` (replicates x points), NaN where it
    would not hold its estimate ``value`` or has no spread (as :func:`~scaling.fitting.core.intervals.summarise`)."""
    q = (1 - LEVEL) / 2
    finite = np.isfinite(draws)
    enough = finite.sum(axis=0) >= 2
    with np.errstate(all="ignore"):
        lo, hi = np.nanquantile(np.where(finite, draws, np.nan), [q, 1 - q], axis=0) if draws.size else (value, value)
    ok = enough & (lo <= value) & (value <= hi) & (hi - lo > 1e-9 * np.abs(value)) & np.isfinite(value)
    return np.where(ok, np.maximum(lo, 0.0), np.nan), np.where(ok, hi, np.nan)


def curve_noise(losses: Sequence[np.ndarray]) -> float:
    """The evaluations' noise (SD, in log) from the curves alone: the second differences of each curve's log loss
    (variance 6 SD^2 for independent noise), pooled, their median absolute value over 0.6745 sqrt(6); NaN under
    3 points. Free of the law, it is not inflated where the law misfits the curves (the fit's residuals are), and
    the median passes over a schedule's sharp turns (about 1e-4 on noiseless published curves, against noise 1e-3)."""
    d2 = [np.diff(np.log(y), 2) for y in losses if y.size >= 3]
    if not d2:
        return math.nan
    return float(np.median(np.abs(np.concatenate(d2))) / (norm.ppf(0.75) * math.sqrt(6.0)))


def knots(lr: np.ndarray, steps: np.ndarray, count: int = MAX_DIRECT_POINTS) -> np.ndarray:
    """Steps to evaluate a law at so that linear interpolation between them gives every step in ``steps``:
    evenly spread, plus steps after every large change of rate at distances growing geometrically (where the loss
    moves fast)."""
    lo, hi = int(steps.min()), int(steps.max())
    even = np.linspace(lo, hi, count).round().astype(np.int64)
    gap = np.abs(np.diff(lr[: hi + 1]))
    jumps = np.flatnonzero(gap > 0.01 * max(float(gap.sum()), 1e-300)) + 1
    after = np.unique(np.round(np.geomspace(1, 2**14, 57)).astype(np.int64))  # about 4 knots per doubling
    near = (jumps[:, None] + np.concatenate([[-1, 0], after])[None, :]).ravel() if jumps.size else np.zeros(0)
    near = near[(near >= lo) & (near <= hi)]
    return np.unique(np.concatenate([even, near.astype(np.int64), [lo, hi]]))


def law_at(f: Form, thetas: np.ndarray, lr: np.ndarray, steps: np.ndarray, count: int = MAX_DIRECT_POINTS) -> np.ndarray:
    """The law ``f`` at ``steps`` of the rate ``lr``, for each parameter row of ``thetas`` (rows x steps);
    beyond ``count`` distinct steps, evaluated at :func:`knots` and interpolated."""
    thetas = np.atleast_2d(thetas)
    steps = np.asarray(steps, dtype=np.int64)
    if steps.size == 0:
        return np.zeros((thetas.shape[0], 0))
    direct = np.unique(steps).size <= count
    at = np.unique(steps) if direct else knots(lr, steps, count)
    a = areas(lr, at)
    values = np.vstack([f.value(th, a) for th in thetas])
    return np.vstack([np.interp(steps, at, v) for v in values])


class _Fit:
    """The residuals of one form on a set of curves (weights per curve), ready for least squares."""

    def __init__(self, f: Form, parts: list[tuple[Areas, np.ndarray]]) -> None:
        self.form = f
        self.parts = parts
        self.log_loss = [np.log(y) for _, y in parts]
        self.max_loss = max(float(np.max(y)) for _, y in parts)
        self.lo, self.hi = f.bounds(self.max_loss)
        # Without any change of rate after warmup the loss-drop parameters do nothing: they stay at their start.
        self.free = np.ones(len(f.params), bool)
        if not any(a.span.size or np.any(a.anneal) for a, _ in parts):
            self.free[3:] = False

    def run(self, start: np.ndarray, weights: Optional[np.ndarray] = None, targets: Optional[list[np.ndarray]] = None,
            max_nfev: int = 300, tol: float = 1e-9) -> tuple[np.ndarray, float]:
        w = np.ones(len(self.parts)) if weights is None else np.asarray(weights, float)
        logs = self.log_loss if targets is None else targets
        sw = np.concatenate([np.full(a.steps.size, math.sqrt(wi)) for (a, _), wi in zip(self.parts, w)])

        ys = np.concatenate(logs)
        last: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

        def evaluate(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """The Huber residuals at ``th`` and the predictions (one evaluation serves both calls)."""
            key = th.tobytes()
            if key not in last:
                p = np.maximum(np.concatenate([self.form.value(th, a) for a, _ in self.parts]), 1e-12)
                last.clear()
                last[key] = (p, (ys - np.log(p)) * sw)
            return last[key]

        x0 = np.clip(start, self.lo, np.where(np.isfinite(self.hi), self.hi, start))
        free = self.free

        def full(z: np.ndarray) -> np.ndarray:
            th = x0.copy()
            th[free] = z
            return th

        def residual(z: np.ndarray) -> np.ndarray:
            return huber_residuals(evaluate(full(z))[1])[0]

        def jac(z: np.ndarray) -> np.ndarray:
            th = full(z)
            p, r = evaluate(th)
            d = huber_residuals(r)[1] * sw
            J = np.vstack([self.form.jacobian(th, a) for a, _ in self.parts])[:, free]
            return -(d / p)[:, None] * J

        with np.errstate(all="ignore"):
            res = least_squares(residual, x0[free], jac=jac, bounds=(self.lo[free], self.hi[free]), x_scale="jac",
                                max_nfev=max_nfev, ftol=tol, xtol=tol, gtol=tol)
        cost = float(res.cost) if np.all(np.isfinite(res.fun)) else math.inf
        return full(res.x), cost

    def starts(self) -> list[np.ndarray]:
        forward = np.concatenate([a.forward for a, _ in self.parts])
        loss = np.concatenate([y for _, y in self.parts])
        if self.form.name == MULTI_POWER:
            drop = np.concatenate([a.total_drop for a, _ in self.parts])
            L0, A, alpha, B = first_stage(forward, drop, loss)
            return [np.array([L0, A, alpha, max(B, 1.0), C, beta, gamma]) for C, beta, gamma in DROP_STARTS]
        drop = np.concatenate([a.anneal for a, _ in self.parts])
        return [first_stage(forward, drop, loss)]

    def best(self, extra: Sequence[np.ndarray] = (), scout: bool = True) -> tuple[np.ndarray, float]:
        """The best of a short run from every start (``extra`` and :meth:`starts`), then run to convergence."""
        best, best_cost = None, math.inf
        for start in [*extra, *(self.starts() if scout else [])]:
            try:
                th, cost = self.run(start, max_nfev=SCOUT_EVALUATIONS, tol=1e-6)
            except (ValueError, np.linalg.LinAlgError):
                continue
            if cost < best_cost:
                best, best_cost = th, cost
        if best is None:
            raise FitError(f"the {self.form.title} could not be fitted to these curves")
        return self.run(best)


def fit_form(f: Form, parts: list[tuple[Areas, np.ndarray]]) -> tuple[np.ndarray, float]:
    """The best fit of the form ``f`` to ``parts`` (each curve's areas and losses) from its usual starts, and its cost."""
    return _Fit(f, parts).best()


def _same_schedule(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two runs follow one schedule (one's rate is the other's first steps, or their rates agree)."""
    n = min(a.size, b.size)
    return bool(np.allclose(a[:n], b[:n], rtol=1e-6, atol=0.0))


class CurveLaw(Doubtful):
    """Loss curves in their learning-rate schedule (scikit-learn style: ``fit``, ``predict``, ``bootstrap``).

    After :meth:`fit`: ``params_`` (form -> parameter dict), ``held_out_`` (form -> per curve MAE, relative
    error and RMS log error when left out), ``noise_`` (form -> the evaluations' noise, :func:`curve_noise`), ``form_`` (the
    chosen form); after :meth:`bootstrap`: ``replicates_`` (form -> rows of parameters).
    """

    kind = "curve"

    def __init__(self, forms: Sequence[str] = FORMS, *, held_out: bool = True) -> None:
        self.forms = tuple(forms)
        self.held_out = held_out
        self.params_: dict[str, dict[str, float]] = {}
        self.cost_: dict[str, float] = {}
        self.noise_: dict[str, float] = {}
        self.held_out_: dict[str, list[dict[str, Any]]] = {}
        self.replicates_: dict[str, np.ndarray] = {}
        self.form_: Optional[str] = None
        self.runs_: list[str] = []
        self.n_points_: int = 0
        self.notes_ = []
        self.doubts_ = []
        self._curves: list[Curve] = []

    # -- fitting -------------------------------------------------------------------------------------
    def fit(self, curves: Sequence[Curve]) -> "CurveLaw":
        curves = list(curves)
        if not curves:
            raise FitError("no curves to fit")
        self._curves = curves
        self.runs_ = [c.run for c in curves]
        pts = [fit_points(c) for c in curves]
        for c, (s, _) in zip(curves, pts):
            if s.size < 3:
                raise FitError(f"run {c.run!r} has {s.size} loss value(s) after its warmup: a curve needs at least 3")
        self.n_points_ = int(sum(s.size for s, _ in pts))
        parts = [(areas(c.lr, s), y) for c, (s, y) in zip(curves, pts)]
        for name in self.forms:
            f = form(name)
            theta, cost = _Fit(f, parts).best()
            self.params_[name] = dict(zip(f.params, map(float, theta)))
            self.cost_[name] = cost
            self.noise_[name] = curve_noise([y for _, y in parts])
        if self.held_out and len(curves) >= 2:
            for name in self.forms:
                self.held_out_[name] = self._leave_one_out(form(name), curves, pts)
        self.form_ = self._choose()
        self._judge(curves)
        return self

    def _leave_one_out(self, f: Form, curves: list[Curve], pts: list[tuple[np.ndarray, np.ndarray]]) -> list[dict[str, Any]]:
        out = []
        full = np.array([self.params_[f.name][p] for p in f.params])
        for i, c in enumerate(curves):
            rest = [(areas(curves[j].lr, pts[j][0]), pts[j][1]) for j in range(len(curves)) if j != i]
            try:
                theta, _ = _Fit(f, rest).best(extra=[full], scout=False)
            except FitError:
                out.append({"run": c.run, "mae": math.nan, "mre": math.nan})
                continue
            pred = law_at(f, theta, c.lr, c.steps[c.steps >= warmup_end(c.lr)])[0]
            y = c.loss[c.steps >= warmup_end(c.lr)]
            shown = law_at(f, theta, c.lr, pts[i][0])[0]  # the prediction at the fitted evaluations, to draw
            with np.errstate(all="ignore"):
                rmsle = float(np.sqrt(np.mean(np.log(pred / y) ** 2)))
            out.append({"run": c.run, "mae": float(np.mean(np.abs(pred - y))),
                        "mre": float(np.mean(np.abs(pred - y) / y)), "rmsle": rmsle,
                        "steps": pts[i][0].tolist(), "pred": shown.tolist()})
        return out

    def held_out_error(self, name: str) -> float:
        """The form's mean absolute error on curves left out of its fit (NaN without held-out fits)."""
        errs = [e["mae"] for e in self.held_out_.get(name, [])]
        return float(np.mean(errs)) if errs and np.all(np.isfinite(errs)) else math.nan

    def model_error(self, name: Optional[str] = None) -> float:
        """The form's model error (SD, in log) a prediction's interval adds to its parameters' uncertainty:
        the RMS log error of the curves left out of the fit, less the evaluations' noise (:func:`curve_noise`,
        in quadrature); 0 where the held-out curves lie within their noise, NaN without held-out fits."""
        name = name or self.form_
        errs = [e.get("rmsle", math.nan) for e in self.held_out_.get(name or "", [])]
        noise = self.noise_.get(name or "", math.nan)
        if not errs or not np.all(np.isfinite(errs)) or not math.isfinite(noise):
            return math.nan
        return math.sqrt(max(0.0, float(np.mean(np.square(errs))) - noise**2))

    def _choose(self) -> str:
        errors = {n: self.held_out_error(n) for n in self.forms}
        known = {n: e for n, e in errors.items() if math.isfinite(e)}
        if known:
            return min(known, key=lambda n: known[n])
        return MULTI_POWER if MULTI_POWER in self.forms else self.forms[0]

    def _judge(self, curves: list[Curve]) -> None:
        self.doubts_, self.notes_ = [], []
        if len(curves) < 2:
            self.add_doubt(DoubtKind.FEW_POINTS, "unreliable: one curve only (no curve can be held out to test the law)")
        distinct: list[np.ndarray] = []
        for c in curves:
            if not any(_same_schedule(c.lr, d) for d in distinct):
                distinct.append(c.lr)
        if len(distinct) < 2:
            self.add_doubt(DoubtKind.IDENTIFICATION, "unreliable: every curve follows one schedule, and a single "
                           "schedule cannot separate the annealing term from the power law in the summed rate")
        if not any(np.any(np.diff(c.lr[warmup_end(c.lr) - 1:]) < 0) for c in curves):
            self.add_doubt(DoubtKind.IDENTIFICATION, "unreliable: no curve's learning rate decays, so the loss drop "
                           "of annealing is not measured")
        f = form(self.form_)
        lo, hi = f.bounds(max(float(np.max(c.loss)) for c in curves))
        theta = [self.params_[self.form_][p] for p in f.params]
        for name, where in pinned_at(theta, lo, hi, f.params).items():
            self.add_doubt(DoubtKind.PINNED, f"unreliable: {name} of the {f.title} sits at its {where}")

    # -- bootstrap -----------------------------------------------------------------------------------
    def bootstrap(self, n: int = 100, seed: int = 0) -> "CurveLaw":
        """Refit the chosen form ``n`` times over whole curves (Dirichlet weights, residuals redrawn in blocks)."""
        if self.form_ is None or not self._curves:
            raise FitError("fit the curves before bootstrapping")
        self.drop_doubts(DoubtKind.BOOTSTRAP)
        if n < 2:
            self.replicates_ = {}
            return self
        rng = np.random.default_rng(seed)
        f = form(self.form_)
        pts = [fit_points(c) for c in self._curves]
        parts = [(areas(c.lr, s), y) for c, (s, y) in zip(self._curves, pts)]
        problem = _Fit(f, parts)
        theta = np.array([self.params_[f.name][p] for p in f.params])
        fitted = [np.log(np.maximum(f.value(theta, a), 1e-12)) for a, _ in parts]
        resid = [np.log(y) - p for (_, y), p in zip(parts, fitted)]
        rows = []
        for _ in range(n):
            weights = rng.dirichlet(np.ones(len(parts))) * len(parts)
            targets = [p + block_resample(r, rng) for p, r in zip(fitted, resid)]
            try:
                th, cost = problem.run(theta, weights=weights, targets=targets, max_nfev=300, tol=1e-10)
            except (ValueError, np.linalg.LinAlgError):
                continue
            if math.isfinite(cost):
                rows.append(th)
        self.replicates_ = {f.name: np.array(rows) if rows else np.zeros((0, len(f.params)))}
        self.drop_doubts(DoubtKind.UNDETERMINED)
        if len(rows) < MIN_OK_FRACTION * n:
            self.add_doubt(DoubtKind.BOOTSTRAP, f"unreliable: only {len(rows)} of {n} bootstrap replicates refitted")
        for name, iv in self.intervals().items():
            lo, hi = f.bounds(math.inf)
            j = f.params.index(name)
            if lo[j] > 0 and orders_of_magnitude(iv) > MAX_DECADES:
                self.add_doubt(DoubtKind.UNDETERMINED, f"unreliable: the curves do not determine {name} of the "
                               f"{f.title} (its 95% interval spans more than {MAX_DECADES:g} decades)")
        return self

    # -- prediction ----------------------------------------------------------------------------------
    def theta(self, name: Optional[str] = None) -> np.ndarray:
        self._check()
        f = form(name or self.form_)
        return np.array([self.params_[f.name][p] for p in f.params])

    def _check(self) -> None:
        if self.form_ is None:
            raise FitError("the curve law is not fitted")

    def loss_at(self, lr: Sequence[float] | np.ndarray, steps: Sequence[int] | np.ndarray,
                form_name: Optional[str] = None) -> np.ndarray:
        """The predicted loss at ``steps`` of a run whose rate at step k is ``lr[k]``."""
        lr = np.asarray(lr, dtype=float)
        out = law_at(form(form_name or self.form_), self.theta(form_name), lr, np.asarray(steps, np.int64))[0]
        return np.where(out > 0, out, np.nan)

    def predict(self, schedules: "Schedule | Sequence[Schedule] | pd.DataFrame | str", form_name: Optional[str] = None,
                *, model_error: bool = True) -> pd.DataFrame:
        """The predicted loss with its 95% interval at each wanted step: columns ``run, step, loss, lo, hi``.

        ``schedules``: :class:`Schedule` objects, a table or CSV path of ``run, step, lr`` (optional
        ``predict`` 0/1). ``lo``/``hi`` are NaN without a bootstrap, or where the interval is withheld;
        they hold the bootstrap's parameter uncertainty and the law's :meth:`model_error` (the former only
        with ``model_error=False``: to measure what each contributes).
        """
        from pathlib import Path

        self._check()
        if isinstance(schedules, (str, Path)):
            from scaling.fitting.curves.data import schedules_from_csv

            schedules = schedules_from_csv(schedules)
        elif isinstance(schedules, pd.DataFrame):
            schedules = schedules_from_frame(schedules)
        elif isinstance(schedules, Schedule):
            schedules = [schedules]
        name = form_name or self.form_
        f = form(name)
        reps = self.replicates_.get(name)
        frames = []
        for s in schedules:
            steps = np.asarray(s.steps, np.int64)
            value = self.loss_at(s.lr, steps, name)
            lo = np.full(steps.size, np.nan)
            hi = np.full(steps.size, np.nan)
            if reps is not None and reps.shape[0] >= 2 and steps.size:
                lo, hi = percentile_bounds(law_at(f, reps, s.lr, steps, INTERVAL_POINTS), value)
                if model_error:
                    lo, hi = add_model_error(value, lo, hi, self.model_error(name))
                wide = (hi - lo) > UNDETERMINED_WIDTH * value
                if np.any(wide) or np.any(np.isnan(lo) & np.isfinite(value)):
                    self._flag_undetermined(s.run)
            if np.any(~np.isfinite(value)):
                self._flag_impossible(s.run)
            frames.append(pd.DataFrame({"run": s.run, "step": steps, "loss": value, "lo": lo, "hi": hi}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "step", "loss", "lo", "hi"])

    def _flag_undetermined(self, run: str) -> None:
        message = (f"unreliable: the curves do not determine the prediction for run {run!r} (its 95% interval is "
                   f"wider than {100 * UNDETERMINED_WIDTH:g}% of the loss, or withheld)")
        if message not in self.notes_:
            self.add_doubt(DoubtKind.UNDETERMINED, message)

    def _flag_impossible(self, run: str) -> None:
        message = f"implausible: the law predicts a loss of 0 or below for run {run!r} (left out)"
        if message not in self.notes_:
            self.add_doubt(DoubtKind.IMPLAUSIBLE, message)

    def intervals(self, name: Optional[str] = None) -> dict[str, Interval]:
        """Each parameter of a form with its 95% interval (the chosen form's only is bootstrapped)."""
        self._check()
        name = name or self.form_
        f = form(name)
        reps = self.replicates_.get(name)
        lo, hi = f.bounds(math.inf)
        pinned = pinned_at(self.theta(name), lo, hi, f.params)
        out = {}
        for j, p in enumerate(f.params):
            values = reps[:, j] if reps is not None and reps.shape[0] else []
            out[p] = summarise(values, self.params_[name][p], pinned=pinned.get(p))
        return out

    # -- output --------------------------------------------------------------------------------------
    def table(self) -> str:
        """The fitted forms, their held-out errors and the doubts, as text."""
        self._check()
        lines = [f"Curve law: {len(self.runs_)} curve(s), {self.n_points_} evaluations fitted"]
        for name in self.forms:
            if name not in self.params_:
                continue
            f = form(name)
            chosen = " (chosen: lower held-out error)" if name == self.form_ else ""
            lines.append(f"{f.title}{chosen}")
            for p, iv in self.intervals(name).items():
                lines.append(f"  {p:<6} {iv.text(4)}")
            err = self.held_out_error(name)
            if math.isfinite(err):
                mre = float(np.mean([e["mre"] for e in self.held_out_[name]]))
                lines.append(f"  held-out error (each curve left out): MAE {num(err, 3)}, relative {100 * mre:.3g}%")
                model = self.model_error(name)
                if name == self.form_ and math.isfinite(model):
                    lines.append(f"  model error beyond the noise ({100 * self.noise_[name]:.3g}%): {100 * model:.3g}% "
                                 "of the loss (SD), in every predicted interval")
        for note in self.notes_:
            lines.append(f"note: {note}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "forms": list(self.forms), "form": self.form_, "params": self.params_,
                "cost": self.cost_, "noise": self.noise_, "held_out": self.held_out_, "runs": self.runs_, "n_points": self.n_points_,
                "replicates": {k: v.tolist() for k, v in self.replicates_.items()},
                "doubts": stored(self.doubts_), "notes": [str(n) for n in self.notes_]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CurveLaw":
        law = cls(tuple(d.get("forms") or FORMS))
        law.form_ = d.get("form")
        law.params_ = {k: {p: float(v) for p, v in ps.items()} for k, ps in (d.get("params") or {}).items()}
        law.cost_ = dict(d.get("cost") or {})
        law.noise_ = {k: float(v) for k, v in (d.get("noise") or {}).items()}
        law.held_out_ = dict(d.get("held_out") or {})
        law.runs_ = list(d.get("runs") or [])
        law.n_points_ = int(d.get("n_points") or 0)
        law.replicates_ = {k: np.array(v, dtype=float).reshape(-1, len(form(k).params))
                           for k, v in (d.get("replicates") or {}).items()}
        law.doubts_ = restore(d.get("doubts"))
        law.notes_ = list(law.doubts_)
        return law

    def __repr__(self) -> str:
        return f"CurveLaw(form={self.form_!r}, runs={len(self.runs_)})"


def block_resample(r: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``r`` redrawn in circular blocks of about sqrt(len) consecutive residuals (keeps their correlation)."""
    n = r.size
    size = max(1, int(round(math.sqrt(n))))
    starts = rng.integers(0, n, size=-(-n // size))
    idx = (starts[:, None] + np.arange(size)[None, :]).ravel()[:n] % n
    return r[idx]


class CurveLaws:
    """One :class:`CurveLaw` per model size (a curve law holds for one size): ``laws`` by N.

    :meth:`predict` sends each schedule to the law of its size (a schedule's ``N``)."""

    kind = "curves by size"

    def __init__(self, laws: dict[float, CurveLaw]) -> None:
        self.laws = dict(sorted(laws.items()))

    def law_for(self, N: Optional[float], run: str = "") -> CurveLaw:
        if N is None or not math.isfinite(N):
            sizes = ", ".join(num(n, 3) for n in self.laws)
            raise FitError(f"run {run!r} has no N: the curves come from several model sizes ({sizes}), so each "
                           "schedule needs an N column saying which")
        for n, law in self.laws.items():
            if math.isclose(n, N, rel_tol=1e-6):
                return law
        raise FitError(f"run {run!r}: no curves of size N = {num(N, 4)} were fitted")

    def predict(self, schedules: "Sequence[Schedule] | pd.DataFrame | str") -> pd.DataFrame:
        """As :meth:`CurveLaw.predict`, each schedule by the law of its size, with a column ``N``."""
        from pathlib import Path

        if isinstance(schedules, (str, Path)):
            from scaling.fitting.curves.data import schedules_from_csv

            schedules = schedules_from_csv(schedules)
        elif isinstance(schedules, pd.DataFrame):
            schedules = schedules_from_frame(schedules)
        frames = []
        for s in schedules:
            frame = self.law_for(s.N, s.run).predict([s])
            frame.insert(1, "N", s.N)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    @property
    def notes_(self) -> list[str]:
        return [f"N = {num(n, 3)}: {note}" for n, law in self.laws.items() for note in law.notes_]

    def doubts(self) -> list[Any]:
        return [d for law in self.laws.values() for d in law.doubts()]

    def reliable(self) -> bool:
        return all(law.reliable() for law in self.laws.values())

    def table(self) -> str:
        return "".join(f"Model size N = {num(n, 4)}\n{law.table()}" for n, law in self.laws.items())

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "sizes": [{"N": n, "law": law.to_dict()} for n, law in self.laws.items()]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CurveLaws":
        return cls({float(x["N"]): CurveLaw.from_dict(x["law"]) for x in d.get("sizes", [])})


def fit_curves(curves: Iterable[Curve], *, bootstrap: int = 100, seed: int = 0,
               forms: Sequence[str] = FORMS) -> "CurveLaw | CurveLaws":
    """Fit both forms to ``curves``, choose by held-out error, and bootstrap the chosen one; curves of
    several model sizes (their ``N``) get one law per size (:class:`CurveLaws`)."""
    curves = list(curves)
    sizes = sorted({float(c.N) for c in curves if c.N is not None and math.isfinite(c.N)})
    if len(sizes) > 1:
        unsized = [c.run for c in curves if c.N is None or not math.isfinite(c.N)]
        if unsized:
            raise FitError(f"run {unsized[0]!r} has no N while other runs do: a curve law holds for one model size")
        return CurveLaws({n: fit_curves([c for c in curves if math.isclose(float(c.N), n, rel_tol=1e-6)],
                                        bootstrap=bootstrap, seed=seed, forms=forms) for n in sizes})
    law = CurveLaw(forms).fit(curves)
    return law.bootstrap(bootstrap, seed) if bootstrap else law
