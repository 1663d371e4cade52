"""No numerical failure in fitting escapes as a traceback.

A dense simulated grid (few model sizes, many token budgets) puts several runs of one size in one
IsoFLOP budget; a parabola window of one repeated size made ``np.polyfit`` raise LinAlgError. Such
a budget is left out with a note. The fuzz test draws random grids (sizes, repeats, token spacing,
noise, seeds) and requires fit, recommend and the report to end in a result or a FitError, nothing
else. A larger run of the same draw is benchmarks/bench_fit_fuzz.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scaling.errors import FitError
from scaling.fitting import ChinchillaIsoFLOP, fit_data, from_frame
from scaling.fitting.loss.frontier import parabola

LAW = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}


def simulated_grid(rng: np.random.Generator, n_sizes: int, n_tokens: int, decades: float, noise: float,
                   repeats: int = 1) -> pd.DataFrame:
    """Every size at every token count (log-spaced from 1e6), losses from LAW with log-normal noise."""
    N = np.sort(np.exp(rng.uniform(math.log(1e4), math.log(3e5), n_sizes)))
    D = np.logspace(6, 6 + decades, n_tokens)
    NN, DD = (a.ravel() for a in np.meshgrid(N, D))
    NN, DD = np.repeat(NN, repeats), np.repeat(DD, repeats)
    loss = LAW["E"] + LAW["A"] / NN ** LAW["alpha"] + LAW["B"] / DD ** LAW["beta"]
    return pd.DataFrame({"N": NN, "D": DD, "C": 6 * NN * DD, "loss": loss * np.exp(noise * rng.standard_normal(NN.size))})


def test_parabola_of_one_repeated_size_is_refused_not_raised() -> None:
    assert parabola(np.full(5, math.log(5e4)), np.array([3.0, 3.1, 3.2, 3.0, 3.05])) is None
    assert parabola(np.log([1e4, 1e4, 2e4, 2e4]), np.array([3.0, 3.1, 2.9, 2.95])) is None  # two distinct sizes
    assert parabola(np.log([1e4, 2e4, 4e4]), np.array([3.0, 2.9, 3.2])) is not None


def test_dense_grid_budget_with_repeated_sizes_is_fitted_or_left_out_with_a_note() -> None:
    # 10 sizes x 120 token counts over 3 decades (2.3% apart): each 5% budget holds runs of one size
    # at neighbouring token counts, the grid that raised LinAlgError from the IsoFLOP parabola.
    df = simulated_grid(np.random.default_rng(9), 10, 120, 3.0, 0.005)
    law = ChinchillaIsoFLOP().fit(from_frame(df))
    statuses = {b["status"] for b in law.budgets_}
    assert "used" in statuses
    for b in law.budgets_:
        if b["status"] == "used":
            assert len(np.unique(np.asarray(b["N"])[b["window"]])) >= 3


@pytest.mark.parametrize("seed", range(4))
def test_random_simulated_grids_never_raise_in_fit_recommend_or_report(seed: int) -> None:
    from scaling.fitting.recommend import recommend
    from scaling.reports.report_data import ReportData
    from scaling.reports.html import render

    rng = np.random.default_rng(seed)
    df = simulated_grid(rng, n_sizes=int(rng.integers(1, 9)), n_tokens=int(rng.integers(1, 40)),
                        decades=float(rng.uniform(0.0, 3.0)), noise=float(rng.choice([0.0, 0.005, 0.05, 0.5])),
                        repeats=int(rng.choice([1, 1, 2])))
    try:
        summary = fit_data(from_frame(df), "all", n_bootstrap=4, seed=seed, settings={"approach3": {"grid": "small"}})
    except FitError:
        return  # refused with its reason: what the command prints as one line
    try:
        recommend(summary)
    except FitError:
        pass
    runs = df.assign(run_key=[f"r{i}" for i in range(len(df))], status="completed", final_loss=df["loss"])
    html = render(ReportData(sweep="fuzz", runs=runs, fits=dict(summary.laws)))
    assert "<html" in html


def test_backtest_of_a_held_out_set_with_one_size_repeated_is_scored_not_raised() -> None:
    # 63 IsoFLOP points to fit, and 11 larger-compute runs held out: nine of one size (tokens 8%
    # apart) around its lowest loss, so a window of five points around the minimum held one size.
    from scaling.fitting.loss import synthetic as S
    from scaling.fitting.core.backtest import backtest

    train = S.isoflop_points(budgets=[1e17, 3e17, 1e18, 3e18, 1e19, 3e19, 1e20], n_sizes=9, seed=0)
    D = 4e11 * 1.08 ** np.arange(9)
    held = pd.DataFrame({"N": [1e9] + [3e9] * 9 + [1e10], "D": [3e12, *D, 2e11]})
    held["loss"] = [2.1] + [2.05] * 4 + [2.0] + [2.05] * 4 + [2.1]
    held["C"] = 6 * held["N"] * held["D"]
    data = from_frame(pd.concat([train, held], ignore_index=True))
    law = ChinchillaIsoFLOP().fit(data)
    result, _ = backtest(law, data)
    assert result.get("error") is None and math.isfinite(result["mean_abs_rel_error"])
