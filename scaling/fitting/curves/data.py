"""Loss curves and schedules to fit or predict: from a CSV (``run, step, lr, loss``) or a sweep.

A run is its learning rate at every step 0 .. T and the steps of interest (with their losses for a
curve). A CSV gives the rate at some steps: between them it is interpolated linearly, and before
a run's first row it warms up linearly from 0. A sweep's runs get the rate the trainer used,
rebuilt from each spec by :func:`scaling.lr_schedule.lr_steps`, and their eval-loss rows.
Bad input is refused with one line naming the data row (counted from 1 after the header).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import pandas as pd

from scaling.batching import steps_for
from scaling.errors import FitError, NotFoundError
from scaling.fitting.core.tabular import parse_numbers, read_csv
from scaling.lr_schedule import lr_steps, schedule_of

__all__ = ["MAX_RUN_STEPS", "MAX_TOTAL_STEPS", "Curve", "Schedule", "curves_from_csv", "curves_from_db",
           "curves_from_frame", "run_curve", "schedules_from_csv", "schedules_from_frame"]

#: The most steps one run may span (its rate is held at every step).
MAX_RUN_STEPS = 10_000_000
#: The most steps all runs of one file may span together.
MAX_TOTAL_STEPS = 50_000_000


@dataclass(frozen=True)
class Schedule:
    """One run's learning rate at every step 0 .. T and the steps wanted."""

    run: str
    lr: np.ndarray
    steps: np.ndarray
    N: Optional[float] = None
    D: Optional[float] = None


@dataclass(frozen=True)
class Curve(Schedule):
    """A run's learning rate and its measured loss at ``steps``."""

    loss: np.ndarray = field(default_factory=lambda: np.zeros(0))


def _column(df: pd.DataFrame, name: str, where: str, required: bool = True) -> Optional[str]:
    hits = [c for c in df.columns if c.strip().lower() == name.lower()]
    if not hits and required:
        raise FitError(f"{where}: no column {name!r} (the columns are {', '.join(map(repr, df.columns))})")
    return hits[0] if hits else None


def _numbers(df: pd.DataFrame, col: str, where: str, allow_missing: bool) -> np.ndarray:
    parsed = parse_numbers(df[col])
    bad = np.flatnonzero(parsed.unreadable | ~(np.isfinite(parsed.values) | np.isnan(parsed.values)))
    if not allow_missing:
        bad = np.union1d(bad, np.flatnonzero(np.isnan(parsed.values)))
    if bad.size:
        i = int(bad[0])
        cell = "" if parsed.text is None else str(parsed.text.iloc[i])
        what = "is empty" if cell.strip() == "" or cell == "<NA>" else f"is {cell!r}, not a number"
        raise FitError(f"{where}, data row {i + 1}: {col} {what}")
    return parsed.values


def _runs(df: pd.DataFrame, where: str, *, with_loss: bool) -> list[tuple[str, np.ndarray, dict[str, Any]]]:
    """Each run's row indices (file order) and its columns, checked."""
    run_col = _column(df, "run", where)
    step = _numbers(df, _column(df, "step", where), where, allow_missing=False)
    lr = _numbers(df, _column(df, "lr", where), where, allow_missing=False)
    cols: dict[str, Any] = {"step": step, "lr": lr}
    if with_loss:
        cols["loss"] = _numbers(df, _column(df, "loss", where), where, allow_missing=True)
    predict_col = None if with_loss else _column(df, "predict", where, required=False)
    if predict_col is not None:
        cols["predict"] = _numbers(df, predict_col, where, allow_missing=False)
    for name in ("N", "D"):
        c = _column(df, name, where, required=False)
        if c is not None:
            cols[name] = _numbers(df, c, where, allow_missing=True)
    names = df[run_col].astype("string").str.strip()
    for i in np.flatnonzero(names.isna().to_numpy() | (names == "").fillna(True).to_numpy(bool)):
        raise FitError(f"{where}, data row {i + 1}: the run is empty")
    bad = np.flatnonzero((step < 0) | (step != np.round(step)))
    if bad.size:
        i = int(bad[0])
        raise FitError(f"{where}, data row {i + 1}: step {step[i]:g} is not a whole number of steps >= 0")
    if step.size and float(step.max()) >= MAX_RUN_STEPS:
        i = int(np.argmax(step))
        raise FitError(f"{where}, data row {i + 1}: step {step[i]:g} is beyond the {MAX_RUN_STEPS:,} steps a run may have")
    bad = np.flatnonzero(lr < 0)
    if bad.size:
        i = int(bad[0])
        raise FitError(f"{where}, data row {i + 1}: lr {lr[i]:g} is negative")
    if "loss" in cols:
        bad = np.flatnonzero(~(cols["loss"] > 0) & ~np.isnan(cols["loss"]))
        if bad.size:
            i = int(bad[0])
            raise FitError(f"{where}, data row {i + 1}: loss {cols['loss'][i]:g} is not positive")
    if "predict" in cols:
        bad = np.flatnonzero(~np.isin(cols["predict"], (0.0, 1.0)))
        if bad.size:
            i = int(bad[0])
            raise FitError(f"{where}, data row {i + 1}: predict must be 0 or 1, not {cols['predict'][i]:g}")
    out, total = [], 0
    for run, idx in names.groupby(names, sort=False).indices.items():
        idx = np.sort(np.asarray(idx))
        s = step[idx]
        back = np.flatnonzero(np.diff(s) < 0)
        if back.size:
            i = int(idx[back[0] + 1])
            raise FitError(f"{where}, data row {i + 1}: run {run!r} goes back from step {s[back[0]]:g} to "
                           f"{step[i]:g} (a run's steps must increase down the file)")
        twice = np.flatnonzero(np.diff(s) == 0)
        if twice.size:
            i = int(idx[twice[0] + 1])
            raise FitError(f"{where}, data row {i + 1}: run {run!r} gives step {step[i]:g} twice "
                           f"(first at data row {int(idx[twice[0]]) + 1})")
        r = lr[idx]
        positive = np.flatnonzero(r > 0)
        late = np.flatnonzero(r <= 0)
        late = late[late > positive[0]] if positive.size else late
        if late.size or not positive.size:
            i = int(idx[late[0]]) if late.size else int(idx[-1])
            raise FitError(f"{where}, data row {i + 1}: run {run!r} has lr {lr[i]:g} at step {step[i]:g}, after its "
                           "warmup (a learning rate must be positive once it has started)")
        if "loss" in cols and not np.isfinite(cols["loss"][idx]).any():
            raise FitError(f"{where}, data row {int(idx[0]) + 1}: run {run!r} has no loss in any of its "
                           f"{idx.size} row(s)")
        total += int(s[-1]) + 1
        if total > MAX_TOTAL_STEPS:
            raise FitError(f"{where}: the runs span more than {MAX_TOTAL_STEPS:,} steps together")
        out.append((str(run), idx, cols))
    if not out:
        raise FitError(f"{where}: no rows")
    return out


def _expand(steps: np.ndarray, lr: np.ndarray) -> np.ndarray:
    """The rate at every step 0 .. last: linear between given steps, a linear warmup from 0 before the first."""
    every = np.arange(int(steps[-1]) + 1, dtype=float)
    out = np.interp(every, steps, lr)
    first = int(steps[0])
    if first > 0:
        out[:first] = lr[0] * every[:first] / first
    return out


def _first(values: Optional[np.ndarray]) -> Optional[float]:
    if values is None:
        return None
    ok = values[np.isfinite(values)]
    return float(ok[0]) if ok.size else None


def curves_from_frame(df: pd.DataFrame, where: str = "the table") -> list[Curve]:
    """Curves from a table of ``run, step, lr, loss`` (``loss`` empty where only the rate is known)."""
    out = []
    for run, idx, cols in _runs(df, where, with_loss=True):
        s, loss = cols["step"][idx], cols["loss"][idx]
        has = np.isfinite(loss)
        N = _first(cols["N"][idx]) if "N" in cols else None
        D = _first(cols["D"][idx]) if "D" in cols else None
        out.append(Curve(run, _expand(s, cols["lr"][idx]), s[has].astype(np.int64), N, D, loss=loss[has]))
    return out


def schedules_from_frame(df: pd.DataFrame, where: str = "the table") -> list[Schedule]:
    """Schedules from a table of ``run, step, lr`` (optional ``predict`` 0/1: the steps wanted, else all;
    optional ``N``: the model size, where the curves come from several)."""
    out = []
    for run, idx, cols in _runs(df, where, with_loss=False):
        s = cols["step"][idx]
        wanted = s if "predict" not in cols else s[cols["predict"][idx] == 1]
        N = _first(cols["N"][idx]) if "N" in cols else None
        out.append(Schedule(run, _expand(s, cols["lr"][idx]), wanted.astype(np.int64), N))
    return out


def curves_from_csv(path: str | Path) -> list[Curve]:
    """Curves from a CSV of ``run, step, lr, loss`` (optional ``N``, ``D`` per run)."""
    df, _ = read_csv(path)
    return curves_from_frame(df, str(path))


def schedules_from_csv(path: str | Path) -> list[Schedule]:
    """Schedules to predict from a CSV of ``run, step, lr`` (optional ``predict``)."""
    df, _ = read_csv(path)
    return schedules_from_frame(df, str(path))


def run_curve(run: str, spec: dict[str, Any], steps: np.ndarray, loss: np.ndarray,
              N: Optional[float] = None) -> Optional[Curve]:
    """A run's curve from its spec (as stored) and its eval-loss rows; None without a usable loss or rate.

    The rate of every step is rebuilt by :func:`scaling.lr_schedule.lr_steps` from the spec's peak
    ``optimizer.lr``, its ``schedule`` and its steps; a row at step s follows s updates (the rates
    of steps 0 .. s-1)."""
    batch = int(spec.get("batch_tokens") or 0)
    tokens = int(spec.get("tokens") or 0)
    peak = float((spec.get("optimizer") or {}).get("lr") or 0.0)
    ok = np.isfinite(loss) & (loss > 0)
    if batch <= 0 or tokens <= 0 or peak <= 0 or not ok.any():
        return None
    total = steps_for(tokens, batch)
    lr = lr_steps(total, peak, schedule_of(spec.get("schedule")))
    at = np.clip(np.asarray(steps, np.int64)[ok] - 1, 0, total - 1)
    order = np.argsort(at, kind="stable")
    at, first = np.unique(at[order], return_index=True)
    return Curve(run, lr, at, N, float(tokens), loss=loss[ok][order][first])


def curves_from_db(url: str, sweep: Optional[str] = None, *,
                   runs: Optional[pd.DataFrame] = None) -> tuple[list[Curve], str]:
    """Each completed run's eval-loss curve and the rate its trainer used at every step; (curves, sweep).

    The rate is rebuilt from the run's spec (peak ``optimizer.lr``, its ``schedule``, its steps)
    by the function the trainer steps by. A cooldown branch's steps before it left its trunk are
    the trunk's, at the same rates (its schedule decays only after its start). ``runs``: the sweep's
    completed runs with their specs, read already by the caller (else read here)."""
    from scaling import db
    from scaling import vocab as names

    with db.connect(url) as res:
        if sweep is None:
            sweep = res.latest_sweep()
            if sweep is None:
                raise NotFoundError("the database has no sweeps to fit")
        if runs is None:
            runs = res.runs(sweep=sweep, status=names.COMPLETED)
        if len(runs) == 0:
            raise FitError(f"sweep {sweep!r} has no completed runs to fit")
        m = res.metrics(run_keys=list(runs["run_key"]), names=[names.EVAL_LOSS], sweep=sweep)
    out = []
    for _, run in runs.iterrows():
        rows = m[m["run_key"] == run["run_key"]]
        spec = run.get("spec")
        curve = run_curve(str(run["run_key"]), spec if isinstance(spec, dict) else {}, rows["step"].to_numpy(),
                          rows["value"].to_numpy(float), float(run.get("N") or np.nan))
        if curve is not None:
            out.append(curve)
    if not out:
        raise FitError(f"sweep {sweep!r}: no completed run has an eval-loss curve and a learning rate to fit")
    return out, sweep
