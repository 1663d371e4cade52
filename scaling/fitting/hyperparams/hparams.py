"""Hyperparameter scaling laws: each point's tuned loss, learning rate and batch, and how they scale.

A *group* is the runs of one (N, D) point that differ only in learning rate, batch (tokens) and
AdamW's beta2. Per group (:func:`fit_group`), a quadratic in (ln lr, ln B) is fitted to the runs
around the group's best one (grids step by 2x-4x, so the best run alone places the optimum
coarsely): its minimum gives the tuned loss L*, lr* and B*, with a residual-bootstrap interval.
A group whose best run sits at the edge of its grid is flagged (the optimum may lie beyond
it) and left out of the laws, as is a group whose losses do not curve up around the best run.

Over the groups (:func:`fit_hparams`), least squares in logs gives Step Law's forms (Li et al.
2025) lr*(N, D) = c N^a D^b and B*(D) = d D^e, and DeepSeek LLM's (Bi et al. 2024) lr*(C) = c C^a
and B*(C) = d C^e. Each group is weighted by how precisely its own bootstrap places its optimum;
the intervals resample the groups with replacement (as Step Law's recipe does), widened by the
small-sample factor sqrt(n / (n - p)). ``benchmarks/bench_hparams.py`` measures their coverage.
A law whose exponents the groups do not identify (a variable that does not vary, or varies with
another) is flagged: its values are shown, no interval, and nothing is recommended from it.

The loss laws of a sweep with groups are fitted on each group's L* (:func:`tuned_points`),
or on one fixed setting per group (the centre of its grid) when asked. Everything here takes
DataFrames and returns dataclasses; :func:`runs_frame` takes lr, batch and beta2 from a runs listing's columns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np
import pandas as pd

from scaling import batching
from scaling.errors import FitError
from scaling.fitting.core.doubts import Doubt, Doubtful, DoubtKind, restore, stored
from scaling.fitting.core.intervals import summarise, withheld
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.core.points import DIGITS, point_keys, rounded
from scaling.fmt import Interval, bounds, num, size
from scaling.naming import group_title, point_label

#: Columns of the runs a hyperparameter fit reads (``beta2``, ``group``, ``run_key`` optional).
RUN_COLUMNS = ("N", "D", "C", "loss", "lr", "batch")
#: Ways to reduce a group to the one loss the loss laws are fitted on.
MODES = ("tuned", "fixed")
#: Grid steps either side of the best run that the quadratic is fitted to.
WINDOW = 3
#: Near-optimal region: runs within this fraction of L* (DeepSeek LLM, Bi et al. 2024, Fig. 3, and
#: Step Law's fitting recipe use 0.25%).
NEAR_FRACTION = 0.0025
#: Share of failed bootstrap refits (no minimum) above which no interval is given.
MAX_FAILED = 0.2
#: A law's variable must span at least this factor across the groups to identify its exponent.
MIN_SPAN = 2.0
#: An exponent whose 95% interval is wider than this is not determined by the groups (lr* or B* would
#: be uncertain by more than a factor 100 across a tenfold range of its variable).
MAX_EXPONENT_WIDTH = 2.0
#: |correlation| of ln N and ln D across the groups above which a and b are not told apart.
MAX_CORRELATION = 0.98
#: Published laws, for comparison (their data, conventions and units, not ours).
PUBLISHED = {
    "lr_ND": "Step Law (Li et al. 2025, dense): lr* = 1.7973 N^-0.7129 D^0.3075",
    "batch_D": "Step Law (Li et al. 2025, dense): B* = 0.5807 D^0.5709 tokens",
    "lr_C": "DeepSeek LLM (Bi et al. 2024): lr* = 0.3118 C^-0.125",
    "batch_C": "DeepSeek LLM (Bi et al. 2024): B* = 0.2920 C^0.3271 tokens",
}


def assign_groups(runs: pd.DataFrame) -> pd.Series:
    """Each run's group label, or None for a run in no group.

    With a ``group`` column, its labels (a label over several (N, D) points is split by point);
    without one, every (N, D) point whose runs differ in lr, batch or beta2 is a group.
    """
    r = runs.reset_index(drop=True)
    same = point_keys(r, ["N", "D"])
    keys = list(zip(same["N"], same["D"]))
    names = {k: point_label(*k) for k in dict.fromkeys(keys)}
    if len(set(names.values())) < len(names):  # distinct points that print alike at 3 digits
        names = {k: point_label(*k, digits=DIGITS) for k in names}
    point = pd.Series([names[k] for k in keys], dtype=object)
    if "group" in r and r["group"].notna().any():
        label = r["group"].where(r["group"].notna(), None)
        out = label.astype(object)
        for g, idx in r.groupby(label.astype(str)[label.notna()]).groups.items():
            pts = point.loc[idx]
            if pts.nunique() > 1:
                out.loc[idx] = [f"{g} ({p})" for p in pts]
        return out.where(label.notna(), None).set_axis(runs.index)
    hp = [c for c in ("lr", "batch", "beta2") if c in r]
    if not hp:
        return pd.Series([None] * len(r), index=runs.index, dtype=object)
    varied = r[hp].astype(float).round(12).groupby(point).nunique().max(axis=1) > 1
    return pd.Series([p if varied.get(p, False) else None for p in point], index=runs.index, dtype=object)


def has_groups(runs: pd.DataFrame) -> bool:
    return bool(len(runs)) and bool(assign_groups(runs).notna().any())


# -- one group ---------------------------------------------------------------------------------
@dataclass
class GroupOptimum:
    """The tuned loss, lr and batch of one group, or why they are not fitted.

    ``status``: ``fitted`` (used by the laws); ``edge`` (the best run is at the edge of the grid);
    ``no minimum`` (no upward curvature around the best run); ``one setting`` (nothing varied).
    """

    label: str
    N: float
    D: float
    C: float
    n_runs: int
    n_settings: int
    status: str
    message: str
    loss: Interval
    lr: Interval
    batch: Interval
    beta2: float | None = None
    varied: tuple[str, ...] = ()
    best: dict[str, float] = field(default_factory=dict)
    #: Settings within ``near_fraction`` of L*: their count and the ranges of lr and batch.
    near: dict[str, float] = field(default_factory=dict)
    #: Bootstrap replicates of ln lr* and ln B* (NaN where a refit found no minimum).
    replicates: np.ndarray | None = field(default=None, repr=False)

    @property
    def used(self) -> bool:
        return self.status == "fitted"

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "replicates"}
        d["varied"] = list(self.varied)
        d.update(loss=self.loss.to_dict(), lr=self.lr.to_dict(), batch=self.batch.to_dict())
        return d


def _settings(g: pd.DataFrame) -> pd.DataFrame:
    """Mean loss per distinct (lr, batch, beta2) setting, and its number of runs."""
    keys = [c for c in ("lr", "batch", "beta2") if c in g]
    s = g.groupby(keys, sort=True, dropna=False)["loss"].agg(["mean", "size"]).reset_index()
    return s.rename(columns={"mean": "loss", "size": "n"})


def _design(x: np.ndarray, y: np.ndarray | None) -> np.ndarray:
    if y is None:
        return np.column_stack([np.ones_like(x), x, x * x])
    return np.column_stack([np.ones_like(x), x, y, x * x, y * y, x * y])


def _optimum(beta: np.ndarray, two_d: bool) -> tuple[np.ndarray, np.ndarray]:
    """Minimum (x*, y*) and value of quadratics with coefficients ``beta`` (p, R); NaN where none."""
    beta = np.atleast_2d(beta.T).T if beta.ndim == 1 else beta
    if not two_d:
        c0, c1, c2 = beta
        with np.errstate(all="ignore"):
            x = np.where(c2 > 0, -c1 / (2 * c2), np.nan)
        return x[None, :], c0 + c1 * x + c2 * x * x
    c0, c1, c2, c3, c4, c5 = beta
    det = 4 * c3 * c4 - c5 * c5
    ok = (c3 > 0) & (det > 0)
    with np.errstate(all="ignore"):
        x = np.where(ok, (-2 * c4 * c1 + c5 * c2) / det, np.nan)
        y = np.where(ok, (-2 * c3 * c2 + c5 * c1) / det, np.nan)
    return np.vstack([x, y]), c0 + c1 * x + c2 * y + c3 * x * x + c4 * y * y + c5 * x * y


def _grid_index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    grid = np.unique(rounded(values))
    return grid, np.searchsorted(grid, rounded(values))


def fit_group(g: pd.DataFrame, label: str, *, n_bootstrap: int = 200, seed: int = 0,
              near_fraction: float = NEAR_FRACTION, window: int = WINDOW) -> GroupOptimum:
    """The quadratic optimum of one group's runs (columns of :data:`RUN_COLUMNS`)."""
    g = g.reset_index(drop=True)
    N, D, C = float(g["N"].median()), float(g["D"].median()), float(g["C"].median())
    s = _settings(g)
    beta2 = None
    note = ""
    if "beta2" in s and s["beta2"].nunique() > 1:  # tune beta2 on its grid: the quadratic is at the best one
        best_b2 = float(s.loc[s["loss"].idxmin(), "beta2"])
        note = f"; beta2 tuned on its grid ({s['beta2'].nunique()} values): the quadratic is fitted at beta2 = {best_b2:.4g}"
        g, s, beta2 = g[np.isclose(g["beta2"], best_b2)], s[np.isclose(s["beta2"], best_b2)], best_b2
    elif "beta2" in s and s["beta2"].notna().any():
        beta2 = float(s["beta2"].iloc[0])
    best = s.loc[s["loss"].idxmin()]
    best_d = {"loss": float(best["loss"]), "lr": float(best["lr"]), "batch": float(best["batch"])}
    varied = tuple(c for c in ("lr", "batch") if s[c].nunique() > 1)

    def result(status: str, message: str, loss: Interval, lr: Interval, batch: Interval, reps: np.ndarray | None = None,
               near: dict | None = None) -> GroupOptimum:
        return GroupOptimum(label, N, D, C, len(g), len(s), status, message + note, loss, lr, batch, beta2, varied,
                            best_d, near or {}, reps)

    def as_run(why: str) -> tuple[Interval, Interval, Interval]:
        """The best run's own values, flagged: no interval."""
        return tuple(Interval(float(best_d[q]), withheld=why, kind="unreliable")  # type: ignore[return-value]
                     for q in ("loss", "lr", "batch"))

    if not varied:
        what = "one run" if len(g) == 1 else f"{len(g)} runs of one setting"
        why = f"{what}: no optimum to fit (its loss, lr and batch are the run's own)"
        return result("one setting", why, *as_run(why))
    for dim in varied:  # the edge: the optimum may lie beyond what was tried
        tried = s[dim].to_numpy(float)
        word, write = ("lr*", num) if dim == "lr" else ("batch*", size)  # a batch is a count of tokens
        if math.isclose(best_d[dim], tried.max(), rel_tol=1e-9):
            why = f"{word} at the largest value tried ({write(tried.max(), 3)}): widen the sweep"
            return result("edge", why, *as_run(why))
        if math.isclose(best_d[dim], tried.min(), rel_tol=1e-9):
            why = f"{word} at the smallest value tried ({write(tried.min(), 3)}): widen the sweep"
            return result("edge", why, *as_run(why))
    # the window: grid steps around the best setting in every varied dimension
    keep = np.ones(len(g), bool)
    for dim in varied:
        grid, idx = _grid_index(g[dim].to_numpy(float))
        centre = int(np.searchsorted(grid, rounded(best_d[dim])))
        keep &= np.abs(idx - centre) <= window
    w = g[keep]
    two_d = len(varied) == 2
    x0, y0 = math.log(best_d["lr"]), math.log(best_d["batch"])
    x = np.log(w["lr"].to_numpy(float)) - x0
    y = np.log(w["batch"].to_numpy(float)) - y0 if two_d else None
    if "lr" not in varied:  # only the batch varies: the quadratic is in ln B
        x, x0 = np.log(w["batch"].to_numpy(float)) - y0, y0
    X = _design(x, y)
    loss = w["loss"].to_numpy(float)
    beta, *_ = np.linalg.lstsq(X, loss, rcond=None)
    opt, L = _optimum(beta[:, None], two_d)
    if not np.all(np.isfinite(opt)):
        why = "the losses do not curve up around the best run: no minimum to fit"
        return result("no minimum", why, *as_run(why))
    span = [(np.log(w[d].to_numpy(float)) - (x0 if i == 0 else y0)) for i, d in enumerate(varied)]
    for i, d in enumerate(varied):
        if not span[i].min() - 1e-9 <= opt[i, 0] <= span[i].max() + 1e-9:
            write = num if d == "lr" else size
            why = (f"the fitted {'lr*' if d == 'lr' else 'batch*'} lies outside the runs it was fitted to "
                   f"({write(math.exp(opt[i, 0] + (x0 if i == 0 else y0)), 3)})")
            return result("no minimum", why, *as_run(why))
    msg, L_iv, lr_iv, b_iv, replicates, near = _quadratic_optimum(
        (X, beta, loss, varied, opt, L, x0, y0), s, best_d, n_bootstrap, seed, near_fraction)
    return result("fitted", msg, L_iv, lr_iv, b_iv, replicates, near)


def _quadratic_optimum(quadratic: tuple[Any, ...], s: pd.DataFrame, best_d: dict[str, float], n_bootstrap: int,
                       seed: int, near_fraction: float) -> tuple[str, dict, dict, dict, np.ndarray, dict]:
    """A group's fitted quadratic (design, coefficients, losses, varied dimensions, optimum, L*, centre ln lr
    and ln B) with residual-bootstrap intervals: (message, loss, lr, batch, the replicates of ln lr* and ln B*,
    the settings near the optimum)."""
    X, beta, loss, varied, opt, L, x0, y0 = quadratic
    two_d = len(varied) == 2
    p = X.shape[1]
    # residual bootstrap (the design is the grid, so it is kept; residuals scaled for the fitted df)
    n = len(loss)
    if n_bootstrap >= 2 and n > p:
        resid = (loss - X @ beta) * math.sqrt(n / (n - p))
        rng = np.random.default_rng(seed)
        Y = (X @ beta)[:, None] + resid[rng.integers(0, n, size=(n, n_bootstrap))]
        B = np.linalg.pinv(X) @ Y
        ropt, rL = _optimum(B, two_d)
    else:
        ropt, rL = np.full((len(varied), 0), np.nan), np.full(0, np.nan)
    failed = int(np.sum(~np.all(np.isfinite(ropt), axis=0))) if ropt.shape[1] else 0
    no_interval = None
    if n <= p:
        no_interval = f"as many runs around the best one ({n}) as quadratic coefficients ({p}): no interval"
    elif n_bootstrap >= 2 and failed > MAX_FAILED * n_bootstrap:
        no_interval = f"{failed} of {n_bootstrap} bootstrap refits find no minimum: no interval"

    def iv(values: np.ndarray, point: float, log: bool) -> Interval:
        out = summarise(values, point, log=log)
        return withheld(out, no_interval) if no_interval else out

    lr_dim = varied.index("lr") if "lr" in varied else None
    b_dim = varied.index("batch") if "batch" in varied else None
    lr_point = math.exp(opt[lr_dim, 0] + x0) if lr_dim is not None else best_d["lr"]
    b_point = math.exp(opt[b_dim, 0] + (y0 if two_d else x0)) if b_dim is not None else best_d["batch"]
    with np.errstate(over="ignore"):  # a replicate far off the grid: inf, left out by summarise
        lr_reps = np.exp(ropt[lr_dim] + x0) if lr_dim is not None else None
        b_reps = np.exp(ropt[b_dim] + (y0 if two_d else x0)) if b_dim is not None else None
    lr_iv = (iv(lr_reps, lr_point, True) if lr_dim is not None
             else summarise([], lr_point, pinned="not varied in the group"))
    b_iv = (iv(b_reps, b_point, True) if b_dim is not None
            else summarise([], b_point, pinned="not varied in the group"))
    L_iv = iv(rL, float(L[0]), False)
    replicates = np.vstack([ropt[lr_dim] + x0 if lr_dim is not None else np.full(ropt.shape[1], math.log(lr_point)),
                            ropt[b_dim] + (y0 if two_d else x0) if b_dim is not None
                            else np.full(ropt.shape[1], math.log(b_point))])
    ref = min(float(L[0]), best_d["loss"])
    nr = s[s["loss"] <= ref * (1 + near_fraction)]
    near = {"fraction": near_fraction, "n": int(len(nr)), "of": int(len(s)),
            "lr_lo": float(nr["lr"].min()), "lr_hi": float(nr["lr"].max()),
            "batch_lo": float(nr["batch"].min()), "batch_hi": float(nr["batch"].max())}
    msg = f"quadratic in {' and '.join('ln ' + ('lr' if d == 'lr' else 'B') for d in varied)} over {n} runs"
    if failed:
        msg += f"; {failed} of {n_bootstrap} bootstrap refits found no minimum"
    return msg, L_iv, lr_iv, b_iv, replicates, near


# -- laws over the groups ----------------------------------------------------------------------
#: name -> (response, variables, display form)
LAWS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "lr_ND": ("lr", ("N", "D"), "lr* = c N^a D^b"),
    "batch_D": ("batch", ("D",), "B* = d D^e"),
    "lr_C": ("lr", ("C",), "lr* = c C^a"),
    "batch_C": ("batch", ("C",), "B* = d C^e"),
}
#: parameter names of each law (coefficient first)
PARAMS: dict[str, tuple[str, ...]] = {"lr_ND": ("c", "a", "b"), "batch_D": ("d", "e"), "lr_C": ("c", "a"),
                                      "batch_C": ("d", "e")}


@dataclass
class PowerLaw(Doubtful):
    """One hyperparameter law fitted over the groups: ``response`` = coef * prod(var^exponent).

    Its typed doubts (:meth:`doubts`) decide :meth:`reliable`, as every other law's do."""

    name: str
    form: str
    response: str
    variables: tuple[str, ...]
    params: dict[str, Interval]
    n_groups: int
    #: Why the data do not determine the law (then no interval and no recommendation).
    doubts_: list[Doubt] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: (R, 1 + len(variables)) replicates of (ln coef, exponents...).
    replicates: np.ndarray | None = field(default=None, repr=False)
    #: The fit itself: (ln coef, exponents...) (the coefficient may be beyond a float when unidentified).
    theta: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    @property
    def notes_(self) -> list[str]:
        """Its notes, where :class:`~scaling.fitting.core.doubts.Doubtful` writes and drops a doubt's message."""
        return self.notes

    @notes_.setter
    def notes_(self, notes: list[str]) -> None:
        self.notes = notes

    def predict(self, **values: float) -> float:
        x = np.array([1.0] + [math.log(float(values[v])) for v in self.variables])
        with np.errstate(over="ignore"):
            return float(np.exp(x @ self.theta))

    def predict_interval(self, **values: float) -> Interval:
        """The prediction at ``values`` with its 95% bootstrap interval (withheld for a flagged law)."""
        point = self.predict(**values)
        if not self.reliable():
            return Interval(point, withheld="the law is flagged: " + self.doubts()[0], kind="unreliable")
        if self.replicates is None or not len(self.replicates):
            return summarise([], point, log=True)
        x = np.array([1.0] + [math.log(float(values[v])) for v in self.variables])
        with np.errstate(over="ignore"):
            return summarise(np.exp(self.replicates @ x), point, log=True)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; the doubts with their kinds (``doubts``)."""
        d = {f: getattr(self, f) for f in self.__dataclass_fields__ if f not in ("doubts_", "replicates", "theta")}
        d["doubts"] = stored(self.doubts())
        d["params"] = {p: iv.to_dict() for p, iv in self.params.items()}
        d["variables"] = list(self.variables)
        d["theta"] = [float(t) for t in self.theta]
        d["replicates"] = None if self.replicates is None else self.replicates.tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "PowerLaw":
        """Rebuild from :meth:`to_dict`; doubts stored as bare messages come back of kind ``STORED``."""
        reps = d.get("replicates")
        return cls(d["name"], d["form"], d["response"], tuple(d["variables"]),
                   {p: Interval.of(iv) for p, iv in (d.get("params") or {}).items()}, int(d["n_groups"]),
                   restore(d.get("doubts") or []), list(d.get("notes", [])),
                   None if reps is None else np.asarray(reps, float).reshape(-1, 1 + len(d["variables"])),
                   np.asarray(d["theta"], float))


def _identification(name: str, X: dict[str, np.ndarray], n: int, p: int) -> list[Doubt]:
    """Why the groups do not determine the law's exponents (empty when they do)."""
    doubts = []
    if n == p:
        doubts.append(Doubt(DoubtKind.IDENTIFICATION, f"{n} groups for {p} parameters: exactly determined, nothing left to judge the fit by"))
    for var, v in X.items():
        factor = math.exp(float(np.ptp(v)))
        if factor < MIN_SPAN * (1 - 1e-3):  # a span of 2 rounded to whole batches is still 2
            doubts.append(Doubt(DoubtKind.IDENTIFICATION, f"{var} spans a factor {factor:.4g} across the groups (less "
                                f"than {MIN_SPAN:g}): its exponent is not identified"))
    if {"N", "D"} <= set(X) and all(np.ptp(X[v]) > 0 for v in ("N", "D")):
        r = float(np.corrcoef(X["N"], X["D"])[0, 1])
        if abs(r) > MAX_CORRELATION:
            doubts.append(Doubt(DoubtKind.IDENTIFICATION, f"ln N and ln D move together across the groups "
                                f"(correlation {r:.3f}): a and b are not told apart"))
    return doubts


def fit_law(name: str, groups: Sequence[GroupOptimum], n_bootstrap: int = 200, seed: int = 0) -> PowerLaw:
    """OLS in logs of one of :data:`LAWS` over the used groups, with the two-level bootstrap."""
    response, variables, form = LAWS[name]
    usable = [g for g in groups if g.used]
    # a group that did not vary this hyperparameter says nothing of its optimum
    used = [g for g in usable if (g.lr if response == "lr" else g.batch).kind != "pinned"]
    if usable and not used:
        raise FitError(f"{form}: the {'learning rate' if response == 'lr' else 'batch'} was not varied in any group")
    p = 1 + len(variables)
    if len(used) < p:
        raise FitError(f"{form}: {len(used)} usable group(s) for {p} parameters")
    y = np.log([g.lr.value if response == "lr" else g.batch.value for g in used])
    logs = {v: np.log([getattr(g, v) for g in used]) for v in variables}
    X = np.column_stack([np.ones(len(used))] + [logs[v] for v in variables])
    if any(np.ptp(logs[v]) == 0 for v in variables):
        same = [v for v in variables if np.ptp(logs[v]) == 0]
        raise FitError(f"{form}: every group has the same {', '.join(same)}: its exponent is not identified")
    k = 0 if response == "lr" else 1
    own = [g.replicates[k] if g.replicates is not None and g.replicates.shape[1] else np.full(0, np.nan) for g in used]
    w = np.sqrt(_weights(own))
    theta, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
    doubts = _identification(name, logs, len(used), p)
    reps = None
    failed = 0
    if n_bootstrap >= 2:
        rng = np.random.default_rng(seed)
        out = np.full((n_bootstrap, p), np.nan)
        for r in range(n_bootstrap):
            idx = rng.integers(0, len(used), len(used))
            Xr = X[idx] * w[idx, None]
            if np.linalg.matrix_rank(Xr) < p:
                failed += 1
                continue
            out[r], *_ = np.linalg.lstsq(Xr, y[idx] * w[idx], rcond=None)
        reps = out[np.all(np.isfinite(out), axis=1)]
        if len(used) > p:  # a few groups: resampling under-states the spread (see small_sample_factor)
            reps = theta + (reps - theta) * small_sample_factor(len(used), p)
    names = PARAMS[name]
    params: dict[str, Interval] = {}
    for j, pname in enumerate(names):
        if j == 0:
            with np.errstate(over="ignore"):
                iv = summarise(np.exp(reps[:, 0]) if reps is not None else [], float(np.exp(theta[0])), log=True)
            if not 0.0 < iv.value < math.inf:  # e^log c beyond floating point: no number to show
                doubts.append(Doubt(DoubtKind.UNDETERMINED, f"{pname} = e^{float(theta[0]):.4g} is beyond floating "
                                    "point: the groups do not determine the law"))
                iv = replace(iv, value=math.nan)
        else:
            iv = summarise(reps[:, j] if reps is not None else [], float(theta[j]))
            width = iv.hi - iv.lo if iv.kind == "percentile" and iv.interval is not None else math.nan
            if width > MAX_EXPONENT_WIDTH:
                doubts.append(Doubt(DoubtKind.UNDETERMINED, f"{pname}'s 95% interval {bounds(iv.lo, iv.hi)} "
                                    f"is wider than {MAX_EXPONENT_WIDTH:g}: the groups do not determine it"))
        params[pname] = iv
    if n_bootstrap >= 2 and failed > n_bootstrap / 2:
        doubts.append(Doubt(DoubtKind.BOOTSTRAP, f"{failed} of {n_bootstrap} bootstrap resamples of the groups could "
                            "not identify the law"))
    if doubts:
        params = {p_: withheld(iv, "the law is flagged: " + doubts[0]) for p_, iv in params.items()}
    notes = [f"fitted over {len(used)} groups"]
    if failed:
        notes.append(f"{failed} of {n_bootstrap} bootstrap resamples could not identify the law (left out)")
    return PowerLaw(name, form, response, variables, params, len(used), doubts, notes, reps, theta)


def small_sample_factor(n: int, p: int) -> float:
    """How much to widen a case-resampling bootstrap of a regression on n points with p coefficients.

    Resampling n cases reproduces the residual variance as if it were known, which under-states it by
    (n - p) / n, and the percentile interval then takes normal quantiles where Student's t with n - p
    degrees of freedom applies: sqrt(n / (n - p)) t_{0.975, n-p} / z_{0.975} (1.19 for 16 groups and
    3 coefficients). ``benchmarks/bench_hparams.py`` measures the coverage it gives.
    """
    from scipy.stats import norm, t

    return math.sqrt(n / (n - p)) * float(t.ppf(0.975, n - p) / norm.ppf(0.975))


def _weights(replicates: Sequence[np.ndarray]) -> np.ndarray:
    """Weights 1/var of each group's ln optimum (a robust spread of its bootstrap replicates), so a
    group that places its optimum precisely counts more; equal weights without replicates.

    The spread is half the 16-84% range, floored at a tenth of the median group's, so one group
    with a lucky narrow bootstrap cannot dominate.
    """
    sd = np.array([0.5 * float(np.subtract(*np.nanquantile(r, [0.84, 0.16]))) if np.isfinite(r).sum() >= 10
                   else np.nan for r in replicates])
    if not np.isfinite(sd).any():
        return np.ones(len(replicates))
    med = float(np.nanmedian(sd))
    sd = np.where(np.isfinite(sd), np.maximum(sd, 0.1 * med), np.nanmax(sd))
    return 1.0 / np.maximum(sd, 1e-12) ** 2


@dataclass
class HparamFit:
    """Every group's optimum and the hyperparameter laws fitted over them."""

    groups: list[GroupOptimum]
    laws: dict[str, PowerLaw] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    near_fraction: float = NEAR_FRACTION

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HparamFit":
        """Rebuild from :meth:`to_dict` stored as JSON (missing numbers come back as NaN); the groups'
        own bootstrap replicates are not stored (the laws' are)."""
        names = {f for f in GroupOptimum.__dataclass_fields__ if f != "replicates"}
        groups = []
        for g in d.get("groups") or []:
            fields = {k: v for k, v in g.items() if k in names}
            for q in ("loss", "lr", "batch"):
                fields[q] = Interval.of(fields.get(q) or {})
            fields["varied"] = tuple(fields.get("varied") or ())
            fields["near"] = {k: math.nan if v is None else v for k, v in (fields.get("near") or {}).items()}
            groups.append(GroupOptimum(**fields))
        laws = {}
        for name, law in (d.get("laws") or {}).items():
            laws[name] = PowerLaw.from_dict(law)
        return cls(groups, laws, dict(d.get("skipped") or {}), list(d.get("notes") or []),
                   float(d.get("near_fraction") or NEAR_FRACTION))

    def groups_frame(self) -> pd.DataFrame:
        """One row per group: N, D, C, status, L*, lr*, B* with their bounds, the near-optimal region."""
        rows = []
        for g in self.groups:
            row: dict[str, Any] = {"group": g.label, "N": g.N, "D": g.D, "C": g.C, "runs": g.n_runs,
                                   "settings": g.n_settings, "status": g.status, "message": g.message}
            for q, iv in (("loss", g.loss), ("lr", g.lr), ("batch", g.batch)):
                row[f"{q}_star"] = iv.value
                row[f"{q}_lo"], row[f"{q}_hi"] = _bounds(iv)
            row["beta2"] = g.beta2
            for k in ("lr_lo", "lr_hi", "batch_lo", "batch_hi", "n"):
                row[f"near_{k}"] = g.near.get(k, math.nan)
            rows.append(row)
        return pd.DataFrame(rows)

    def laws_frame(self) -> pd.DataFrame:
        """One row per (law, parameter): value, lo, hi, and whether the law is flagged."""
        rows = [{"law": name, "form": law.form, "parameter": p, "value": iv.value, "lo": _bounds(iv)[0],
                 "hi": _bounds(iv)[1], "flagged": "; ".join(law.doubts()) or None}
                for name, law in self.laws.items() for p, iv in law.params.items()]
        return pd.DataFrame(rows, columns=["law", "form", "parameter", "value", "lo", "hi", "flagged"])

    def recommend(self, N: float, D: float, C: float) -> dict[str, Any]:
        """lr and batch for a run of (N, D, C) from Step Law's forms, each with its interval, or why none.

        ``lr``/``batch`` are intervals (``kind`` ``unreliable`` for a flagged law) or None when
        the law is not fitted; ``why`` says where each came from or why it is withheld. A
        non-positive or non-finite N, D or C is refused (FitError): no law extends to it.
        """
        for what, value, unit in (("N", N, "parameters"), ("D", D, "tokens"), ("C", C, "FLOPs")):
            if not (isinstance(value, (int, float, np.floating, np.integer)) and math.isfinite(value) and value > 0):
                raise FitError(f"recommend: {what} must be a positive, finite number of {unit}, got {value!r}")
        out: dict[str, Any] = {"N": N, "D": D, "C": C}
        for q, name in (("lr", "lr_ND"), ("batch", "batch_D")):
            law = self.laws.get(name)
            if law is None:
                out[q], out[f"{q}_why"] = None, f"{LAWS[name][2]} not fitted: {self.skipped.get(name, 'no groups')}"
                continue
            out[q] = law.predict_interval(N=N, D=D, C=C)
            out[f"{q}_why"] = (f"from {law.form} over {law.n_groups} groups" if law.reliable() else
                               f"not recommended: {law.form} is flagged ({law.doubts()[0]})")
        return out

    def to_dict(self, replicates: bool = False) -> dict[str, Any]:
        """JSON-ready; the laws' bootstrap replicates only when asked."""
        laws = {k: {f: x for f, x in v.to_dict().items() if replicates or f != "replicates"} for k, v in self.laws.items()}
        return {"groups": [g.to_dict() for g in self.groups], "laws": laws,
                "skipped": dict(self.skipped), "notes": list(self.notes), "near_fraction": self.near_fraction,
                "published": dict(PUBLISHED)}

    def table(self) -> str:
        """The groups and laws as text, as ``scaling fit`` prints them."""
        from rich.table import Table

        from scaling.fmt import PlainText

        con = PlainText(width=130)
        used = sum(g.used for g in self.groups)
        con.print(f"Hyperparameter groups: {len(self.groups)} ({used} used by the laws)")
        t = Table(show_edge=False)
        for col in ("group", "runs", "L* [95%]", "lr* [95%]", "B* [95%]", "status"):
            t.add_column(col, justify="left" if col in ("group", "status") else "right")
        for g in self.groups:
            t.add_row(group_title(g.label), str(g.n_runs), ivtext(g.loss, 4), ivtext(g.lr), ivtext(g.batch, 3, size),
                      "fitted" if g.used else f"left out ({g.status})")
        con.print(t)
        for name, law in self.laws.items():
            cells = ", ".join(f"{p} = {ivtext(iv, 4)}" for p, iv in law.params.items())
            con.print(f"{law.form}: {cells}" + ("" if law.reliable() else f"  [flagged: {'; '.join(law.doubts())}]"))
            con.print(f"  published, for comparison: {PUBLISHED[name]}")
        for name, why in self.skipped.items():
            con.print(f"{LAWS[name][2]}: not fitted: {why}")
        for note in self.notes:
            con.print(f"note: {note}")
        return con.text()


def _bounds(iv: Interval) -> tuple[float, float]:
    """A percentile interval's bounds; NaN for each without one."""
    if iv.kind != "percentile" or iv.interval is None:
        return math.nan, math.nan
    return iv.interval


def ivtext(iv: Interval | None, digits: int = 3, fmt: Callable[..., str] = num) -> str:
    """A value with its 95% interval, or with why it has none ('-' for none at all); ``fmt`` writes each
    number (:func:`scaling.fmt.size` for a batch in tokens, as the report writes it)."""
    return "-" if iv is None else iv.text(digits, fmt)


def check_runs(runs: pd.DataFrame, where: str = "") -> None:
    """Refuse runs a hyperparameter fit cannot read: one line naming the first bad one."""
    for col in ("lr", "batch"):
        if col not in runs:
            continue
        v = pd.to_numeric(runs[col], errors="coerce").to_numpy(float)
        bad = ~np.isfinite(v) | (v <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(f"{where}{int(bad.sum())} run(s) with a non-positive or missing {col} "
                           f"(first: row {i}, {col}={float(v[i])!r})")


def as_float(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with their numeric columns as floats (integer columns would overflow in products such as 6ND)."""
    runs = runs.reset_index(drop=True)
    cols = [c for c in (*RUN_COLUMNS, "beta2") if c in runs]
    return runs.assign(**{c: pd.to_numeric(runs[c], errors="coerce").astype(float) for c in cols})


def fit_hparams(runs: pd.DataFrame, n_bootstrap: int = 200, seed: int = 0, *,
                near_fraction: float = NEAR_FRACTION) -> HparamFit | None:
    """Each group's optimum and the laws over them; None when the runs form no group.

    ``runs``: one row per completed run with :data:`RUN_COLUMNS` (``beta2`` and ``group`` optional).
    """
    runs = as_float(runs)
    lost = int((~np.isfinite(runs["loss"])).sum())
    runs = runs[np.isfinite(runs["loss"])].reset_index(drop=True)  # a run without a final loss says nothing
    labels = assign_groups(runs)
    if not labels.notna().any():
        return None
    check_runs(runs[labels.notna()])
    fit = HparamFit(groups=[], near_fraction=near_fraction)
    if lost:
        fit.notes.append(f"{lost} run(s) without a finite final loss left out")
    for i, (label, g) in enumerate(runs[labels.notna()].groupby(labels[labels.notna()], sort=False)):
        fit.groups.append(fit_group(g, str(label), n_bootstrap=n_bootstrap, seed=seed + i, near_fraction=near_fraction))
    fit.groups.sort(key=lambda g: (g.N, g.D))
    out = [g for g in fit.groups if not g.used]
    if out:
        fit.notes.append(f"{len(out)} of {len(fit.groups)} groups left out of the laws: "
                         + "; ".join(f"{group_title(g.label)}: {g.message}" for g in out))
    for name in LAWS:
        try:
            fit.laws[name] = fit_law(name, fit.groups, n_bootstrap, seed)
        except FitError as exc:
            fit.skipped[name] = str(exc).split(": ", 1)[-1]
    return fit


# -- the points the loss laws see ---------------------------------------------------------------
def centre_setting(s: pd.DataFrame) -> int:
    """Index (in ``s``) of the setting nearest the centre of the group's lr x batch grid."""
    dist = np.zeros(len(s))
    for dim in ("lr", "batch"):
        grid, idx = _grid_index(s[dim].to_numpy(float))
        dist += np.abs(idx - (len(grid) - 1) // 2)
    return int(s.index[int(np.argmin(dist))])


def tuned_points(runs: pd.DataFrame, mode: str = "tuned") -> tuple[pd.DataFrame, list[str] | None, list[str]]:
    """The rows the loss laws are fitted on: runs in no group as they are, one row per group.

    ``mode`` ``tuned``: the group's L* (its quadratic minimum; the best setting's loss where the
    group is flagged); ``fixed``: the setting at the centre of its grid. Returns (rows with N, D,
    C, loss and any other column of the runs, the run keys kept for curves or None for all, notes).
    """
    if mode not in MODES:
        raise FitError(f"unknown hyperparameter mode {mode!r} (use one of {', '.join(MODES)})")
    runs = as_float(runs)
    labels = assign_groups(runs)
    check_runs(runs[labels.notna()])
    other = [c for c in runs.columns if c not in ("lr", "batch", "beta2", "group", "loss", "run_key", "seed")]
    rows = [runs.loc[labels.isna(), [c for c in runs.columns if c not in ("lr", "batch", "beta2", "group")]]]
    keys: list[str] = list(runs.loc[labels.isna(), "run_key"]) if "run_key" in runs else []
    flagged = 0
    for label, g in runs[labels.notna()].groupby(labels[labels.notna()], sort=False):
        first = g.iloc[0]
        if mode == "tuned":
            opt = fit_group(g, str(label), n_bootstrap=0)
            loss = opt.loss.value
            flagged += not opt.used
            chosen = g
        else:
            s = _settings(g)
            c = s.loc[centre_setting(s)]
            chosen = g[np.isclose(g["lr"], c["lr"]) & np.isclose(g["batch"], c["batch"])]
            if "beta2" in g and g["beta2"].notna().any():
                chosen = chosen[np.isclose(chosen["beta2"], c["beta2"], equal_nan=True)] if "beta2" in c else chosen
            loss = float(chosen["loss"].mean())
        row = {c: first[c] for c in other}
        row.update(N=float(g["N"].median()), D=float(g["D"].median()), C=float(g["C"].median()), loss=float(loss))
        rows.append(pd.DataFrame([row]))
        if "run_key" in g:
            keys += list(chosen["run_key"])
    n_groups = int(labels.dropna().nunique())
    out = pd.concat(rows, ignore_index=True)
    if mode == "tuned":
        note = (f"hyperparameters: the loss laws are fitted on the tuned loss L* of each of {n_groups} groups "
                "(the minimum of a quadratic in ln lr and ln B around its best run"
                + (f"; {flagged} flagged group(s) at their best run's loss" if flagged else "")
                + "); --hparams fixed fits one fixed setting instead")
    else:
        note = (f"hyperparameters: the loss laws are fitted on one fixed setting per group ({n_groups} groups: the "
                "run at the centre of each group's lr x batch grid), not on the tuned loss")
    return out, (keys if "run_key" in runs else None), [Note(NoteKind.HPARAM_MODE, note)]


def runs_frame(runs: pd.DataFrame) -> pd.DataFrame:
    """A sweep's runs listing (``Results.runs()``, with ``loss``) with the columns a hyperparameter fit
    reads: ``lr``, ``batch`` (the row's ``batch_tokens``), ``beta2`` and ``group`` (its ``hparam_group``,
    present when some run has one); NaN where the listing has no such value."""
    out = runs.copy()

    def column(name: str) -> pd.Series:
        if name not in runs:
            return pd.Series(math.nan, index=runs.index, dtype=float)
        return pd.to_numeric(runs[name], errors="coerce").astype(float)

    out["lr"] = column("lr")
    out["batch"] = column("batch_tokens")
    out["beta2"] = column("beta2")
    if "hparam_group" in runs:
        labels = [g if isinstance(g, str) and g else None for g in runs["hparam_group"]]
        if any(label is not None for label in labels):
            out["group"] = pd.Series(labels, index=out.index, dtype=object)
    return out


def whole_sequences(tokens: float, run: dict[str, Any]) -> int:
    """A batch of ``tokens`` rounded to whole sequences of the run's context (a plan refuses any other)."""
    shape = run.get("shape") if isinstance(run.get("shape"), dict) else {}
    context = shape.get("context")
    if isinstance(context, int) and context > 0:
        return batching.whole_sequences(tokens, context)
    return int(round(tokens))


def apply_to_run(fit: HparamFit | None, run: dict[str, Any] | None, N: float, D: float, C: float,
                 flagged_point: bool, run_source: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The lr and batch for the recommended (N, D), written into the concrete ``run`` where the laws allow.

    Returns (the laws' recommendation or None without groups, a note). A value from a flagged law,
    or for an (N, D) that a flagged loss law chose, is shown without an interval and not used:
    the run keeps the plan's own lr or batch, and the note says so. With a concrete run, lr* is for
    the parameters its shape really has, and the batch is rounded to whole sequences of its context.
    """
    if fit is None:
        if run is None:
            return None, None
        return None, f"lr and batch of the concrete run come from {run_source or 'the plan'}: the sweep has no " \
                     "hyperparameter groups to fit them from"
    if run is not None and isinstance(run.get("n_params"), (int, float)) and run["n_params"] > 0:
        N = float(run["n_params"])
    rec = fit.recommend(N, D, C)
    if flagged_point:
        for q in ("lr", "batch"):
            if rec[q] is not None:
                rec[q] = withheld(rec[q], "the (N, D) it is for comes from a loss law flagged unreliable")
                rec[f"{q}_why"] = "not recommended: the (N, D) comes from a flagged loss law"
    if run is None:
        return rec, None
    kept = []
    for q, key in (("lr", "lr"), ("batch", "batch_tokens")):
        iv = rec[q]
        if iv is None or iv.kind == "unreliable":
            kept.append(q)
            continue
        bounds = list(_bounds(iv))
        if q == "lr":
            run[key], run[f"{key}_interval"] = float(iv.value), bounds
        else:  # the bounds rounded as the batch is (monotone), so the interval still holds the run's batch
            run[key] = whole_sequences(float(iv.value), run)
            run[f"{key}_interval"] = [whole_sequences(b, run) if math.isfinite(b) else b for b in bounds]
    if kept:
        return rec, (f"{' and '.join(kept)} of the concrete run come from {run_source or 'the plan'}: the "
                     "hyperparameter laws give no recommendation for it (see above)")
    return rec, None
