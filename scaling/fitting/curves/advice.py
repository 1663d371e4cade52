"""Schedule advice for one run: the predicted final loss of cosine against WSD schedules, with intervals.

For a run of ``steps`` steps (its warmup and peak rate given), the fitted curve law predicts the
final loss of a cosine decay to ``floor`` x peak and of warmup-stable-decay schedules that decay
over the last 10%, 20% or 30% of the steps, linearly or exponentially (Luo et al.'s two WSD
variants). Each prediction carries the bootstrap's 95% interval with the law's model error added.
No schedule is named best by a law doubted for more than its parameters (its design, its
plausibility); otherwise the best is the lowest prediction, and the schedules whose bootstrap paired
difference to it does not exclude zero are listed as not told apart from it.

:func:`run_schedule_advice` answers for a sweep's recommended run, from the curve law of its size
(:mod:`scaling.fitting.curves.sweep`), at the recipe that law was fitted with; it refuses, saying why,
where that would extrapolate (another size, a run far longer than the curves) or the law is flagged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling.batching import steps_for
from scaling.errors import FitError
from scaling.fitting.core.intervals import add_model_error, summarise
from scaling.fitting.curves.fit import CurveLaw, law_at
from scaling.fitting.curves.laws import form
from scaling.fitting.curves.sweep import SizeCurves
from scaling.fmt import Interval, num, size
from scaling.lr_schedule import lr_steps, schedule_of

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.curves.sweep import SweepCurves

__all__ = ["DECAY_FRACTIONS", "MAX_LENGTH_FACTOR", "SIZE_TOLERANCE", "ScheduleAdvice", "advice_lines",
           "run_schedule_advice", "schedule_advice", "schedules_for"]

#: The decay fractions of the WSD schedules compared.
DECAY_FRACTIONS = (0.1, 0.2, 0.3)


def schedules_for(steps: int, peak: float, warmup: int, floor: float = 0.1) -> dict[str, np.ndarray]:
    """Every compared schedule's rate at each step 0 .. ``steps`` - 1, as the trainer would step them
    (:func:`scaling.lr_schedule.lr_steps`; ``warmup`` steps of linear warmup to ``peak``, decays to ``floor`` x peak)."""
    if not (steps > warmup + 1 and warmup >= 0 and peak > 0 and 0 < floor < 1):
        raise FitError("schedule advice needs steps beyond the warmup, a positive peak and a floor between 0 and 1")
    common = {"warmup_steps": warmup, "min_lr_ratio": floor}
    out = {"cosine": lr_steps(steps, peak, schedule_of({"kind": "cosine", **common}))}
    for frac in DECAY_FRACTIONS:
        for shape in ("linear", "exponential"):
            wsd = schedule_of({"kind": "wsd", "decay_fraction": frac, "decay_shape": shape, **common})
            out[f"wsd {int(round(100 * frac))}% {shape}"] = lr_steps(steps, peak, wsd)
    return out


@dataclass
class ScheduleAdvice:
    """The predicted final loss of each schedule, and the best one where the law and its bootstrap say so."""

    steps: int
    losses: dict[str, Interval]
    best: Optional[str]
    tied: list[str] = field(default_factory=list)
    why_not: Optional[str] = None

    def table(self) -> str:
        lines = [f"Final loss after {self.steps:,} steps by schedule (95% interval):"]
        for name, iv in sorted(self.losses.items(), key=lambda kv: kv[1].value):
            mark = "  <- best" if name == self.best else ""
            lines.append(f"  {name:<22} {iv.text(4)}{mark}")
        if self.best is None:
            lines.append(f"no best schedule: {self.why_not}")
        elif self.tied:
            lines.append(f"not told apart from the best: {', '.join(self.tied)}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "best": self.best, "tied": self.tied, "why_not": self.why_not,
                "losses": {k: {"value": v.value, "lo": v.lo, "hi": v.hi} for k, v in self.losses.items()}}


def schedule_advice(law: CurveLaw, steps: int, peak: float, warmup: int, floor: float = 0.1) -> ScheduleAdvice:
    """Cosine against WSD (10-30% decay, linear and exponential) for a run of ``steps`` steps."""
    schedules = schedules_for(steps, peak, warmup, floor)
    f = form(law.form_ or "")
    reps = law.replicates_.get(f.name)
    values, draws = {}, {}
    for name, lr in schedules.items():
        values[name] = float(law.loss_at(lr, [steps - 1])[0])
        if reps is not None and reps.shape[0] >= 2:
            draws[name] = law_at(f, reps, lr, np.array([steps - 1]))[:, 0]
    losses = {n: _with_model_error(summarise(draws.get(n, []), v), law.model_error())
              for n, v in values.items()}
    order = sorted(values, key=lambda n: values[n])
    verdicts = [d for d in law.doubts() if not d.kind.about_parameters]
    if verdicts:  # doubts about parameters alone leave the answer to the bootstrap's paired differences
        return ScheduleAdvice(steps, losses, None, why_not="the curve law is not trusted: " + "; ".join(verdicts))
    if not draws:
        return ScheduleAdvice(steps, losses, None, why_not="no bootstrap: the schedules cannot be told apart")
    best = order[0]
    tied = []
    for other in order[1:]:
        diff = summarise(draws[other] - draws[best], values[other] - values[best])
        if diff.lo is None or diff.lo <= 0:
            tied.append(other)
    return ScheduleAdvice(steps, losses, best, tied)


def _with_model_error(iv: Interval, sigma_log: float) -> Interval:
    """A predicted loss's bootstrap summary with the law's model error added to its interval, as
    :meth:`CurveLaw.predict` adds it (the paired differences between schedules share it and stay as they are)."""
    if not (sigma_log > 0 and iv.interval is not None):
        return iv
    lo, hi = add_model_error(iv.value, iv.lo, iv.hi, sigma_log)
    return replace(iv, lo=float(lo), hi=float(hi), se=None, se_log=None)  # the bootstrap's SE no longer spans it


#: A size's curve law speaks for a run within this share of its N (a curve law holds for one model size).
SIZE_TOLERANCE = 0.1
#: How many times its longest fitted curve a run may be (Luo et al. test predictions three times longer).
MAX_LENGTH_FACTOR = 3.0


def run_schedule_advice(curves: Optional[SweepCurves], N: float, D: float) -> dict[str, Any]:
    """The schedule advice for a recommended run of ``N`` parameters and ``D`` tokens from a sweep's curve laws
    (a :class:`~scaling.fitting.curves.sweep.SweepCurves`, or None): the predicted final loss of each schedule
    with its interval and the best, at the recipe the size's curves were fitted with; or ``why_not`` alone.

    Where the sweep has a law across sizes (its trunks, :class:`~scaling.fitting.curves.sweep.JointCurves`), an N
    that no fitted size is near is answered from it, at the largest trunk's recipe; otherwise
    nothing is said from a law of another size (the laws are per size), from a run longer than
    :data:`MAX_LENGTH_FACTOR` times the size's longest curve, or from a law doubted for more than its parameters.
    """
    joint = getattr(curves, "joint", None)
    if curves is None or not (getattr(curves, "sizes", None) or joint):
        return {"why_not": getattr(curves, "why", "") or "no curve law: the sweep's curves were not fitted"}
    size = curves.nearest(N)
    fitted = ", ".join(num(n, 3) for n in curves.sizes)
    far = size is None or abs(math.log(size.N / N)) > math.log1p(SIZE_TOLERANCE)
    if far and joint is not None:  # the law across sizes speaks for any N
        size = SizeCurves(N, joint.law.at_size(N), joint.peak, joint.batch, joint.warmup, joint.longest)
    elif far:
        return {"why_not": f"the curve laws are per model size (fitted at N = {fitted}); the recommended "
                           f"N = {num(N, 3)} is outside them, and a size's law is not extrapolated to another"}
    steps = steps_for(math.ceil(D), round(size.batch)) if size.batch > 0 else 0
    where = {"N": size.N, "steps": steps, "peak": size.peak, "batch": size.batch, "across_sizes": far}
    if steps > MAX_LENGTH_FACTOR * size.longest:
        return where | {"why_not": f"the run's {steps:,} steps are more than {MAX_LENGTH_FACTOR:g}x the longest "
                                   f"curve fitted at N = {num(size.N, 3)} ({size.longest:,} steps)"}
    verdicts = [str(d) for d in size.law.doubts() if not d.kind.about_parameters]
    if verdicts:
        return where | {"why_not": "the curve law is not trusted: " + "; ".join(verdicts)}
    try:
        advice = schedule_advice(size.law, steps, size.peak, int(round(size.warmup * steps)))
    except FitError as exc:
        return where | {"why_not": " ".join(str(exc).split())}
    return where | advice.to_dict()


def advice_lines(schedule: Optional[dict[str, Any]], indent: str = "  ") -> list[str]:
    """The schedule advice as text lines: the best schedule with its loss, cosine beside it, or why none."""
    if not schedule:
        return []
    if schedule.get("why_not") and not schedule.get("best"):
        return [f"{indent}schedule: no advice: {schedule['why_not']}"]
    losses = {k: Interval.of(v) for k, v in schedule["losses"].items()}
    best = schedule["best"]
    which = "curve law across sizes" if schedule.get("across_sizes") else "curve law"
    at = (f"{which} at N = {size(schedule['N'])}, {schedule['steps']:,} steps at peak lr "
          f"{num(schedule['peak'], 3)}")
    lines = [f"{indent}schedule: {best} ({at}): final loss {losses[best].text(4)}"]
    others = [n for n in ("cosine", _best_of(losses, "linear"), _best_of(losses, "exponential")) if n and n != best]
    if others:
        lines.append(f"{indent}  against " + "; ".join(f"{n} {losses[n].text(4)}" for n in others))
    if schedule.get("tied"):
        lines.append(f"{indent}  not told apart from it: {', '.join(schedule['tied'])}")
    return lines


def _best_of(losses: dict[str, Interval], decay: str) -> Optional[str]:
    """The WSD schedule of ``decay`` (linear or exponential) with the lowest predicted loss."""
    names = [n for n in losses if n.endswith(decay)]
    return min(names, key=lambda n: losses[n].value) if names else None
