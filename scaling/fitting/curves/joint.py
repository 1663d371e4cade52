"""The curve law across model sizes: L(N, schedule), so that any size's loss at any D and schedule is predicted.

A curve law (:mod:`scaling.fitting.curves.fit`) holds for one model size. Here its parameters become
functions of N, fitted to the curves of every size at once, with x = ln(N / N0) (N0 the sizes'
geometric mean):

- its floor as in Chinchilla: L0(N) = E + K e^(-a x), that is E + K (N / N0)^-a;
- its amplitudes as power laws in N: A(N) = A e^(-pA x) for the power law in the summed rate, and the
  loss drop's scale (B of the multi-power law, C of the annealing law) likewise with its own exponent;
- the shape of the curve (the exponent alpha, and C, beta, gamma of the multi-power law's drop) shared.

That is Chinchilla's L(N, D) = E + A N^-alpha + B D^-beta with the D term replaced by the curve in the
schedule, and three parameters per size replaced by two exponents: a fit needs curves of at least
three sizes (L0(N) has three parameters), and with three only it is fitted exactly, so nothing checks
it (said in the notes). As :class:`~scaling.fitting.curves.fit.CurveLaw`: both forms fitted by least
squares on the Huber loss of log residuals; each size left out in turn, the others fitted and its
curves predicted (the held-out error); the form with the lower held-out error chosen; intervals from
a bootstrap over whole runs (Dirichlet weights per curve, residuals redrawn in blocks) summarised by
:func:`scaling.fitting.core.intervals.summarise`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
import pandas as pd
from scipy.optimize import least_squares
from scipy.stats import norm

from scaling.curve_forms import FORMS, MULTI_POWER, Areas, areas, warmup_end
from scaling.errors import FitError
from scaling.fitting.core.base import MAX_DECADES
from scaling.fitting.core.doubts import DoubtKind, Doubtful, restore, stored
from scaling.fitting.core.intervals import LEVEL, ZERO_WIDTH, orders_of_magnitude, summarise
from scaling.fitting.curves.data import Curve, Schedule
from scaling.fitting.curves.fit import (MIN_OK_FRACTION, CurveLaw, SCOUT_EVALUATIONS, UNDETERMINED_WIDTH, block_resample,
                                        curve_noise, fit_form, fit_points, law_at, percentile_bounds)
from scaling.fitting.curves.laws import Form, form, huber_residuals, pinned_at
from scaling.fmt import Interval, num, size

__all__ = ["MIN_SIZES", "RESOLVED_SHARE", "JointCurveLaw", "JointForm", "fit_joint", "joint_form"]

#: The share of the narrowest 95% width the evaluations' noise allows a prediction (1.96 SD / sqrt(evaluations),
#: twice) below which its bootstrap is taken to have measured nothing: replicates that stop where the fit is (a fit
#: at its bounds) agree to within the refit's tolerance, far below anything the evaluations could determine.
RESOLVED_SHARE = 0.1
#: Model sizes a joint law needs at least (L0(N) = E + K (N/N0)^-a has three parameters).
MIN_SIZES = 3
#: Bounds of the exponents of the amplitudes in N (a power of N within +-2 covers every published fit).
EXPONENT_BOUND = 2.0
#: Exponents a of L0(N) the fit is started from.
FLOOR_EXPONENT_STARTS = (0.1, 0.3, 0.6)


@dataclass(frozen=True)
class JointForm:
    """A curve law's form with its parameters as functions of N: the joint parameters, their bounds,
    and the map from them to one size's parameters (with its derivative, for the Jacobian)."""

    base: Form
    params: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    #: The base parameters that are amplitudes (power laws in N), each with its exponent's joint name.
    amplitudes: tuple[tuple[str, str], ...]

    @property
    def name(self) -> str:
        return self.base.name

    @property
    def title(self) -> str:
        return self.base.title + " across sizes"

    def bounds(self, max_loss: float) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.lower.copy(), self.upper.copy()
        hi[self.params.index("E")] = max_loss
        hi[self.params.index("K")] = max_loss
        return lo, hi

    def size_theta(self, theta: np.ndarray, x: float) -> np.ndarray:
        """One size's base parameters (x = ln(N / N0)) from the joint parameters ``theta``."""
        return self.size_map(np.atleast_2d(theta), x)[0][0]

    def size_map(self, theta: np.ndarray, x: float) -> tuple[np.ndarray, list[np.ndarray]]:
        """Each row of ``theta`` mapped to one size's base parameters, and (for a single row) d base / d joint."""
        j = {p: i for i, p in enumerate(self.params)}
        out = np.empty((theta.shape[0], len(self.base.params)))
        jac = np.zeros((len(self.base.params), len(self.params)))
        exps = dict(self.amplitudes)
        for b, p in enumerate(self.base.params):
            if p == "L0":
                E, K, a = theta[:, j["E"]], theta[:, j["K"]], theta[:, j["a"]]
                scale = np.exp(-a * x)
                out[:, b] = E + K * scale
                jac[b, j["E"]], jac[b, j["K"]], jac[b, j["a"]] = 1.0, scale[0], -K[0] * x * scale[0]
            elif p in exps:
                amp, e = theta[:, j[p]], theta[:, j[exps[p]]]
                scale = np.exp(-e * x)
                out[:, b] = amp * scale
                jac[b, j[p]], jac[b, j[exps[p]]] = scale[0], -x * amp[0] * scale[0]
            else:
                out[:, b] = theta[:, j[p]]
                jac[b, j[p]] = 1.0
        return out, [jac]

    def joint_from_sizes(self, xs: np.ndarray, thetas: np.ndarray, a: float) -> np.ndarray:
        """A start: each size's base parameters ``thetas`` (sizes x params) summarised across sizes, with L0's
        exponent ``a`` given (E and K then by linear least squares)."""
        base = list(self.base.params)
        start = np.empty(len(self.params))
        exps = dict(self.amplitudes)
        for p in self.params:
            if p in base and p not in exps and p != "L0":
                start[self.params.index(p)] = float(np.median(thetas[:, base.index(p)]))
        L0 = thetas[:, base.index("L0")]
        design = np.column_stack([np.ones_like(xs), np.exp(-a * xs)])
        (E, K), *_ = np.linalg.lstsq(design, L0, rcond=None)
        E, K = max(float(E), 0.0), max(float(K), 1e-6)
        start[self.params.index("E")], start[self.params.index("K")], start[self.params.index("a")] = E, K, a
        for p, e in self.amplitudes:
            amp = np.maximum(thetas[:, base.index(p)], 1e-9)
            slope, intercept = np.polyfit(xs, np.log(amp), 1) if np.ptp(xs) > 0 else (0.0, float(np.log(amp).mean()))
            start[self.params.index(p)] = math.exp(intercept)
            start[self.params.index(e)] = float(np.clip(-slope, -EXPONENT_BOUND, EXPONENT_BOUND))
        lo, hi = self.lower, np.where(np.isfinite(self.upper), self.upper, np.inf)
        return np.clip(start, lo, np.nextafter(hi, -np.inf))


def joint_form(name: str) -> JointForm:
    """The form ``name`` with its floor, its power law's amplitude and its loss drop's scale as functions of N."""
    base = form(name)
    amps = (("A", "pA"), ("B", "pB")) if name == MULTI_POWER else (("A", "pA"), ("C", "pC"))
    exps = dict(amps)
    params: list[str] = []
    lower: list[float] = []
    upper: list[float] = []
    for p, lo, hi in zip(base.params, base.lower, base.upper):
        if p == "L0":
            params += ["E", "K", "a"]
            lower += [0.0, 0.0, 1e-3]
            upper += [np.inf, np.inf, 3.0]
        else:
            params.append(p)
            lower.append(lo)
            upper.append(hi)
            if p in exps:
                params.append(exps[p])
                lower.append(-EXPONENT_BOUND)
                upper.append(EXPONENT_BOUND)
    return JointForm(base, tuple(params), np.array(lower), np.array(upper), amps)


@dataclass(frozen=True)
class _Part:
    """One curve as the joint fit sees it: its size (x = ln N / N0), its areas and its losses."""

    x: float
    areas: Areas
    loss: np.ndarray


def _run(jf: JointForm, parts: list[_Part], start: np.ndarray, lo: np.ndarray, hi: np.ndarray,
         weights: Optional[np.ndarray] = None, targets: Optional[list[np.ndarray]] = None,
         max_nfev: int = 300, tol: float = 1e-9) -> tuple[np.ndarray, float]:
    """Least squares of the Huber loss of log residuals over every size's curves; (theta, cost)."""
    w = np.ones(len(parts)) if weights is None else np.asarray(weights, float)
    ys = np.concatenate([np.log(p.loss) for p in parts] if targets is None else targets)
    sw = np.concatenate([np.full(p.loss.size, math.sqrt(wi)) for p, wi in zip(parts, w)])
    cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def evaluate(th: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = th.tobytes()
        if key not in cache:
            pred = np.concatenate([jf.base.value(jf.size_theta(th, p.x), p.areas) for p in parts])
            pred = np.maximum(pred, 1e-12)
            cache.clear()
            cache[key] = (pred, (ys - np.log(pred)) * sw)
        return cache[key]

    def residual(th: np.ndarray) -> np.ndarray:
        return huber_residuals(evaluate(th)[1])[0]

    def jac(th: np.ndarray) -> np.ndarray:
        pred, r = evaluate(th)
        d = huber_residuals(r)[1] * sw
        blocks = []
        for p in parts:
            size, (m,) = jf.size_map(th[None, :], p.x)
            blocks.append(jf.base.jacobian(size[0], p.areas) @ m)
        return -(d / pred)[:, None] * np.vstack(blocks)

    x0 = np.clip(start, lo, np.where(np.isfinite(hi), np.nextafter(hi, -np.inf), start))
    with np.errstate(all="ignore"):
        res = least_squares(residual, x0, jac=jac, bounds=(lo, hi), x_scale="jac", max_nfev=max_nfev,
                            ftol=tol, xtol=tol, gtol=tol)
    cost = float(res.cost) if np.all(np.isfinite(res.fun)) else math.inf
    return res.x, cost


def _starts(jf: JointForm, parts: list[_Part]) -> list[np.ndarray]:
    """Starts from each size's own fit of the base form, summarised across sizes."""
    xs = sorted({p.x for p in parts})
    thetas, fitted = [], []
    for x in xs:
        mine = [(p.areas, p.loss) for p in parts if p.x == x]
        try:
            thetas.append(fit_form(jf.base, mine)[0])
            fitted.append(x)
        except FitError:
            continue
    if len(fitted) < 2:  # one size's fit (or none): every size from the pooled curves
        theta, _ = fit_form(jf.base, [(p.areas, p.loss) for p in parts])
        fitted, thetas = [min(xs), max(xs)], [theta, theta]
    return [jf.joint_from_sizes(np.array(fitted), np.array(thetas), a) for a in FLOOR_EXPONENT_STARTS]


def _best(jf: JointForm, parts: list[_Part], extra: Sequence[np.ndarray] = (), scout: bool = True) -> tuple[np.ndarray, float]:
    lo, hi = jf.bounds(max(float(np.max(p.loss)) for p in parts))
    best, best_cost = None, math.inf
    for start in [*extra, *(_starts(jf, parts) if scout else [])]:
        try:
            th, cost = _run(jf, parts, start, lo, hi, max_nfev=SCOUT_EVALUATIONS, tol=1e-6)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if cost < best_cost:
            best, best_cost = th, cost
    if best is None:
        raise FitError(f"the {jf.title} could not be fitted to these curves")
    return _run(jf, parts, best, lo, hi)


class JointCurveLaw(Doubtful):
    """A curve law across model sizes (scikit-learn style: ``fit``, ``bootstrap``, ``predict``).

    After :meth:`fit`: ``params_`` (form -> joint parameters), ``held_out_`` (form -> per size left out:
    the MAE and relative error of its curves predicted), ``form_`` (the chosen form), ``sizes_`` and
    ``N0_``; after :meth:`bootstrap`: ``replicates_`` (form -> rows of joint parameters).
    """

    kind = "curves across sizes"

    def __init__(self, forms: Sequence[str] = FORMS, *, held_out: bool = True) -> None:
        self.forms = tuple(forms)
        self.held_out = held_out
        self.params_: dict[str, dict[str, float]] = {}
        self.held_out_: dict[str, list[dict[str, Any]]] = {}
        self.replicates_: dict[str, np.ndarray] = {}
        self.form_: Optional[str] = None
        self.sizes_: list[float] = []
        self.N0_: float = math.nan
        self.runs_: list[str] = []
        self.n_points_ = 0
        #: The fitted evaluations' noise (SD of log loss about the curves; NaN: unknown), kept with a stored law.
        self.noise_: float = math.nan
        self.notes_ = []
        self.doubts_ = []
        self._parts: list[_Part] = []

    # -- fitting -------------------------------------------------------------------------------------
    def _parts_of(self, curves: Sequence[Curve]) -> list[_Part]:
        out = []
        for c in curves:
            s, y = fit_points(c)
            if s.size < 3:
                raise FitError(f"run {c.run!r} has {s.size} loss value(s) after its warmup: a curve needs at least 3")
            out.append(_Part(math.log(float(c.N) / self.N0_), areas(c.lr, s), y))  # type: ignore[arg-type]
        return out

    def fit(self, curves: Sequence[Curve]) -> "JointCurveLaw":
        curves = list(curves)
        unsized = [c.run for c in curves if c.N is None or not (math.isfinite(c.N) and c.N > 0)]
        if unsized:
            raise FitError(f"run {unsized[0]!r} has no N: a curve law across sizes needs each run's model size")
        self.sizes_ = sorted({float(c.N) for c in curves})  # type: ignore[arg-type]
        if len(self.sizes_) < MIN_SIZES:
            raise FitError(f"a curve law across sizes needs curves of at least {MIN_SIZES} model sizes (its floor "
                           f"E + K N^-a has three parameters); these have {len(self.sizes_)}")
        self.N0_ = math.exp(float(np.mean(np.log(self.sizes_))))
        self.runs_ = [c.run for c in curves]
        self._parts = self._parts_of(curves)
        self.n_points_ = int(sum(p.loss.size for p in self._parts))
        self.noise_ = float(curve_noise([p.loss for p in self._parts]))
        for name in self.forms:
            jf = joint_form(name)
            theta, _ = _best(jf, self._parts)
            self.params_[name] = dict(zip(jf.params, map(float, theta)))
        if self.held_out and len(self.sizes_) > MIN_SIZES:
            for name in self.forms:
                self.held_out_[name] = self._leave_one_size_out(joint_form(name), curves)
        errors = {n: self.held_out_error(n) for n in self.forms}
        known = {n: e for n, e in errors.items() if math.isfinite(e)}
        self.form_ = min(known, key=lambda n: known[n]) if known else (
            MULTI_POWER if MULTI_POWER in self.forms else self.forms[0])
        self._judge(curves)
        return self

    def _leave_one_size_out(self, jf: JointForm, curves: list[Curve]) -> list[dict[str, Any]]:
        out = []
        full = self.theta(jf.name)
        for N in self.sizes_:
            rest = [p for p, c in zip(self._parts, curves) if not math.isclose(float(c.N), N, rel_tol=1e-9)]  # type: ignore[arg-type]
            mine = [c for c in curves if math.isclose(float(c.N), N, rel_tol=1e-9)]  # type: ignore[arg-type]
            try:
                theta, _ = _best(jf, rest, extra=[full], scout=False)
            except FitError:
                out.append({"N": N, "mae": math.nan, "mre": math.nan, "runs": []})
                continue
            errs, rel, runs = [], [], []
            for c in mine:
                keep = c.steps >= warmup_end(c.lr)
                pred = law_at(jf.base, jf.size_theta(theta, math.log(N / self.N0_)), c.lr, c.steps[keep])[0]
                errs.append(np.abs(pred - c.loss[keep]))
                rel.append(np.abs(pred - c.loss[keep]) / c.loss[keep])
                final = float(pred[-1])
                runs.append({"run": c.run, "final": float(c.loss[keep][-1]), "predicted_final": final})
            out.append({"N": N, "mae": float(np.mean(np.concatenate(errs))),
                        "mre": float(np.mean(np.concatenate(rel))), "runs": runs})
        return out

    def held_out_error(self, name: str) -> float:
        """The form's mean absolute error on the curves of sizes left out of its fit (NaN without)."""
        errs = [e["mae"] for e in self.held_out_.get(name, [])]
        return float(np.mean(errs)) if errs and np.all(np.isfinite(errs)) else math.nan

    def _judge(self, curves: list[Curve]) -> None:
        self.doubts_, self.notes_ = [], []
        if len(self.sizes_) == MIN_SIZES:
            self.add_doubt(DoubtKind.COVERAGE, f"L0(N) = E + K (N/N0)^-a is fitted to {MIN_SIZES} sizes exactly: "
                           "nothing checks it, and no size can be left out to test the law")
        if not any(np.any(np.diff(c.lr[warmup_end(c.lr) - 1:]) < 0) for c in curves):
            self.add_doubt(DoubtKind.IDENTIFICATION, "unreliable: no curve's learning rate decays, so the loss drop "
                           "of annealing is not measured")
        jf = joint_form(self.form_ or "")
        lo, hi = jf.bounds(max(float(np.max(c.loss)) for c in curves))
        for name, where in pinned_at(self.theta(), lo, hi, jf.params).items():
            self.add_doubt(DoubtKind.PINNED, f"unreliable: {name} of the {jf.title} sits at its {where}")

    # -- bootstrap -----------------------------------------------------------------------------------
    def bootstrap(self, n: int = 100, seed: int = 0) -> "JointCurveLaw":
        """Refit the chosen form ``n`` times over whole runs (Dirichlet weights, residuals redrawn in blocks)."""
        if self.form_ is None or not self._parts:
            raise FitError("fit the curves before bootstrapping")
        self.drop_doubts(DoubtKind.BOOTSTRAP, DoubtKind.UNDETERMINED)
        self.replicates_ = {}
        if n < 2:
            return self
        rng = np.random.default_rng(seed)
        jf = joint_form(self.form_)
        theta = self.theta()
        lo, hi = jf.bounds(max(float(np.max(p.loss)) for p in self._parts))
        fitted = [np.log(np.maximum(jf.base.value(jf.size_theta(theta, p.x), p.areas), 1e-12)) for p in self._parts]
        resid = [np.log(p.loss) - f for p, f in zip(self._parts, fitted)]
        rows = []
        for _ in range(n):
            weights = rng.dirichlet(np.ones(len(self._parts))) * len(self._parts)
            targets = [f + block_resample(r, rng) for f, r in zip(fitted, resid)]
            try:
                th, cost = _run(jf, self._parts, theta, lo, hi, weights=weights, targets=targets, max_nfev=100, tol=1e-8)
            except (ValueError, np.linalg.LinAlgError):
                continue
            if math.isfinite(cost):
                rows.append(th)
        self.replicates_ = {jf.name: np.array(rows) if rows else np.zeros((0, len(jf.params)))}
        if len(rows) < MIN_OK_FRACTION * n:
            self.add_doubt(DoubtKind.BOOTSTRAP, f"unreliable: only {len(rows)} of {n} bootstrap replicates refitted")
        elif rows and not _varies(self.replicates_[jf.name], theta):
            self.add_doubt(DoubtKind.BOOTSTRAP, f"unreliable: all {len(rows)} bootstrap replicates refit to the fit's "
                           "own parameters, so the bootstrap measures no error: no interval, and no prediction from it")
        for name, iv in self.intervals().items():
            j = jf.params.index(name)
            if jf.lower[j] > 0 and orders_of_magnitude(iv) > MAX_DECADES:
                self.add_doubt(DoubtKind.UNDETERMINED, f"the curves do not determine {name} of the {jf.title} "
                               f"(its 95% interval spans more than {MAX_DECADES:g} decades)")
        return self

    # -- prediction ----------------------------------------------------------------------------------
    def theta(self, name: Optional[str] = None) -> np.ndarray:
        name = name or self.form_
        if name not in self.params_:
            raise FitError("the curve law across sizes is not fitted")
        jf = joint_form(name)
        return np.array([self.params_[jf.name][p] for p in jf.params])

    def size_params(self, N: float) -> dict[str, float]:
        """The chosen form's parameters at model size ``N``."""
        jf = joint_form(self.form_ or "")
        return dict(zip(jf.base.params, map(float, jf.size_theta(self.theta(), math.log(N / self.N0_)))))

    def loss_at(self, N: float, lr: Sequence[float] | np.ndarray, steps: Sequence[int] | np.ndarray) -> np.ndarray:
        """The predicted loss of a model of ``N`` parameters at ``steps`` of a run whose rate at step k is ``lr[k]``."""
        jf = joint_form(self.form_ or "")
        th = jf.size_theta(self.theta(), math.log(N / self.N0_))
        out = law_at(jf.base, th, np.asarray(lr, float), np.asarray(steps, np.int64))[0]
        return np.where(out > 0, out, np.nan)

    def draws_at(self, N: float, lr: Sequence[float] | np.ndarray, steps: Sequence[int] | np.ndarray) -> np.ndarray:
        """Each bootstrap replicate's loss at ``steps`` (replicates x steps; no rows without a bootstrap)."""
        jf = joint_form(self.form_ or "")
        reps = self.replicates_.get(jf.name)
        steps = np.asarray(steps, np.int64)
        if reps is None or reps.shape[0] < 2:
            return np.zeros((0, steps.size))
        sized, _ = jf.size_map(reps, math.log(N / self.N0_))
        return law_at(jf.base, sized, np.asarray(lr, float), steps)

    def at_size(self, N: float) -> CurveLaw:
        """The single-size curve law this law gives at ``N`` (its bootstrap mapped too, its doubts kept), for
        what takes one size's law (the schedule advice)."""
        jf = joint_form(self.form_ or "")
        x = math.log(N / self.N0_)
        law = CurveLaw((jf.name,), held_out=False)
        law.form_ = jf.name
        law.params_ = {jf.name: self.size_params(N)}
        reps = self.replicates_.get(jf.name)
        if reps is not None and reps.shape[0]:
            law.replicates_ = {jf.name: jf.size_map(reps, x)[0]}
        law.runs_, law.n_points_ = list(self.runs_), self.n_points_
        law.doubts_, law.notes_ = list(self.doubts_), list(self.notes_)
        return law

    def resolution(self) -> float:
        """The narrowest relative 95% width a prediction's bootstrap is believed at (:data:`RESOLVED_SHARE` of
        what the fitted evaluations' noise allows; 0 where the noise is unknown, as in a law stored without it)."""
        if not math.isfinite(self.noise_) or self.n_points_ < 1:
            return 0.0
        return RESOLVED_SHARE * 2 * float(norm.ppf(0.5 + LEVEL / 2)) * self.noise_ / math.sqrt(self.n_points_)

    def final_loss(self, N: float, lr: Sequence[float] | np.ndarray) -> Interval:
        """The predicted loss after the last step of ``lr`` for a model of ``N`` parameters, with its 95% interval
        (withheld where it is narrower than :meth:`resolution`: the replicates did not move from the fit)."""
        last = [len(lr) - 1]
        value = float(self.loss_at(N, lr, last)[0])
        iv = summarise(self.draws_at(N, lr, last)[:, 0], value)
        width = iv.hi - iv.lo if iv.interval is not None else math.nan  # type: ignore[operator]
        if width < self.resolution() * abs(value):
            return iv.without_interval(f"the bootstrap replicates agree to {width / abs(value):.2g} of the loss, under "
                                       f"{RESOLVED_SHARE:g} of what the evaluations' noise allows: they did not move "
                                       "from the fit (parameters at their bounds), and measure no error")
        return iv

    def predict(self, schedules: Sequence[Schedule]) -> pd.DataFrame:
        """The predicted loss with its 95% interval at each wanted step of each schedule (its ``N`` needed):
        columns ``run, N, step, loss, lo, hi`` (``lo``/``hi`` NaN without a bootstrap or where withheld)."""
        frames = []
        for s in schedules:
            if s.N is None or not (math.isfinite(s.N) and s.N > 0):
                raise FitError(f"run {s.run!r} has no N: a curve law across sizes predicts a given model size")
            steps = np.asarray(s.steps, np.int64)
            value = self.loss_at(s.N, s.lr, steps)
            draws = self.draws_at(s.N, s.lr, steps)
            lo, hi = percentile_bounds(draws, value) if draws.shape[0] else (np.full(steps.size, np.nan),) * 2
            lo, hi = (np.where(hi - lo < self.resolution() * np.abs(value), np.nan, b) for b in (lo, hi))
            if draws.shape[0] and np.any((hi - lo > UNDETERMINED_WIDTH * value) | (np.isnan(lo) & np.isfinite(value))):
                message = (f"the curves do not determine the prediction for run {s.run!r} (its 95% interval is wider "
                           f"than {100 * UNDETERMINED_WIDTH:g}% of the loss, or withheld)")
                if message not in self.notes_:
                    self.add_doubt(DoubtKind.UNDETERMINED, message)
            frames.append(pd.DataFrame({"run": s.run, "N": s.N, "step": steps, "loss": value, "lo": lo, "hi": hi}))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["run", "N", "step", "loss", "lo", "hi"])

    def intervals(self, name: Optional[str] = None) -> dict[str, Interval]:
        """Each joint parameter with its 95% interval (the chosen form's only is bootstrapped)."""
        jf = joint_form(name or self.form_ or "")
        reps = self.replicates_.get(jf.name)
        pinned = pinned_at(self.theta(jf.name), jf.lower, jf.upper, jf.params)
        return {p: summarise(reps[:, j] if reps is not None and reps.shape[0] else [],
                             self.params_[jf.name][p], pinned=pinned.get(p))
                for j, p in enumerate(jf.params)}

    # -- output --------------------------------------------------------------------------------------
    def table(self) -> str:
        lines = [f"Curve law across sizes: {len(self.runs_)} curve(s) of {len(self.sizes_)} sizes "
                 f"(N0 = {size(self.N0_)}), {self.n_points_} evaluations fitted"]
        for name in self.forms:
            if name not in self.params_:
                continue
            jf = joint_form(name)
            chosen = " (chosen: lower held-out error)" if name == self.form_ and self.held_out_ else \
                " (chosen)" if name == self.form_ else ""
            lines.append(f"{jf.title}{chosen}")
            for p, iv in self.intervals(name).items():
                lines.append(f"  {p:<6} {iv.text(4)}")
            for e in self.held_out_.get(name, []):
                if math.isfinite(e["mae"]):
                    lines.append(f"  N = {size(e['N'])} left out: MAE {num(e['mae'], 3)}, relative "
                                 f"{100 * e['mre']:.3g}%")
        lines += [f"note: {n}" for n in self.notes_]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "forms": list(self.forms), "form": self.form_, "params": self.params_,
                "held_out": self.held_out_, "sizes": self.sizes_, "N0": self.N0_, "runs": self.runs_,
                "n_points": self.n_points_, "noise": self.noise_ if math.isfinite(self.noise_) else None,
                "replicates": {k: v.tolist() for k, v in self.replicates_.items()}, "doubts": stored(self.doubts_)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JointCurveLaw":
        law = cls(tuple(d.get("forms") or FORMS))
        law.form_ = d.get("form")
        law.params_ = {k: {p: float(v) for p, v in ps.items()} for k, ps in (d.get("params") or {}).items()}
        law.held_out_ = dict(d.get("held_out") or {})
        law.sizes_ = [float(n) for n in d.get("sizes") or []]
        law.N0_ = float(d.get("N0") or math.nan)
        law.runs_ = list(d.get("runs") or [])
        law.n_points_ = int(d.get("n_points") or 0)
        law.noise_ = float(d.get("noise") or math.nan)
        law.replicates_ = {k: np.array(v, dtype=float).reshape(-1, len(joint_form(k).params))
                           for k, v in (d.get("replicates") or {}).items()}
        law.doubts_ = restore(d.get("doubts"))
        law.notes_ = list(law.doubts_)
        return law

    def __repr__(self) -> str:
        return f"JointCurveLaw(form={self.form_!r}, sizes={len(self.sizes_)})"


def _varies(replicates: np.ndarray, theta: np.ndarray) -> bool:
    """Whether any parameter's bootstrap replicates spread beyond rounding (:data:`ZERO_WIDTH` of its size):
    replicates that all refit to the fit itself (a fit at its bounds, or curves it matches exactly) measure nothing."""
    if replicates.shape[0] < 2:
        return False
    scale = np.maximum(np.max(np.abs(replicates), axis=0), np.abs(theta))
    return bool(np.any(np.ptp(replicates, axis=0) > ZERO_WIDTH * np.maximum(scale, 1e-300)))


def fit_joint(curves: Sequence[Curve], *, bootstrap: int = 50, seed: int = 0,
              forms: Sequence[str] = FORMS) -> JointCurveLaw:
    """Both forms fitted across sizes, the one that predicts held-out sizes better chosen, and bootstrapped."""
    law = JointCurveLaw(forms).fit(curves)
    return law.bootstrap(bootstrap, seed) if bootstrap else law


