"""Fits of many points keep their memory bounded (approach 3's grid of starts is chunked; approach 3
and the Kaplan laws bootstrap by a bag of little bootstraps).

Unchunked, one objective call holds about eight (starts x points) float64 arrays: 4,500 starts
on a million points is 33.5 GiB. These tests measure the peak with tracemalloc (numpy reports
its allocations to it) on inputs sized for a test, against what the unchunked call would need.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

from cli_run import run_cli

from scaling.fitting import ChinchillaParametric, from_frame
from scaling.fitting.loss import synthetic as S
from scaling.fitting.core.optim import BYTES_PER_ELEMENT, batch_lbfgs, max_batch
from scaling.fitting.loss.parametric import BLB_THRESHOLD, GRID_POINTS, HuberLogObjective, start_grid


def _points(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    N = np.exp(rng.uniform(np.log(1e7), np.log(1e10), n))
    D = np.exp(rng.uniform(np.log(1e9), np.log(1e12), n))
    return pd.DataFrame({"N": N, "D": D, "loss": S.chinchilla_loss(N, D) * np.exp(rng.normal(0, 0.01, n))})


def _peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_start_grid_is_evaluated_in_chunks_within_the_budget() -> None:
    pts = _points(40_000)
    obj = HuberLogObjective(pts["N"], pts["D"], pts["loss"], 1e-3)
    starts = start_grid("coarse")  # 432 starts: 432 x 40,000 x 64 B = 1.1 GB in one call
    budget = 32 * 2**20
    chunk = max_batch(len(pts), budget=budget)
    assert chunk < len(starts)
    peak = _peak(lambda: batch_lbfgs(obj, starts, max_iter=2, batch=chunk))
    unchunked = len(starts) * len(pts) * BYTES_PER_ELEMENT
    assert peak < 3 * budget, (peak, budget)
    assert peak < unchunked / 10, (peak, unchunked)


def test_chunked_and_whole_grids_reach_the_same_optima() -> None:
    data = from_frame(S.grid_points(seed=3))
    pts = data.points
    obj = HuberLogObjective(pts["N"], pts["D"], pts["loss"], 1e-3)
    starts = start_grid("small")
    whole = batch_lbfgs(obj, starts)
    chunked = batch_lbfgs(obj, starts, batch=10)
    np.testing.assert_allclose(chunked.fun, whole.fun, rtol=1e-9)


def test_a_fit_and_bootstrap_of_many_points_stay_bounded() -> None:
    """Above GRID_POINTS and BLB_THRESHOLD: subsampled grid, polish on all, little bootstraps."""
    n = BLB_THRESHOLD + 10_000
    data = from_frame(_points(n, seed=1))
    law = ChinchillaParametric(grid="coarse", n_polish=2)
    peak = _peak(lambda: law.fit(data).bootstrap(20, 0))
    assert peak < 512 * 2**20, peak  # unchunked: 432 x 30,000 x 64 B = 830 MB for the grid alone
    assert any(f"random {GRID_POINTS:,}" in t for t in law.notes_)
    assert any("bag of little bootstraps" in t for t in law.notes_)
    for name, truth in S.TRUTH.items():
        assert abs(law.params_[name] / truth - 1) < 0.05, (name, law.params_[name])
    iv = law.intervals()
    for name in ("alpha", "beta"):
        assert iv[name].lo <= iv[name].value <= iv[name].hi
        assert iv[name].hi - iv[name].lo < 0.02


def test_a_large_csv_fitted_with_every_law_takes_the_fast_path_with_honest_intervals(tmp_path: Path) -> None:
    """25,000 rows (above both thresholds), `--law all`: the Kaplan laws and approach 3 subsample their
    starts and use little bootstraps; every interval printed contains its estimate, the exponents have one."""
    p = tmp_path / "big.csv"
    _points(25_000, seed=2).to_csv(p, index=False)
    result: dict[str, tuple[int, str, str]] = {}
    peak = _peak(lambda: result.setdefault("run", run_cli("fit", "--csv", str(p), "--law", "all", "--bootstrap", "20",
                                                         "--format", "json")))
    code, out, err = result["run"]
    assert code == 0, err
    laws = json.loads(out)["laws"]
    assert {"kaplan", "approach2", "approach3"} <= set(laws)
    for kind in ("kaplan", "approach3"):
        notes = " ".join(laws[kind]["notes"])
        assert "bag of little bootstraps" in notes and "25,000 points" in notes, (kind, notes)
    assert "random 20,000 of the 25,000 points" in " ".join(laws["kaplan"]["notes"])
    for kind, law in laws.items():
        for name, iv in law["intervals"].items():
            if iv.get("kind") == "percentile":
                assert iv["lo"] <= iv["value"] <= iv["hi"], (kind, name, iv)
    for kind, names in (("kaplan", ("alpha_N", "alpha_D", "alpha_N1", "alpha_D1")), ("approach3", ("alpha", "beta"))):
        for name in names:
            assert laws[kind]["intervals"][name]["kind"] == "percentile", (kind, name)
    assert peak < 1024 * 2**20, peak
