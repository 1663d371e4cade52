"""Fitted laws, as the figures draw them: frontiers with bands, IsoFLOP slices, backtests.

Fits arrive as stored dicts (the fits table) or as live laws; :func:`as_law` turns either into a
law through ``scaling.fitting.from_dict``. Only the fitting package's public surface is used:
``optimal(C)``, ``optimal_interval(C)``, ``predict(N, D)``, ``intervals()``, and the ``plot``
part of ``to_dict()`` (fitted points, parabolas, flagged budgets). Views only: which fits a
report shows, and where they come from, is :mod:`scaling.reports.report_data`'s job.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from scaling.errors import UserError
from scaling.fitting import KINDS, Law, from_dict
from scaling.fitting import sweep_fit
from scaling.fitting.core.base import NotFittedError
from scaling.fitting.core.measurements import group_budgets

#: Method kinds, in the order the report lists them, with their display names (the fitting package's).
LABELS = {kind: label for kind, (_, label) in KINDS.items()}


def as_law(obj: Law | dict[str, Any] | None) -> Law | None:
    """A fitted law from a law or its ``to_dict()`` form; None when it cannot be rebuilt."""
    if isinstance(obj, Law):
        return obj
    if isinstance(obj, dict):
        try:
            return from_dict(obj)
        except (UserError, KeyError, TypeError, ValueError):  # a stored form this version cannot read
            return None
    return None


def kind_of(method: str | None, law: Law | dict[str, Any] | None = None) -> str:
    """One of :data:`scaling.fitting.KINDS` for a law; else ``method`` (a report's fits are keyed by kind)."""
    if isinstance(law, Law):
        return sweep_fit.kind_of(law)
    return str(method or "law")


def label_of(method: str | None, law: Law | dict[str, Any] | None = None) -> str:
    kind = kind_of(method, law)
    return LABELS.get(kind, kind)


def plot_info(law: Law | dict[str, Any] | None) -> dict[str, Any]:
    """The figure data a law stored with itself (``to_dict()['plot']``), or {}."""
    if isinstance(law, dict):
        return law.get("plot") or {}
    if not isinstance(law, Law):
        return {}
    info = law.plot_  # set by from_dict and by fit()
    if info is None:  # a law fitted in this process
        try:
            info = law.to_dict().get("plot")
        except NotFittedError:  # an unfitted law has nothing to draw
            info = None
    return info or {}


@dataclass(eq=False)  # hashed by identity, so its bands can be cached
class FrontierView:
    """One method's compute-optimal frontier: the line, its band, and the points it rests on."""

    method: str
    kind: str
    label: str
    law: Law
    points: pd.DataFrame | None  # C, N, D: the measured optima (envelope or per-budget minima)

    def curve(self, C: np.ndarray) -> dict[str, np.ndarray]:
        C = np.asarray(C, float)
        with np.errstate(all="ignore"):
            N, D, L = self.law.optimal(C)
        return {"N": np.broadcast_to(np.asarray(N, float), C.shape), "D": np.broadcast_to(np.asarray(D, float), C.shape),
                "loss": np.broadcast_to(np.asarray(L, float), C.shape)}

    def band(self, C: np.ndarray, key: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The bootstrap 95% interval of ``key`` (N or D) along C, or None without a bootstrap."""
        return self._bands(tuple(np.asarray(C, float))).get(key)

    @functools.lru_cache(maxsize=4)
    def _bands(self, C: tuple[float, ...]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Intervals of N and D along C, from one ``optimal_interval`` call per budget (none for an
        unreliable law: its bootstrap spread is not a 95% interval)."""
        if self.law.replicates_ is None or not self.law.reliable():
            return {}
        rows = []
        for c in C:
            try:
                iv = self.law.optimal_interval(float(c))
            except Exception:  # a law whose replicates cannot be evaluated here has no band
                return {}
            rows.append([end for k in ("N", "D") for end in (iv[k].interval or (math.nan, math.nan))])
        a = np.asarray(rows, float)
        out = {}
        for j, k in enumerate(("N", "D")):
            lo, hi = a[:, 2 * j], a[:, 2 * j + 1]
            if np.isfinite(lo).all() and np.isfinite(hi).all():
                out[k] = (lo, hi)
        return out


def frontier(method: str, law: Law | dict[str, Any]) -> FrontierView | None:
    """The frontier view of a fitted law, or None when it gives no N_opt(C)."""
    model = as_law(law)
    if model is None:
        return None
    try:
        N, D, _ = model.optimal(np.array([1e18]))
        if not (np.isfinite(np.asarray(N, float)).all() and np.isfinite(np.asarray(D, float)).all()):
            return None
    except Exception:  # a law that cannot evaluate its frontier is left out of the figure, not the report
        return None
    kind = kind_of(method, model)
    return FrontierView(method=method, kind=kind, label=label_of(method, model), law=model,
                        points=_frontier_points(model))


def _frontier_points(law: Law) -> pd.DataFrame | None:
    """The measured optima a frontier rests on: approach 1's envelope, approach 2's budgets.

    Only the points the fit used (``status == "used"``); D_opt = C / (k N_opt) with the law's k.
    """
    plot = plot_info(law)
    rows = plot.get("budgets") or plot.get("envelope")
    if not rows:
        return None
    df = _frame(rows)
    c_col = "C" if "C" in df.columns else "flops" if "flops" in df.columns else None
    if c_col is None or "N_opt" not in df.columns:
        return None
    if "status" in df.columns:
        df = df[df["status"] == "used"]
    out = pd.DataFrame({"C": pd.to_numeric(df[c_col], errors="coerce"), "N": pd.to_numeric(df["N_opt"], errors="coerce")})
    k = float(law.k_)
    out["D"] = out["C"] / (k * out["N"])
    out = out.dropna()
    return out if not out.empty else None


def _frame(rows: pd.DataFrame | dict[str, Any] | Iterable[dict[str, Any]]) -> pd.DataFrame:
    if isinstance(rows, pd.DataFrame):
        return rows
    if isinstance(rows, dict):
        return pd.DataFrame(rows)
    return pd.DataFrame(list(rows))


# -- IsoFLOP slices ----------------------------------------------------------------------------
def isoflop_slices(isoflop: Law | dict[str, Any] | None, done: pd.DataFrame) -> dict[float, dict[str, Any]]:
    """Runs grouped by compute budget, with the fitted parabola and minimum where there is one.

    Returns {budget: {"points": runs, "parabola": {"N", "loss"} | None, "N_opt", "loss_opt",
    "flagged", "status"}}. Budgets are grouped as the fit groups them (C within 5%); a budget with
    a single run and no fitted minimum is left out (a grid of N x D has no IsoFLOP slices).
    """
    C = done["C"].to_numpy(float)
    labels = group_budgets(C) if C.size else np.array([], int)
    slices: dict[float, dict[str, Any]] = {}
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)
        slices[float(np.median(C[idx]))] = {"points": done.iloc[idx], "parabola": None, "N_opt": None, "loss_opt": None,
                          "flagged": False, "status": ""}
    for fitted in fitted_slices(isoflop):
        c = fitted["C"]
        match = _nearest(slices, c)
        if match is None:
            continue
        sl = slices[match]
        sl["flagged"], sl["status"] = fitted["flagged"], fitted["status"]
        sl["N_opt"], sl["loss_opt"] = fitted["N_opt"], fitted["loss_opt"]
        if fitted["coef"] is not None:
            # drawn over the sizes it was fitted to (a window around the minimum), a little beyond
            lo, hi = fitted["N_range"] or (sl["points"]["N"].min(), sl["points"]["N"].max())
            x = np.linspace(np.log(lo) - 0.15, np.log(hi) + 0.15, 60)  # coefficients are in ln N
            sl["parabola"] = {"N": np.exp(x), "loss": np.polyval(fitted["coef"], x)}
    return {b: s for b, s in slices.items() if len(s["points"]) >= 2 or s["N_opt"] is not None}


def _nearest(slices: dict[float, Any], c: float, tol: float = 0.05) -> float | None:
    if not slices or not c or not np.isfinite(c):
        return None
    best = min(slices, key=lambda b: abs(math.log(b / c)))
    return best if abs(math.log(best / c)) <= math.log1p(tol) else None


def fitted_slices(isoflop: Law | dict[str, Any] | None) -> list[dict[str, Any]]:
    """Approach 2's per-budget parabolas (``to_dict()['plot']['budgets']``), normalised.

    Each stored budget has C, its sizes and losses, the parabola's coefficients in x = ln N, the
    vertex (N_opt, loss_opt) and a status: "used", or why the budget was left out.
    """
    if isoflop is None:
        return []
    plot = plot_info(as_law(isoflop) or isoflop)
    out = []
    for row in plot.get("budgets") or []:
        if not isinstance(row, dict) or row.get("C") is None:
            continue
        coef = row.get("coef")
        status = str(row.get("status", "used"))
        sizes = np.asarray(row.get("N") or [], float)
        window = [i for i in (row.get("window") or []) if 0 <= int(i) < sizes.size]
        fitted_on = sizes[window] if window else sizes  # the sizes the parabola was fitted to
        out.append({
            "N_range": (float(fitted_on.min()), float(fitted_on.max())) if fitted_on.size else None,
            "C": float(row["C"]),
            "coef": None if coef is None else np.asarray(coef, float),
            "N_opt": _float(row.get("N_opt")),
            "loss_opt": _float(row.get("loss_opt")),
            "flagged": status != "used",
            "status": status,
        })
    return out


def _float(v: object) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


# -- backtest ----------------------------------------------------------------------------------
def backtest_frame(laws: dict[str, Any]) -> pd.DataFrame:
    """Held-out prediction errors each law stored with itself (``plot['backtest']``), one row per run.

    Columns: method, label, N, D, C, rel_error; ``attrs['notes']`` has each law's summary line
    (mean error, N_opt error, or why no backtest was possible).
    """
    rows = []
    notes = []
    for method, law in laws.items():
        bt = plot_info(law).get("backtest")
        label = label_of(method, law)
        if not isinstance(bt, dict):
            continue
        if bt.get("error"):
            notes.append(f"{label}: no backtest: {bt['error']}")
            continue
        for r in bt.get("held_out") or []:
            if isinstance(r, dict) and r.get("rel_error") is not None:
                rows.append({"method": method, "label": label, "N": _float(r.get("N")), "D": _float(r.get("D")),
                             "C": _float(r.get("C")), "rel_error": float(r["rel_error"])})
        line = f"{label}: mean |error| of held-out loss {100 * float(bt.get('mean_abs_rel_error') or 0):.2f}% " \
               f"({len(bt.get('held_out') or [])} held out, {bt.get('n_train', '?')} fitted)"
        nopt = bt.get("N_opt")
        if isinstance(nopt, dict) and nopt.get("rel_error") is not None:
            line += f"; N_opt at C = {float(nopt['C']):.3g} off by {100 * float(nopt['rel_error']):+.3g}%"
        notes.append(line)
    df = pd.DataFrame(rows, columns=["method", "label", "N", "D", "C", "rel_error"])
    df.attrs["notes"] = notes
    return df
