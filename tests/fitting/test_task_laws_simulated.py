"""Downstream task laws on a sweep of the simulated trainer: its task metrics, fitted, find its task law.

A plan whose ``simulate`` section gives a task (bits per byte of Chinchilla form, accuracy a sigmoid
of it, binomial noise) is expanded, registered and each run trained by the real simulated trainer
into a real SQLite database (as ``scaling sweep`` does, without Ray). The task's two steps are then
read back from the database and fitted; the fit must recover the simulator's law and predict a
larger run within its interval.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from in_process_sweep import train_plan

TASK = dict(name="sim_task", E=0.5, A=5.0, B=20.0, alpha=0.3, beta=0.3, chance=0.25, slope=10.0, midpoint=0.95,
            items=4000)
PLAN = {
    "name": "sim-tasks",
    "simulate": {"law": {"E": 1.5, "A": 40.0, "B": 60.0, "alpha": 0.3, "beta": 0.3}, "noise": 0.002, "seed": 0,
                 "tasks": [TASK]},
    "model": {"vocab_size": 256, "context": 64},
    "train": {"batch_tokens": 256},
    "grid": [{"compute": [C], "models": [{"n_layer": 2, "d_model": d, "n_head": 2} for d in (16, 24, 32, 48, 64)]}
             for C in (3e11, 1e12, 3e12)],
}


def true_bpb(N, D):
    return TASK["E"] + TASK["A"] / np.power(N, TASK["alpha"]) + TASK["B"] / np.power(D, TASK["beta"])


def true_acc(bpb):
    return TASK["chance"] + (1 - TASK["chance"]) / (1 + np.exp(TASK["slope"] * (bpb - TASK["midpoint"])))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("sim-tasks")
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump({**PLAN, "runs_dir": str(folder / "runs")}, sort_keys=False))
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(path, url, folder)
    return url


def test_the_simulators_task_law_is_recovered_from_its_metrics(sweep: str) -> None:
    from scaling.fitting.tasks.task_laws import fit_tasks_sweep

    fits = fit_tasks_sweep(sweep, "sim-tasks", n_bootstrap=30, grid="coarse")
    law = fits.laws[TASK["name"]]
    assert law.loss_source == "bpb" and law.accuracy == "acc"
    assert law.chance == TASK["chance"]  # the simulated event's truth: no prediction falls below it
    ev = law.evals
    assert ev["final"].sum() == 15 and len(ev) > 15  # every checkpoint's evaluation is a step-2 point
    sig = law.curves["sigmoid"].params_
    # the simulator's acc = chance + (1 - chance) / (1 + exp(slope (bpb - midpoint))): OLMo's form with
    # a = 1 - chance, b = chance, k = -slope, L0 = midpoint
    assert sig["k"] == pytest.approx(-TASK["slope"], rel=0.2) and sig["L0"] == pytest.approx(TASK["midpoint"], abs=0.03)
    assert sig["b"] == pytest.approx(TASK["chance"], abs=0.05)
    N = float(ev["N"].max()) * 3
    D = float(ev["D"].max()) * 3
    p = law.predict_interval(N, D)
    assert p["task_loss"].lo * 0.99 <= float(true_bpb(N, D)) <= p["task_loss"].hi * 1.01
    iv = p["sigmoid"]
    assert iv.lo - 0.01 <= float(true_acc(true_bpb(N, D))) <= iv.hi + 0.01
    assert TASK["chance"] <= min(iv.lo, p["exp"].value) and max(iv.hi, p["exp"].value) <= 1.0


def test_accuracy_intervals_beyond_the_sweep_are_widened_by_the_chains_backtest(sweep: str) -> None:
    import math

    from scaling.fitting.core.base import EXTRAPOLATION_Z
    from scaling.fitting.tasks.task_laws import backtest_clause, fit_tasks_sweep

    law = fit_tasks_sweep(sweep, "sim-tasks", n_bootstrap=30, grid="coarse").laws[TASK["name"]]
    bt = law.backtest
    assert bt and not bt.get("error") and bt["train_c_max"] < min(r["C"] for r in bt["held_out"])
    error = law.backtest_error("sigmoid")
    assert error == bt["sigmoid_mean_abs_error"] > 0
    ev = law.evals
    N, D = float(ev["N"].max()) * 3, float(ev["D"].max()) * 3
    iv = law.predict_interval(N, D)["sigmoid"]
    assert iv.backtest_error == error and "backtest's error" in iv.widened
    # each end moved out by Z x (error per unit ln C the backtest extrapolated) x (ln C beyond the sweep),
    # unless it met chance or 1
    held = float(np.median([r["C"] for r in bt["held_out"]]))
    extra = EXTRAPOLATION_Z * error / math.log(held / bt["train_c_max"]) * math.log(
        law.step1.k_ * N * D / law.step1.c_range_[1])
    assert iv.lo == pytest.approx(max(TASK["chance"], iv.lo_param - extra), rel=1e-9)
    assert iv.hi == pytest.approx(min(1.0, iv.hi_param + extra), rel=1e-9)
    assert TASK["chance"] <= iv.lo <= iv.value <= iv.hi <= 1.0
    assert backtest_clause(iv) == f"; backtest off by {100 * error:.2g} points, interval widened"
    # inside the fitted budgets the backtest (an error in extrapolating) widens nothing
    inside = law.predict_interval(float(ev["N"].median()), float(ev["D"].median()))["sigmoid"]
    assert not inside.widened and inside.backtest_error == error
