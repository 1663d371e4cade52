"""The curve laws: the fast sums against the exact ones, a fit that recovers a known law and predicts
unseen schedules, the doubts, the round trip, and the one learning-rate function."""

from __future__ import annotations

import numpy as np
import pytest

from scaling.curve_forms import (ANNEALING, MULTI_POWER, areas, annealing, multi_power, multi_power_exact,
                                 warmup_end)
from scaling.errors import FitError
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.curves import CurveLaw, fit_curves
from scaling.fitting.curves.data import Curve, Schedule
from scaling.fitting.curves.synthetic import FIT_ON, PUBLISHED_MULTI_POWER, draw_curves, published_schedules

THETA = np.array(PUBLISHED_MULTI_POWER)


@pytest.fixture(scope="module")
def fitted() -> tuple[CurveLaw, list[Curve]]:
    curves = draw_curves(THETA, noise=0.003, every=200, seed=3)
    law = fit_curves([c for c in curves if c.run in FIT_ON], bootstrap=12, seed=0)
    return law, curves


@pytest.mark.parametrize("name", ["cosine_72000", "two_stage_9e-5", "wsd_linear", "wsd_exponential"])
def test_the_blocked_loss_drop_matches_the_step_by_step_sum(name: str) -> None:
    lr = published_schedules()[name]
    steps = np.unique(np.linspace(2160, lr.size - 1, 60).astype(int))
    fast = multi_power(THETA, areas(lr, steps))
    exact = multi_power_exact(THETA, lr, steps)
    assert np.max(np.abs(fast - exact)) < 2e-4


def test_the_annealing_area_is_tissue_et_al_s_momentum_sum() -> None:
    lr = np.concatenate([np.linspace(0, 1e-3, 10), np.full(20, 1e-3), np.linspace(1e-3, 1e-4, 30)])
    steps = np.arange(10, lr.size)
    m, s2, total = 0.0, [], 0.0
    for k in range(1, lr.size):
        m = 0.999 * m + ((lr[k - 1] - lr[k]) if k >= warmup_end(lr) else 0.0)
        total += m
        s2.append(total)
    a = areas(lr, steps)
    assert np.allclose(a.anneal, np.array(s2)[steps - 1], rtol=1e-9, atol=1e-15)
    assert np.allclose(annealing([3.0, 0.5, 0.5, 10.0], a), 3.0 + 0.5 * np.cumsum(lr)[steps] ** -0.5 - 10.0 * a.anneal)


def test_warmup_ends_where_the_rate_stops_rising() -> None:
    assert warmup_end(published_schedules()["constant_24000"]) == 2160
    assert warmup_end(np.full(5, 1e-3)) == 1


def test_a_fit_on_three_schedules_predicts_the_six_others(fitted) -> None:
    law, curves = fitted
    truth = {c.run: c.loss for c in draw_curves(THETA, every=200, truth=True)}
    assert law.form_ == MULTI_POWER and set(law.params_) == {MULTI_POWER, ANNEALING}
    errors = [np.mean(np.abs(law.loss_at(c.lr, c.steps) - truth[c.run])) for c in curves if c.run not in FIT_ON]
    assert np.mean(errors) < 0.002, errors
    assert law.held_out_error(MULTI_POWER) < law.held_out_error(ANNEALING)


def test_predictions_have_intervals_around_them(fitted) -> None:
    law, curves = fitted
    wsd = next(c for c in curves if c.run == "wsd_linear")
    out = law.predict(Schedule("wsd", wsd.lr, np.array([21000, 23999])))
    assert list(out.columns) == ["run", "step", "loss", "lo", "hi"]
    assert np.all(out["lo"] <= out["loss"]) and np.all(out["loss"] <= out["hi"])
    assert np.all(out["lo"] > 0)


def test_the_law_round_trips_through_its_dict(fitted) -> None:
    law, curves = fitted
    again = CurveLaw.from_dict(law.to_dict())
    c = curves[0]
    assert np.allclose(again.loss_at(c.lr, c.steps), law.loss_at(c.lr, c.steps))
    assert again.form_ == law.form_ and [d.kind for d in again.doubts()] == [d.kind for d in law.doubts()]
    assert np.allclose(again.predict(Schedule("x", c.lr, c.steps[-3:]))[["lo", "hi"]].to_numpy(),
                       law.predict(Schedule("x", c.lr, c.steps[-3:]))[["lo", "hi"]].to_numpy())


def test_one_schedule_cannot_separate_the_annealing_term() -> None:
    curves = draw_curves(THETA, names=["cosine_24000"], every=400, seed=1)
    law = CurveLaw().fit(curves)
    kinds = {d.kind for d in law.doubts()}
    assert DoubtKind.IDENTIFICATION in kinds and DoubtKind.FEW_POINTS in kinds
    assert any("single schedule cannot separate" in d for d in law.doubts())


def test_curves_without_decay_say_the_loss_drop_is_unmeasured() -> None:
    curves = draw_curves(THETA, names=["constant_24000", "constant_72000"], every=800, seed=1)
    law = CurveLaw(held_out=False).fit(curves)
    assert any("learning rate decays" in d for d in law.doubts())
    assert any("single schedule" in d for d in law.doubts())  # a longer constant run is the same schedule


def test_too_short_a_curve_is_refused() -> None:
    lr = np.full(100, 1e-3)
    with pytest.raises(FitError, match="at least 3"):
        CurveLaw().fit([Curve("r", lr, np.array([10, 20]), loss=np.array([3.0, 2.9]))])


def test_the_trainer_steps_by_the_fits_learning_rate_function() -> None:
    from scaling import lr_schedule
    from scaling.trainer import optim, sections as spec

    assert optim.lr_at is lr_schedule.lr_at and spec.decay_start is lr_schedule.decay_start
    sched = spec.ScheduleSpec(kind="wsd", warmup_steps=10, decay_fraction=0.3)
    lr = lr_schedule.lr_steps(100, 1e-3, lr_schedule.schedule_of(sched.model_dump()))
    assert lr[9] == pytest.approx(1e-3) and lr[-1] == pytest.approx(1e-4) and warmup_end(lr) == 10


def test_schedule_advice_compares_cosine_with_wsd_decays(fitted) -> None:
    from scaling.fitting.curves.advice import schedule_advice, schedules_for

    law, _ = fitted
    names = set(schedules_for(24_000, 3e-4, 2160))
    assert {"cosine", "wsd 10% linear", "wsd 30% exponential"} <= names and len(names) == 7
    advice = schedule_advice(law, 24_000, 3e-4, 2160)
    assert set(advice.losses) == names
    assert all(iv.interval is None or iv.lo <= iv.value <= iv.hi for iv in advice.losses.values())
    assert all(d.kind.about_parameters for d in law.doubts()), law.doubts()  # three schedules: only parameter doubts
    assert advice.best is not None and advice.best not in advice.tied
    assert advice.losses[advice.best].value == min(iv.value for iv in advice.losses.values())
    one = CurveLaw.from_dict(law.to_dict())
    one.add_doubt(DoubtKind.IDENTIFICATION, "unreliable: every curve follows one schedule")
    refused = schedule_advice(one, 24_000, 3e-4, 2160)
    assert refused.best is None and "not trusted" in refused.why_not
    assert "Final loss after 24,000 steps" in advice.table()


def test_every_step_of_a_long_schedule_is_predicted_through_knots() -> None:
    from scaling.fitting.curves.fit import law_at
    from scaling.fitting.curves.laws import form

    lr = published_schedules()["two_stage_3e-5"]
    steps = np.arange(2160, lr.size)
    every = law_at(form(MULTI_POWER), THETA, lr, steps)[0]
    some = np.array([2160, 7999, 8000, 8003, 8020, 8100, 9000, 15999])
    assert np.max(np.abs(every[some - 2160] - multi_power_exact(THETA, lr, some))) < 1e-4


def test_model_error_is_added_in_quadrature_and_keeps_withheld_intervals_withheld() -> None:
    from scaling.fitting.core.intervals import add_model_error

    value, lo, hi = np.array([2.0, 2.0, 2.0]), np.array([1.9, 1.99, np.nan]), np.array([2.2, 2.01, np.nan])
    new_lo, new_hi = add_model_error(value, lo, hi, 0.01)
    z = 1.959963984540054
    assert new_lo[0] == pytest.approx(2.0 * np.exp(-np.hypot(np.log(2.0 / 1.9), z * 0.01)))
    assert new_hi[1] == pytest.approx(2.0 * np.exp(np.hypot(np.log(2.01 / 2.0), z * 0.01)))
    assert np.all(new_lo[:2] < lo[:2]) and np.all(new_hi[:2] > hi[:2]) and np.all(new_lo[:2] > 0)
    assert np.isnan(new_lo[2]) and np.isnan(new_hi[2])  # withheld stays withheld
    same = add_model_error(value, lo, hi, 0.0)
    assert np.array_equal(same[0][:2], lo[:2]) and np.array_equal(same[1][:2], hi[:2])


def test_predicted_intervals_hold_the_held_out_error_beyond_the_noise(fitted) -> None:
    """The model error is the curves' left-out error less the fit's noise; every interval holds the
    bootstrap's and widens it by it; the law stores both and says so."""
    law, curves = fitted
    held = law.held_out_[law.form_]
    noise = law.noise_[law.form_]
    expected = np.sqrt(max(0.0, np.mean([h["rmsle"] ** 2 for h in held]) - noise**2))
    assert law.model_error() == pytest.approx(expected) and law.model_error() > 0
    assert 0.0005 < noise < 0.003  # the curves' noise: 0.003 on losses near 3
    target = [c for c in curves if c.run == "wsd_linear"]
    wide, alone = law.predict(target), law.predict(target, model_error=False)
    ok = wide["lo"].notna()
    assert ok.any() and np.all(wide["lo"][ok] < alone["lo"][ok]) and np.all(wide["hi"][ok] > alone["hi"][ok])
    assert np.all((wide["lo"][ok] < wide["loss"][ok]) & (wide["loss"][ok] < wide["hi"][ok]))
    again = CurveLaw.from_dict(law.to_dict())
    assert again.model_error() == pytest.approx(law.model_error())
    assert "model error beyond the noise" in law.table()
    assert np.isnan(CurveLaw(held_out=False).fit(curves[:3]).model_error())  # no curve left out: none known
