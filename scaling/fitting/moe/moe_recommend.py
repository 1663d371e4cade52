"""The compute-optimal mixture of experts at a budget, from a fitted law of sparsity, against the dense optimum.

At budget C = k N_active D the law's closed form gives N_active* and D* for each cut of the
experts x (granularity G or sparsity S); the recommendation takes the x with the lowest loss
*within the measured range* (a power law in x says nothing beyond it, and both forms keep
improving with finer or sparser experts, so the optimum often sits at the range's edge: it is
then said). Each bootstrap replicate chooses its own x, N* and D*, which give the intervals; the
dense optimum (G = 1 or S = 0) of the same law and replicates gives the comparison. A law
flagged unreliable recommends nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scaling.errors import FitError
from scaling.fitting.core.base import check_budget, jsonable
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.intervals import summarise
from scaling.fitting.moe.moe_laws import MoELaw
from scaling.fmt import Interval, PlainText, num, size


@dataclass
class MoERecommendation:
    """N_active*, the experts' cut, D* and loss at one budget (each an :class:`~scaling.fmt.Interval`),
    and the dense optimum of the same law with the loss the experts save."""

    law: str
    compute: float
    variable: str
    choice: Interval
    N: Interval
    D: Interval
    loss: Interval
    dense: dict[str, Interval]
    dense_label: str
    gain: Interval
    N_total: Interval | None = None
    notes: list[str] = field(default_factory=list)
    conventions: Conventions = field(default_factory=Conventions)

    def to_dict(self) -> dict[str, Any]:
        return jsonable({
            "law": self.law, "compute": self.compute, "variable": self.variable, "choice": self.choice,
            "N_active": self.N, "D": self.D, "loss": self.loss,
            **({"N_total": self.N_total} if self.N_total is not None else {}),
            "dense": {"label": self.dense_label, **self.dense}, "loss_saved": self.gain,
            "notes": self.notes, "conventions": self.conventions.to_json(),
        })

    #: What each cut of the experts is called in the one-line answer.
    VARIABLE_TEXT = {"S": "sparsity S", "G": "granularity G"}

    def headline(self) -> str:
        """The answer in one line: N_active*, the experts' cut and D* with their 95% intervals, and the loss
        saved against the dense optimum of the same law."""
        def text(iv: Interval, fmt: Any = num) -> str:
            return iv.text(3, fmt)

        return (f"N_active* = {text(self.N, size)}, {self.VARIABLE_TEXT.get(self.variable, self.variable)} = "
                f"{text(self.choice)}, D* = {text(self.D, size)} tokens, loss {self.loss.text(4)} "
                f"(saves {text(self.gain)} against {self.dense_label})")

    def lines(self) -> list[str]:
        """What the table prints, one line each."""
        def text(iv: Interval, fmt: Any = num) -> str:
            return iv.text(3, fmt)

        out = [f"{self.law} law at C = {self.compute:.3g} FLOPs (C = {self.conventions.c_formula or '6 N_active D'}):",
               f"  {self.variable} = {text(self.choice)}",
               f"  N_active* = {text(self.N, size)}"]
        if self.N_total is not None:
            out.append(f"  N_total* = {text(self.N_total, size)}")
        out += [f"  D* = {text(self.D, size)}", f"  loss = {self.loss.text(4)}",
                f"  compared with {self.dense_label}:",
                f"    N* = {text(self.dense['N'], size)}, D* = {text(self.dense['D'], size)}, "
                f"loss = {self.dense['loss'].text(4)}",
                f"  loss saved against it: {text(self.gain)}"]
        out += [f"  note: {n}" for n in self.notes]
        return out


def recommend_moe(law: MoELaw, compute: float) -> MoERecommendation:
    """The optimum of ``law`` at ``compute`` FLOPs; FitError (one line) when the law is flagged or the
    budget lies too far from the measured ones."""
    law.require_fitted()
    if not law.reliable():
        raise FitError(f"no recommendation from the {law.law} law: {law.doubts()[0]}")
    if not (compute > 0 and math.isfinite(compute)):
        raise FitError(f"--compute must be a positive number of FLOPs, not {compute!r}")
    check_budget(compute, list(law.c_range_))
    xs = law.x_grid()
    C = np.asarray(float(compute))
    N, D, L = law.optimal_at(law.params_, C, xs)
    best = int(np.nanargmin(L))
    x_star = float(xs[best])
    reps = law.replicate_params()
    log_x = law.variable == "G"
    notes: list[str] = []
    if reps:
        Nr, Dr, Lr = law.optimal_at({k: np.asarray(v)[:, None] for k, v in reps.items()}, C, xs)  # (replicates, xs)
        ok = np.isfinite(Lr).any(axis=1)
        pick = np.argmin(np.where(np.isfinite(Lr), Lr, np.inf), axis=1)
        rows = np.arange(len(pick))
        x_r = np.where(ok, xs[pick], np.nan)
        N_r, D_r, L_r = (np.where(ok, a[rows, pick], np.nan) for a in (Nr, Dr, Lr))
        Nd_r, Dd_r, Ld_r = (np.asarray(v, float).ravel() for v in law.optimal_at(reps, C, np.asarray(law.dense)))
    else:
        x_r = N_r = D_r = L_r = Nd_r = Dd_r = Ld_r = np.array([])
    Nd, Dd, Ld = (float(np.asarray(v)) for v in law.optimal_at(law.params_, C, np.asarray(law.dense)))
    lo, hi = law.x_range_
    if best == len(xs) - 1 and len(xs) > 1:
        notes.append(f"the law's loss keeps falling up to the largest measured {law.variable_text} ({law.variable} = "
                     f"{hi:.4g}): chosen at the edge of the measured range; it says nothing beyond it")
    elif best == 0 and len(xs) > 1:
        notes.append(f"the law's loss is lowest at the smallest measured {law.variable_text} ({law.variable} = {lo:.4g})")
    if not lo <= law.dense <= hi:
        notes.append(f"the sweep has no run at {law.dense_text}: the dense comparison extrapolates the law to it")
    if compute > law.c_range_[1] * (1 + 1e-9):
        notes.append(f"{compute / law.c_range_[1]:.3g}x beyond the largest measured budget: the intervals are the "
                     "parameters' uncertainty only, not the law's error at that distance")
    gain_r = Ld_r - L_r if reps else np.array([])
    total = None
    if law.variable == "S":
        with np.errstate(all="ignore"):
            total = summarise(N_r / (1.0 - x_r) if reps else [], float(N[best]) / (1.0 - x_star), log=True)
    return MoERecommendation(
        law=law.law, compute=float(compute), variable=law.variable,
        choice=summarise(x_r, x_star, log=log_x),
        N=summarise(N_r, float(N[best]), log=True), D=summarise(D_r, float(D[best]), log=True),
        loss=summarise(L_r, float(L[best]), log=True),
        dense={"N": summarise(Nd_r, Nd, log=True), "D": summarise(Dd_r, Dd, log=True),
               "loss": summarise(Ld_r, Ld, log=True)},
        dense_label=law.dense_text, gain=summarise(gain_r, Ld - float(L[best])), N_total=total,
        notes=notes, conventions=law.conventions_)


def recommendations_table(recs: list[MoERecommendation], refused: dict[str, str]) -> str:
    """The recommendations and the laws that recommended nothing (with why), as text."""
    console = PlainText(width=110)
    for rec in recs:
        for line in rec.lines():
            console.print(line)
    for law, why in refused.items():
        console.print(f"{law} law: no recommendation: {why}")
    return console.text()
