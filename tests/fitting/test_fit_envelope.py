"""Approach 1 says when its data cannot give an estimate or an interval, instead of a fake one.

The regression case: three sizes around the optimum, so one middle run decides every kept FLOP
value. Resampling whole runs then either drops a decisive run (the replicate fails) or keeps
them all (the same envelope, the same refit): the old bootstrap printed a zero-width interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scaling.fitting import ChinchillaEnvelope, KaplanLaw, from_dict, from_frame
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.sweep_data import loss_curves
from scaling.fitting.loss import synthetic as S
from scaling.fitting.sweep_fit import FitSummary


def _few_decisive_runs() -> ChinchillaEnvelope:
    data = S.curves(sizes=np.array([3e7, 1e8, 3e8]), tokens_per_param=400.0, n_points=30, seed=0)
    return ChinchillaEnvelope().fit(data).bootstrap(200, seed=0)


def test_few_decisive_runs_give_no_zero_width_interval() -> None:
    law = _few_decisive_runs()
    iv = law.intervals()["a"]
    # Either a real interval or none at all, never a point.
    assert ((iv.lo is None) and (iv.se is None)) or iv.hi - iv.lo > 1e-3, iv
    assert (iv.lo is None)  # here: unavailable, with the reason in the notes
    assert "unavailable" in law.bootstrap_info_
    assert any(n.startswith("intervals unavailable") for n in law.notes_)
    N, _, _ = law.optimal(1e19)
    assert math.isfinite(float(N))  # the point estimate is still there
    opt = law.optimal_interval(1e19)
    assert (opt["N"].lo is None) and (opt["loss"].hi is None)


def test_data_that_cannot_pin_a_down_is_noted_in_table_and_stored_form() -> None:
    law = _few_decisive_runs()
    note = next(n for n in law.notes_ if n.startswith("unreliable"))
    assert "1 model size" in note and "span only a factor" in note
    summary = FitSummary(source="synthetic", fingerprint="x", n_points=law.n_points_, conventions=Conventions(),
                         laws={"approach1": law})
    text = summary.table()
    assert "unreliable: the data cannot pin approach 1" in text
    assert "intervals unavailable" in text
    again = from_dict(law.to_dict())
    assert again.notes_ == law.notes_
    assert (again.intervals()["a"].lo is None)


def test_rich_sweep_keeps_a_real_interval_around_the_truth() -> None:
    law = ChinchillaEnvelope().fit(S.curves(seed=3)).bootstrap(100, seed=3)
    iv = law.intervals()["a"]
    a_true = S.TRUTH["beta"] / (S.TRUTH["alpha"] + S.TRUTH["beta"])
    assert 1e-3 < iv.hi - iv.lo < 0.3 and iv.lo <= a_true <= iv.hi
    assert law.bootstrap_info_["failed"] < 50 and "unavailable" not in law.bootstrap_info_
    assert not any(n.startswith("unreliable") for n in law.notes_)


def test_identical_replicates_are_no_interval_for_any_law() -> None:
    law = KaplanLaw().fit(from_frame(S.grid_points(seed=0, law="kaplan"))).bootstrap(40, seed=0)
    assert law.bootstrap_unavailable() is None
    assert law.intervals()["alpha_N"].lo is not None
    row = np.array([law.params_[k] for k in law.param_names])
    law.replicates_ = np.tile(row, (40, 1))  # what a collapsed resampling produces
    assert "distinct" in law.bootstrap_unavailable()
    assert (law.intervals()["alpha_N"].lo is None)
    law.replicates_[:25] = np.nan  # most replicates failed
    assert "fewer than half" in law.bootstrap_unavailable()


def test_curves_prefer_first_epoch_train_loss_and_fall_back_to_eval() -> None:
    rows = []
    for step in range(1, 11):  # run a: train loss every step, two epochs; eval twice
        rows += [("a", step, 100 * step, 600.0 * step, "train/loss", 5.0 / step),
                 ("a", step, 100 * step, 600.0 * step, "data/epoch", step / 5)]
    rows += [("a", 5, 500, 3000.0, "eval/loss", 1.1), ("a", 10, 1000, 6000.0, "eval/loss", 0.6)]
    rows += [("b", 4, 400, 4800.0, "eval/loss", 1.5), ("b", 8, 800, 9600.0, "eval/loss", 1.2)]  # eval only
    m = pd.DataFrame(rows, columns=["run_key", "step", "tokens", "flops", "name", "value"])
    runs = pd.DataFrame({"run_key": ["a", "b"], "N": [1.0, 2.0]})
    cur = loss_curves(m, runs, "train/loss", "eval/loss", "data/epoch")
    a = cur[cur["run_key"] == "a"]
    assert set(a["metric"]) == {"train/loss"} and a["tokens"].max() == 500  # epoch <= 1 only
    b = cur[cur["run_key"] == "b"]
    assert set(b["metric"]) == {"eval/loss"} and len(b) == 2
    assert loss_curves(None, runs, "train/loss", "eval/loss", "data/epoch") is None


@pytest.mark.parametrize("h", [0.0, 0.05, 0.3])
def test_smoothing_keeps_a_straight_curve_and_its_ends(h: float) -> None:
    from scaling.fitting.loss.envelope import _smooth

    lf = np.log(np.linspace(1e9, 1e10, 200))
    ll = 2.0 - 0.1 * lf
    assert np.allclose(_smooth(lf, ll, h), ll, atol=2e-3)
    noisy = ll + np.random.default_rng(0).normal(0, 0.01, lf.size)
    out = _smooth(lf, noisy, h)
    assert out[0] == pytest.approx(noisy[0], abs=1e-12) and out[-1] == pytest.approx(noisy[-1], abs=1e-12)
    if h >= 0.05:
        assert np.std(out[20:-20] - ll[20:-20]) < 0.5 * np.std(noisy - ll)


def test_recommend_keeps_a_law_the_data_cannot_pin_down_out_of_the_consensus() -> None:
    from scaling.fitting import ChinchillaIsoFLOP, recommend

    shaky = _few_decisive_runs()
    good = ChinchillaIsoFLOP().fit(from_frame(S.isoflop_points(seed=0))).bootstrap(50, seed=0)
    assert shaky.doubts() and not good.doubts()
    summary = FitSummary(source="synthetic", fingerprint="x", n_points=good.n_points_, conventions=Conventions(),
                         laws={"approach1": shaky, "approach2": good})
    rec = recommend(summary, 1e21)
    assert set(rec.per_law) == {"approach1", "approach2"}  # still listed
    assert rec.chosen == "approach2"
    assert not rec.consensus and not rec.agreement  # one law the data determine: nothing to agree or average
    assert any("the choice leaves out Chinchilla 1" in n for n in rec.notes)  # one reliable law: no agreement
