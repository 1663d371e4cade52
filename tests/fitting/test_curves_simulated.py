"""Curves drawn by the simulated trainer from a known curve law: stored like trained runs, read back from
the sweep with the rates the trainer used, fitted, and the held-out predictions' intervals covering the truth."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from scaling.curve_forms import ANNEALING, MULTI_POWER, areas, curve_loss
from scaling.fitting.curves import CurveLaw, curves_from_db
from scaling.fitting.curves.data import Schedule
from scaling.lr_schedule import lr_steps
from scaling.trainer.spec import RunSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from bench_curve_coverage import curve_spec, draw  # noqa: E402 - the benchmark's own draws, fewer of them


def test_a_simulated_run_follows_its_curve_law_in_its_schedule() -> None:
    from scaling.trainer.simulate import simulated_run

    spec = curve_spec(MULTI_POWER, "cosine", 1200, {}, noise=0.0, seed=0, evals=20)
    rows, events, result = simulated_run(spec, None)
    evals = [(s, v) for s, _, _, name, v in rows if name == "eval/loss"]
    steps = np.array([s for s, _ in evals])
    lr = lr_steps(spec.steps, 3e-4, spec.schedule)
    c = spec.simulate.curve
    expected = curve_loss(c.form, c.theta(), areas(lr, steps - 1)) + spec.simulate.law.A / spec.n_params
    assert len(evals) == 20 and steps[-1] == spec.steps and steps[0] > 216
    assert np.allclose([v for _, v in evals], expected, rtol=1e-12)
    assert result.final_eval_loss == pytest.approx(events[0][2]["expected_final_loss"], abs=1e-4)
    assert RunSpec.from_dict(spec.model_dump(mode="json")).key == spec.key  # the curve law round-trips in the key


def test_a_sweep_of_simulated_curves_is_read_with_its_rates_and_predicts_a_held_out_run(sqlite_url: str,
                                                                                      tmp_path: Path) -> None:
    from scaling.db import Store
    from scaling.trainer import train

    specs = {n: curve_spec(ANNEALING, kind, 1200, extra, noise=0.001, seed=1, evals=40)
             for n, (kind, extra) in {"constant": ("constant", {}), "cosine": ("cosine", {}),
                                      "wsd": ("wsd", {"decay_fraction": 0.3})}.items()}
    from scaling import vocab

    with Store(sqlite_url) as store:
        store.register("curves", [s.record() for s in specs.values()])
        for s in specs.values():
            store.claim(s.key, "test:1", sweep="curves")
            r = train(s, sqlite_url, tmp_path, attempt=1, sweep="curves")
            store.finish(s.key, vocab.COMPLETED, final_train_loss=r.final_train_loss,
                         final_eval_loss=r.final_eval_loss, sweep="curves")
    curves, sweep = curves_from_db(sqlite_url, "curves")
    assert sweep == "curves" and len(curves) == 3
    by_key = {c.run: c for c in curves}
    for s in specs.values():
        assert np.allclose(by_key[s.key].lr, lr_steps(s.steps, 3e-4, s.schedule)) and by_key[s.key].steps.size == 40
    law = CurveLaw(forms=(ANNEALING,), held_out=False).fit(curves).bootstrap(20, 0)
    held = curve_spec(ANNEALING, "wsd", 1200, {"decay_fraction": 0.5}, noise=0.0, seed=1)
    truth = curve_loss(ANNEALING, held.simulate.curve.theta(),
                       areas(lr_steps(held.steps, 3e-4, held.schedule), [held.steps - 1]))[0]
    row = law.predict(Schedule("half", lr_steps(held.steps, 3e-4, held.schedule), np.array([held.steps - 1]))).iloc[0]
    assert abs(row.loss - truth) < 0.01 and row.lo < row.loss < row.hi


@pytest.mark.parametrize("form", [ANNEALING])
def test_held_out_intervals_cover_the_truth_in_a_few_draws(form: str) -> None:
    """A quick version of benchmarks/bench_curve_coverage.py (two draws; the benchmark runs a hundred)."""
    covered = [c for seed in range(2) for c in draw(form, seed, bootstrap=20, noise=0.001)["covered"]]
    assert np.mean(covered) >= 0.75, covered


def test_a_simulated_two_stage_run_drops_below_the_constant_run_at_its_drop() -> None:
    """The simulated trainer steps a two-stage schedule by the one rate function: its curve is the constant
    run's until the drop, then falls below it at once (later the constant run, moving faster at its higher
    rate, overtakes it on these short runs: the law's own trade-off)."""
    from scaling.trainer.simulate import simulated_run

    def curve(kind: str, extra: dict) -> tuple[np.ndarray, np.ndarray]:
        spec = curve_spec(MULTI_POWER, kind, 1600, extra, noise=0.0, seed=0, evals=40)
        rows, _, _ = simulated_run(spec, None)
        evals = sorted((s, v) for s, _, _, name, v in rows if name == "eval/loss")
        return np.array([s for s, _ in evals]), np.array([v for _, v in evals])

    spec = curve_spec(MULTI_POWER, "two_stage", 1600, {"drop_at": 0.5, "drop_lr_ratio": 0.3}, noise=0.0, seed=0)
    lr = lr_steps(spec.steps, 3e-4, spec.schedule)
    assert lr[799] == pytest.approx(3e-4) and lr[800] == pytest.approx(9e-5)
    steps, two_stage = curve("two_stage", {"drop_at": 0.5, "drop_lr_ratio": 0.3})
    same, constant = curve("constant", {})
    assert np.array_equal(steps, same)
    before = steps <= 800  # a row at step s follows the rates of steps 0 .. s-1
    np.testing.assert_allclose(two_stage[before], constant[before], rtol=1e-12)
    assert constant[~before][0] - two_stage[~before][0] > 0.01
