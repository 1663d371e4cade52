"""Fitting input: one tidy DataFrame of points ``N, D, C, loss`` (+ optional curves).

Sources are the database (a sweep's completed runs) and CSV files of anyone's measurements.
Whatever the source, :func:`prepare` validates the numbers, fills C or D from the other with the
FLOP convention, averages repeated seeds per (N, D) and keeps their spread as the point's noise.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scaling.errors import FitError, NotFoundError

#: CSV column aliases (case-insensitive), first match wins.
ALIASES: dict[str, tuple[str, ...]] = {
    "N": ("N", "params", "n_params", "Model Size", "parameters"),
    "D": ("D", "tokens", "d_tokens"),
    "C": ("C", "flops", "compute", "compute_flops", "Training FLOP"),
    "loss": ("loss", "final_loss", "eval_loss"),
    "seed": ("seed",),
    "unique_tokens": ("unique_tokens", "U"),
}

#: Training FLOPs per parameter per token in the 6ND convention (Kaplan et al. 2020, Sec. 2.1).
SIX = 6.0

#: Muennighoff et al. (2023), eq. 5: repeated data decays in value with this many epochs' scale.
R_STAR_DATA = 15.4


@dataclass
class FitData:
    """Averaged points plus what a fit needs to know about where they came from.

    ``points`` columns: N, D, C, loss, loss_std (spread over seeds, NaN for one seed), n_seeds.
    ``curves`` (optional) columns: run_key, N, tokens, flops, loss.
    ``flops_per_param_token`` is k in C = k N D (6 for the 6ND convention; the median ratio of
    the data otherwise), used to map a budget to (N, D) and back.
    """

    points: pd.DataFrame
    curves: pd.DataFrame | None = None
    params_convention: str = "non_embedding"
    flops_convention: str = "6N"
    flops_per_param_token: float = SIX
    source: str = ""
    unique_tokens: float | None = None
    notes: list[str] = field(default_factory=list)

    def conventions(self) -> dict[str, Any]:
        return {
            "params": self.params_convention,
            "flops": self.flops_convention,
            "flops_per_param_token": self.flops_per_param_token,
            "effective_data": self.unique_tokens is not None,
            "unique_tokens": self.unique_tokens,
        }

    def fingerprint(self) -> str:
        """A stable hash of the averaged points and conventions: equal data, equal fingerprint."""
        pts = self.points[["N", "D", "C", "loss"]].sort_values(["N", "D"]).to_numpy()
        payload = {
            "points": [[float(f"{v:.12g}") for v in row] for row in pts],
            "conventions": self.conventions(),
        }
        if self.curves is not None and len(self.curves):
            cur = self.curves[["N", "flops", "loss"]].sort_values(["N", "flops"]).to_numpy()
            payload["curves"] = hashlib.sha256(np.ascontiguousarray(cur.round(12)).tobytes()).hexdigest()
        text = json.dumps(payload, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def effective_tokens(D: np.ndarray | float, unique_tokens: float, r_star: float = R_STAR_DATA) -> np.ndarray:
    """Muennighoff et al. (2023) effective data D' = U + U R* (1 - exp(-R/R*)), R = D/U - 1.

    Tokens beyond one pass over the U unique tokens are worth less and less; D <= U is unchanged.
    """
    D = np.asarray(D, dtype=float)
    U = float(unique_tokens)
    if not U > 0:
        raise FitError(f"unique_tokens must be positive, got {unique_tokens}")
    R = np.maximum(D / U - 1.0, 0.0)
    return np.where(D <= U, D, U + U * r_star * (1.0 - np.exp(-R / r_star)))


def _pick(columns: list[str], names: tuple[str, ...]) -> str | None:
    lower = {c.lower().strip(): c for c in columns}
    for name in names:
        if name.lower() in lower:
            return lower[name.lower()]
    return None


def from_frame(
    df: pd.DataFrame,
    *,
    flops_convention: str = "6N",
    params_convention: str = "non_embedding",
    source: str = "frame",
    unique_tokens: float | None = None,
    curves: pd.DataFrame | None = None,
) -> FitData:
    """Map aliased columns to N, D, C, loss, derive the missing one of C/D, then :func:`prepare`."""
    from scaling.accounting import FLOPS_CONVENTIONS

    if flops_convention not in FLOPS_CONVENTIONS:
        raise FitError(f"unknown FLOP convention {flops_convention!r} (use one of {', '.join(FLOPS_CONVENTIONS)})")
    cols = list(df.columns)
    picked = {key: _pick(cols, names) for key, names in ALIASES.items()}
    if picked["N"] is None:
        raise FitError(f"{source}: no parameter-count column (one of {', '.join(ALIASES['N'])})")
    if picked["loss"] is None:
        raise FitError(f"{source}: no loss column (one of {', '.join(ALIASES['loss'])})")
    if picked["D"] is None and picked["C"] is None:
        raise FitError(
            f"{source}: need tokens or FLOPs: no column among {', '.join(ALIASES['D'] + ALIASES['C'])}"
        )
    out = pd.DataFrame({"N": pd.to_numeric(df[picked["N"]], errors="coerce")})
    out["loss"] = pd.to_numeric(df[picked["loss"]], errors="coerce")
    k = SIX if flops_convention == "6N" else None
    if picked["D"] is not None:
        out["D"] = pd.to_numeric(df[picked["D"]], errors="coerce")
    if picked["C"] is not None:
        out["C"] = pd.to_numeric(df[picked["C"]], errors="coerce")
    if "D" not in out:
        if k is None:
            raise FitError(f"{source}: tokens can only be derived from FLOPs under the 6N convention")
        out["D"] = out["C"] / (k * out["N"])
    if "C" not in out:
        if k is None:
            raise FitError(f"{source}: FLOPs can only be derived from tokens under the 6N convention")
        out["C"] = k * out["N"] * out["D"]
    if picked["seed"] is not None:
        out["seed"] = df[picked["seed"]].to_numpy()
    if unique_tokens is None and picked["unique_tokens"] is not None:
        u = pd.to_numeric(df[picked["unique_tokens"]], errors="coerce").dropna().unique()
        unique_tokens = float(u[0]) if len(u) == 1 else None
    return prepare(
        out,
        flops_convention=flops_convention,
        params_convention=params_convention,
        source=source,
        unique_tokens=unique_tokens,
        curves=curves,
    )


def from_csv(path: str | Path, *, flops_convention: str = "6N", unique_tokens: float | None = None) -> FitData:
    """Read a CSV of measurements (column aliases in :data:`ALIASES`)."""
    p = Path(path)
    if not p.is_file():
        raise NotFoundError(f"CSV file not found: {p}")
    try:
        df = pd.read_csv(p)
    except Exception as exc:  # pandas raises several parser errors
        raise FitError(f"{p}: cannot read as CSV ({exc.__class__.__name__}: {exc})") from None
    return from_frame(df, flops_convention=flops_convention, source=str(p), unique_tokens=unique_tokens)


def prepare(
    df: pd.DataFrame,
    *,
    flops_convention: str = "6N",
    params_convention: str = "non_embedding",
    source: str = "",
    unique_tokens: float | None = None,
    curves: pd.DataFrame | None = None,
) -> FitData:
    """Validate N, D, C, loss and average repeated seeds per (N, D).

    Raises :class:`FitError` naming the first bad row for non-finite or non-positive values.
    """
    where = f"{source}: " if source else ""
    if len(df) == 0:
        raise FitError(f"{where}no points to fit (no completed runs or empty file)")
    for col in ("N", "D", "C", "loss"):
        vals = pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(vals) | (vals <= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise FitError(
                f"{where}{int(bad.sum())} point(s) with non-positive or non-finite {col} "
                f"(first: row {i}, {col}={vals[i]!r})"
            )
    work = df[["N", "D", "C", "loss"]].astype(float).copy()
    # Seeds repeat (N, D): average them, keep the spread as that point's noise.
    keyN = work["N"].map(lambda v: float(f"{v:.9g}"))
    keyD = work["D"].map(lambda v: float(f"{v:.9g}"))
    grouped = work.groupby([keyN, keyD], sort=True)
    points = pd.DataFrame(
        {
            "N": grouped["N"].mean(),
            "D": grouped["D"].mean(),
            "C": grouped["C"].mean(),
            "loss": grouped["loss"].mean(),
            "loss_std": grouped["loss"].std(ddof=1),
            "n_seeds": grouped["loss"].size(),
        }
    ).reset_index(drop=True)
    ratio = points["C"] / (points["N"] * points["D"])
    k = SIX if flops_convention == "6N" else float(np.median(ratio))
    notes: list[str] = []
    if (points["n_seeds"] > 1).any():
        notes.append(f"averaged {len(work)} runs into {len(points)} points over seeds")
    if unique_tokens is not None:
        points["D_raw"] = points["D"]
        points["D"] = effective_tokens(points["D"].to_numpy(), unique_tokens)
        notes.append(f"D is Muennighoff et al.'s effective data with U = {unique_tokens:.4g} unique tokens")
    if curves is not None:
        curves = curves.dropna(subset=["tokens", "flops", "loss"])
        curves = curves[(curves["tokens"] > 0) & (curves["flops"] > 0) & (curves["loss"] > 0)]
        curves = curves[np.isfinite(curves["loss"])]
        if len(curves) == 0:
            curves = None
    return FitData(
        points=points,
        curves=curves,
        params_convention=params_convention,
        flops_convention=flops_convention,
        flops_per_param_token=k,
        source=source,
        unique_tokens=unique_tokens,
        notes=notes,
    )


def group_budgets(C: np.ndarray, rel_tol: float = 0.05) -> np.ndarray:
    """Label points whose FLOPs agree within ``rel_tol`` (in log space) as one IsoFLOP budget.

    Returns an integer label per point, budgets numbered by increasing compute.
    """
    logc = np.log(np.asarray(C, dtype=float))
    order = np.argsort(logc)
    labels = np.empty(len(logc), dtype=int)
    current, start = 0, logc[order[0]] if len(order) else 0.0
    for pos, i in enumerate(order):
        if pos and logc[i] - start > math.log1p(rel_tol):
            current += 1
            start = logc[i]
        labels[i] = current
    return labels


def from_db(url: str, sweep: str | None = None, *, effective_data: bool = False) -> tuple[FitData, str]:
    """A sweep's completed runs (and their loss curves) as :class:`FitData`; returns (data, sweep).

    N is the runs table's ``N`` (the sweep's params convention); the loss is the final eval loss,
    falling back to the final train loss where no eval loss was recorded.
    """
    from scaling import db
    from scaling import vocab as names

    with db.connect(url) as res:
        if sweep is None:
            sweep = res.latest_sweep()
            if sweep is None:
                raise NotFoundError("the database has no sweeps to fit")
        runs = res.runs(sweep=sweep, status="completed")
        info = _sweep_info(res, sweep)
        if runs is None or len(runs) == 0:
            raise FitError(f"sweep {sweep!r} has no completed runs to fit")
        runs = runs.copy()
        loss = pd.to_numeric(runs.get("final_loss"), errors="coerce")
        if "final_train_loss" in runs:
            loss = loss.fillna(pd.to_numeric(runs["final_train_loss"], errors="coerce"))
        runs["loss"] = loss
        params_conv = str(info.get("params_convention") or _spec_field(runs, "params_convention") or "non_embedding")
        flops_conv = str(info.get("flops_convention") or _spec_field(runs, "flops_convention") or "6N")
        unique = None
        if effective_data:
            unique = _unique_tokens(runs)
            if unique is None:
                raise FitError(f"sweep {sweep!r}: effective data needs the corpus's unique_tokens in the run specs")
        m = res.metrics(run_keys=list(runs["run_key"]), names=[names.EVAL_LOSS, names.TRAIN_LOSS, names.EPOCH],
                        sweep=sweep)
        curves = loss_curves(m, runs[["run_key", "N"]], names.TRAIN_LOSS, names.EVAL_LOSS, names.EPOCH)
    data = prepare(
        runs[["N", "D", "C", "loss"]],
        flops_convention=flops_conv,
        params_convention=params_conv,
        source=f"sweep {sweep!r}",
        unique_tokens=unique,
        curves=curves,
    )
    return data, sweep


def loss_curves(m: pd.DataFrame | None, runs: pd.DataFrame, train: str, evaluation: str, epoch: str) -> pd.DataFrame | None:
    """Each run's loss curve for approach 1: its train loss over its first epoch, else its eval loss.

    Hoffmann et al. (2022, Sec. 3.1) build the envelope from smoothed *training* loss curves: in
    a single pass over the data each batch is unseen when its loss is measured, so the train loss
    estimates held-out loss, logged every few steps where eval loss is logged rarely (a handful of
    points per run cannot place a minimum between budgets). Past one epoch the train loss is on
    seen data and biased low, so those steps are dropped. A run with fewer than two such train
    points falls back to its eval curve. Column ``metric`` says which was used.
    """
    if m is None or len(m) == 0:
        return None
    m = m[["run_key", "step", "tokens", "flops", "name", "value"]]
    tr = m[m["name"] == train]
    ep = m[m["name"] == epoch]
    if len(tr) and len(ep):
        tr = tr.merge(ep[["run_key", "step", "value"]].rename(columns={"value": "_epoch"}), on=["run_key", "step"],
                      how="left")
        tr = tr[~(pd.to_numeric(tr["_epoch"], errors="coerce") > 1.0)].drop(columns="_epoch")
    use_train = tr.groupby("run_key").size()
    use_train = set(use_train[use_train >= 2].index)
    ev = m[(m["name"] == evaluation) & ~m["run_key"].isin(use_train)]
    out = pd.concat([tr[tr["run_key"].isin(use_train)], ev], ignore_index=True)
    if len(out) == 0:
        return None
    out = out.rename(columns={"value": "loss", "name": "metric"}).merge(runs, on="run_key", how="inner")
    return out[["run_key", "N", "tokens", "flops", "loss", "metric"]].astype(
        {"tokens": float, "flops": float, "loss": float})


def _sweep_info(res: Any, sweep: str) -> dict[str, Any]:
    """The sweep's stored description (conventions, plan) when the read API offers it."""
    fn = getattr(res, "sweep_info", None)
    if fn is None:
        return {}
    info = fn(sweep)
    if info is None:
        raise NotFoundError(f"sweep {sweep!r} not found")
    return dict(info)


def _spec_field(runs: pd.DataFrame, name: str) -> Any:
    if "spec" not in runs or not len(runs):
        return None
    from scaling.db.jsonvalues import as_dict

    return as_dict(runs["spec"].iloc[0]).get(name)


def _unique_tokens(runs: pd.DataFrame) -> float | None:
    data = _spec_field(runs, "data")
    if isinstance(data, dict) and data.get("unique_tokens"):
        return float(data["unique_tokens"])
    return None
