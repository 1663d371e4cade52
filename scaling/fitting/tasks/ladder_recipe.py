"""The OLMo model ladder's data recipe for both steps (Bhagia et al. 2024, their released fitting code).

What the ladder does to the evaluations before fitting, apart from the fits' own search:

- Step 1's point of a run is its final tokens with the task loss averaged over its last
  :data:`SMOOTH_WINDOW` evaluations (one noisy last checkpoint does not set the run's point), here
  only those within the run's last :data:`SMOOTH_SPAN` of tokens: on the ladder's dense checkpoints
  that is all five, on a ladder of a few evaluations per run it keeps mid-training losses out.
- Step 2 drops the first :data:`SKIP_FRACTION` of each run's evaluations (rounded up: the early
  checkpoints, far from the models predicted; a run's last evaluation always stays, so a ladder of
  final evaluations only keeps them all), then replaces each remaining task loss and accuracy by
  its trailing moving average over :data:`SMOOTH_WINDOW` evaluations (the first ones over as many as
  there are).
- Step 2's sigmoid is fitted with one more point, :data:`IDEAL_POINT`: accuracy 1 at task loss 0.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

#: Evaluations averaged: step 1's last ones per run, step 2's trailing window.
SMOOTH_WINDOW = 5
#: Step 1 averages only evaluations this close to the run's end, as a share of its tokens (the ladder's
#: last five lie within its last 9.2%).
SMOOTH_SPAN = 0.1
#: The share of each run's first evaluations that step 2 leaves out, rounded up.
SKIP_FRACTION = 0.1
#: (task loss, accuracy) the ladder adds to the sigmoid's data: a perfect model at zero loss.
IDEAL_POINT = (0.0, 1.0)


def trailing_mean(values: np.ndarray, window: int = SMOOTH_WINDOW) -> np.ndarray:
    """Each value's mean with the ``window - 1`` before it (the first ones: with all before them)."""
    total = np.cumsum(np.asarray(values, float))
    out = total.copy()
    out[window:] = total[window:] - total[:-window]
    return out / np.minimum(np.arange(1, len(out) + 1), window)


def _by_run(ev: pd.DataFrame) -> list[pd.DataFrame]:
    """Each run's evaluations in the order they were taken."""
    return [g.sort_values("tokens", kind="stable") for _, g in ev.groupby("run_key", sort=False)]


def step1_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """Each run's final evaluation with its task loss ``x`` the mean of its last :data:`SMOOTH_WINDOW`
    within :data:`SMOOTH_SPAN` of its end."""
    out = []
    for g in _by_run(ev):
        final = g[g["final"].astype(bool)]
        if len(final):
            last = g.tail(SMOOTH_WINDOW)
            near = last[last["tokens"] >= (1.0 - SMOOTH_SPAN) * float(final["tokens"].iloc[-1])]
            out.append(final.iloc[[-1]].assign(x=float(near["x"].mean())))
    return pd.concat(out) if out else ev.iloc[:0]


def step2_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """Each run's evaluations without its first :data:`SKIP_FRACTION`, task loss and accuracy smoothed."""
    out = []
    for g in _by_run(ev):
        kept = g.iloc[min(math.ceil(SKIP_FRACTION * len(g)), len(g) - 1):]
        if len(kept):
            out.append(kept.assign(x=trailing_mean(kept["x"].to_numpy()), y=trailing_mean(kept["y"].to_numpy())))
    return pd.concat(out) if out else ev.iloc[:0]
