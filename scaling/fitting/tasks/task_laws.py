"""Downstream prediction: a task's accuracy at any (N, D), in two fitted steps, with intervals.

Step 1: the task loss (the bits per byte of the correct answer, or the run's own loss for a task
that reports none) as a function of (N, D) in the Chinchilla form L = E + A/N^alpha + B/D^beta,
fitted to each run's final evaluation by :class:`~scaling.fitting.loss.parametric.ChinchillaParametric`
(its own parameters, the same Huber objective, grid and bootstrap as the loss law).
Step 2: accuracy as a function of the task loss (:mod:`scaling.fitting.tasks.task_curves`: the OLMo
ladder's sigmoid and Gadre et al.'s exponential error), fitted to every evaluation.

The chained prediction at (N, D) evaluates step 2 at step 1's task loss, replicate by replicate:
the two bootstraps are drawn independently (step 1 resamples final points, step 2 whole runs) and
paired by index, so the 95% interval carries both steps' parameter uncertainty. A chain whose
step 2 is flagged unreliable keeps its value, marked, without an interval; one whose step 1 alone is
flagged keeps its interval where the paired bootstrap determines the accuracy at the asked point
(:func:`determined`), with step 1's doubts in its notes. A form that fits the evaluations clearly
worse than the other is flagged (:meth:`TaskLaw.misfit`); forms that fit them about as well share
one interval holding both their predictions, since the data cannot say which holds beyond them
(:meth:`TaskLaw.predict_interval`). Step 2's forms are bounded to [chance, 1]
(:mod:`scaling.fitting.tasks.task_curves`). The backtest holds out the largest budget as
:mod:`scaling.fitting.core.backtest` does for the loss laws.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, fields, replace
from typing import Any, Mapping, Optional, Protocol

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError
from scaling.arguments import check_size
from scaling.fmt import Interval, bounds
from scaling.fitting.core.base import EXTRAPOLATION_Z, MIN_OK_FRACTION, Law, jsonable
from scaling.fitting.core.measurements import FitData, group_budgets, prepare
from scaling.fitting.core.doubts import Doubt, DoubtKind
from scaling.fitting.core.intervals import summarise, withheld
from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP
from scaling.fitting.loss.parametric import RECIPES, ChinchillaParametric
from scaling.fitting.tasks import ladder_recipe
from scaling.fitting.tasks.task_curves import CURVES, AccuracyCurve
from scaling.fitting.tasks.task_data import TaskData
from scaling.fitting.tasks.task_data import from_db as tasks_from_db
from scaling.fitting.tasks.task_data import from_frame as tasks_from_frame

#: Step 2's forms, in report order; the first is the headline method.
FORMS = tuple(CURVES)
#: A predicted task loss this far outside the evaluated ones (as a fraction of their range) is an
#: extrapolation of step 2, said in the prediction's notes.
STEP2_REACH = 0.1
#: A chained accuracy whose step 1 is flagged (a parameter not determined on its own) still gets its
#: interval when the paired bootstrap determines it at the asked point: at least MIN_OK_FRACTION of
#: the replicates give a finite accuracy, the interval is a percentile one (it holds its estimate) and
#: it is at most this wide, in accuracy. Step 1's doubts then stay in the prediction's notes.
DETERMINED_WIDTH = 0.2
#: A step-2 form whose residuals are more than this factor above the best form's on the same evaluations
#: does not fit them: flagged, its value shown without an interval. On simulated ladders a form that
#: matches the truth fits within a few percent of the other form; a wrong one reaches 1.4-3.5x
#: (benchmarks/bench_task_coverage.py, docs/downstream.md).
MISFIT_RATIO = 1.2
#: The recipe of both steps: ``grid`` (the default: step 1 from Epoch AI's grid of starts, step 2 on every
#: evaluation) or ``ladder`` (OLMo's model-ladder recipe: step 1 from one start, every parameter >= 0,
#: L-BFGS-B, on each run's last evaluations averaged; step 2 as :mod:`scaling.fitting.tasks.ladder_recipe`
#: selects and smooths the evaluations, the sigmoid with its ideal point); see docs/downstream.md.
STEP1_RECIPES = RECIPES

__all__ = ["FORMS", "TaskFits", "TaskLaw", "TaskData", "fit_task", "fit_tasks", "tasks_from_db", "tasks_from_frame"]


def _step1_points(rows: pd.DataFrame, source: str, k: float) -> Any:
    """The final evaluations as fitting points: N, D, C and the task loss as ``loss``."""
    pts = rows[["N", "D", "C", "x"]].rename(columns={"x": "loss"}).astype(float)
    return prepare(pts, flops_convention="6N" if k == FLOPS_PER_PARAM_TOKEN else "given", source=source)


#: Step 1 along the frontier says so in its notes, starting with this.
FRONTIER_NOTE = "step 1 is the task loss along the compute-optimal frontier"


def fit_step1(points: FitData | pd.DataFrame, *, grid: str = "epoch", n_bootstrap: int = 200, seed: int = 0, recipe: str = "grid") -> Law:
    """Task loss from (N, D): the Chinchilla form, or, where that fit fails or is flagged and the runs form
    an IsoFLOP ladder, the task loss of compute along the frontier (approach 2 on the task loss: each
    budget's parabola in ln N and power laws across budgets), which then says so in its notes.

    Returns the Chinchilla fit, flagged, when neither is usable (its flags then withhold every interval);
    raises :class:`FitError` when neither can be fitted at all. ``recipe``: how the Chinchilla form is
    searched (:data:`STEP1_RECIPES`).
    """
    law: Law | None = None
    try:
        law = ChinchillaParametric(grid=grid, recipe=recipe).fit(points)
        if n_bootstrap:
            law.bootstrap(n_bootstrap, seed)
        if law.reliable():
            return law
        why = law.doubts()[0]
    except FitError as exc:
        why = " ".join(str(exc).split())
    try:
        frontier = ChinchillaIsoFLOP().fit(points)
        if n_bootstrap:
            frontier.bootstrap(n_bootstrap, seed)
    except FitError as exc:
        if law is None:
            raise FitError(f"{why}; along the frontier: {' '.join(str(exc).split())}") from None
        return law
    if frontier.reliable() or law is None:
        frontier.notes_.insert(0, f"{FRONTIER_NOTE} (approach 2 on the task loss): the (N, D) form is not usable "
                                  f"({why}); its predictions hold near compute-optimal runs")
        return frontier
    return law


#: (N, D) far beyond any run: step 1's prediction there is the lowest task loss it can give.
FAR = 1e30


def task_loss_floor(step1: Law) -> float:
    """The lowest task loss step 1 predicts for any (N, D) (its E for the Chinchilla form), >= 0.

    Step 2's forms are bounded to [chance, 1] at every task loss down to it and hold their value there
    below it: no model reaches a lower task loss by step 1, and a replicate of step 1 that does is
    evaluated at the floor.
    """
    try:
        with np.errstate(all="ignore"):
            value = float(np.asarray(step1.predict(FAR, FAR)))
    except (FitError, ValueError, ArithmeticError):
        return 0.0
    return max(value, 0.0) if math.isfinite(value) else 0.0


def law_replicates(law: Law, N: float, D: float) -> np.ndarray:
    """``law``'s prediction at (N, D) under each of its usable bootstrap replicates (empty without any)."""
    cols = [law.replicate_values(n) for n in law.param_names]
    if any(c is None for c in cols):
        return np.array([])
    probe = copy.copy(law)  # the same law with one replicate's parameters at a time
    out = np.empty(len(cols[0]))
    with np.errstate(all="ignore"):
        for i, row in enumerate(zip(*cols)):
            probe.params_ = dict(zip(law.param_names, (float(v) for v in row)))
            out[i] = float(np.asarray(probe.predict(N, D)))
    return out


@dataclass(frozen=True)
class ChainedAccuracy(Interval):
    """A task's accuracy predicted through both steps, with what the chain adds to its interval."""

    #: The chain's mean absolute error on its backtest (accuracy, 0-1), or None without one.
    backtest_error: Optional[float] = None
    #: Step 1 is flagged, but the paired bootstrap determines the accuracy at this point (see :func:`determined`).
    determined_at_point: bool = False
    #: The bounds are widened to hold the other admissible forms' predictions.
    form_spread: bool = False

    @classmethod
    def chained(cls, iv: Interval, **extra: Any) -> "ChainedAccuracy":
        """``iv`` (an :class:`Interval` or a chained one) with ``extra`` of this class' own fields."""
        own = {f.name: getattr(iv, f.name) for f in fields(iv)}
        return cls(**own | extra)

    @classmethod
    def of(cls, iv: "Mapping[str, Any] | Interval", quantity: Optional[str] = None) -> "ChainedAccuracy":
        """Its JSON form (:meth:`to_dict`) read back."""
        if isinstance(iv, ChainedAccuracy):
            return iv
        base = Interval.of(iv, quantity)
        if not isinstance(iv, Mapping):
            return cls.chained(base)
        error = iv.get("backtest_error")
        return cls.chained(base, backtest_error=None if error is None else float(error),
                           determined_at_point=bool(iv.get("determined_at_point")),
                           form_spread=bool(iv.get("form_spread")))

    from_dict = of

    def to_dict(self) -> dict[str, Any]:
        """:meth:`Interval.to_dict` with the chain's own keys where they say something."""
        extra = {"backtest_error": self.backtest_error, "determined_at_point": self.determined_at_point or None,
                 "form_spread": self.form_spread or None}
        return super().to_dict() | {k: v for k, v in extra.items() if v is not None}


def stored_predictions(predictions: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each task's stored :meth:`TaskLaw.predict_interval` with its intervals read back."""
    return {task: {k: ChainedAccuracy.of(v) if k in FORMS else Interval.of(v) if k == "task_loss" else v
                   for k, v in p.items()} for task, p in predictions.items()}


def determined(iv: Interval, reps: np.ndarray) -> bool:
    """Whether the paired bootstrap pins down one chained accuracy (see :data:`DETERMINED_WIDTH`)."""
    finite = int(np.isfinite(reps).sum())
    return (reps.size > 0 and finite >= MIN_OK_FRACTION * reps.size and iv.kind == "percentile"
            and iv.interval is not None and iv.interval[1] - iv.interval[0] <= DETERMINED_WIDTH)


@dataclass
class TaskLaw:
    """One task's two steps, fitted; :meth:`predict_interval` chains them."""

    task: str
    accuracy: str  # which accuracy is predicted: acc or acc_norm
    loss_source: str  # step 1's task loss: bpb (of the answer) or loss (the run's own)
    step1: Law  # the Chinchilla form, or approach 2 along the frontier (see fit_step1)
    curves: dict[str, AccuracyCurve]
    skipped: dict[str, str] = field(default_factory=dict)  # step-2 forms that could not be fitted, and why
    backtest: dict[str, Any] | None = None
    evals: pd.DataFrame | None = None  # x (task loss), y (accuracy), final, C of every evaluation (figures)
    chance: float | None = None  # the task's chance level when known: no prediction falls below it

    @property
    def loss_label(self) -> str:
        return "task bits per byte" if self.loss_source == "bpb" else "loss"

    def doubts(self, form: str) -> list[Doubt]:
        """What says this chain cannot be trusted: step 1's doubts, then the form's (each of its kind)."""
        out = [Doubt(d.kind, f"step 1 (task loss from N, D): {d}") for d in self.step1.doubts()]
        curve = self.curves.get(form)
        if curve is None:
            return out + [Doubt(DoubtKind.NOT_FITTED, f"step 2 ({form}) not fitted: {self.skipped.get(form, 'no fit')}")]
        return out + [Doubt(d.kind, f"step 2 ({curve.label}): {d}") for d in curve.doubts() + self.misfit(form)]

    def misfit(self, form: str) -> list[Doubt]:
        """Whether ``form`` fits the evaluations clearly worse than another form (see :data:`MISFIT_RATIO`)."""
        sd = {f: c.residual_sd_ for f, c in self.curves.items() if math.isfinite(c.residual_sd_)}
        if form not in sd or len(sd) < 2:
            return []
        best = min(sd, key=sd.get)
        ratio = sd[form] / sd[best] if sd[best] > 0 else math.inf
        if ratio <= MISFIT_RATIO:
            return []
        return [Doubt.unreliable(DoubtKind.MISFIT, f"its residuals (SD {sd[form]:.3g}) are {ratio:.3g}x those of the "
                      f"{self.curves[best].label} (SD {sd[best]:.3g}) on the same evaluations: the form does not fit them")]

    def admissible(self) -> list[str]:
        """The fitted forms that fit the evaluations about as well as the best one."""
        return [f for f in self.curves if not self.misfit(f)]

    def reliable(self, form: str = FORMS[0]) -> bool:
        return not self.doubts(form)

    def task_loss(self, N: ArrayLike, D: ArrayLike) -> np.ndarray:
        return self.step1.predict(N, D)

    def predict(self, N: ArrayLike, D: ArrayLike, form: str = FORMS[0]) -> np.ndarray:
        """Predicted accuracy at (N, D) by ``form``."""
        return self.curves[form].predict(self.task_loss(N, D))

    def predict_interval(self, N: float, D: float) -> dict[str, Any]:
        """Task loss and each form's accuracy at (N, D), with 95% intervals through both steps."""
        N, D = float(N), float(D)
        L = float(np.asarray(self.task_loss(N, D)))
        L_reps = law_replicates(self.step1, N, D)
        step1_ok = self.step1.reliable()
        out: dict[str, Any] = {"N": N, "D": D, "C": self.step1.k_ * N * D, "notes": []}
        c_max = (self.step1.c_range_ or (math.nan, math.nan))[1]
        iv = summarise(L_reps, L, log=True)
        out["task_loss"] = iv if step1_ok else withheld(iv, "step 1 is flagged unreliable: " + self.step1.doubts()[0])
        for form, curve in self.curves.items():
            point = float(np.asarray(curve.predict(L)))
            rows = curve.replicate_rows()
            if rows is None or not L_reps.size:
                reps = np.array([])
            else:
                m = min(len(rows), len(L_reps))
                reps = curve.accuracy_of(rows[:m], L_reps[:m])
            iv = summarise(reps, point)
            doubts = self.doubts(form)
            step1_only = not step1_ok and not curve.doubts() and not self.misfit(form)
            if doubts and step1_only and determined(iv, reps):
                out["notes"].append(f"{form}: step 1 is flagged ({self.step1.doubts()[0].reason})"
                                    f", but the paired bootstrap of both steps determines the accuracy at this point: "
                                    f"its interval is given")
                iv = ChainedAccuracy.chained(iv, determined_at_point=True)
            elif doubts:
                iv = withheld(iv, doubts[0])
            out[form] = self._widen_by_backtest(iv, form, out["C"], c_max)
        self._hold_form_spread(out)
        lo, hi = next(iter(self.curves.values())).loss_range_ if self.curves else (math.nan, math.nan)
        reach = STEP2_REACH * (hi - lo)
        if math.isfinite(L) and (L < lo - reach or L > hi + reach):
            out["notes"].append(f"step 2 extrapolates: the predicted {self.loss_label} {L:.4g} lies outside the "
                                f"evaluated ones ({lo:.4g} to {hi:.4g})")
        if out["C"] > c_max * (1 + 1e-9) and not any(out[f].widened for f in self.curves if f in out):
            out["notes"].append(f"a factor {out['C'] / c_max:.3g} beyond the largest fitted budget in compute: the "
                                "intervals hold the two fits' parameter uncertainty, not their error in extrapolating "
                                "(no backtest measured that)")
        return out

    def backtest_error(self, form: str) -> float | None:
        """The mean absolute error (accuracy, 0-1) of ``form``'s chain on the held-out largest budget, or None."""
        value = (self.backtest or {}).get(f"{form}_mean_abs_error")
        return float(value) if value is not None and math.isfinite(value) else None

    def _backtest_rate(self, form: str) -> float | None:
        """The backtest's error per unit ln C it extrapolated (the held-out budget's distance from the largest
        budget it was fitted on); a backtest that does not say that distance counts as one unit."""
        error = self.backtest_error(form)
        if error is None:
            return None
        bt = self.backtest or {}
        held = [float(r["C"]) for r in bt.get("held_out", []) if r.get("C")]
        train = bt.get("train_c_max")
        dist = math.log(float(np.median(held)) / float(train)) if held and train else 1.0
        return error / max(dist, 1e-9) if dist > 0 else error

    def _widen_by_backtest(self, iv: Interval, form: str, C: float, c_max: float) -> ChainedAccuracy:
        """``iv`` beyond the fitted budgets widened each side by the chain's backtest error, as a loss law's
        interval is (:meth:`scaling.fitting.core.base.Law.extrapolation_error`): the error per unit ln C the
        backtest extrapolated, times the distance from the largest fitted budget, times
        :data:`~scaling.fitting.core.base.EXTRAPOLATION_Z`; the ends stay within [chance, 1]."""
        error = self.backtest_error(form)
        out = ChainedAccuracy.chained(iv, **({} if error is None else {"backtest_error": error}))
        rate = self._backtest_rate(form)
        if rate is None or not (C > c_max * (1 + 1e-9)) or iv.kind != "percentile" or iv.interval is None:
            return out
        lo, hi = iv.interval
        dist = math.log(C / c_max)
        extra = EXTRAPOLATION_Z * rate * dist
        floor = self.chance if self.chance is not None else 0.0
        return out.widen(max(floor, min(lo - extra, iv.value)), min(1.0, max(hi + extra, iv.value)),
                         f"widened for extrapolating {dist / math.log(10):.2g} decades beyond the largest fitted "
                         f"budget by the backtest's error ({100 * error:.2g} points on the held-out budget)")

    def _hold_form_spread(self, out: dict[str, Any]) -> None:
        """Widen each interval to the other admissible forms' predictions and intervals.

        Forms that fit the evaluations equally well may still part beyond the data; which one holds is
        then not known, and an interval of one form alone would claim it is (on simulated ladders the
        wrong form's own intervals covered the truth about one time in ten).
        """
        forms = [f for f in self.admissible() if f in out]
        if len(forms) < 2:
            return
        ends = [v for f in forms for v in (out[f].value, out[f].lo, out[f].hi) if v is not None and math.isfinite(v)]
        if not ends:
            return
        lo, hi = min(ends), max(ends)
        widened = [f for f in forms if out[f].kind == "percentile" and out[f].interval is not None
                   and (out[f].lo > lo or out[f].hi < hi)]
        for f in widened:
            out[f] = replace(out[f], lo=lo, hi=hi, form_spread=True)
        if widened:
            out["notes"].append(f"{', '.join(widened)}: the interval is widened to {bounds(lo, hi)} to hold the "
                                f"predictions of {' and '.join(forms)}, which fit the evaluations about as well and "
                                "part here")

    def to_dict(self, replicates: bool = False) -> dict[str, Any]:
        step1 = self.step1.to_dict()
        curves = {f: c.to_dict() for f, c in self.curves.items()}
        if not replicates:
            step1["bootstrap"] = {k: v for k, v in step1["bootstrap"].items() if k != "replicates"}
            step1["plot"] = {k: v for k, v in step1.get("plot", {}).items() if k != "points"}
            for c in curves.values():
                c.pop("replicates", None)
        return jsonable({"task": self.task, "accuracy": self.accuracy, "loss_source": self.loss_source,
                         "chance": self.chance,
                         "step1": step1, "step2": curves, "skipped": self.skipped, "backtest": self.backtest,
                         "reliable": {f: self.reliable(f) for f in self.curves}})


def _rows_for(rows: pd.DataFrame, accuracy: str) -> tuple[pd.DataFrame, str, str]:
    """(evaluations with x = task loss and y = accuracy, accuracy used, loss source)."""
    acc = accuracy if rows[accuracy].notna().any() else ("acc_norm" if accuracy == "acc" else "acc")
    if not rows[acc].notna().any():
        raise FitError("no accuracy measured")
    source = "bpb" if rows["bpb"].notna().any() else "loss"
    out = rows.assign(x=rows[source].astype(float), y=rows[acc].astype(float))
    out = out[np.isfinite(out["x"]) & np.isfinite(out["y"]) & (out["x"] > 0)]
    if source == "loss" and not len(out):
        raise FitError("no bits per byte and no loss at the task's evaluations")
    return out, acc, source


def fit_task(rows: pd.DataFrame, task: str, *, accuracy: str = "acc", n_bootstrap: int = 200, seed: int = 0,
             grid: str = "epoch", k: float = FLOPS_PER_PARAM_TOKEN, run_backtest: bool = True, forms: tuple[str, ...] = FORMS,
             step1: Law | None = None, chance: float | None = None, recipe: str = "grid") -> TaskLaw:
    """Fit both steps of one task's evaluations ``rows`` (columns of :data:`scaling.fitting.tasks.task_data.COLUMNS`).

    ``step1``: an already fitted step 1 of the same task loss (shared by tasks measured on the run's
    own loss). ``chance``: the task's chance level, when known. ``recipe``: step 1's search
    (:data:`STEP1_RECIPES`). Step 2's forms are bounded to [chance, 1]
    at every task loss down to :func:`task_loss_floor` of step 1. Raises :class:`FitError` when step 1
    or every step-2 form cannot be fitted.
    """
    ev, acc, source = _rows_for(rows, accuracy)
    finals = ev[ev["final"].astype(bool)]
    fitted = ev  # step 2's evaluations
    if recipe == "ladder":  # the ladder's smoothing and early-checkpoint cut (see ladder_recipe)
        finals, fitted = ladder_recipe.step1_rows(ev), ladder_recipe.step2_rows(ev)
    if step1 is None:
        step1 = fit_step1(_step1_points(finals, f"task {task!r} ({source})", k), grid=grid, n_bootstrap=n_bootstrap,
                          seed=seed, recipe=recipe)
    curves: dict[str, AccuracyCurve] = {}
    skipped: dict[str, str] = {}
    floor = task_loss_floor(step1)
    for form in forms:
        try:
            anchor = ladder_recipe.IDEAL_POINT if recipe == "ladder" and form == "sigmoid" else None
            curve = CURVES[form]().fit(fitted["x"], fitted["y"], fitted["run_key"], chance=chance or 0.0, floor=floor,
                                       anchor=anchor)
            if n_bootstrap:
                curve.bootstrap(n_bootstrap, seed + 1)
            curves[form] = curve
        except FitError as exc:
            skipped[form] = " ".join(str(exc).split())
    if not curves:
        raise FitError("step 2: " + "; ".join(f"{f}: {r}" for f, r in skipped.items()))
    law = TaskLaw(task, acc, source, step1, curves, skipped,
                  evals=ev[["run_key", "x", "y", "final", "C", "N", "D"]].reset_index(drop=True), chance=chance)
    if run_backtest:
        law.backtest = backtest_task(law, ev, grid=grid, k=k, recipe=recipe)
    return law


def backtest_task(law: TaskLaw, ev: pd.DataFrame, *, grid: str = "epoch", k: float = FLOPS_PER_PARAM_TOKEN,
                  recipe: str = "grid") -> dict[str, Any]:
    """Refit both steps without the largest budget's runs; the error of each form on them.

    Held out: the runs of the largest budget (final points grouped within 5% in C) when it has at
    least three, otherwise the runs at or above the 90th percentile of final compute; their
    intermediate evaluations leave step 2's data too.
    """
    finals = ev[ev["final"].astype(bool)]
    C = finals["C"].to_numpy(float)
    if len(C) < 4:
        return {"error": "too few runs to hold any out"}
    labels = group_budgets(C)
    held = labels == labels.max()
    if held.sum() < 3:
        held = C >= np.quantile(C, 0.9)
    if (~held).sum() < 6:
        return {"error": "too few runs left to fit after holding out the largest budget"}
    out_keys = set(finals["run_key"][held])
    train = ev[~ev["run_key"].isin(out_keys)]
    try:
        step1 = None
        if isinstance(law.step1, ChinchillaIsoFLOP):  # refit the same kind of step 1 as the full fit
            kept = train[train["final"].astype(bool)]
            step1 = ChinchillaIsoFLOP().fit(_step1_points(kept, f"task {law.task!r}", k))
        refit = fit_task(train, law.task, accuracy=law.accuracy, n_bootstrap=0, grid=grid, k=k, run_backtest=False,
                         forms=tuple(law.curves), step1=step1, chance=law.chance, recipe=recipe)
    except FitError as exc:
        return {"error": " ".join(str(exc).split())}
    test = finals[held]
    L_pred = refit.task_loss(test["N"].to_numpy(float), test["D"].to_numpy(float))
    result: dict[str, Any] = {"n_train_runs": int((~held).sum()), "held_out": [], "train_c_max": float(C[~held].max()),
                              "task_loss_mean_abs_rel_error": float(np.mean(np.abs(L_pred / test["x"] - 1.0)))}
    for form, curve in refit.curves.items():
        pred = curve.predict(L_pred)
        err = pred - test["y"].to_numpy(float)
        result[f"{form}_mean_abs_error"] = float(np.mean(np.abs(err)))
    for i, (_, r) in enumerate(test.iterrows()):
        row = {"N": r["N"], "D": r["D"], "C": r["C"], "accuracy": r["y"], "task_loss": r["x"],
               "predicted_task_loss": float(L_pred[i])}
        for form, curve in refit.curves.items():
            row[f"predicted_{form}"] = float(np.asarray(curve.predict(L_pred[i])))
        result["held_out"].append(row)
    return jsonable(result)


@dataclass(frozen=True)
class TaskPrediction:
    """One task's predicted accuracy at (N, D) by one step-2 form, and the task loss it comes from."""

    task: str
    form: str
    accuracy: Interval
    task_loss: Interval
    reliable: bool
    notes: list[str]


@dataclass
class TaskFits:
    """Every task's fitted chain, what could not be fitted and why (``scaling.tasks()`` returns it as it is)."""

    source: str
    laws: dict[str, TaskLaw] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.laws or self.skipped)

    @property
    def params(self) -> dict[str, dict[str, dict[str, Interval]]]:
        """task -> step (``step1``, ``sigmoid``, ``exp``) -> parameter -> value with its interval (withheld where flagged)."""
        return {t: {"step1": law.step1.reported_intervals(),
                    **{f: c.reported_intervals() for f, c in law.curves.items()}}
                for t, law in self.laws.items()}

    def predictions(self, N: float, D: float) -> dict[str, dict[str, Any]]:
        """Each task's :meth:`TaskLaw.predict_interval` at (N, D)."""
        return {task: law.predict_interval(N, D) for task, law in self.laws.items()}

    def predict(self, N: float, D: float) -> list[TaskPrediction]:
        """Each task's accuracy at (N, D) by each step-2 form, with 95% intervals through both steps' bootstraps."""
        N, D = check_size(N, "N", "TaskFits.predict"), check_size(D, "D", "TaskFits.predict")
        return [TaskPrediction(task, form, p[form], replace(p["task_loss"], quantity="loss"),
                               self.laws[task].reliable(form), list(p["notes"]))
                for task, p in self.predictions(N, D).items() for form in self.laws[task].curves]

    def to_frame(self, N: float, D: float) -> pd.DataFrame:
        """:meth:`predict` as a DataFrame (task, form, accuracy, lo, hi, kind, reliable, task_loss)."""
        return self.frame(check_size(N, "N", "TaskFits.to_frame"), check_size(D, "D", "TaskFits.to_frame"))

    def frame(self, N: float, D: float) -> pd.DataFrame:
        """The predictions at (N, D) as a DataFrame: task, form, value, lo, hi, kind, reliable."""
        rows = []
        for task, p in self.predictions(N, D).items():
            for form in FORMS:
                if form in p:
                    iv = p[form]
                    lo, hi = iv.interval or (math.nan, math.nan)
                    rows.append({"task": task, "form": form, "accuracy": iv.value, "lo": lo, "hi": hi,
                                 "kind": "" if iv.kind == "none" else iv.kind,
                                 "reliable": self.laws[task].reliable(form), "task_loss": p["task_loss"].value})
        return pd.DataFrame(rows)

    def to_dict(self, replicates: bool = False) -> dict[str, Any]:
        return jsonable({"source": self.source, "laws": {t: law.to_dict(replicates) for t, law in self.laws.items()},
                         "skipped": self.skipped, "notes": self.notes})

    def table(self) -> str:
        """Each task's two steps: parameters with 95% intervals (withheld where flagged), backtest, notes."""
        from rich.table import Table

        from scaling.fmt import PlainText
        from scaling.fmt import se_text
        from scaling.fmt import num

        con = PlainText(width=110)
        con.print(f"Downstream tasks ({self.source}): {len(self.laws)} fitted")
        for task, law in self.laws.items():
            t = Table(title=f"task {task}: {law.accuracy} from {law.loss_label}", title_justify="left", show_edge=False)
            for col in ("step", "parameter", "value", "SE", "95% interval"):
                t.add_column(col, justify="left" if col in ("step", "parameter") else "right")
            for name, iv in law.step1.reported_intervals().items():
                t.add_row(f"1: {law.step1.method}", name, num(iv.value, 4, "-"), se_text(iv), iv.text(4, value=False))
            for form, curve in law.curves.items():
                for name, iv in curve.reported_intervals().items():
                    t.add_row(f"2: {form}", name, num(iv.value, 4, "-"), se_text(iv), iv.text(4, value=False))
            con.print(t)
            bt = law.backtest or {}
            if bt.get("error"):
                con.print(f"  backtest: not possible ({bt['error']})")
            elif bt:
                forms = ", ".join(f"{f} {100 * bt[f'{f}_mean_abs_error']:.2f} points" for f in law.curves
                                  if f"{f}_mean_abs_error" in bt)
                con.print(f"  backtest (largest budget held out, {len(bt['held_out'])} runs): task loss off by "
                          f"{100 * bt['task_loss_mean_abs_rel_error']:.2f}%, accuracy by {forms}")
            for form in law.curves:
                for d in law.doubts(form):
                    con.print(f"  {form}: {d}")
            for form, why in law.skipped.items():
                con.print(f"  {form}: not fitted: {why}")
            con.print()
        for task, why in self.skipped.items():
            con.print(f"task {task}: not fitted: {why}")
        for note in self.notes:
            con.print(f"note: {note}")
        return con.text()


def fit_tasks(data: TaskData, *, tasks: list[str] | None = None, accuracy: str = "acc", n_bootstrap: int = 200,
              seed: int = 0, grid: str = "epoch", run_backtest: bool = True, recipe: str = "grid") -> TaskFits:
    """Fit every task of ``data`` (or ``tasks``); a task that cannot be fitted is skipped with its reason.

    Tasks measured on the run's own loss (no bits per byte) share one step-1 fit. ``recipe``: how step 1's
    Chinchilla form is searched (:data:`STEP1_RECIPES`; ``ladder`` is OLMo's model-ladder recipe).
    """
    if accuracy not in ("acc", "acc_norm"):
        raise FitError(f"unknown accuracy {accuracy!r} (use acc or acc_norm)")
    if recipe not in STEP1_RECIPES:
        raise FitError(f"unknown step-1 recipe {recipe!r} (use one of {', '.join(STEP1_RECIPES)})")
    data = data.only(tasks)
    out = TaskFits(source=data.source, notes=list(data.notes))
    shared: dict[frozenset, Law] = {}  # step 1 on the runs' own loss, by the runs it fits
    for task in data.tasks():
        rows = data.of(task)
        try:
            own = rows["bpb"].notna().any()
            runs = frozenset(rows.loc[rows["final"].astype(bool), "run_key"])
            law = fit_task(rows, task, accuracy=accuracy, n_bootstrap=n_bootstrap, seed=seed, grid=grid,
                           k=data.flops_per_param_token, run_backtest=run_backtest,
                           step1=None if own else shared.get(runs), chance=data.chance.get(task), recipe=recipe)
            if not own:
                shared[runs] = law.step1
            out.laws[task] = law
        except FitError as exc:
            out.skipped[task] = " ".join(str(exc).split())
    return out


def tasks_from_csv(path: str, data: FitData, *, tasks: list[str] | None = None) -> TaskData:
    """The task columns of the CSV at ``path`` (read as ``data``, its :class:`FitData`), checked; ``tasks`` selects.

    The rows are those ``data`` was fitted on (`scaling.fitting.core.measurements.csv_rows`): a copy of an
    earlier row is left out, as ``--drop-duplicates`` left it out of ``data`` (without it the copy
    was refused before the tasks are read)."""
    from scaling.fitting.core.measurements import csv_rows

    df, _, kept, _ = csv_rows(path, drop_duplicates=True)
    td = tasks_from_frame(df, data, source=str(path), row_label=lambda i: f"data row {kept[i] + 1}")
    if tasks and not td.tasks():
        raise FitError(f"{path}: --task given but the file has no task columns (task/<task>/acc, acc_<task>, "
                       "bpb_<task> or err_<task>)")
    return td.only(tasks)


def fit_tasks_csv(path: str, data: FitData, *, tasks: list[str] | None = None, n_bootstrap: int = 200, seed: int = 0,
                  grid: str = "epoch", recipe: str = "grid") -> TaskFits:
    """The task columns of the CSV at ``path`` (read as ``data``, its :class:`FitData`), fitted."""
    return fit_tasks(tasks_from_csv(path, data, tasks=tasks), n_bootstrap=n_bootstrap, seed=seed, grid=grid,
                     recipe=recipe)


def fit_tasks_sweep(url: str, sweep: str, *, k: float = FLOPS_PER_PARAM_TOKEN, tasks: list[str] | None = None, n_bootstrap: int = 200,
                    seed: int = 0, grid: str = "epoch", recipe: str = "grid") -> TaskFits:
    """The task metrics of ``sweep``'s completed runs, fitted (empty when the runs evaluated no task)."""
    from scaling.fitting.core.measurements import FitData

    probe = FitData(points=pd.DataFrame(), flops_per_param_token=k)
    td = tasks_from_db(url, sweep, probe)
    if tasks and not td.tasks():
        raise FitError(f"sweep {sweep!r}: --task given but its runs evaluated no task")
    return fit_tasks(td, tasks=tasks, n_bootstrap=n_bootstrap, seed=seed, grid=grid, recipe=recipe)


class Recommended(Protocol):
    """What a task prediction reads of a recommendation (:class:`scaling.fitting.recommend.Recommendation`,
    which imports this module)."""

    compute: float
    chosen: str | None
    per_law: Mapping[str, Mapping[str, Mapping[str, Any]]]
    unreliable: Mapping[str, object]


def predict_for_recommendation(tasks: TaskFits, rec: Recommended, k: float = FLOPS_PER_PARAM_TOKEN) -> tuple[dict[str, dict[str, Any]], str]:
    """Each task's predicted accuracy at the recommended run of ``rec`` (a Recommendation), and a note.

    Nothing is predicted when the recommendation follows no reliable law (no run is recommended).
    """
    if not rec.chosen or rec.chosen in rec.unreliable:
        return {}, "no downstream accuracy is predicted: no reliable law recommends a run"
    N = float(rec.per_law[rec.chosen]["N"].value)
    D = float(rec.compute) / (k * N)
    out = {task: p for task, p in tasks.predictions(N, D).items()}
    note = "; ".join(f"task {t}: not fitted ({why})" for t, why in tasks.skipped.items())
    return out, note


def backtest_clause(iv: Interval) -> str:
    """What a predicted accuracy's chain missed by on its backtest, as a clause ("; backtest off by 1.2 points,
    interval widened"), or "" without a backtest."""
    from scaling.fmt import num

    error = iv.backtest_error if isinstance(iv, ChainedAccuracy) else None
    if error is None or not math.isfinite(error):
        return ""
    return f"; backtest off by {num(100 * error, 2)} points" + (", interval widened" if iv.widened else "")


def task_lines(predictions: dict[str, dict[str, Any]]) -> list[str]:
    """Text lines of each task's predicted accuracy with its 95% interval (or why it has none)."""
    from scaling.fmt import num

    if not predictions:
        return []
    run = next(iter(predictions.values()))
    out = [f"downstream accuracy of the recommended run (N = {num(run['N'], 3)}, D = {num(run['D'], 3)}), "
           "95% intervals through both steps:"]
    for task, p in predictions.items():
        for form in FORMS:
            if form in p:
                iv = p[form]
                if any(v is not None and math.isfinite(v) and not 0.0 <= v <= 1.0 for v in (iv.value, iv.lo, iv.hi)):
                    out.append(f"  {task} [{form}]: not shown (outside [0, 1], not an accuracy)")
                    continue
                why = f" ({iv.withheld})" if iv.kind == "unreliable" else ""
                out.append(f"  {task} [{form}]: {num(iv.value, 4)} {iv.text(4, value=False)}{why}"
                           f"{backtest_clause(iv)}")  # as the bounds
        out.extend(f"  {task}: {n}" for n in p.get("notes", []))
    return out
