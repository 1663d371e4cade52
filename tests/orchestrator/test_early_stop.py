"""Early stopping in adaptive sweeps: a run stops at an evaluation once its final loss is predicted
within the plan's tolerance, is recorded as stopped early with its predicted final, is never trained
again by a resume, and the fits say how many of their finals are predicted.

The sweeps run through real Ray, the real scheduler and a real SQLite database: simulated runs whose
eval losses follow a known curve law, and one run trained (the tiny gpt2 on the CPU) against finished
curves of a known drop.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from scaling import vocab
from scaling.errors import PlanError
from scaling.trainer.early_stop import (MAX_BEYOND, MIN_REFERENCES, Reference, extra_variance, model_error, predict_final,
                                        stopping_point)

#: Luo et al.'s multi-power law of their 25M model, its L0 lowered so that A / N^alpha of the law below adds the size.
CURVE = {"form": "multi-power", "L0": 1.9, "A": 0.5247, "alpha": 0.5079, "B": 363.79, "C": 2.0656,
         "beta": 0.5828, "gamma": 0.6414, "evals": 30}
RULE = {"tolerance": 0.05, "after": 0.6, "every": 0.3}


def plan_dict(tmp: Path, name: str, early_stop: dict[str, Any] | None) -> dict[str, Any]:
    adaptive: dict[str, Any] = {
        "target": {"law": "approach2", "quantity": "N_opt", "at_compute": 1e19, "interval_ratio": 100.0},
        "max_compute": 1e20, "batch": 5, "max_rounds": 1}
    if early_stop is not None:
        adaptive["early_stop"] = early_stop
    return {"name": name, "runs_dir": str(tmp / "runs"),
            "simulate": {"law": {"E": 0.0, "A": 480.0, "B": 1e-6, "alpha": 0.35, "beta": 1.0}, "noise": 0.003,
                         "seed": 0, "curve": CURVE},
            "train": {"batch_tokens": 1024 * 1024, "optimizer": {"lr": 3e-3},
                      "schedule": {"kind": "cosine", "warmup_steps": 10, "min_lr_ratio": 0.1}},
            "resources": {"num_cpus": 2},
            "adaptive": adaptive,
            "grid": [{"models": [3e7, 1e8, 3e8], "compute": [1e17, 1e18]}]}


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# -- the rule, on references of a known drop --------------------------------------------------------
def references(count: int, spread: float, seed: int = 0) -> list[Reference]:
    """Finished curves whose drop from fraction f to the end is (1 - f) * 30 / T^0.5 (T their steps), its
    logarithm off by normal noise of SD ``spread``; sizes and lengths spread over a factor 10."""
    rng = np.random.default_rng(seed)
    f = np.linspace(0.1, 1.0, 10)
    out = []
    for i in range(count):
        T, N = int(1000 * 10 ** (i / count)), 1e8 * 10 ** ((i * 7 % count) / count)
        scale = 30 / T**0.5 * math.exp(spread * rng.standard_normal())
        out.append(Reference(T, N, f, 2.0 + scale * (1.0 - f)))
    return out


def test_the_prediction_follows_the_references_and_needs_enough_of_them() -> None:
    refs = references(10, 0.02)
    pred = predict_final(refs, 0.5, 3.0, 1000, 2000, 3e8)
    truth = 3.0 - 0.5 * 30 / 2000**0.5
    assert pred is not None and pred.references == 10
    assert pred.lo < truth < pred.hi and pred.lo < pred.loss < pred.hi and pred.lo > 0
    assert pred.loss == pytest.approx(truth, abs=0.01)
    far = predict_final(refs, 0.5, 3.0, 1000, 15_000, 3e8)  # longer than every reference: a wider
    assert far is not None and far.lo < 3.0 - 0.5 * 30 / 15_000**0.5 < far.hi  # interval for its drop
    assert (far.hi - far.lo) / (3.0 - far.loss) > 1.1 * (pred.hi - pred.lo) / (3.0 - pred.loss)
    longest = max(r.steps for r in refs)  # more than MAX_BEYOND times longer than every reference: not predicted
    assert predict_final(refs, 0.5, 3.0, 1000, int(MAX_BEYOND * longest) + 2, 3e8) is None
    assert predict_final(refs[: MIN_REFERENCES - 1], 0.5, 3.0, 1000, 2000, 3e8) is None
    # a wide spread never stops; a narrow one stops at the first check from `after` on, never at the last step
    steps = np.arange(200, 2001, 200)
    losses = np.linspace(3.3, 3.0, steps.size)
    args = dict(tolerance=0.01, every=0.1)
    assert stopping_point(references(10, 0.5), steps, losses, 2000, 3e8, after=0.5, **args) is None
    stop = stopping_point(references(10, 0.001), steps, losses, 2000, 3e8, after=0.5, **args)
    assert stop is not None and stop.step == 1000
    assert stopping_point(references(10, 0.001), steps, losses, 2000, 3e8, after=0.95, **args) is None


def test_the_interval_carries_the_held_out_error_of_a_drop_that_bends_away_from_a_power_law() -> None:
    """References whose drop bends in ln T (no power law, as the multi-power law's drop is not): predicted from
    the shorter ones, the longer ones miss by more than the regression's residuals say, and the interval of a
    run just beyond them all holds its true final only with that held-out error added."""
    from scipy.stats import t as student

    def drop(T: float) -> float:
        x = math.log(T / 1000)
        return 30 / T**0.5 * math.exp(0.05 * x * x)

    rng = np.random.default_rng(0)
    f = np.linspace(0.1, 1.0, 10)
    refs = []
    for i in range(10):
        T, N = int(1000 * 10 ** (i / 10)), 1e8 * 10 ** ((i * 7 % 10) / 10)
        refs.append(Reference(T, N, f, 2.0 + drop(T) * math.exp(0.01 * rng.standard_normal()) * (1.0 - f)))
    T, N = 10_000, 3e8
    truth = 3.0 - 0.5 * drop(T)
    pred = predict_final(refs, 0.5, 3.0, 1000, T, N)
    assert pred is not None and pred.lo < truth < pred.hi
    # the regression's own interval, without the held-out error, misses the truth
    rows = np.array([(math.log(r.steps), math.log(r.size), math.log(float(np.interp(0.5, f, r.losses)) - r.final))
                     for r in refs])
    X = np.column_stack([np.ones(len(rows)), rows[:, :2]])
    x0 = np.array([1.0, math.log(T), math.log(N)])
    coef, *_ = np.linalg.lstsq(X, rows[:, 2], rcond=None)
    resid = rows[:, 2] - X @ coef
    plain = float(student.ppf(0.975, 7)) * math.sqrt(float(resid @ resid) / 7 * (1 + x0 @ np.linalg.solve(X.T @ X, x0)))
    centre = float(x0 @ coef)
    assert not (3.0 - math.exp(centre + plain) < truth < 3.0 - math.exp(centre - plain))
    sigma = model_error(X, rows[:, 2])
    assert sigma > 0.5 * math.sqrt(float(resid @ resid) / 7)
    half = math.log((3.0 - pred.lo) / (3.0 - pred.loss))  # the half-width in ln of the drop: both errors in quadrature
    assert half == pytest.approx(math.hypot(plain, float(student.ppf(0.975, 7)) * sigma), rel=1e-9)



def test_a_held_out_prediction_that_claims_a_huge_variance_does_not_cancel_the_others() -> None:
    """Five predictions miss by 1 where they claim a variance of 0.1; a sixth, from nearly collinear
    references, claims 1e6 and hits. The extra variance is what makes the misses' standardized errors
    average one (about 0.73), not the mean of err^2 - claimed (negative: no extra error at all)."""
    errors = [(1.0, 0.1)] * 5 + [(0.0, 1e6)]
    s2 = extra_variance(errors)
    assert np.mean([e / (v + s2) for e, v in errors]) == pytest.approx(1.0)
    assert 0.5 < s2 < 1.0
    assert extra_variance([(0.01, 0.1)] * 4) == 0.0  # the claims hold: nothing is added

# -- the plan -------------------------------------------------------------------------------------------
def test_the_option_is_validated_and_keys_the_runs(tmp_path: Path) -> None:
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    for bad, field in (({"tolerance": 0}, "adaptive.early_stop.tolerance"),
                       ({"tolerance": 0.01, "after": 1.0}, "adaptive.early_stop.after"),
                       ({"tolerance": 0.01, "patience": 3}, "adaptive.early_stop"),
                       ({"after": 0.5}, "adaptive.early_stop.tolerance")):
        path = write(tmp_path / "bad.yaml", plan_dict(tmp_path, "bad", bad))
        with pytest.raises(PlanError) as info:
            load_plan(path)
        line = str(info.value)
        assert "\n" not in line and "bad.yaml" in line and field in line, line

    real = {k: v for k, v in plan_dict(tmp_path, "real", RULE).items() if k != "simulate"}  # trained runs stop too
    assert load_plan(write(tmp_path / "real.yaml", real))[0].adaptive.early_stop.tolerance == RULE["tolerance"]

    branched = {**real, "grid": [{"models": [3e7, 1e8, 3e8], "branches": {"tokens": [1e9, 2e9]}}]}
    with pytest.raises(PlanError, match=r"branched\.yaml:\d+: adaptive\.early_stop: a trunk that stops early") as info:
        load_plan(write(tmp_path / "branched.yaml", branched))
    assert "\n" not in str(info.value)

    with_rule = expand(load_plan(write(tmp_path / "a.yaml", plan_dict(tmp_path, "a", RULE)))[0], resolve=False).runs
    without = expand(load_plan(write(tmp_path / "b.yaml", plan_dict(tmp_path, "a", None)))[0], resolve=False).runs
    assert all(r.spec.early_stop is not None and r.spec.early_stop.tolerance == RULE["tolerance"] for r in with_rule)
    assert all(r.spec.early_stop is None for r in without)
    # a sweep without early stopping trains each point under another key (in full), and the keys of
    # runs without the rule are those they always had
    assert not {r.key for r in with_rule} & {r.key for r in without}
    assert [r.spec.model_copy(update={"early_stop": None}).key for r in with_rule] == [r.key for r in without]


# -- the sweep ------------------------------------------------------------------------------------------
@pytest.mark.usefixtures("shared_ray")
def test_a_run_stops_early_is_recorded_and_never_retrained(tmp_path: Path, sqlite_url: str) -> None:
    from rich.console import Console

    from scaling.db import connect
    from scaling.fitting.core.sweep_data import from_db
    from scaling.orchestrator.status import render_status, sweep_status
    from scaling.orchestrator.sweep import run_sweep

    path = write(tmp_path / "plan.yaml", plan_dict(tmp_path, "early", RULE))
    first = run_sweep(path, db=sqlite_url, fit=False, report=False, echo=lambda s: None)
    with connect(sqlite_url) as res:
        runs = res.runs(sweep="early")
        events = res.events(sweep="early", kinds=[vocab.STOPPED_EARLY])
        rows_before = len(res.metrics(sweep="early"))
    assert set(runs["status"]) == {vocab.COMPLETED}
    stopped = runs[runs["stopped_step"].notna()]
    assert len(stopped) >= 1, runs[["N", "D", "final_loss", "stopped_step"]]
    assert len(events) == len(stopped)
    by_key = {k: d for k, d in zip(events["run_key"], events["detail"])}
    for r in stopped.itertuples():
        steps = -(-int(r.D) // int(r.batch_tokens))
        detail = by_key[r.run_key]
        assert 0.6 * steps <= r.stopped_step < steps and detail["step"] == r.stopped_step
        assert r.final_loss == pytest.approx(detail["loss"])  # the final the fits read is the prediction
        assert detail["lo"] <= r.final_loss <= detail["hi"] and detail["hi"] - detail["lo"] <= 2 * RULE["tolerance"]
    with connect(sqlite_url) as res:  # its curve ends where it stopped
        m = res.metrics(run_keys=list(stopped["run_key"]), sweep="early")
    assert all(m[m["run_key"] == r.run_key]["step"].max() == r.stopped_step for r in stopped.itertuples())

    status = sweep_status(sqlite_url, "early")
    assert status["stopped_early"] == len(stopped) and status["flops_saved_early"] > 0
    assert status["flops_spent"] == pytest.approx(float(runs["C"].sum()) - status["flops_saved_early"])
    out = io.StringIO()
    Console(file=out, width=200).print(render_status(status))
    assert f"stopped early  {len(stopped)} completed run(s) stopped once their final loss was predicted" in out.getvalue()

    data, _ = from_db(sqlite_url, "early")  # the laws see the predicted finals, marked as predicted
    assert data.predicted_finals == len(stopped)
    assert f"{len(stopped)} of {len(runs)} final losses are predicted" in data.predicted_note
    assert data.predicted_note in data.notes
    assert first.adaptive.decisions

    again = run_sweep(path, db=sqlite_url, fit=False, report=False, echo=lambda s: None)  # the resume
    assert again.outcome.completed == [] and len(again.outcome.skipped) == len(runs)
    with connect(sqlite_url) as res:
        after = res.runs(sweep="early")
        assert len(res.metrics(sweep="early")) == rows_before
    assert list(after["stopped_step"].fillna(-1)) == list(runs["stopped_step"].fillna(-1))
    assert list(after["final_loss"]) == list(runs["final_loss"])


@pytest.mark.usefixtures("shared_ray")
def test_a_trained_run_of_a_sweep_stops_early_through_the_scheduler(tmp_path: Path, sqlite_url: str) -> None:
    """A real run (the tiny gpt2 on the CPU, 24 steps evaluated every 4) trained by the scheduler on Ray
    stops at its first check (step 8, from 0.3 of its steps on) against the sweep's finished curves:
    references written beside it in the sweep, as its earlier runs would be, with a drop narrow enough
    that the first prediction stops it. A second sweep of the plan trains nothing."""
    from early_refs import write_references
    from orch_helpers import shape, write_plan

    from scaling.db import connect
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import run_sweep

    rule = {"tolerance": 0.05, "after": 0.3, "every": 0.1}
    grid = [{"models": [shape(1, 32)], "tokens": [512 * 24]}]
    # a budget just above the run's 9.4e8 FLOPs: the adaptive loop adds no slice after it
    adaptive = {"target": {"at_compute": 1e12, "interval_ratio": 100.0}, "max_compute": 1e9, "early_stop": rule}
    path = write_plan(tmp_path / "plan.yaml", "trained", tmp_path / "runs", grid, adaptive=adaptive)
    plan = yaml.safe_load(path.read_text())
    plan["train"]["eval_interval"] = 4
    write(path, plan)
    (run,) = expand(load_plan(path)[0]).runs
    write_references(sqlite_url, "trained", run.spec.model_dump(mode="json", exclude={"early_stop"}), spread=0.001)

    first = run_sweep(path, db=sqlite_url, fit=False, report=False, echo=lambda s: None)
    assert first.outcome.completed == [run.key]
    with connect(sqlite_url) as res:
        row = res.runs(sweep="trained").set_index("run_key").loc[run.key]
        events = res.events(run_keys=[run.key], kinds=[vocab.STOPPED_EARLY])
        evals = res.metrics(run_keys=[run.key], names=[vocab.EVAL_LOSS], sweep="trained")
        rows_before = len(res.metrics(sweep="trained"))
    assert row["status"] == vocab.COMPLETED and row["stopped_step"] == 8, row[["status", "stopped_step"]]
    assert len(events) == 1 and int(events["step"].iloc[0]) == 8
    detail = events["detail"].iloc[0]
    assert detail["step"] == 8 and detail["tolerance"] == rule["tolerance"] and detail["hi"] - detail["lo"] <= 2 * rule["tolerance"]
    assert row["final_loss"] == pytest.approx(detail["loss"])  # the final the fits read is the prediction
    assert detail["lo"] <= row["final_loss"] <= detail["hi"]
    assert int(evals["step"].max()) == 8  # nothing was trained or evaluated after the stop
    loss_at_8 = float(evals.set_index("step")["value"].loc[8])
    drop = (1 - 8 / 24) * 0.8 * (24 / 20) ** -0.5  # what the references say is still to come
    assert row["final_loss"] == pytest.approx(loss_at_8 - drop, abs=0.01)

    again = run_sweep(path, db=sqlite_url, fit=False, report=False, echo=lambda s: None)
    assert again.outcome.completed == [] and run.key in again.outcome.skipped
    with connect(sqlite_url) as res:
        assert len(res.metrics(sweep="trained")) == rows_before
        assert res.runs(sweep="trained").set_index("run_key").loc[run.key, "stopped_step"] == 8
