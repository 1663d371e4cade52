"""What a fit prints about itself is a claim: each case below is shaped like one that overstated.

- an approach 3 fitted to 12 points (the example sweep's shape) whose parameters the data cannot
  determine, printed as numbers with SEs of 1e82;
- a two-budget IsoFLOP set giving a tight-looking exponent a;
- a parameter pinned at a bound (E = 0, E_L = 0) shown with a zero-width interval;
- a point estimate outside its own interval (Kaplan's alpha_C from a frontier re-chosen per resample);
- a linear SE orders of magnitude wider than the interval beside it;
- intervals beyond the data that hold parameter noise only.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest

from scaling.fitting import ChinchillaIsoFLOP, ChinchillaParametric, KaplanLaw, fit_data, from_frame
from scaling.fitting.core.conventions import Conventions
from scaling.fitting.core.intervals import summarise
from scaling.fitting.loss import synthetic as S
from scaling.fitting.recommend import AT_BUDGET_SPAN, compare_laws, recommend, undetermined_at_budget
from scaling.fitting.sweep_fit import FitSummary
from scaling.fitting.sweep_fit import interval_text


def _underdetermined(seed: int = 0, n_boot: int = 50) -> ChinchillaParametric:
    data, _, _ = S.draw("underdetermined", seed)
    assert len(data.points) == 12
    return fit_data(data, "approach3", n_bootstrap=n_boot, seed=seed, settings={"approach3": {"grid": "small"}}).laws[
        "approach3"]


def _isoflop(budgets: np.ndarray, seed: int = 0, n_boot: int = 100) -> ChinchillaIsoFLOP:
    pts = S.isoflop_points(budgets=budgets, n_sizes=7, span=1.5, noise=0.003, seed=seed)
    return fit_data(from_frame(pts), "approach2", n_bootstrap=n_boot, seed=seed).laws["approach2"]


# -- 1. unidentified parameters ----------------------------------------------------------------
def test_underdetermined_approach3_on_12_points_is_flagged_naming_the_parameter() -> None:
    law = _underdetermined()
    doubts = law.doubts()
    assert doubts, law.notes_
    assert any(re.search(r"do not determine .*(E|A|B|alpha|beta) \(its 95% bootstrap interval", d) for d in doubts)
    table = FitSummary(source="12 points", fingerprint="x", n_points=12, conventions=Conventions(),
                       laws={"approach3": law}).table()
    assert "unreliable: the data do not determine" in table


def test_an_unreliable_law_shows_its_values_without_intervals_everywhere() -> None:
    """The fit table, its JSON, the report's parameter table and frontier band all withhold them."""
    from scaling.reports import fitview
    from scaling.reports.blocks import interval

    law = _underdetermined()
    assert law.doubts()
    raw = law.intervals()
    assert any((iv.lo is not None) for iv in raw.values())  # there was a bootstrap interval to withhold
    shown = law.reported_intervals()
    assert set(shown) == set(raw)
    for name, iv in shown.items():
        assert iv.value == raw[name].value
        assert iv.kind in ("unreliable", "pinned") and (iv.lo is None) and (iv.se is None)
    table = FitSummary(source="12 points", fingerprint="x", n_points=12, conventions=Conventions(),
                       laws={"approach3": law}).table()
    rows = [line for line in table.splitlines() if line.split() and line.split()[0] in raw]
    assert len(rows) == len(raw) and not any("[" in row for row in rows), rows
    assert sum("no interval: unreliable" in row for row in rows) == sum(iv.kind == "unreliable" for iv in shown.values())
    d = law.to_dict()
    assert d["reliable"] is False and all(iv["lo"] is None and iv["hi"] is None for iv in d["intervals"].values())
    assert "no interval: unreliable" in interval(shown["alpha"])
    assert fitview.frontier("approach3", law).band(np.geomspace(1e18, 1e22, 5), "N") is None
    good = ChinchillaParametric(grid="small").fit(from_frame(S.grid_points(n_N=6, n_D=6, seed=1))).bootstrap(50, 1)
    assert good.reported_intervals() == good.intervals() and good.to_dict()["reliable"] is True
    assert fitview.frontier("approach3", good).band(np.geomspace(1e18, 1e22, 5), "N") is not None


def test_well_sampled_grid_is_not_flagged() -> None:
    law = ChinchillaParametric(grid="small").fit(from_frame(S.grid_points(n_N=6, n_D=6, seed=1))).bootstrap(50, 1)
    assert not law.doubts(), law.notes_


def test_two_budget_isoflop_does_not_pretend_to_a_tight_exponent() -> None:
    law = _isoflop(np.array([1e19, 1e20]))
    assert any("only 2 FLOP budget(s)" in d for d in law.doubts())
    good = _isoflop(np.geomspace(1e18, 1e20, 5))
    assert not good.doubts(), good.notes_
    rec = compare_laws({"approach2": law, "kaplan": good}, 1e21)  # any second, reliable law
    assert rec.chosen == "kaplan" and "approach2" in rec.unreliable


def test_recommend_follows_the_best_determined_reliable_law_and_says_why() -> None:
    shaky = _underdetermined()
    good = _isoflop(np.geomspace(3e18, 3e19, 5))
    assert shaky.doubts() and not good.doubts()
    C = 10 * 3e19
    # Make the unreliable law the narrowest: it must still not be chosen.
    shaky_width = math.log(shaky.optimal_interval(C)["N"].hi / shaky.optimal_interval(C)["N"].lo)
    summary = FitSummary(source="synthetic", fingerprint="x", n_points=12, conventions=Conventions(),
                         laws={"approach2": good, "approach3": shaky})
    rec = recommend(summary, C)
    assert rec.chosen == "approach2", (rec.chosen, shaky_width)
    assert "narrowest 95% interval on N*" in rec.chosen_reason
    assert "approach3" in rec.unreliable and "do not determine" in rec.unreliable["approach3"]
    text = rec.table()
    assert "recommended: Chinchilla 2 (IsoFLOP)" in text and "left out: Chinchilla 3 (parametric)" in text


def _e_unidentified() -> ChinchillaParametric:
    """IsoFLOP slices of a law whose E is small beside the loss (0.05) at 1% noise: E is not determined."""
    pts = S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 5), n_sizes=7, span=1.5, noise=0.01, seed=3,
                           t={**S.TRUTH, "E": 0.05})
    return fit_data(from_frame(pts), "approach3", n_bootstrap=50, seed=0,
                    settings={"approach3": {"grid": "small"}}).laws["approach3"]


def test_a_law_whose_parameters_are_in_doubt_recommends_where_its_bootstrap_determines_the_budget() -> None:
    law = _e_unidentified()
    assert law.doubts() and all("do not determine E" in d for d in law.doubts()), law.notes_
    C = 10 * law.c_range_[1]
    rec = recommend(FitSummary(source="s", fingerprint="x", n_points=35, conventions=Conventions(), laws={"approach3": law}), C)
    assert rec.chosen == "approach3" and not rec.unreliable
    r = rec.per_law["approach3"]
    assert "do not determine E" in rec.determined_at_budget["approach3"]
    for q in ("N", "D", "loss"):  # intervals holding their estimates, within the stated spans
        assert r[q].kind == "percentile" and r[q].lo <= r[q].value <= r[q].hi
        assert r[q].hi / r[q].lo <= AT_BUDGET_SPAN[q]
    note = next(n for n in rec.notes if n.startswith("Chinchilla 3"))
    assert "do not determine E" in note and "determines N*, D* and the loss at this budget" in note
    text = rec.table()
    row = next(line for line in text.splitlines() if line.lstrip().startswith("Chinchilla 3"))
    assert "determined at this budget" in row and "[" in row, row
    assert "(chosen, unreliable)" not in text
    assert law.reported_intervals()["E"].kind == "unreliable"  # the fit still shows no interval on E


def test_a_law_whose_distribution_at_the_budget_is_wide_still_does_not_recommend() -> None:
    law = _underdetermined(seed=6001)
    C = 10 * law.c_range_[1]
    iv = law.optimal_interval(C)
    assert iv["N"].hi / iv["N"].lo > AT_BUDGET_SPAN["N"]
    why = undetermined_at_budget(law, iv, C)
    assert why is not None and "95% interval of N at this budget spans a factor" in why
    rec = compare_laws({"approach3": law}, C)
    assert "approach3" in rec.unreliable and not rec.determined_at_budget
    assert "(chosen, unreliable)" in rec.table()


def test_design_doubts_stay_verdicts_whatever_the_distribution_at_the_budget() -> None:
    """Too few budgets is no doubt about a parameter: the at-budget rule does not lift it."""
    law = _isoflop(np.array([1e19, 1e20]))
    C = 1e21
    assert undetermined_at_budget(law, law.optimal_interval(C), C) == law.doubts()[0]
    assert "approach2" in compare_laws({"approach2": law}, C).unreliable


# -- 2. pinned parameters ----------------------------------------------------------------------
def test_parameter_at_its_bound_is_reported_pinned_not_with_an_interval() -> None:
    no_floor = {**S.TRUTH, "E": 0.0}  # a pure power law: the fit drives E to its bound 0
    law = ChinchillaParametric(grid="small").fit(from_frame(S.grid_points(n_N=5, n_D=5, noise=0.003, t=no_floor)))
    law.bootstrap(30, 0)
    iv = law.intervals()["E"]
    assert iv.kind == "pinned" and iv.pinned == "lower bound 0"
    assert (iv.lo is None) and (iv.hi is None) and (iv.se is None)
    assert any("E is pinned" in d for d in law.doubts())
    table = FitSummary(source="s", fingerprint="x", n_points=25, conventions=Conventions(), laws={"approach3": law}).table()
    assert "pinned: lower bound 0" in table


def test_approach2_loss_floor_fixed_or_at_zero_is_pinned() -> None:
    three = _isoflop(np.geomspace(1e18, 1e20, 3), n_boot=30)
    assert three.intervals()["E_L"].kind == "pinned" and "fixed at 0" in three.intervals()["E_L"].pinned
    pts = S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 5), n_sizes=7, span=1.5, noise=0.002,
                           t={**S.TRUTH, "E": 0.0})
    law = ChinchillaIsoFLOP().fit(from_frame(pts)).bootstrap(30, 0)
    assert law.intervals()["E_L"].kind == "pinned"
    assert "E_L" in law.to_dict()["pinned"]


def test_replicates_that_never_move_give_no_interval() -> None:
    iv = summarise(np.full(50, 1.03e-52), 1.03e-52, log=True)
    assert iv.kind == "no spread" and (iv.lo is None) and (iv.se is None)


# -- 3. estimates outside their own interval ---------------------------------------------------
def test_estimate_outside_its_percentile_interval_says_the_bootstrap_is_biased() -> None:
    rng = np.random.default_rng(0)
    reps = rng.normal(0.0360, 0.0005, 400)
    point = float(np.quantile(reps, 0.985))  # above the 97.5% quantile: the percentile interval excludes it
    iv = summarise(reps, point)
    assert iv.kind == "biased" and (iv.lo is None) and (iv.hi is None)
    assert iv.quantile == pytest.approx(0.985, abs=0.01) and "does not reproduce the fit" in iv.withheld
    iv = summarise(np.linspace(39.74, 40.30, 200), 40.38)  # log_Cc = 40.38 with [39.74, 40.38]
    assert iv.kind == "biased" and (iv.lo is None)
    assert "bootstrap biased" in interval_text(iv)


def test_kaplan_replicates_come_from_the_same_procedure_as_the_fit() -> None:
    """Over-training runs (sizes x tokens-per-parameter multiples, as Gadre et al.'s), no curves.

    Each single-variable law's points (largest D per size, ...) and the frontier are chosen once
    and resampled; choosing them again inside each resample picks worse points whenever a chosen
    one is left out, which pushed every replicate of alpha_N1 about a third of an SD off the fit.
    """
    import pandas as pd

    shift: dict[str, list[float]] = {}
    for seed in range(8):
        rng = np.random.default_rng(seed)
        N, M = np.meshgrid(np.geomspace(1e7, 1e9, 7), np.array([5, 10, 20, 40, 80, 160]))
        N, D = N.ravel(), (N * M).ravel()
        loss = S.chinchilla_loss(N, D) * np.exp(rng.normal(0, 0.01, N.size))
        law = KaplanLaw().fit(from_frame(pd.DataFrame({"N": N, "D": D, "loss": loss}))).bootstrap(200, seed)
        reps = law.replicates_[np.isfinite(law.replicates_).all(axis=1)]
        for j, name in enumerate(law.param_names):
            shift.setdefault(name, []).append(float((np.median(reps[:, j]) - law.params_[name]) / np.std(reps[:, j])))
        for name, iv in law.intervals().items():
            assert iv.kind != "percentile" or iv.lo <= iv.value <= iv.hi, (name, iv)
    mean_shift = {name: float(np.mean(z)) for name, z in shift.items()}
    assert max(abs(z) for z in mean_shift.values()) < 0.12, mean_shift


# -- 4. SE against skewed replicates -----------------------------------------------------------
def test_heavy_tailed_replicates_get_no_se_on_the_scale_they_are_heavy_tailed_on() -> None:
    rng = np.random.default_rng(1)
    reps = np.exp(rng.normal(np.log(350), 0.4, 300))
    clean = summarise(reps, 350.0, log=True)
    assert 0.3 < clean.se_log < 0.5 and (clean.se is not None)
    reps[:6] = 1e9  # a few runaway refits: heavy-tailed in the value and in its log
    iv = summarise(reps, 350.0, log=True)
    assert (iv.se is None) and "heavy-tailed" in iv.se_note
    assert (iv.se_log is None) and "heavy-tailed" in iv.se_note
    assert iv.lo < 350 < iv.hi < 1e4


def test_no_se_above_ten_times_its_parameter_without_a_flag() -> None:
    """Logs (log_kN, log_Nc...) are exempt: their value is a position on a log scale, near 0 by units."""
    for seed in range(3):
        data, _, _ = S.draw("underdetermined", seed)
        summary = fit_data(data, n_bootstrap=40, seed=seed, settings={"approach3": {"grid": "small"}})
        for kind, law in summary.laws.items():
            if law.doubts():
                continue
            for name, iv in law.intervals().items():
                if (iv.se is not None) and iv.se_log is None:
                    assert iv.se <= 10 * abs(iv.value) or name.startswith("log_"), (kind, name, iv)


# -- 5. extrapolation carries model error ------------------------------------------------------
def test_intervals_beyond_the_data_are_widened_by_the_backtest_error() -> None:
    law = _isoflop(np.geomspace(1e18, 1e20, 5))
    assert law.extrapolation_ and law.extrapolation_["N"] > 0 and law.extrapolation_["loss"] > 0
    inside = law.optimal_interval(1e19)["N"]
    assert not inside.widened
    beyond = law.optimal_interval(1e21)["N"]
    assert beyond.lo < beyond.lo_param and beyond.hi > beyond.hi_param and beyond.widened
    further = law.optimal_interval(1e22)["N"]
    assert math.log(further.hi / further.lo) > math.log(beyond.hi / beyond.lo)
    restored = type(law).from_dict(law.to_dict())
    assert restored.optimal_interval(1e21)["N"].hi == pytest.approx(beyond.hi)
    pred = law.predict_interval([3e9], [5e10])[0]
    assert pred.lo < pred.value < pred.hi


# -- 6. data that show no scaling, or too little to show it ---------------------------------
def _noise_points(seed: int = 0) -> pd.DataFrame:
    """The synthetic IsoFLOP grid with its losses replaced by noise unrelated to N, D or C."""
    pts = S.isoflop_points(budgets=np.geomspace(1e18, 1e21, 8), n_sizes=7, seed=seed)
    pts["loss"] = np.random.default_rng(seed).uniform(3.0, 4.0, len(pts))
    return pts


SHORT_NAMES = {"kaplan": "Kaplan", "approach1": "Chinchilla 1", "approach2": "Chinchilla 2",
               "approach3": "Chinchilla 3"}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_losses_unrelated_to_compute_give_no_reliable_law(seed: int) -> None:
    summary = fit_data(from_frame(_noise_points(seed)), n_bootstrap=40, seed=seed,
                       settings={"approach3": {"grid": "small"}})
    for kind, law in summary.laws.items():
        assert law.doubts(), (kind, law.notes_)
    if "approach2" in summary.laws:
        assert any("alpha_L" in d for d in summary.laws["approach2"].doubts())
    from scaling.fitting.recommend import next_runs_for

    runs, why = next_runs_for(summary, 1e22, seed)
    assert not runs and why is not None  # approach 3's interval says nothing here, so nothing is suggested from it
    rec = recommend(summary, 1e22)
    assert not rec.consensus and not rec.agreement
    assert any("no law is reliable" in n for n in rec.notes)
    assert not rec.next_runs  # approach 3's interval says nothing here, so nothing is suggested from it
    text = rec.table()
    assert "consensus (" not in text and "agreement:" not in text
    assert "(chosen, unreliable)" in text or not rec.chosen
    for kind in rec.unreliable:  # an unreliable law's row prints its values without an interval
        row = next(line for line in text.splitlines() if line.lstrip().startswith(SHORT_NAMES[kind]))
        assert "[" not in row, row


@pytest.mark.parametrize("budgets", [[1e19], [1e19, 2e19]])
def test_kaplan_on_one_or_two_close_budgets_is_unreliable(budgets: list[float]) -> None:
    """On one IsoFLOP budget N and D move together: the joint law cannot separate alpha_N from alpha_D."""
    pts = S.isoflop_points(budgets=np.array(budgets), n_sizes=9, seed=0)
    law = KaplanLaw().fit(from_frame(pts)).bootstrap(40, seed=0)
    doubts = " ".join(law.doubts())
    assert f"only {len(budgets)} FLOP budget(s)" in doubts and "span only a factor" in doubts, law.notes_
    pts = S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 5), n_sizes=9, seed=0)
    well = KaplanLaw().fit(from_frame(pts)).bootstrap(40, seed=0)
    assert not well.doubts(), well.notes_  # five budgets over 100x: the same sampling, enough of it


def test_kaplan_single_variable_exponents_that_do_not_fall_are_noted() -> None:
    """On one budget the largest-D run of each size has less data the larger the model: L(N) does not
    fall, and the compute frontier is a single point (no L(C_min))."""
    pts = S.isoflop_points(budgets=np.array([1e19]), n_sizes=9, seed=0)
    law = KaplanLaw().fit(from_frame(pts))
    assert law.params_["alpha_N1"] <= 0
    assert any(n.startswith("not determined: L(N):") and "not positive" in n for n in law.notes_), law.notes_
    assert any(n.startswith("not determined: L(C_min): alpha_C could not be fitted") for n in law.notes_)
    assert not any(n.startswith("not determined") for n in law.doubts())  # noted, not judged: N* is the joint law's
    two = KaplanLaw().fit(from_frame(S.isoflop_points(budgets=np.array([1e19, 2e19]), n_sizes=9, seed=0)))
    a_frontier = two.params_["alpha_C"] / two.params_["alpha_N1"]
    assert not 0 < a_frontier < 1
    assert any("a_frontier" in n and "not between 0 and 1" in n for n in two.notes_), two.notes_


def test_a_bootstrap_that_mostly_fails_makes_the_law_unreliable() -> None:
    law = _isoflop(np.geomspace(1e18, 1e20, 5))
    assert not law.doubts()
    reps = np.array(law.replicates_, float)
    reps[: int(0.6 * len(reps))] = np.nan  # as if 60% of the resamples could not be refitted
    law.replicates_ = reps
    reasons = law.undetermined()
    assert any("only 40 of 100 bootstrap resamples" in r for r in reasons), reasons


def test_five_parameters_on_six_points_are_not_trusted() -> None:
    pts = S.isoflop_points(budgets=np.array([1e19, 1e20]), n_sizes=3, seed=0)
    assert len(pts) == 6
    law = ChinchillaParametric(grid="small").fit(from_frame(pts))
    assert any("6 points for the 5 parameters" in d for d in law.doubts()), law.notes_


def test_losses_that_do_not_vary_are_refused() -> None:
    from scaling.errors import FitError

    pts = S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 5), n_sizes=5, seed=0)
    pts["loss"] = 3.0 + 1e-9 * np.arange(len(pts))
    with pytest.raises(FitError, match="the losses do not vary"):
        from_frame(pts)
    pts["loss"] = 3.0 + 1e-3 * np.arange(len(pts))  # small but measurable differences are fitted
    assert len(from_frame(pts).points) == len(pts)


def test_a_log_se_that_disagrees_with_its_interval_is_not_printed() -> None:
    """One replicate stuck at a bound (E = 7e-6) beside [0.98, 2.02] must not print an SE of ln E of 1.75."""
    rng = np.random.default_rng(0)
    reps = np.exp(rng.normal(np.log(1.5), 0.15, 49))
    reps = np.append(reps, 7.2e-6)
    iv = summarise(reps, 1.5, log=True)
    assert iv.kind == "percentile" and iv.lo < 1.5 < iv.hi
    assert (iv.se_log is None) and "heavy-tailed" in iv.se_note
    from scaling.fitting.sweep_fit import se_text

    assert "(ln)" not in se_text(iv)


def test_an_undetermined_approach3_raises_no_numpy_warnings(tmp_path) -> None:
    """A flat law (A = B = 1e-6: the loss is E plus noise) leaves approach 3 free to take wild exponents;
    its backtest refit and its optimum then overflow. That is expected and judged (a non-finite value
    is stored as none), so numpy's RuntimeWarnings must not reach the user's terminal."""
    import subprocess
    import sys
    import warnings

    flat = {**S.TRUTH, "A": 1e-6, "B": 1e-6}
    pts = S.isoflop_points(budgets=np.array([1e18, 1e19, 1e20]), n_sizes=9, seed=2, t=flat, noise=0.005)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        law = fit_data(from_frame(pts), "approach3", n_bootstrap=50, seed=2).laws["approach3"]
        law.optimal(np.geomspace(1e10, 1e30, 10))
        law.optimal_interval(1e24)
    assert not [w for w in caught if issubclass(w.category, RuntimeWarning)], [str(w.message) for w in caught]
    assert law.doubts()
    bt = law.backtest_
    assert bt["mean_abs_rel_error"] is None or math.isfinite(bt["mean_abs_rel_error"])  # none, not inf

    csv = tmp_path / "flat.csv"
    pts[["N", "D", "C", "loss"]].to_csv(csv, index=False)
    out = subprocess.run([sys.executable, "-c", "from scaling.cli import main; main()", "fit", "--csv", str(csv),
                          "--law", "approach3", "--bootstrap", "50", "--seed", "2"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "RuntimeWarning" not in out.stderr and "encountered" not in out.stderr, out.stderr


def test_a_backtest_error_is_printed_to_three_digits_whatever_its_size() -> None:
    """An undetermined law's backtest N* can be off by 1e73%: printed as such, not as 74 digits to 0.1%."""
    flat = {**S.TRUTH, "A": 1e-6, "B": 1e-6}
    pts = S.isoflop_points(budgets=np.array([1e18, 1e19, 1e20]), n_sizes=9, seed=1, t=flat, noise=0.005)
    summary = fit_data(from_frame(pts), "approach3", n_bootstrap=20, seed=1)
    law = summary.laws["approach3"]
    assert law.backtest_["N_opt"]["rel_error"] is not None  # this seed's refit gives a finite, wrong N*
    law.backtest_["N_opt"]["rel_error"] = 3.6e71  # as a real sweep's undetermined refit gave
    table = summary.table()
    assert "off by +3.6e+73%" in table and not re.search(r"\d{12}", table), table
