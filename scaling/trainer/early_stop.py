"""When a running run may stop: its final loss predicted from the sweep's finished curves.

A run with ``early_stop`` (an adaptive plan's rule, :class:`~scaling.trainer.sections.EarlyStopSpec`)
decides at its own evaluations, from ``after`` of its steps on and at most once per ``every`` of
them. Its references are the runs of the same sweep, schedule and peak rate trained to their last
step. At fraction f of its steps, with eval loss y, each reference gives the drop still to come,
d = loss at f (its curve interpolated at f) - final; ln d is regressed on ln T (the run's steps)
and ln N (its parameters) over the references, and the run's predicted final loss is y minus the
regression's d at its own T and N, with the 95% interval of the regression's prediction for a new
run (Student t with n - 3 degrees of freedom, its leverage included: a run longer or larger than
every reference gets a wide interval) widened by the regression's held-out error beyond what it claims
(:func:`model_error`: the drop is no exact power law in T and N, and a stopping run sits at the long
end of its references; without it the intervals held the truth in 86% of simulated runs, not 95%).
A run more than :data:`MAX_BEYOND` times as long as every reference is not predicted: that far the
held-out errors say nothing. The run stops once that interval's half-width is at most ``tolerance``.

Why not a curve law fitted to the run's own prefix: one schedule cannot separate the annealing
term from the power law, and on a cosine run's first half the annealing law misses the final loss
by far more than its bootstrap interval says (docs/experiments/2026-12-07-early-stopping.md). The
references measure the drop instead of assuming its form. Without :data:`MIN_REFERENCES` of them (a
sweep's first runs) a run trains to its end.

The decision is the run's own, taken where it evaluates: the run holds its curve, reads the
references once, and needs no signal from outside while it trains. The simulated trainer and the
training loop both decide through :class:`Watch`; on several ranks the loop's rank 0 reads the
references and decides, and every rank learns the decision (they all stop at one step).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling import fmt, vocab
from scaling.batching import steps_for

if TYPE_CHECKING:
    from scaling.trainer.spec import RunSpec

#: Reference runs a prediction needs at least (three coefficients are fitted to them).
MIN_REFERENCES = 6
#: How many times the longest reference's steps a run may have and still be predicted: beyond, the
#: regression's drop is an extrapolation that its held-out errors do not measure, and the run trains on.
MAX_BEYOND = 2.0
#: A drop whose interval reaches beyond exp of this (nats) says nothing (and overflows a float).
MAX_LOG_DROP = 50.0


@dataclass(frozen=True)
class Reference:
    """A finished run's eval curve: its steps, the fractions of them evaluated at and the losses there."""

    steps: int
    size: float
    fractions: np.ndarray
    losses: np.ndarray

    @property
    def final(self) -> float:
        return float(self.losses[-1])


@dataclass(frozen=True)
class FinalPrediction:
    """The loss predicted at a run's last step, with its 95% interval, made at eval ``step``."""

    step: int
    loss: float
    lo: float
    hi: float
    references: int

    @property
    def half_width(self) -> float:
        return 0.5 * (self.hi - self.lo)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def predict_final(references: list[Reference], fraction: float, loss: float, step: int,
                  total: int, size: float) -> Optional[FinalPrediction]:
    """The final loss of a run of ``total`` steps and ``size`` parameters whose eval loss at ``fraction``
    of its steps is ``loss``; None with too few references that reach back to ``fraction``."""
    from scipy.stats import t as student

    rows = []
    for r in references:
        if r.fractions[0] <= fraction < 1.0 <= r.fractions[-1]:
            drop = float(np.interp(fraction, r.fractions, r.losses)) - r.final
            if drop > 0 and np.isfinite(drop):
                rows.append((math.log(r.steps), math.log(r.size), math.log(drop)))
    n, p = len(rows), 3
    if n < MIN_REFERENCES or not (loss > 0) or math.log(total) > max(r[0] for r in rows) + math.log(MAX_BEYOND):
        return None
    data = np.array(rows)
    X = np.column_stack([np.ones(n), data[:, :2]])
    x0 = np.array([1.0, math.log(total), math.log(size)])
    try:
        coef, var = _prediction(X, data[:, 2], x0)
    except np.linalg.LinAlgError:  # the references do not vary in length or size: nothing to regress on
        return None
    half = float(student.ppf(0.975, n - p)) * math.sqrt(var + model_error(X, data[:, 2]) ** 2)
    centre = float(x0 @ coef)
    if not math.isfinite(half) or centre + half > MAX_LOG_DROP:  # the interval reaches past any loss
        return None
    lo, mid, hi = loss - math.exp(centre + half), loss - math.exp(centre), loss - math.exp(centre - half)
    if not (lo > 0) or not all(math.isfinite(v) for v in (lo, mid, hi)):  # no possible loss is predicted
        return None
    return FinalPrediction(int(step), mid, lo, hi, n)


def _prediction(X: np.ndarray, y: np.ndarray, x0: np.ndarray) -> tuple[np.ndarray, float]:
    """The least-squares coefficients of ``y`` on ``X`` and the variance of a new observation at ``x0``
    (the residual variance times 1 + its leverage)."""
    n, p = X.shape
    coef, *_ = np.linalg.lstsq(X, y, rcond=None)
    resid = y - X @ coef
    s2 = float(resid @ resid) / max(n - p, 1)
    return coef, s2 * (1.0 + float(x0 @ np.linalg.solve(X.T @ X, x0)))


def model_error(X: np.ndarray, y: np.ndarray) -> float:
    """The SD (in ln of the drop) of the held-out error beyond what the regression's own interval claims: each
    reference predicted from the others, and from the references shorter than it alone (the extrapolation a
    stopping run asks of them); for each of the two, the extra variance s2 that makes the held-out errors'
    mean of err^2 / (claimed + s2) one (Paule and Mandel's estimator: a prediction whose claimed variance is
    large weighs little, rather than cancelling the others), the larger of the two (0 where the claims hold).
    The drop follows no exact power law in T and N, so the residuals of the references fitted understate the
    error of a prediction beyond them."""
    n, p = X.shape
    loo: list[tuple[float, float]] = []
    ahead: list[tuple[float, float]] = []
    for i in range(n):
        for keep, out in ((np.arange(n) != i, loo), (X[:, 1] < X[i, 1], ahead)):
            if int(keep.sum()) - p < 1:
                continue
            try:
                coef, var = _prediction(X[keep], y[keep], X[i])
            except np.linalg.LinAlgError:
                continue
            if var > 0 and math.isfinite(var):
                out.append((float(y[i] - X[i] @ coef) ** 2, var))
    return math.sqrt(max([0.0] + [extra_variance(e) for e in (loo, ahead) if len(e) >= 2]))


def extra_variance(errors: list[tuple[float, float]]) -> float:
    """The s2 >= 0 at which the mean of err^2 / (var + s2) over ``errors`` ((err^2, var) pairs) is one."""
    from scipy.optimize import brentq

    sq, var = np.array(errors).T

    def excess(s2: float) -> float:
        return float(np.mean(sq / (var + s2))) - 1.0

    if excess(0.0) <= 0:
        return 0.0
    high = float(sq.max()) * len(sq)  # there every term is at most 1 / len: the mean is below one
    return float(brentq(excess, 0.0, high))


class Watch:
    """The rule of a run with ``early_stop`` as it trains: which of its evaluations are checks, and
    the prediction that stops it at one. The simulated trainer and the training loop both decide
    through it (:func:`stopping_point`, ``Trainer``)."""

    def __init__(self, refs: list[Reference], total: int, size: float, *, tolerance: float, after: float,
                 every: float) -> None:
        self.refs, self.total, self.size = refs, int(total), float(size)
        self.tolerance, self.every = tolerance, every
        self.next_check = after * total

    @classmethod
    def of(cls, spec: "RunSpec", refs: list[Reference]) -> "Watch":
        rule = spec.early_stop
        assert rule is not None
        return cls(refs, spec.steps, float(spec.n_params), tolerance=rule.tolerance, after=rule.after,
                   every=rule.every)

    def due(self, step: int) -> bool:
        """Whether the evaluation at 1-based ``step`` is a check (the next one then waits ``every``);
        the last step never is (nothing is left to save). Evaluations must come in step order."""
        if step >= self.total or step < self.next_check:
            return False
        self.next_check = step + self.every * self.total
        return True

    def predict(self, step: int, loss: float) -> Optional[FinalPrediction]:
        """The prediction that stops the run at a check with eval ``loss``; None: it trains on."""
        pred = predict_final(self.refs, step / self.total, float(loss), int(step), self.total, self.size)
        return pred if pred is not None and pred.half_width <= self.tolerance else None


def stopping_point(references: list[Reference], steps: np.ndarray, losses: np.ndarray, total: int, size: float, *,
                   tolerance: float, after: float, every: float) -> Optional[FinalPrediction]:
    """The first evaluation at which the run may stop, with its prediction; None: it trains to the end.

    ``steps``: the run's 1-based eval steps, ``losses`` the eval losses there, ``total`` its steps,
    ``size`` its parameters N (:class:`Watch`).
    """
    watch = Watch(references, total, size, tolerance=tolerance, after=after, every=every)
    for s, y in zip(np.asarray(steps, np.int64), np.asarray(losses, float)):
        if watch.due(int(s)):
            pred = watch.predict(int(s), float(y))
            if pred is not None:
                return pred
    return None


def stop_record(stop: FinalPrediction, spec: "RunSpec", attempt: Optional[int]) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a run that stopped records: its result's ``stopped_early`` entry, and its ``stopped_early``
    event's detail (the store sets the run's ``stopped_step`` from that event)."""
    assert spec.early_stop is not None
    entry = {**stop.to_dict(), "tolerance": spec.early_stop.tolerance}
    message = (f"stopped at step {stop.step} of {spec.steps}: final loss predicted {fmt.loss(stop.loss)} "
               f"{fmt.bounds(stop.lo, stop.hi, 4)}")
    return entry, {**entry, "attempt": attempt, "message": message}


def references(url: str, sweep: Optional[str], spec: "RunSpec") -> list[Reference]:
    """The finished curves of ``sweep`` that predict ``spec``'s final loss: runs completed to their last
    step (none stopped early) under the same schedule and peak learning rate."""
    if sweep is None:
        return []
    from scaling.db import connect
    from scaling.errors import NotFoundError

    schedule = spec.schedule.model_dump(mode="json")
    with connect(url) as res:
        try:
            runs = res.runs(sweep=sweep, status=vocab.COMPLETED)
        except NotFoundError:
            return []
        keep = [r for _, r in runs.iterrows()
                if r["stopped_step"] is None or r["stopped_step"] != r["stopped_step"]  # None, or NaN in a float column
                if isinstance(r["spec"], dict) and r["spec"].get("schedule") == schedule
                and (r["spec"].get("optimizer") or {}).get("lr") == spec.optimizer.lr]
        if not keep:
            return []
        metrics = res.metrics(run_keys=[r["run_key"] for r in keep], names=[vocab.EVAL_LOSS], sweep=sweep)
    out = []
    for r in keep:
        rows = metrics[metrics["run_key"] == r["run_key"]].sort_values("step")
        total = _steps(r["spec"])
        if len(rows) < 3 or total <= 0 or int(rows["step"].iloc[-1]) != total:
            continue
        out.append(Reference(total, float(r["N"]), rows["step"].to_numpy(float) / total, rows["value"].to_numpy(float)))
    return out


def _steps(spec: dict[str, Any]) -> int:
    return steps_for(int(spec.get("tokens") or 0), int(spec.get("batch_tokens") or 0))
