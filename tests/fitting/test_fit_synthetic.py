"""Every method recovers a known law from noisy data, and its 95% intervals cover the truth.

Coverage is checked on ten fixed data sets per method with 30 bootstrap replicates: percentile
intervals of so few replicates run somewhat narrow, so the bar is 80%, and the median interval must
be narrower than twice the truth, so that uselessly wide intervals fail too. The study over 50 data
sets with 100 replicates, with each coverage's binomial SE, is ``benchmarks/bench_coverage.py
--parameters``.
"""

from __future__ import annotations

import numpy as np
import pytest

from scaling.fitting import ChinchillaEnvelope, ChinchillaIsoFLOP, ChinchillaParametric, KaplanLaw, from_frame
from scaling.fitting.loss import synthetic as S

A_TRUE = S.TRUTH["beta"] / (S.TRUTH["alpha"] + S.TRUTH["beta"])
REPLICATES = 10


def _parametric(seed: int, n_boot: int = 0) -> ChinchillaParametric:
    law = ChinchillaParametric(grid="small").fit(from_frame(S.grid_points(n_N=6, n_D=6, seed=seed)))
    return law.bootstrap(n_boot, seed) if n_boot else law


def _isoflop(seed: int, n_boot: int = 0) -> ChinchillaIsoFLOP:
    law = ChinchillaIsoFLOP().fit(from_frame(S.isoflop_points(seed=seed)))
    return law.bootstrap(n_boot, seed) if n_boot else law


def _envelope(seed: int, n_boot: int = 0) -> ChinchillaEnvelope:
    law = ChinchillaEnvelope().fit(S.curves(seed=seed))
    return law.bootstrap(n_boot, seed) if n_boot else law


def _kaplan(seed: int, n_boot: int = 0) -> KaplanLaw:
    law = KaplanLaw().fit(from_frame(S.grid_points(seed=seed, law="kaplan")))
    return law.bootstrap(n_boot, seed) if n_boot else law


def test_parametric_recovers_the_truth() -> None:
    law = _parametric(seed=1)
    p = law.params_
    assert p["E"] == pytest.approx(S.TRUTH["E"], abs=0.03)
    assert p["alpha"] == pytest.approx(S.TRUTH["alpha"], abs=0.02)
    assert p["beta"] == pytest.approx(S.TRUTH["beta"], abs=0.02)
    assert np.log(p["A"] / S.TRUTH["A"]) == pytest.approx(0, abs=0.3)
    assert np.log(p["B"] / S.TRUTH["B"]) == pytest.approx(0, abs=0.5)
    N, D, L = law.optimal(1e22)
    assert np.log(N / S.chinchilla_optimal_N(1e22)) == pytest.approx(0, abs=0.15)
    assert L == pytest.approx(S.chinchilla_loss(N, D), rel=0.01)


def test_isoflop_recovers_the_truth() -> None:
    law = _isoflop(seed=1)
    assert law.params_["a"] == pytest.approx(A_TRUE, abs=0.02)
    assert all(b["status"] == "used" for b in law.budgets_)
    N, _, _ = law.optimal(1e22)
    assert np.log(N / S.chinchilla_optimal_N(1e22)) == pytest.approx(0, abs=0.15)


def test_envelope_recovers_the_truth() -> None:
    law = _envelope(seed=1)
    assert law.params_["a"] == pytest.approx(A_TRUE, abs=0.03)
    N, _, _ = law.optimal(1e20)
    assert np.log(N / S.chinchilla_optimal_N(1e20)) == pytest.approx(0, abs=0.2)


def test_envelope_without_noise_is_exact() -> None:
    law = ChinchillaEnvelope().fit(S.curves(seed=0, run_noise=0.0, point_noise=0.0))
    assert law.params_["a"] == pytest.approx(A_TRUE, abs=1e-3)


def test_kaplan_recovers_the_truth() -> None:
    law = _kaplan(seed=1)
    t = S.KAPLAN_TRUTH
    assert law.params_["alpha_N"] == pytest.approx(t["alpha_N"], abs=0.005)
    assert law.params_["alpha_D"] == pytest.approx(t["alpha_D"], abs=0.005)
    iv = law.intervals()
    a_joint = t["alpha_D"] / (t["alpha_N"] + t["alpha_D"])
    assert iv["a"].value == pytest.approx(a_joint, abs=0.02)


def _coverage(make, truth: dict[str, float], n_boot: int) -> tuple[dict[str, float], dict[str, float]]:
    """Per parameter: the share of draws whose interval covers the truth, and the median width over |truth|."""
    hits = {k: 0 for k in truth}
    widths: dict[str, list[float]] = {k: [] for k in truth}
    for seed in range(REPLICATES):
        iv = make(seed + 100, n_boot).intervals()
        for k, v in truth.items():
            hits[k] += iv[k].lo <= v <= iv[k].hi
            widths[k].append((iv[k].hi - iv[k].lo) / abs(v))
    return {k: h / REPLICATES for k, h in hits.items()}, {k: float(np.median(w)) for k, w in widths.items()}


@pytest.mark.parametrize(
    "method",
    ["parametric", "isoflop", "envelope", "kaplan"],
)
def test_interval_coverage(method: str) -> None:
    make, truth = {
        "parametric": (_parametric, {**S.TRUTH, "a": A_TRUE}),
        "isoflop": (_isoflop, {"a": A_TRUE}),
        "envelope": (_envelope, {"a": A_TRUE}),
        "kaplan": (_kaplan, {k: S.KAPLAN_TRUTH[k] for k in ("alpha_N", "alpha_D", "log_Nc", "log_Dc")}),
    }[method]
    cov, width = _coverage(make, truth, n_boot=30)
    assert min(cov.values()) >= 0.80, cov
    assert all(np.isfinite(w) and w < 2.0 for w in width.values()), width
