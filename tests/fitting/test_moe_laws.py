"""The laws of sparsity on simulated MoE sweeps with a known truth: recovery, identification, recommendation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.optimize import minimize

from scaling.errors import FitError
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.core.resample import multinomial_counts
from scaling.fitting.moe import moe_synthetic as S
from scaling.fitting.moe.moe_fit import fit_moe
from scaling.fitting.moe.moe_laws import GranularityLaw, SparsityLaw
from scaling.fitting.moe.moe_recommend import recommend_moe


@pytest.fixture(scope="module")
def granularity_law() -> GranularityLaw:
    return GranularityLaw(grid="small").fit(S.as_data(S.granularity_sweep(seed=3))).bootstrap(60, seed=0)


@pytest.fixture(scope="module")
def sparsity_law() -> SparsityLaw:
    return SparsityLaw(grid="small").fit(S.as_data(S.sparsity_sweep(seed=3))).bootstrap(60, seed=0)


def test_granularity_law_recovers_the_truth_within_its_intervals(granularity_law: GranularityLaw) -> None:
    assert granularity_law.reliable(), granularity_law.doubts()
    ivs = granularity_law.reported_intervals()
    for name in ("alpha", "beta", "gamma", "c"):
        iv = ivs[name]
        assert iv.lo <= S.GRANULARITY_TRUTH[name] <= iv.hi, (name, iv)
    assert abs(ivs["gamma"].value - S.GRANULARITY_TRUTH["gamma"]) < 0.15


def test_sparsity_law_recovers_delta(sparsity_law: SparsityLaw) -> None:
    assert sparsity_law.reliable(), sparsity_law.doubts()
    iv = sparsity_law.reported_intervals()["delta"]
    assert iv.lo <= S.SPARSITY_TRUTH["delta"] <= iv.hi
    assert 0 < iv.lo  # the sweep shows that sparsity helps
    # the law reproduces the truth at a point inside the sweep, within a percent
    N, D, x = 2e8, 5e9, 0.875
    assert sparsity_law.predict(N, D, x) == pytest.approx(S.sparsity_loss(N, D, x), rel=0.01)


def test_recommendation_beats_its_dense_comparison_and_says_it_sits_at_the_edge(sparsity_law: SparsityLaw) -> None:
    rec = recommend_moe(sparsity_law, 1e20)
    assert rec.choice.value == pytest.approx(1 - 1 / 64)  # the sparsest measured: 64 experts, top-1
    assert any("edge of the measured range" in n for n in rec.notes)
    truth_N = (S.SPARSITY_TRUTH["alpha"] * S.SPARSITY_TRUTH["a"] * (1 / 64) ** S.SPARSITY_TRUTH["delta"]
               / (S.SPARSITY_TRUTH["beta"] * S.SPARSITY_TRUTH["b"])) ** (1 / (S.SPARSITY_TRUTH["alpha"] + S.SPARSITY_TRUTH["beta"]))
    truth_N *= (1e20 / 6) ** (S.SPARSITY_TRUTH["beta"] / (S.SPARSITY_TRUTH["alpha"] + S.SPARSITY_TRUTH["beta"]))
    assert rec.N.lo <= truth_N <= rec.N.hi
    assert rec.N.value * rec.D.value * 6 == pytest.approx(1e20)
    assert rec.gain.lo > 0  # the experts save loss against the dense optimum, with an interval above 0
    assert rec.dense["loss"].value > rec.loss.value
    assert rec.N_total.value == pytest.approx(rec.N.value * 64)
    json.dumps(rec.to_dict())


@pytest.mark.parametrize("form", ["granularity", "sparsity"])
def test_bootstrap_refits_reach_their_own_optimum(form: str, granularity_law: GranularityLaw,
                                                  sparsity_law: SparsityLaw) -> None:
    # a refit stopped short of its resample's optimum sits between it and the fit it started from, which
    # narrows the bootstrap's intervals: scipy, run on to tight tolerances, must find nothing lower
    law = granularity_law if form == "granularity" else sparsity_law
    m = law.n_points_
    counts = multinomial_counts(m, m, 8, np.random.default_rng(1))
    objective = law.objective(counts)
    for j, theta in enumerate(law.refit(counts)):
        f, _ = objective.single(theta, j)
        r = minimize(objective.single, theta, args=(j,), jac=True, method="L-BFGS-B",
                     options={"ftol": 1e-15, "gtol": 1e-13, "maxiter": 3000})
        assert r.fun >= f * (1 - 1e-6), (j, f, r.fun)


def test_every_printed_interval_holds_its_estimate(granularity_law: GranularityLaw, sparsity_law: SparsityLaw) -> None:
    for law in (granularity_law, sparsity_law):
        rec = recommend_moe(law, 10 * law.c_range_[1])
        summaries = {**law.reported_intervals(), **law.intervals(), "N*": rec.N, "D*": rec.D, "x*": rec.choice,
                     "loss": rec.loss, "saved": rec.gain, **{f"dense {k}": v for k, v in rec.dense.items()}}
        predicted = law.predict_interval([1e8, 3e8], [3e9, 1e10], [law.x_range_[1]] * 2)
        summaries.update({f"predicted {i}": iv for i, iv in enumerate(predicted)})
        shown = 0
        for name, iv in summaries.items():
            if iv.interval is not None and math.isfinite(iv.lo) and math.isfinite(iv.hi):
                assert iv.covers(iv.value), (law.law, name, iv)
                shown += 1
        assert shown >= len(law.param_names) + 5, (law.law, shown)  # the check is not vacuous


def test_a_stored_law_recommends_the_same(granularity_law: GranularityLaw) -> None:
    again = GranularityLaw.from_dict(json.loads(json.dumps(granularity_law.to_dict())))
    a, b = recommend_moe(granularity_law, 3e20), recommend_moe(again, 3e20)
    assert (a.N.value, *a.N.interval) == pytest.approx((b.N.value, *b.N.interval), rel=1e-9)
    assert a.choice.value == pytest.approx(b.choice.value, rel=1e-9)
    assert a.choice.interval == b.choice.interval or a.choice.interval == pytest.approx(b.choice.interval, rel=1e-9)


def test_a_sweep_at_one_granularity_identifies_the_dense_part_only() -> None:
    table = S.granularity_sweep(seed=1, granularities=(8,))
    law = GranularityLaw(grid="small").fit(S.as_data(table)).bootstrap(40, seed=0)
    assert not law.reliable()
    assert [d.kind for d in law.doubts()] == [DoubtKind.IDENTIFICATION]
    ivs = law.reported_intervals()
    for name in ("a", "g", "gamma"):
        assert ivs[name].kind == "not identified" and math.isnan(ivs[name].value)
        assert (ivs[name].se is None)
    assert ivs["alpha"].lo <= S.GRANULARITY_TRUTH["alpha"] <= ivs["alpha"].hi  # identified at fixed G
    with pytest.raises(FitError, match="no recommendation"):
        recommend_moe(law, 1e20)
    with pytest.raises(FitError, match="predicts only at the sweep"):
        law.predict(1e8, 1e9, 2.0)
    assert law.predict(1e8, 1e9, 8.0) > 0


def test_two_granularities_cannot_separate_the_granularity_term() -> None:
    table = S.granularity_sweep(seed=2, granularities=(1, 4), sizes=(3e7, 2e8, 1e9), tokens=(1e9, 5e9, 3e10))
    law = GranularityLaw(grid="small").fit(S.as_data(table))
    assert any(d.kind is DoubtKind.IDENTIFICATION for d in law.doubts())
    assert law.reported_intervals()["gamma"].kind == "not identified"


def test_sparsity_tied_to_active_size_is_not_identified() -> None:
    """Every run with the same total parameters: sparsity is a function of active size (as Step Law's sweep)."""
    rng = np.random.default_rng(0)
    N = np.repeat(np.geomspace(1e8, 1e9, 4), 4)
    D = np.tile(np.geomspace(1e9, 2e10, 4), 4)
    total = 4e9
    truth = {**S.SPARSITY_TRUTH, "delta": 0.1}
    loss = S.sparsity_loss(N, D, 1 - N / total, truth) * np.exp(rng.normal(0, 0.003, N.size))
    import pandas as pd

    data = S.as_data(pd.DataFrame({"N": N, "N_total": total, "D": D, "loss": loss}))
    law = SparsityLaw(grid="small").fit(data).bootstrap(40, seed=0)
    ivs = law.reported_intervals()
    assert {n for n, iv in ivs.items() if iv.kind == "not identified"} == {"a", "alpha", "delta"}
    # along the path the active exponent is alpha - delta (total fixed): that, not alpha, is what is measured
    path = ivs["alpha_path"]
    assert path.kind == "percentile" and 0 < path.lo < path.hi < truth["alpha"] + 0.1
    assert "lockstep" in law.doubts()[-1]


def test_fit_moe_fits_the_forms_the_data_support_and_skips_the_others() -> None:
    fit = fit_moe(S.as_data(S.sparsity_sweep(seed=4)), n_bootstrap=20, grid="small")
    assert set(fit.laws) == {"sparsity"} and "granularity" in fit.skipped
    text = fit.table()
    assert "moe-sparsity" in text and "delta" in text and "not fitted" in text
    with pytest.raises(FitError, match="needs granularity"):
        fit_moe(S.as_data(S.sparsity_sweep(seed=4)), "moe-granularity", n_bootstrap=0, grid="small")
