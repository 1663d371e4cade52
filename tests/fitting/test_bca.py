"""Efron's BCa interval in the shared interval summary: the percentile interval where nothing is skewed,
moved towards the long tail where the estimator is skewed, and better at holding the truth there."""

from __future__ import annotations

import numpy as np

from scaling.fitting.core.intervals import bca_levels, summarise


def _mean_bootstrap(x: np.ndarray, rng: np.random.Generator, n: int = 1000) -> tuple[np.ndarray, np.ndarray]:
    idx = rng.integers(0, len(x), size=(n, len(x)))
    jack = (x.sum() - x) / (len(x) - 1)
    return x[idx].mean(axis=1), jack


def test_symmetric_replicates_give_the_percentile_levels() -> None:
    v = np.linspace(-1, 1, 2001)
    jack = np.linspace(-0.01, 0.01, 41)
    lo, hi = bca_levels(v, 0.0, jack)
    assert abs(lo - 0.025) < 1e-3 and abs(hi - 0.975) < 1e-3
    assert summarise(v, 0.0, jackknife=jack)["kind"] == "bca"
    assert summarise(v, 0.0)["kind"] == "percentile"  # without leave-one-out refits: the percentile interval


def test_replicates_all_on_one_side_give_no_correction() -> None:
    assert bca_levels(np.linspace(1, 2, 100), 0.5, np.linspace(0.4, 0.6, 10)) is None
    assert summarise(np.linspace(1, 2, 100), 0.5, jackknife=np.linspace(0.4, 0.6, 10))["kind"] == "biased"


def test_a_skewed_estimator_is_covered_more_often_than_by_the_percentile_interval() -> None:
    # the mean of 15 exponential draws: right-skewed, its percentile interval too short on the right
    rng = np.random.default_rng(0)
    pct = bca = 0
    sims = 400
    for _ in range(sims):
        x = rng.exponential(1.0, 15)
        reps, jack = _mean_bootstrap(x, rng)
        p, b = summarise(reps, x.mean(), log=True), summarise(reps, x.mean(), log=True, jackknife=jack)
        assert b["kind"] == "bca" and b["lo"] <= x.mean() <= b["hi"]
        pct += p["lo"] <= 1.0 <= p["hi"]
        bca += b["lo"] <= 1.0 <= b["hi"]
    assert bca > pct and bca / sims > 0.9, (pct, bca)
