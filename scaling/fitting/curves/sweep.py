"""A sweep's curve laws: one per model size whose runs of one recipe were trained under two schedules or more.

A curve law holds for one model trained with one recipe (peak learning rate, batch): a sweep's runs are
grouped by size, and at each size the recipe most runs share is kept. A size gets a law only where
those runs follow at least two schedule shapes (the rate after warmup against the fraction of those
steps: cosines of different lengths are one shape), since a single schedule cannot separate the annealing term from the
power law in the summed rate; IsoFLOP sweeps of one schedule get none, and say so. The laws are fitted
once, with the sweep's analysis (:func:`scaling.fitting.analysis.analyse`), and stored with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling.curve_forms import warmup_end
from scaling.errors import UserError
from scaling.fitting.curves.data import Curve, curves_from_db
from scaling.fitting.curves.fit import CurveLaw, fit_curves
from scaling.fitting.curves.joint import JointCurveLaw
from scaling.fmt import num

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

__all__ = ["CURVE_BOOTSTRAP", "JointCurves", "SizeCurves", "SweepCurves", "schedule_shapes", "selected_curves", "sweep_curves"]

#: Bootstrap replicates of each size's curve law at most (a refit of about a second per replicate).
CURVE_BOOTSTRAP = 50
#: Points of the rate, against the fraction of the run, two schedule shapes are compared at.
SHAPE_POINTS = 200
#: Two schedules whose rates (as shares of their peaks) differ by less than this everywhere are one shape.
SHAPE_TOLERANCE = 0.01


#: Why a sweep has no curve law when no size was trained under two schedules.
NO_TWO_SCHEDULES = ("no curve law: no model size was trained under two schedules of one recipe (peak rate, batch), "
                    "and a single schedule cannot separate the annealing term")
#: The fields of a run's schedule that change its shape after warmup, by its kind.
SHAPE_FIELDS = {"constant": ("kind",), "cosine": ("kind", "min_lr_ratio"),
                "wsd": ("kind", "min_lr_ratio", "decay_fraction", "decay_shape"),
                "two_stage": ("kind", "drop_at", "drop_lr_ratio")}


def _two_schedules_somewhere(runs: Optional[pd.DataFrame]) -> bool:
    """Whether some size's completed ``runs`` of one peak rate and batch name two schedules (by their specs)."""
    from scaling.lr_schedule import schedule_of

    if runs is None or not len(runs):
        return False
    seen: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for _, run in runs.iterrows():
        spec = run.get("spec") if isinstance(run.get("spec"), dict) else {}
        schedule = schedule_of(spec.get("schedule"))
        recipe = (run.get("N"), (spec.get("optimizer") or {}).get("lr"), spec.get("batch_tokens"))
        shape = tuple(getattr(schedule, f) for f in SHAPE_FIELDS.get(schedule.kind, SHAPE_FIELDS["wsd"]))
        seen.setdefault(recipe, set()).add(shape)
    return any(len(shapes) > 1 for shapes in seen.values())


def _recipe(c: Curve) -> tuple[float, float]:
    """A curve's peak rate and tokens per step (its batch), rounded to group runs of one recipe."""
    peak = float(np.max(c.lr))
    batch = float(c.D) / c.lr.size if c.D else math.nan
    return round(math.log(peak), 3), round(math.log(batch), 2) if math.isfinite(batch) and batch > 0 else math.nan


def _shape(c: Curve) -> np.ndarray:
    """The rate after warmup as a share of its peak, at :data:`SHAPE_POINTS` fractions of those steps."""
    lr = c.lr[max(0, warmup_end(c.lr) - 1):] / float(np.max(c.lr))
    return np.interp(np.linspace(0.0, 1.0, SHAPE_POINTS), np.linspace(0.0, 1.0, lr.size), lr)


def schedule_shapes(curves: list[Curve]) -> int:
    """How many schedule shapes ``curves`` follow (the rate after warmup as a share of its peak, against the
    fraction of those steps: a warmup's length makes no other shape)."""
    shapes: list[np.ndarray] = []
    for c in curves:
        s = _shape(c)
        if not any(np.max(np.abs(s - t)) < SHAPE_TOLERANCE for t in shapes):
            shapes.append(s)
    return len(shapes)


def selected_curves(curves: list[Curve]) -> tuple[dict[float, list[Curve]], list[str]]:
    """Each size's curves of its most common recipe, where they follow two schedule shapes or more, and
    what was left out (one line per size)."""
    by_size: dict[float, list[Curve]] = {}
    for c in curves:
        if c.N is not None and math.isfinite(c.N):
            by_size.setdefault(float(c.N), []).append(c)
    kept, left = {}, []
    for N, group in sorted(by_size.items()):
        recipes: dict[tuple[float, float], list[Curve]] = {}
        for c in group:
            recipes.setdefault(_recipe(c), []).append(c)
        same = max(recipes.values(), key=len)
        if schedule_shapes(same) < 2:
            left.append(f"N = {num(N, 3)}: its {len(same)} run(s) of one recipe follow one schedule shape")
            continue
        kept[N] = same
        if len(same) < len(group):
            left.append(f"N = {num(N, 3)}: {len(group) - len(same)} run(s) of another peak rate or batch left out")
    return kept, left


@dataclass(frozen=True)
class SizeCurves:
    """One size's curve law and the recipe it was fitted with (what a prediction for that size assumes)."""

    N: float
    law: CurveLaw
    #: The runs' peak learning rate, batch (tokens per step), warmup (share of the steps) and longest run (steps).
    peak: float
    batch: float
    warmup: float
    longest: int

    def to_dict(self) -> dict[str, Any]:
        return {"N": self.N, "law": self.law.to_dict(), "peak": self.peak, "batch": self.batch,
                "warmup": self.warmup, "longest": self.longest}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SizeCurves":
        return cls(float(d["N"]), CurveLaw.from_dict(d["law"]), float(d["peak"]), float(d["batch"]),
                   float(d["warmup"]), int(d["longest"]))


@dataclass(frozen=True)
class JointCurves:
    """The curve law across sizes fitted to a sweep's trunks and the recipe they were trained with (the largest
    trunk's peak rate, batch, warmup share and steps): what a prediction for any size assumes."""

    law: JointCurveLaw
    peak: float
    batch: float
    warmup: float
    longest: int

    def to_dict(self) -> dict[str, Any]:
        return {"law": self.law.to_dict(), "peak": self.peak, "batch": self.batch, "warmup": self.warmup,
                "longest": self.longest}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "JointCurves":
        return cls(JointCurveLaw.from_dict(d["law"]), float(d["peak"]), float(d["batch"]), float(d["warmup"]),
                   int(d["longest"]))


@dataclass(frozen=True)
class SweepCurves:
    """A sweep's curve laws by size (``sizes``; empty where none could be fitted, ``why`` saying why), what was
    left out of them (``left_out``), and the law across sizes of its trunks (``joint``; None without trunks)."""

    sizes: dict[float, SizeCurves]
    why: str = ""
    left_out: tuple[str, ...] = ()
    joint: Optional[JointCurves] = None

    def nearest(self, N: float) -> Optional[SizeCurves]:
        """The fitted size nearest to ``N`` in log (None without any)."""
        if not self.sizes or not (N > 0):
            return None
        return self.sizes[min(self.sizes, key=lambda n: abs(math.log(n / N)))]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "sweep curves", "sizes": [s.to_dict() for s in self.sizes.values()], "why": self.why,
                "left_out": list(self.left_out), "joint": self.joint.to_dict() if self.joint else None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepCurves":
        sizes = [SizeCurves.from_dict(s) for s in d.get("sizes") or []]
        joint = JointCurves.from_dict(d["joint"]) if d.get("joint") else None
        return cls({s.N: s for s in sizes}, str(d.get("why") or ""), tuple(d.get("left_out") or ()), joint)


def sweep_curves(url: str, sweep: Optional[str], n_bootstrap: int = CURVE_BOOTSTRAP, seed: int = 0) -> SweepCurves:
    """The curve law of each size of ``sweep`` whose runs of one recipe follow two schedules or more
    (:func:`selected_curves`), bootstrapped (at most :data:`CURVE_BOOTSTRAP` replicates); none, and why, else."""
    from scaling import db, vocab

    with db.connect(url) as res:  # the completed runs, read once for both
        sweep = sweep if sweep is not None else res.latest_sweep()
        runs = res.runs(sweep=sweep, status=vocab.COMPLETED) if sweep is not None else None
    if not _two_schedules_somewhere(runs):  # decided from the runs' specs, before any curve is rebuilt
        return SweepCurves({}, NO_TWO_SCHEDULES)
    try:
        curves, _ = curves_from_db(url, sweep, runs=runs)
    except UserError as exc:
        return SweepCurves({}, f"no curve law: {' '.join(str(exc).split())}")
    kept, left = selected_curves(curves)
    if not kept:
        return SweepCurves({}, NO_TWO_SCHEDULES, tuple(left))
    sizes = {}
    for N, group in kept.items():
        try:
            law = fit_curves(group, bootstrap=min(n_bootstrap, CURVE_BOOTSTRAP), seed=seed)
        except UserError as exc:
            left.append(f"N = {num(N, 3)}: not fitted ({' '.join(str(exc).split())})")
            continue
        assert isinstance(law, CurveLaw)  # one size: one law
        longest = max(group, key=lambda c: c.lr.size)
        sizes[N] = SizeCurves(N, law, float(np.max(longest.lr)), float(longest.D or 0) / longest.lr.size,
                              warmup_end(longest.lr) / longest.lr.size, int(longest.lr.size))
    why = "" if sizes else "no curve law: no size's curves could be fitted"
    return SweepCurves(sizes, why, tuple(left))
