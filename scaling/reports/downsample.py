"""Thin long training curves for display without moving what a reader looks for.

A curve of 100,000 steps drawn as SVG makes a report slow to open and large on disk. Curves are
read on log axes, so the points kept are spaced evenly in log(x): early steps, where the loss
moves fastest, keep their detail. Each curve's minimum (the point the Chinchilla envelope and the
final-loss columns care about), its first point and its last point are always kept.
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def log_spaced_indices(x: np.ndarray, max_points: int) -> np.ndarray:
    """Indices into ``x`` (sorted ascending) spaced evenly in log(x), about ``max_points`` of them.

    Non-positive x (a step 0 at zero tokens) cannot be placed on a log axis; those points are
    thinned linearly instead. Always includes the first and last index.
    """
    x = np.asarray(x, dtype=float)
    n = len(x)
    if n <= max_points:
        return np.arange(n)
    if max_points < 2:
        return np.array([n - 1])
    positive = np.flatnonzero(x > 0)
    if len(positive) < 2 or x[positive[-1]] <= x[positive[0]]:
        return np.unique(np.linspace(0, n - 1, max_points).round().astype(int))
    first = positive[0]
    lo, hi = np.log(x[first]), np.log(x[positive[-1]])
    targets = np.exp(np.linspace(lo, hi, max_points))
    picked = np.searchsorted(x, targets, side="left").clip(0, n - 1)
    # searchsorted lands many targets on the same early index: keep each once, then top up
    # with evenly spaced indices so the budget is used where there are points to show.
    picked = np.unique(np.concatenate([[0, first, n - 1], picked]))
    spare = max_points - len(picked)
    if spare > 0:
        extra = np.linspace(0, n - 1, spare + 2).round().astype(int)
        picked = np.unique(np.concatenate([picked, extra]))
    return picked


def keep_minimum(indices: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``indices`` plus the index of the smallest finite ``y``, sorted."""
    y = np.asarray(y, dtype=float)
    finite = np.isfinite(y)
    if not finite.any():
        return indices
    argmin = int(np.flatnonzero(finite)[np.argmin(y[finite])])
    return np.union1d(indices, [argmin])


def downsample_curve(x: np.ndarray, y: np.ndarray, max_points: int = 200) -> tuple[np.ndarray, np.ndarray]:
    """Log-spaced subsample of one curve (x ascending) that keeps its minimum, first and last."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    order = np.argsort(x, kind="stable")
    x, y = x[order], y[order]
    idx = keep_minimum(log_spaced_indices(x, max_points), y)
    return x[idx], y[idx]


def downsample_frame(
    df: pd.DataFrame, by: str | list[str], x: str, y: str = "value", max_points: int = 200
) -> pd.DataFrame:
    """Apply :func:`downsample_curve`'s choice of rows to each group of a long DataFrame.

    Every column of the kept rows survives (so tokens and flops stay paired with each point);
    rows come back sorted by group, then x. One sort for the whole frame, then numpy slices per
    group: a million rows in 1,000 curves take a fraction of a second.
    """
    if df.empty:
        return df
    codes = df.groupby(by, sort=False).ngroup().to_numpy()
    xv = df[x].to_numpy(dtype=float)
    yv = df[y].to_numpy(dtype=float)
    order = np.lexsort((xv, codes))
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    keep: list[np.ndarray] = []
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(order)]):
        rows = order[a:b]
        if b - a > max_points:
            rows = rows[keep_minimum(log_spaced_indices(xv[rows], max_points), yv[rows])]
        keep.append(rows)
    return df.iloc[np.concatenate(keep)]


#: Runs whose curves a report draws at most: a few hundred lines already fill a figure, and
#: every further one adds to what a browser must parse and draw (10,000 runs made 75 MB).
MAX_RUNS_DRAWN = 300


def thin_runs(runs: pd.DataFrame, max_runs: int = MAX_RUNS_DRAWN, by: tuple[str, ...] = ("N", "D")) -> pd.DataFrame:
    """At most ``max_runs`` of ``runs`` (rows with ``run_key`` and the ``by`` columns), spread over
    the configurations ``by``: one run of every configuration before a second of any (seeds are
    repeats), and evenly spaced configurations when there are more of them than ``max_runs``."""
    if len(runs) <= max_runs:
        return runs
    cols = [c for c in by if c in runs.columns]
    if not cols:
        return runs.iloc[np.unique(np.linspace(0, len(runs) - 1, max_runs).round().astype(int))]
    order = runs.sort_values([*cols, "run_key"], kind="stable")
    repeat = order.groupby(cols, sort=False, dropna=False).cumcount().to_numpy()
    config = order.groupby(cols, sort=True, dropna=False).ngroup().to_numpy()
    first = np.flatnonzero(repeat == 0)
    if len(first) >= max_runs:
        picked = first[np.unique(np.linspace(0, len(first) - 1, max_runs).round().astype(int))]
    else:
        picked = np.lexsort((config, repeat))[:max_runs]  # every first run, then every second, ...
    return order.iloc[np.sort(picked)]


#: Rows of a report's runs table and markers of its events figure at most (``scaling runs`` and
#: the read API list everything).
MAX_TABLE_ROWS = 1000
MAX_EVENTS_DRAWN = 2000
#: Runs drawn at most as markers of one figure (IsoFLOP profiles, residuals, contour, throughput).
MAX_POINTS_DRAWN = 2000


def thin_table(runs: pd.DataFrame, max_rows: int = MAX_TABLE_ROWS) -> pd.DataFrame:
    """At most ``max_rows`` runs to list, in their order: every run that did not complete first
    (they need a reader's attention), then :func:`thin_runs` of the completed ones."""
    if len(runs) <= max_rows:
        return runs
    attention = runs[runs["status"] != "completed"].iloc[:max_rows]
    rest = thin_runs(runs[runs["status"] == "completed"], max_rows - len(attention))
    return runs[runs.index.isin(attention.index) | runs.index.isin(rest.index)]


def thin_events(events: pd.DataFrame, prefer: frozenset[str] | set[str], max_events: int = MAX_EVENTS_DRAWN) -> pd.DataFrame:
    """At most ``max_events`` events, in their order: every event of a ``prefer`` kind first (up to
    the cap), then evenly spaced others."""
    if len(events) <= max_events:
        return events
    wanted = events["kind"].isin(prefer).to_numpy()
    first = np.flatnonzero(wanted)[:max_events]
    others = np.flatnonzero(~wanted)
    room = max_events - len(first)
    if room > 0 and len(others):
        others = others[np.unique(np.linspace(0, len(others) - 1, min(room, len(others))).round().astype(int))]
    else:
        others = others[:0]
    return events.iloc[np.sort(np.concatenate([first, others]))]
