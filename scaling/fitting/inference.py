"""The cheapest model to train *and serve*: Chinchilla's law with inference cost (Sardana et al. 2023).

Minimises ``k N D + (k / 3) N T`` along approach 3's iso-loss curve (one root in log N), for a
given target loss or the compute-optimal loss at a budget, with bootstrap intervals. The
derivation: docs/reference/modules.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.optimize import brentq

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.errors import FitError
from scaling.fitting.core.base import MAX_EXTRAPOLATION, check_budget, jsonable, outside_measured, summarise
from scaling.fmt import Interval, bounds, num, size

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.core.base import Law
    from scaling.fitting.recommend import Fitted

#: Inference FLOPs per parameter per token as a fraction of training's k: a forward pass is 1/3.
INFERENCE_SHARE = 1.0 / 3.0
#: Bracket search: how far above N_min (in log N) the root may lie before we give up.
MAX_LOG_SPAN = 200.0
#: More tokens than this to serve is refused: 1e24 is about a million times a frontier model's yearly
#: traffic, and beyond it 2 N T overflows what a float holds.
MAX_INFERENCE_TOKENS = 1e24


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta, with the closed forms the optimisation needs."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float

    @classmethod
    def from_params(cls, p: dict[str, Any]) -> "LossLaw":
        return cls(*(float(p[k]) for k in ("E", "A", "B", "alpha", "beta")))

    def valid(self) -> bool:
        vals = (self.E, self.A, self.B, self.alpha, self.beta)
        return all(math.isfinite(v) for v in vals) and self.A > 0 and self.B > 0 and self.alpha > 0 and self.beta > 0

    def loss(self, N: ArrayLike, D: ArrayLike) -> np.ndarray:
        return self.E + self.A / np.asarray(N, float) ** self.alpha + self.B / np.asarray(D, float) ** self.beta

    def tokens_for(self, N: ArrayLike, target: float) -> np.ndarray:
        """D reaching loss ``target`` with N parameters (inf where N alone cannot get there)."""
        N = np.asarray(N, float)
        with np.errstate(all="ignore"):
            room = target - self.E - self.A / N ** self.alpha
            return np.where(room > 0, (self.B / room) ** (1.0 / self.beta), np.inf)

    def min_params(self, target: float) -> float:
        """N_min: below it no amount of data reaches ``target`` (inf where it overflows)."""
        with np.errstate(over="ignore"):
            return float(np.exp((math.log(self.A) - math.log(target - self.E)) / self.alpha))

    def compute_optimal(self, compute: float, k: float = FLOPS_PER_PARAM_TOKEN) -> tuple[float, float]:
        """Hoffmann et al. eq. 4 with C = k N D: N* = G (C/k)^(beta/(alpha+beta)), D* = C / (k N*)."""
        s = self.alpha + self.beta
        log_n = (math.log(self.alpha * self.A / (self.beta * self.B)) / s
                 + self.beta / s * math.log(compute / k))
        with np.errstate(over="ignore", under="ignore"):
            N = float(np.exp(log_n))
        return N, compute / (k * N)


def inference_flops(N: ArrayLike, inference_tokens: float, k: float = FLOPS_PER_PARAM_TOKEN) -> np.ndarray:
    """FLOPs to serve ``inference_tokens`` tokens with an N-parameter model: (k/3) N T (2 N T for k = 6)."""
    return k * INFERENCE_SHARE * np.asarray(N, float) * inference_tokens


def check_target(law: LossLaw, target: float) -> None:
    """Refuse a loss the law never reaches (at or below its irreducible loss E)."""
    if not (math.isfinite(target) and target > law.E):
        raise FitError(f"target loss {target:.6g} is unreachable: the fitted law's irreducible loss is "
                       f"E = {law.E:.6g}, and no finite model reaches E or below")


def cheapest(law: LossLaw, target: float, inference_tokens: float = 0.0, k: float = FLOPS_PER_PARAM_TOKEN) -> tuple[float, float]:
    """(N, D) reaching loss ``target`` for the least training plus inference FLOPs."""
    check_target(law, target)
    if not (inference_tokens >= 0 and math.isfinite(inference_tokens)):
        raise FitError(f"inference tokens must be a non-negative number, got {inference_tokens}")
    c_inf = k * INFERENCE_SHARE * inference_tokens
    room = target - law.E
    log_a = math.log(law.A)

    def gap(x: float) -> float:
        """log((alpha/beta) u k D) - log(k D + c_inf): decreasing in x = log N, zero at the optimum."""
        p = math.exp(log_a - law.alpha * x)  # A N^-alpha
        q = room - p  # B D^-beta
        if q <= 0:  # at (or, rounded, just past) N_min: D is infinite, the derivative's sign positive
            return 1e6
        log_d = (math.log(law.B) - math.log(q)) / law.beta
        log_kd = math.log(k) + log_d
        log_total = np.logaddexp(log_kd, math.log(c_inf)) if c_inf > 0 else log_kd
        return math.log(law.alpha / law.beta) + math.log(p) - math.log(q) + log_kd - float(log_total)

    x_min = (log_a - math.log(room)) / law.alpha  # log N_min, where D(N) diverges
    lo = x_min
    hi, step = x_min + 1.0, 1.0
    while gap(hi) > 0:
        step *= 2.0
        hi = x_min + step
        if step > MAX_LOG_SPAN:
            raise FitError("no optimum found along the iso-loss curve (the law's parameters are degenerate)")
    try:  # at extreme losses N_min rounds so that the bracket shows no sign change
        x = brentq(gap, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps, maxiter=500)
    except ValueError:
        raise FitError(f"no optimum found along the iso-loss curve of loss {target:.6g}: the law is numerically "
                       "degenerate there (a loss far from the measured ones?)") from None
    if x > math.log(np.finfo(float).max):
        raise FitError(f"the cheapest model reaching loss {target:.6g} has more than 1e308 parameters "
                       "(the law's exponents are degenerate)")
    if x < 0:
        raise FitError(f"the cheapest model reaching loss {target:.6g} has less than one parameter "
                       "(a loss far above the measured ones?)")
    N = math.exp(x)
    return N, float(law.tokens_for(N, target))


def target_at(law: LossLaw, compute: float, k: float = FLOPS_PER_PARAM_TOKEN) -> float:
    """The loss the compute-optimal run at ``compute`` reaches."""
    N, D = law.compute_optimal(compute, k)
    return float(law.loss(N, D))


def iso_loss_curve(law: LossLaw, target: float, inference_tokens: float, k: float = FLOPS_PER_PARAM_TOKEN,
                   n: int = 121, span: float = 1.0) -> dict[str, np.ndarray]:
    """Points along L(N, D) = target: N from just above N_min to ``span`` decades past the cheapest N.

    Columns N, D, tokens_per_param, training_flops, inference_flops, total_flops (for the figure).
    """
    check_target(law, target)
    n_min = law.min_params(target)
    n_opt, _ = cheapest(law, target, inference_tokens, k)
    n_co, _ = cheapest(law, target, 0.0, k)
    lo = max(n_min * 1.02, min(n_opt, n_co) / 10 ** span)
    hi = max(n_opt, n_co) * 10 ** span
    N = np.geomspace(lo, hi, n)
    D = law.tokens_for(N, target)
    train = k * N * D
    infer = inference_flops(N, inference_tokens, k)
    return {"N": N, "D": D, "tokens_per_param": D / N, "training_flops": train, "inference_flops": infer,
            "total_flops": train + infer}


def _point(law: LossLaw, target: float, T: float, k: float) -> dict[str, float]:
    N, D = cheapest(law, target, T, k)
    train = k * N * D
    total = train + float(inference_flops(N, T, k))
    return {"N": N, "D": D, "tokens_per_param": D / N, "training_flops": train, "total_flops": total,
            "loss": target}


QUANTITIES = ("N", "D", "tokens_per_param", "training_flops", "total_flops", "loss")


def honest_interval(values: np.ndarray, point: float) -> Interval:
    """:func:`summarise`, with no interval where the percentile interval excludes the estimate."""
    iv = summarise(values, point)
    if iv.interval is None:
        return iv
    lo, hi = iv.interval
    if hi - lo <= 1e-12 * max(abs(point), 1e-300):
        return Interval(iv.value, withheld="every bootstrap replicate gives the same value (e.g. a given target loss)",
                        kind="no spread")
    if not lo <= point <= hi:
        return Interval(iv.value, withheld="the estimate lies outside its bootstrap replicates' 95% interval, so no "
                        "interval is given", kind="biased")
    return iv


@dataclass
class InferenceRecommendation:
    """The cheapest (N, D) to train and serve ``inference_tokens`` at one loss, against compute-optimal."""

    inference_tokens: float
    k: float
    compute: float | None
    target_loss: float
    source: str
    optimum: dict[str, Interval] = field(default_factory=dict)
    compute_optimal: dict[str, Interval] = field(default_factory=dict)
    saving: float = math.nan
    replicates: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    #: Why approach 3 is unreliable on these data (its first doubt), or None: then no interval is
    #: given and no saving claimed, the values being what an undetermined law extrapolates.
    unreliable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self.__dict__)

    def table(self) -> str:
        from rich.table import Table

        from scaling.fmt import PlainText

        con = PlainText(width=220)
        how = (f"the loss of the compute-optimal run at C = {self.compute:.3g} FLOPs" if self.compute is not None
               else "the requested loss")
        con.print(f"Cheapest run reaching loss {self.target_loss:.4g} ({how}) and serving "
                  f"{size(self.inference_tokens)} inference tokens ({self.source}; approach 3; "
                  f"cost = {self.k:g} N D + {self.k * INFERENCE_SHARE:g} N T)")
        t = Table(show_edge=False)
        for col in ("", "N [95% interval]", "D [95% interval]", "D/N", "training FLOPs", "total FLOPs"):
            t.add_column(col, justify="left" if not col else "right", no_wrap=True, min_width=15 if not col else None)
        for label, row in (("inference-aware", self.optimum), ("compute-optimal", self.compute_optimal)):
            t.add_row(label, _cell(row["N"], size), _cell(row["D"], size), _cell(row["tokens_per_param"]),
                      _cell(row["training_flops"]), _cell(row["total_flops"]))
        con.print(t)
        if self.unreliable:
            con.print("approach 3 is unreliable on these data, so no interval is given and no saving claimed "
                      "(the values above are what an undetermined law extrapolates)")
        elif self.inference_tokens == 0:
            con.print("with no inference tokens to serve (--inference-tokens) the two runs are the same")
        elif math.isfinite(self.saving):
            con.print(f"training the smaller model longer saves {100 * self.saving:.1f}% of the total FLOPs")
        for note in self.notes:
            con.print(f"note: {note}")
        return con.text()


def _cell(iv: Interval, write: Callable[..., str] = num) -> str:
    """The value and its bounds, each by ``write`` (:func:`size` for a count of parameters or tokens)."""
    v = write(iv.value, 3)
    return v if iv.interval is None else f"{v} {bounds(iv.lo, iv.hi, fmt=write)}"


def check_request(inference_tokens: float, *, compute: float | None = None, target_loss: float | None = None) -> None:
    """Refuse (:class:`FitError`) what no fit can answer, before any fit is made: both ``compute`` and
    ``target_loss``, a budget that is not a positive number, inference tokens out of range, a target
    loss that is not finite."""
    if compute is not None and target_loss is not None:
        raise FitError("give either --compute or --target-loss, not both")
    if compute is not None and not (compute > 0 and math.isfinite(compute)):
        raise FitError(f"--compute must be a positive number of FLOPs, got {compute}")
    if not (inference_tokens >= 0 and math.isfinite(inference_tokens)):
        raise FitError(f"--inference-tokens must be a non-negative number of tokens, got {inference_tokens}")
    if inference_tokens > MAX_INFERENCE_TOKENS:
        raise FitError(f"--inference-tokens {inference_tokens:.3g} is more than {MAX_INFERENCE_TOKENS:.0e} tokens")
    if target_loss is not None and not math.isfinite(target_loss):
        raise FitError(f"--target-loss must be a finite number, got {target_loss}")


def recommend_for_inference(law: Law, inference_tokens: float, *, compute: float | None = None,
                            target_loss: float | None = None, source: str = "fit") -> InferenceRecommendation:
    """The inference-aware optimum from a fitted approach-3 law (``params_``, ``k_``, ``replicates_``).

    Give exactly one of ``compute`` (target: the compute-optimal loss there) and ``target_loss``.
    """
    if compute is None and target_loss is None:
        raise FitError("give either a compute budget or a target loss")
    check_request(inference_tokens, compute=compute, target_loss=target_loss)
    measured = law.data_.points["C"] if law.data_ is not None else []
    if compute is not None:
        check_budget(compute, measured)
    k = float(law.k_)
    point = LossLaw.from_params(law.params_)
    if not point.valid():
        bad = ", ".join(f"{k} = {v:.3g}" for k, v in vars(point).items() if not (math.isfinite(v) and (k == "E" or v > 0)))
        raise FitError(f"the approach-3 fit has no usable parameters ({bad}; A, B, alpha, beta must be positive): "
                       "the data do not determine it")
    target = target_at(point, compute, k) if compute is not None else float(target_loss)
    if compute is not None and not math.isfinite(target):
        raise FitError(f"the approach-3 fit gives no finite compute-optimal loss at C = {compute:.3g} FLOPs")
    check_target(point, target)
    if target_loss is not None:
        check_target_in_range(point, target, measured, k)
    best = _point(point, target, inference_tokens, k)
    co = _point(point, target, 0.0, k)
    if target_loss is not None:  # the compute-optimal run reaching it must lie near the measured budgets
        check_budget(co["training_flops"], measured,
                     what=f"--target-loss {target:.6g}: its compute-optimal run at")
    co["total_flops"] = co["training_flops"] + float(inference_flops(co["N"], inference_tokens, k))
    _check_training_in_range(best["training_flops"], measured, inference_tokens)
    rec = InferenceRecommendation(inference_tokens=float(inference_tokens), k=k, compute=compute,
                                  target_loss=target, source=source)
    reps = _replicate_laws(law)
    rows_best: list[dict[str, float]] = []
    rows_co: list[dict[str, float]] = []
    unreachable = 0
    for r in reps:
        if not r.valid():
            continue
        t = target_at(r, compute, k) if compute is not None else target
        if not t > r.E:
            unreachable += 1
            continue
        try:
            b, c = _point(r, t, inference_tokens, k), _point(r, t, 0.0, k)
        except (FitError, ValueError, OverflowError, ZeroDivisionError):
            continue
        c["total_flops"] = c["training_flops"] + float(inference_flops(c["N"], inference_tokens, k))
        rows_best.append(b)
        rows_co.append(c)
    rec.replicates = {"n": len(reps), "used": len(rows_best), "unreachable": unreachable}
    doubts = law.doubts()
    rec.unreliable = doubts[0] if doubts else None
    enough = reps and len(rows_best) >= 0.5 * len(reps) and not rec.unreliable
    for out, pt, rows in ((rec.optimum, best, rows_best), (rec.compute_optimal, co, rows_co)):
        for q in QUANTITIES:
            vals = np.array([r[q] for r in rows]) if enough else np.array([])
            out[q] = honest_interval(vals, pt[q])
    rec.saving = 1.0 - best["total_flops"] / co["total_flops"] if co["total_flops"] > 0 else math.nan
    if not reps:
        rec.notes.append("the fit has no bootstrap replicates, so no intervals are given")
    elif rec.unreliable:
        pass  # said by the doubts below
    elif not enough:
        rec.notes.append(f"only {len(rows_best)} of {len(reps)} bootstrap replicates reach the target loss, "
                         "so no intervals are given")
    elif unreachable:
        rec.notes.append(f"{unreachable} of {len(reps)} bootstrap replicates cannot reach the target loss "
                         "(their E lies above it) and are left out of the intervals")
    rec.notes.extend(doubts)
    return rec


def check_target_in_range(law: LossLaw, target: float, measured: ArrayLike, k: float = FLOPS_PER_PARAM_TOKEN) -> None:
    """Refuse a target loss whose compute-optimal run lies beyond :data:`MAX_EXTRAPOLATION` of the measured budgets.

    Checked on the losses the law gives at the two ends of the allowed budgets, before any optimum is
    sought: far outside them N and D under- or overflow, and a budget of "0 FLOPs" would be quoted.
    """
    C = np.asarray(measured, float)
    C = C[np.isfinite(C) & (C > 0)]
    if not len(C):
        return
    lo_c, hi_c = float(C.min()) / MAX_EXTRAPOLATION, float(C.max()) * MAX_EXTRAPOLATION
    with np.errstate(all="ignore"):
        hi_loss, lo_loss = target_at(law, lo_c, k), target_at(law, hi_c, k)
    if not (math.isfinite(hi_loss) and math.isfinite(lo_loss)):
        return  # the budget check on the optimum itself still applies
    if not lo_loss <= target <= hi_loss:
        raise FitError(f"--target-loss {target:.6g}: its compute-optimal run lies more than {MAX_EXTRAPOLATION:.0e}x "
                       f"outside the measured budgets ({C.min():.3g} to {C.max():.3g} FLOPs): the fitted laws say "
                       f"nothing that far away (use a target loss from {lo_loss:.4g} to {hi_loss:.4g})")


def _check_training_in_range(training_flops: float, measured: ArrayLike, inference_tokens: float) -> None:
    """Refuse an inference-aware run whose own training lies beyond :data:`MAX_EXTRAPOLATION` of the data.

    Serving many tokens moves the optimum to a small model trained far longer: its training budget,
    not only the compute-optimal run's, must lie where the fitted law was measured.
    """
    span = outside_measured(training_flops, measured)
    if span is not None:
        raise FitError(f"--inference-tokens {inference_tokens:.3g}: the cheapest run to train and serve them "
                       f"trains for {training_flops:.3g} FLOPs, more than {MAX_EXTRAPOLATION:.0e}x outside the measured budgets "
                       f"({span[0]:.3g} to {span[1]:.3g} FLOPs): the fitted laws say nothing that far away")


def _replicate_laws(law: Law) -> list[LossLaw]:
    names = ("E", "A", "B", "alpha", "beta")
    reps = [law.replicate_values(name) for name in names]
    if any(r is None for r in reps):
        return []
    return [LossLaw(*(float(r[i]) for r in reps)) for i in range(len(reps[0]))]


def recommend_inference(fit: Fitted, inference_tokens: float, *, compute: float | None = None,
                        target_loss: float | None = None) -> InferenceRecommendation:
    """The inference-aware optimum from a sweep's or a CSV's fit (an :class:`~scaling.fitting.analysis.Analysis`
    holding approach 3): nothing is fitted here.

    Without ``compute`` or ``target_loss`` the budget is ten times the largest measured run's C.
    """
    check_request(inference_tokens, compute=compute, target_loss=target_loss)
    law = fit.laws.get("approach3")
    if law is None and "approach3" in fit.skipped:
        raise FitError("the inference-aware optimum needs approach 3, which could not be fitted: "
                       + fit.skipped["approach3"])
    if law is None:
        raise FitError("the inference-aware optimum needs approach 3, and this fit holds none "
                       "(fit with law 'all' or 'approach3')")
    if compute is None and target_loss is None:
        compute = 10.0 * float(law.data_.points["C"].max())
    return recommend_for_inference(law, inference_tokens, compute=compute, target_loss=target_loss,
                                   source=fit.source)
