"""Inference-aware optimum (Sardana et al. 2023) against closed forms, monotonicity, intervals and the CLI."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from scaling.errors import FitError
from scaling.fitting import ChinchillaParametric
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.loss import synthetic as S
from scaling.fitting.inference import (
    recommend_inference,
    LossLaw,
    cheapest,
    inference_flops,
    iso_loss_curve,
    recommend_for_inference,
    target_at,
)

TRUTH = LossLaw(**S.TRUTH)


@pytest.mark.parametrize("compute", [1e18, 1e21, 1e24])
def test_no_inference_reproduces_hoffmann_eq4(compute: float) -> None:
    t = S.TRUTH
    G = (t["alpha"] * t["A"] / (t["beta"] * t["B"])) ** (1 / (t["alpha"] + t["beta"]))
    n_eq4 = G * (compute / 6) ** (t["beta"] / (t["alpha"] + t["beta"]))
    d_eq4 = compute / (6 * n_eq4)
    N, D = cheapest(TRUTH, target_at(TRUTH, compute), 0.0)
    assert N == pytest.approx(n_eq4, rel=1e-8) and D == pytest.approx(d_eq4, rel=1e-8)


def test_equal_exponents_one_match_the_quadratic_closed_form() -> None:
    """alpha = beta = 1: with p = A/N, q = B/D, p + q = L - E, the optimum solves c q^2 + 2kB q - kB(L-E) = 0."""
    law = LossLaw(E=1.5, A=4.0e3, B=9.0e4, alpha=1.0, beta=1.0)
    k, target = 6.0, 1.5 + 2e-4
    for T in (0.0, 1e6, 1e9, 1e12):
        c = 2.0 * T
        room = target - law.E
        q = room / 2 if c == 0 else (-2 * k * law.B + math.sqrt(4 * k**2 * law.B**2 + 4 * c * k * law.B * room)) / (2 * c)
        N_hand, D_hand = law.A / (room - q), law.B / q
        N, D = cheapest(law, target, T, k)
        assert N == pytest.approx(N_hand, rel=1e-6) and D == pytest.approx(D_hand, rel=1e-6), T
        assert float(law.loss(N, D)) == pytest.approx(target, rel=1e-12)


def test_equal_exponents_split_the_reducible_loss_evenly_without_inference() -> None:
    law = LossLaw(E=2.0, A=300.0, B=800.0, alpha=0.4, beta=0.4)
    target = 2.3
    N, D = cheapest(law, target, 0.0)
    assert N == pytest.approx((2 * law.A / (target - law.E)) ** (1 / 0.4), rel=1e-6)
    assert D == pytest.approx((2 * law.B / (target - law.E)) ** (1 / 0.4), rel=1e-6)


def test_more_inference_means_a_smaller_model_trained_longer() -> None:
    target = target_at(TRUTH, 1e22)
    Ts = [0.0, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14]
    pts = [cheapest(TRUTH, target, T) for T in Ts]
    Ns, Ds = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    assert np.all(np.diff(Ns) < 0) and np.all(np.diff(Ds) > 0)
    for N, D in pts:
        assert float(TRUTH.loss(N, D)) == pytest.approx(target, rel=1e-10)


def test_the_optimum_is_the_cheapest_point_of_the_iso_loss_curve() -> None:
    target, T = target_at(TRUTH, 1e21), 1e12
    N, D = cheapest(TRUTH, target, T)
    best = 6 * N * D + float(inference_flops(N, T))
    curve = iso_loss_curve(TRUTH, target, T, n=2001)
    assert best <= curve["total_flops"].min() * (1 + 1e-9)
    for f in (0.98, 1.02):  # neighbours on the curve cost more
        n2 = N * f
        assert 6 * n2 * float(TRUTH.tokens_for(n2, target)) + float(inference_flops(n2, T)) > best


@pytest.mark.parametrize("bad", [S.TRUTH["E"], S.TRUTH["E"] - 0.1, float("nan")])
def test_unreachable_target_loss_is_refused(bad: float) -> None:
    with pytest.raises(FitError, match="unreachable.*irreducible loss"):
        cheapest(TRUTH, bad, 1e9)


def test_degenerate_exponent_is_refused_not_overflowed() -> None:
    law = LossLaw(E=1.0, A=400.0, B=400.0, alpha=1e-3, beta=0.3)
    with pytest.raises(FitError, match="degenerate"):
        cheapest(law, 1.5, 1e9)


@pytest.fixture(scope="module")
def fitted_law() -> ChinchillaParametric:
    pts = S.isoflop_points(budgets=np.array([1e17, 3e17, 1e18, 3e18, 1e19]), n_sizes=7, span=1.5, seed=3)
    return ChinchillaParametric(grid="coarse").fit(pts).bootstrap(60, seed=1)


def test_intervals_contain_their_estimates(fitted_law: ChinchillaParametric) -> None:
    rec = recommend_for_inference(fitted_law, 1e13, compute=1e21)
    assert rec.replicates["used"] >= 30
    for block in (rec.optimum, rec.compute_optimal):
        for q in ("N", "D", "tokens_per_param", "total_flops"):
            iv = block[q]
            if (iv.lo is not None):
                assert iv.lo <= iv.value <= iv.hi, (q, iv)
    assert any((rec.optimum[q].lo is not None) for q in ("N", "D"))
    # serving 1e13 tokens: a smaller model trained on more tokens, cheaper in all
    assert rec.optimum["N"].value < rec.compute_optimal["N"].value
    assert rec.optimum["D"].value > rec.compute_optimal["D"].value
    assert 0 < rec.saving < 1
    json.dumps(rec.to_dict())
    assert "inference-aware" in rec.table() and "compute-optimal" in rec.table()


def test_target_loss_mode_and_its_refusal(fitted_law: ChinchillaParametric) -> None:
    E = fitted_law.params_["E"]
    rec = recommend_for_inference(fitted_law, 0.0, target_loss=E + 0.5)
    N, D = rec.optimum["N"].value, rec.optimum["D"].value
    assert float(fitted_law.predict(N, D)) == pytest.approx(E + 0.5, rel=1e-10)
    assert rec.optimum["loss"].lo is None  # a given target has no interval
    with pytest.raises(FitError, match="unreachable"):
        recommend_for_inference(fitted_law, 1e9, target_loss=E)


def test_an_interval_excluding_its_estimate_is_dropped() -> None:
    from scaling.fitting.inference import honest_interval

    iv = honest_interval(np.linspace(2.0, 3.0, 100), 1.0)
    assert (iv.lo is None) and iv.kind == "biased"


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from scaling.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_recommend_inference_tokens_and_target_loss(tmp_path: Path) -> None:
    pts = S.isoflop_points(budgets=np.array([1e17, 3e17, 1e18, 3e18]), n_sizes=7, span=1.5, seed=0)
    csv = tmp_path / "pts.csv"
    pts[["N", "D", "C", "loss"]].to_csv(csv, index=False)
    out = _cli("recommend", "--csv", str(csv), "--compute", "1e21", "--inference-tokens", "1e12",
               "--bootstrap", "20", "--format", "json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["optimum"]["N"]["value"] < d["compute_optimal"]["N"]["value"]
    out = _cli("recommend", "--csv", str(csv), "--target-loss", "1.0", "--inference-tokens", "1e12", "--bootstrap", "20")
    assert out.returncode == 2 and "unreachable" in out.stderr and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    out = _cli("recommend", "--csv", str(csv), "--compute", "1e21", "--target-loss", "1.0", "--inference-tokens", "1e12")
    assert out.returncode == 2 and out.stderr.strip() == "error: give either --compute or --target-loss, not both"


def test_the_inference_optimum_reads_a_fit_and_says_when_approach_3_is_missing(fitted_law) -> None:
    from scaling.fitting.sweep_fit import FitSummary

    fit = FitSummary(source="pts.csv", fingerprint="f", n_points=0, conventions=Conventions(), laws={"approach3": fitted_law})
    assert recommend_inference(fit, 1e12, compute=1e19).optimum["N"].value > 0
    without = FitSummary(source="pts.csv", fingerprint="f", n_points=0, conventions=Conventions(),
                         skipped={"approach3": "every budget has fewer than 3 sizes"})
    with pytest.raises(FitError, match="needs approach 3, which could not be fitted: every budget has fewer"):
        recommend_inference(without, 1e12)
    with pytest.raises(FitError, match=r"this fit holds none \(fit with law 'all' or 'approach3'\)"):
        recommend_inference(FitSummary(source="pts.csv", fingerprint="f", n_points=0, conventions=Conventions()), 1e12)


def test_budgets_and_targets_far_outside_the_data_are_refused(fitted_law: ChinchillaParametric) -> None:
    """The fit saw 1e17-1e19 FLOPs: a budget a million times beyond, a target loss whose compute-optimal
    run lies there, or more inference tokens than a float can price are refused, not printed as numbers."""
    with pytest.raises(FitError, match="outside the measured budgets"):
        recommend_for_inference(fitted_law, 1e12, compute=1e300)
    with pytest.raises(FitError, match="outside the measured budgets"):
        recommend_for_inference(fitted_law, 1e12, compute=1e-300)
    with pytest.raises(FitError, match="--target-loss 1e\\+20: its compute-optimal run"):
        recommend_for_inference(fitted_law, 1e12, target_loss=1e20)
    with pytest.raises(FitError):  # at 1e300 the iso-loss curve is numerically degenerate, or far outside
        recommend_for_inference(fitted_law, 1e12, target_loss=1e300)
    with pytest.raises(FitError, match="more than 1e\\+24 tokens"):
        recommend_for_inference(fitted_law, 1e300, compute=1e21)
    rec = recommend_for_inference(fitted_law, 1e12, compute=1e24)  # 1e5x beyond: allowed
    assert math.isfinite(rec.optimum["total_flops"].value)


def test_cli_recommend_refuses_absurd_budgets_in_one_line(tmp_path: Path) -> None:
    from cli_run import run_cli

    pts = S.isoflop_points(budgets=np.array([1e17, 3e17, 1e18, 3e18]), n_sizes=7, span=1.5, seed=0)
    csv = tmp_path / "pts.csv"
    pts[["N", "D", "C", "loss"]].to_csv(csv, index=False)
    for args in (("--compute", "1e300"), ("--compute", "1e-300"),
                 ("--inference-tokens", "1e12", "--target-loss", "1e300"),
                 ("--inference-tokens", "1e300")):
        code, out, err = run_cli("recommend", "--csv", str(csv), "--bootstrap", "20", *args)
        assert code == 2, (args, out, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "inf" not in out, (args, err)


def test_an_unreliable_fit_gives_no_interval_and_claims_no_saving() -> None:
    """Six points for five parameters: approach 3 is flagged, so its extrapolation is no recommendation."""
    from scaling.fitting import from_frame

    pts = S.isoflop_points(budgets=np.array([1e19, 1e20]), n_sizes=3, seed=0)
    law = ChinchillaParametric().fit(from_frame(pts)).bootstrap(30, seed=0)
    assert law.doubts()
    rec = recommend_for_inference(law, 1e13, compute=1e20)
    assert rec.unreliable == law.doubts()[0]
    for block in (rec.optimum, rec.compute_optimal):
        assert all(block[q].lo is None for q in ("N", "D", "tokens_per_param", "total_flops"))
    table = rec.table()
    assert "no saving claimed" in table and "saves" not in table
    rows = [line for line in table.splitlines() if line.strip().startswith(("inference-aware", "compute-optimal"))]
    assert len(rows) == 2 and not any("[" in row for row in rows), table


@pytest.mark.parametrize("target", ["1e200", "1e308", "1e100", "1e50", "nan", "inf", "-inf"])
def test_cli_recommend_refuses_an_absurd_target_loss_in_one_line(tmp_path: Path, target: str) -> None:
    """A target loss that is no finite number, or one whose compute-optimal run lies absurdly far from the
    measured budgets, is refused by name in one line: no traceback, no "0 FLOPs" quoted as a budget."""
    from cli_run import run_cli

    pts = S.isoflop_points(budgets=np.array([1e17, 3e17, 1e18, 3e18]), n_sizes=7, span=1.5, seed=0)
    csv = tmp_path / "pts.csv"
    pts[["N", "D", "C", "loss"]].to_csv(csv, index=False)
    code, out, err = run_cli("recommend", "--csv", str(csv), "--bootstrap", "20", "--inference-tokens", "1e12",
                             "--target-loss", target)
    assert code == 2 and out == "", (out, err)
    line = err.strip()
    assert len(line.splitlines()) == 1 and "--target-loss" in line, err
    assert all(float(c) >= 1 for c in re.findall(r"(\S+) FLOPs", line)), err  # no "0 FLOPs" or 8e-15
    if not math.isfinite(float(target)):
        assert "must be a finite number" in line, err
    else:
        assert "outside the measured budgets" in line, err


def test_cheapest_refuses_a_model_of_less_than_one_parameter() -> None:
    """At a loss far above the law's range the optimum underflows to N = 0: refused, not divided by."""
    with pytest.raises(FitError, match="less than one parameter"):
        cheapest(TRUTH, 1e200, 1e12)


def test_an_inference_aware_run_trained_far_beyond_the_data_is_refused(fitted_law: ChinchillaParametric) -> None:
    """1e24 inference tokens move the optimum to a small model trained on ~1e19 tokens: its own training
    budget lies 1e9x beyond the measured 1e17-1e19 FLOPs, so no number is printed for it."""
    E = fitted_law.params_["E"]
    target = target_at(LossLaw.from_params(fitted_law.params_), 1e19)
    with pytest.raises(FitError, match="--inference-tokens 1e\\+24: the cheapest run to train and serve them trains"):
        recommend_for_inference(fitted_law, 1e24, target_loss=target)
    rec = recommend_for_inference(fitted_law, 1e12, target_loss=target)  # near the data: answered
    assert math.isfinite(rec.optimum["training_flops"].value) and target > E


def test_no_inference_tokens_claims_no_saving(fitted_law: ChinchillaParametric) -> None:
    """--target-loss alone serves nothing: the two rows coincide, and "saves 0.0%" is not printed as a finding."""
    table = recommend_for_inference(fitted_law, 0.0, target_loss=fitted_law.params_["E"] + 0.5).table()
    assert "saves" not in table and "the two runs are the same" in table


def test_a_fit_with_a_negative_exponent_names_it() -> None:
    """A flat law (the loss is E plus noise) fits approach 3 with a negative exponent: the refusal names it."""
    from scaling.fitting import fit_data, from_frame

    flat = {**S.TRUTH, "A": 1e-6, "B": 1e-6}
    law = fit_data(from_frame(S.isoflop_points(seed=0, t=flat, noise=0.005)), "approach3", n_bootstrap=20,
                   seed=0).laws["approach3"]
    bad = [k for k in ("A", "B", "alpha", "beta") if not law.params_[k] > 0]
    assert bad, law.params_
    with pytest.raises(FitError, match=f"no usable parameters \\({bad[0]} = -"):
        recommend_for_inference(law, 1e12, compute=1e20)
