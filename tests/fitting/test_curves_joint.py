"""The curve law across model sizes: recovers a known L(N, schedule), predicts an unfitted size and a longer
run within its interval, leaves each size out, and refuses or flags what the sizes cannot determine."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from scaling.curve_forms import ANNEALING
from scaling.errors import FitError
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.curves.data import Curve, Schedule
from scaling.fitting.curves.fit import law_at
from scaling.fitting.curves.joint import JointCurveLaw, fit_joint
from scaling.fitting.curves.laws import form

WARMUP, PEAK, STEPS = 60, 1e-3, 1000
#: The annealing law's (A, alpha, C) shared by every size; L0(N) = 2 + 1.5 (N / 1e7)^-0.3.
SHAPE = (0.5, 0.5, 0.6)
SIZES = (1e6, 3e6, 1e7, 3e7)


def schedule(kind: str, steps: int = STEPS) -> np.ndarray:
    lr = np.full(steps, PEAK)
    lr[:WARMUP] = PEAK * np.arange(WARMUP) / WARMUP
    k = np.arange(WARMUP, steps)
    if kind == "cosine":
        lr[WARMUP:] = 0.1 * PEAK + 0.45 * PEAK * (1 + np.cos(np.pi * (k - WARMUP) / (steps - WARMUP)))
    elif kind == "wsd":
        start = int(0.8 * steps)
        u = (np.arange(start, steps) - start) / (steps - start)
        lr[start:] = PEAK * (1 - u) + 0.1 * PEAK * u
    return lr


def truth(N: float) -> np.ndarray:
    return np.array([2.0 + 1.5 * (N / 1e7) ** -0.3, *SHAPE])


def true_loss(N: float, lr: np.ndarray, steps: np.ndarray) -> np.ndarray:
    return law_at(form(ANNEALING), truth(N), lr, steps)[0]


def curves(sizes=SIZES, kinds=("constant", "cosine", "wsd"), seed: int = 0) -> list[Curve]:
    rng = np.random.default_rng(seed)
    out = []
    for N in sizes:
        for kind in kinds:
            lr = schedule(kind)
            steps = np.arange(WARMUP, STEPS, 20)
            y = true_loss(N, lr, steps) * np.exp(0.002 * rng.standard_normal(steps.size))
            out.append(Curve(f"{kind}-{N:g}", lr, steps, N, None, loss=y))
    return out


@pytest.fixture(scope="module")
def law() -> JointCurveLaw:
    return fit_joint(curves(), bootstrap=20, forms=(ANNEALING,))


def test_recovers_the_floor_in_N_and_the_shared_shape(law: JointCurveLaw) -> None:
    p = law.params_[ANNEALING]
    assert p["E"] == pytest.approx(2.0, abs=0.1)
    assert p["a"] == pytest.approx(0.3, abs=0.05)
    assert p["alpha"] == pytest.approx(0.5, abs=0.05)
    assert abs(p["pA"]) < 0.05 and abs(p["pC"]) < 0.1  # the truth's amplitudes do not change with N
    assert law.size_params(1e7)["L0"] == pytest.approx(3.5, abs=0.02)


def test_predicts_an_unfitted_size_and_a_longer_run_within_its_interval(law: JointCurveLaw) -> None:
    for N in (2e6, 1e8):
        lr = schedule("wsd", 3 * STEPS)
        iv = law.final_loss(N, lr)
        true = float(true_loss(N, lr, np.array([lr.size - 1]))[0])
        assert iv.lo is not None and iv.hi is not None and iv.lo <= iv.value <= iv.hi
        assert iv.value == pytest.approx(true, rel=0.01)
        assert iv.lo - 0.005 <= true <= iv.hi + 0.005


def test_each_size_is_left_out_and_its_curves_predicted(law: JointCurveLaw) -> None:
    held = law.held_out_[ANNEALING]
    assert [e["N"] for e in held] == list(SIZES)
    for e in held:
        assert e["mre"] < 0.01  # within 1% of the loss, though that size was not fitted
        assert {r["run"] for r in e["runs"]} == {f"{k}-{e['N']:g}" for k in ("constant", "cosine", "wsd")}
    assert "left out" in law.table()


def test_predict_table_and_stored_law_agree(law: JointCurveLaw) -> None:
    lr = schedule("cosine", 1500)
    s = Schedule("next", lr, np.array([500, 1499]), N=5e7)
    df = law.predict([s])
    assert list(df.columns) == ["run", "N", "step", "loss", "lo", "hi"]
    assert np.all((df["lo"] <= df["loss"]) & (df["loss"] <= df["hi"]))
    back = JointCurveLaw.from_dict(law.to_dict())
    assert np.allclose(back.predict([s])["loss"], df["loss"]) and np.allclose(back.predict([s])["hi"], df["hi"])
    with pytest.raises(FitError, match="has no N"):
        law.predict([Schedule("unsized", lr, np.array([10]))])


def test_two_sizes_are_refused_and_three_are_flagged() -> None:
    with pytest.raises(FitError, match="at least 3 model sizes"):
        JointCurveLaw((ANNEALING,)).fit(curves(SIZES[:2]))
    three = JointCurveLaw((ANNEALING,)).fit(curves(SIZES[:3]))
    assert not three.held_out_
    assert any(d.kind is DoubtKind.COVERAGE and "exactly" in d for d in three.doubts())


def test_a_run_without_N_is_refused() -> None:
    c = curves(SIZES[:3])
    c[0] = Curve("lost", c[0].lr, c[0].steps, None, None, loss=c[0].loss)
    with pytest.raises(FitError, match="'lost' has no N"):
        JointCurveLaw((ANNEALING,)).fit(c)


def test_constant_rates_only_are_flagged_as_not_measuring_the_drop() -> None:
    law = JointCurveLaw((ANNEALING,), held_out=False).fit(curves(SIZES[:3], kinds=("constant",)))
    assert any(d.kind is DoubtKind.IDENTIFICATION for d in law.doubts())
    assert math.isfinite(law.params_[ANNEALING]["E"])


def test_the_law_at_a_size_is_a_single_size_law_that_predicts_the_same(law: JointCurveLaw) -> None:
    from scaling.fitting.curves.advice import schedule_advice

    lr = schedule("wsd", 2000)
    single = law.at_size(5e7)
    assert single.loss_at(lr, [1999])[0] == pytest.approx(law.loss_at(5e7, lr, [1999])[0])
    iv = law.final_loss(5e7, lr)
    got = single.predict(Schedule("x", lr, np.array([1999])))
    assert got["lo"].iloc[0] == pytest.approx(iv.lo, rel=0.02) and got["hi"].iloc[0] == pytest.approx(iv.hi, rel=0.02)
    advice = schedule_advice(single, 2000, PEAK, WARMUP)
    assert set(advice.losses) >= {"cosine", "wsd 20% linear"}


def test_schedule_advice_for_an_unfitted_size_comes_from_the_law_across_sizes(law: JointCurveLaw) -> None:
    from scaling.fitting.curves.advice import advice_lines, run_schedule_advice
    from scaling.fitting.curves.sweep import JointCurves, SweepCurves

    curves = SweepCurves({}, "no curve law: one schedule", (), JointCurves(law, PEAK, 1000.0, WARMUP / STEPS, STEPS))
    advice = run_schedule_advice(curves, 5e7, 2.0e6)
    assert advice["across_sizes"] is True and advice["best"] in advice["losses"]
    assert "curve law across sizes at N = 50.0M" in advice_lines(advice)[0]
    back = SweepCurves.from_dict(curves.to_dict())
    assert run_schedule_advice(back, 5e7, 2.0e6)["best"] == advice["best"]
    assert "longest curve" in run_schedule_advice(curves, 5e7, 4.0e6 * 1000)["why_not"]
    assert run_schedule_advice(SweepCurves({}, "no curve law: x", (), None), 5e7, 2e6) == {"why_not": "no curve law: x"}


def test_replicates_that_did_not_move_from_the_fit_give_no_interval(law: JointCurveLaw) -> None:
    """A bootstrap whose refits stopped where the fit is (parameters at bounds: every replicate within 1e-8 of
    it, as measured on real trunks) gives a prediction an interval of near zero width: withheld, saying why,
    where the evaluations' noise could never determine it so closely; the law's own bootstrap keeps its
    interval."""
    lr = schedule("wsd")
    honest = law.final_loss(3e6, lr)
    assert honest.interval is not None and honest.hi - honest.lo > law.resolution() * honest.value > 0
    stalled = copy.deepcopy(law)
    theta = stalled.theta()
    jitter = np.random.default_rng(0).standard_normal((20, theta.size))
    stalled.replicates_ = {stalled.form_: theta * (1 + 1e-8 * jitter)}
    iv = stalled.final_loss(3e6, lr)
    assert iv.interval is None and iv.value == pytest.approx(honest.value)
    assert iv.kind == "unreliable" and "did not move from the fit" in str(iv.withheld)
    table = stalled.predict([Schedule("wsd-3e6", lr, np.array([STEPS - 1]), 3e6)])
    assert table["lo"].isna().all() and table["hi"].isna().all()
    assert any(d.kind is DoubtKind.UNDETERMINED and "wsd-3e6" in d for d in stalled.doubts())
