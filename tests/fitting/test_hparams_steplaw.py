"""Hyperparameter laws on part of Step Law's released MoE sweep (tests/data/steplaw, see its README),
against the authors' own fitting recipe run on the same runs.

What is compared, honestly: the released runs are a mixture-of-experts sweep, the published law
(lr* = 1.7973 N^-0.7129 D^0.3075, B* = 0.5807 D^0.5709) is the authors' dense one, fitted on more runs
than were released, so only the recipe run here on the same runs is a like-for-like reference.
N is the active parameter count: the total is about 2.15e9 for all four shapes (it spans a factor
1.003), which must leave the exponent of N unidentified rather than fitted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaling.fitting import from_frame
from scaling.fitting.hyperparams.hparams import fit_hparams

CSV = Path(__file__).resolve().parents[1] / "data" / "steplaw" / "moe_lr_bs_sweep.csv"


@pytest.fixture(scope="module")
def steplaw() -> pd.DataFrame:
    return pd.read_csv(CSV)


def runs(d: pd.DataFrame, n_column: str) -> pd.DataFrame:
    N = d[n_column].astype(float)
    return pd.DataFrame({"N": N, "D": d["D_tokens"].astype(float), "C": 6.0 * N * d["D_tokens"],
                         "loss": d["final_train_loss_smoothed"], "lr": d["lr_peak"], "batch": d["batch_size_tokens"]})


def authors_recipe(d: pd.DataFrame, n_bootstrap: int = 300, seed: int = 0) -> dict[str, float]:
    """code/fit_tool.py: runs within 0.25% of each pair's minimum, OLS in logs, bootstrap-averaged coefficients."""
    near = d[d["final_train_loss_smoothed"] <= 1.0025 * d.groupby(["N_params_active", "D_tokens"])[
        "final_train_loss_smoothed"].transform("min")]
    lnN, lnD = np.log(near["N_params_active"].to_numpy(float)), np.log(near["D_tokens"].to_numpy(float))
    X, Xb = np.column_stack([np.ones(len(near)), lnN, lnD]), np.column_stack([np.ones(len(near)), lnD])
    y, yb = np.log(near["lr_peak"].to_numpy(float)), np.log(near["batch_size_tokens"].to_numpy(float))
    rng = np.random.default_rng(seed)
    th, tb = [], []
    for _ in range(n_bootstrap):
        i = rng.integers(0, len(near), len(near))
        th.append(np.linalg.lstsq(X[i], y[i], rcond=None)[0])
        tb.append(np.linalg.lstsq(Xb[i], yb[i], rcond=None)[0])
    (_, a, b), (_, e) = np.mean(th, axis=0), np.mean(tb, axis=0)
    return {"a": float(a), "b": float(b), "e": float(e)}


def test_the_laws_on_step_laws_moe_runs_agree_with_the_authors_recipe_where_it_is_comparable(steplaw) -> None:
    fit = fit_hparams(runs(steplaw, "N_params_active"), 200)
    assert len(fit.groups) == 16 and all(g.used for g in fit.groups)  # every optimum is inside its grid
    lr, batch = fit.laws["lr_ND"], fit.laws["batch_D"]
    assert lr.reliable() and batch.reliable()
    ref = authors_recipe(steplaw)
    # measured on this data (see docs/hyperparameters.md): recipe a = 0.057, b = 0.261, e = 0.435
    assert ref["a"] == pytest.approx(0.057, abs=0.03) and ref["e"] == pytest.approx(0.435, abs=0.03)
    a, b, e = lr.params["a"], lr.params["b"], batch.params["e"]
    # lr* barely depends on the active parameters in this MoE sweep, in both fits
    assert a.lo <= ref["a"] <= a.hi and a.lo < 0 < a.hi
    # B*: the recipe's exponent lies in our interval
    assert e.lo <= ref["e"] <= e.hi
    # lr* grows with D in both; the quadratic's optimum (at each group's own B*) grows more slowly than the
    # recipe's pooled near-optimal runs, which mix batches (documented, not hidden)
    assert 0 < b.value < ref["b"] and b.lo > 0


def test_total_parameters_that_barely_vary_leave_the_exponent_of_N_unidentified(steplaw) -> None:
    fit = fit_hparams(runs(steplaw, "N_params_total_nonembed"), 50)
    law = fit.laws["lr_ND"]
    assert not law.reliable() and "not identified" in law.doubts()[0]
    assert law.predict_interval(N=2.2e9, D=1e11).kind == "unreliable"


def test_the_csv_columns_of_step_law_are_read_as_hyperparameters(steplaw) -> None:
    frame = steplaw.rename(columns={"N_params_active": "N", "D_tokens": "D", "final_train_loss_smoothed": "loss"})
    data = from_frame(frame[["N", "D", "loss", "lr_peak", "batch_size_tokens"]], source="steplaw")
    assert len(data.points) == 16 and len(data.hparam_runs) == len(steplaw)
