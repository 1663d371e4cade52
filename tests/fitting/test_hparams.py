"""Hyperparameter groups and laws (scaling.fitting.hyperparams.hparams): the per-group quadratic optimum, edge
flags, the laws against a simulated truth, CSV import, recommend, and bad input on the command line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_run import run_cli
from scaling.errors import ArgumentError, FitError
from scaling.fmt import Interval
from scaling.fitting import fit_sweep, from_csv, recommend
from scaling.fitting.hyperparams import hparams_synthetic as HS
from scaling.fitting.hyperparams.hparams import fit_group, fit_hparams, tuned_points


def bowl(lr_star: float = 3e-3, b_star: float = 2e5, *, lrs: np.ndarray | None = None,
         batches: np.ndarray | None = None, L0: float = 3.0) -> pd.DataFrame:
    """An exact quadratic bowl in (ln lr, ln B) with a cross term, on a 2x / 2x grid around (not on) its minimum."""
    lrs = lr_star * 2.0 ** (np.arange(-3, 4) + 0.3) if lrs is None else lrs
    batches = b_star * 2.0 ** (np.arange(-2, 3) - 0.4) if batches is None else batches
    L, B = (a.ravel() for a in np.meshgrid(lrs, batches, indexing="ij"))
    x, y = np.log(L / lr_star), np.log(B / b_star)
    loss = L0 + 0.03 * x * x + 0.02 * y * y + 0.01 * x * y
    return pd.DataFrame({"N": 1e8, "D": 2e9, "C": 1.2e18, "loss": loss, "lr": L, "batch": B})


def test_the_quadratic_finds_a_known_bowls_minimum_between_grid_values() -> None:
    g = fit_group(bowl(), "bowl", n_bootstrap=50)
    assert g.status == "fitted" and g.used
    assert g.lr.value == pytest.approx(3e-3, rel=1e-6)
    assert g.batch.value == pytest.approx(2e5, rel=1e-6)
    assert g.loss.value == pytest.approx(3.0, abs=1e-9)
    best = bowl().sort_values("loss").iloc[0]
    assert abs(math.log(best["lr"] / 3e-3)) > 0.1  # the grid's argmin is not the answer
    # exact data: every replicate refits the same optimum, and no interval is invented for it
    assert g.lr.kind == "no spread"


def test_a_noisy_bowl_gives_an_interval_around_its_estimate() -> None:
    d = bowl()
    d["loss"] = d["loss"] * np.exp(np.random.default_rng(0).normal(0, 0.001, len(d)))
    g = fit_group(d, "noisy", n_bootstrap=200)
    assert g.lr.kind == "percentile" and g.lr.lo <= g.lr.value <= g.lr.hi
    assert g.lr.lo < 3e-3 * 1.25 and g.lr.hi > 3e-3 / 1.25
    assert g.near["n"] >= 1 and g.near["lr_lo"] <= g.near["lr_hi"]


def test_a_minimum_at_the_edge_of_the_grid_is_flagged_and_left_out() -> None:
    d = bowl(lrs=3e-3 * 2.0 ** np.arange(-6, 1, dtype=float) / 4)  # every lr below lr*: best at the largest
    g = fit_group(d, "edge", n_bootstrap=20)
    assert g.status == "edge" and not g.used
    assert "lr* at the largest value tried" in g.message and "widen the sweep" in g.message
    assert g.lr.kind == "unreliable"


def test_only_lr_varied_gives_a_pinned_batch_and_one_run_one_clear_line() -> None:
    d = bowl(batches=np.array([2e5]))
    g = fit_group(d, "lr only", n_bootstrap=20)
    assert g.used and g.varied == ("lr",) and g.batch.kind == "pinned"
    one = fit_group(d.iloc[:1], "single", n_bootstrap=20)
    assert one.status == "one setting" and one.message.startswith("one run: ")


@pytest.fixture(scope="module")
def truth_fits() -> list[tuple[HS.HparamTruth, object]]:
    rng = np.random.default_rng(7)
    out = []
    for i in range(2):
        truth = HS.random_truth(rng)
        out.append((truth, fit_hparams(HS.sweep(truth, rng), 200, seed=i)))
    return out


def test_the_laws_find_the_simulated_exponents(truth_fits) -> None:
    for truth, fit in truth_fits:
        lr, b = fit.laws["lr_ND"], fit.laws["batch_D"]
        assert lr.reliable() and b.reliable()
        for iv, true in ((lr.params["a"], truth.a), (lr.params["b"], truth.b), (b.params["e"], truth.e)):
            assert iv.lo <= iv.value <= iv.hi
            assert abs(iv.value - true) < 0.1
        N, D = 1e9, 4e10
        rec = fit.recommend(N, D, 6 * N * D)
        assert rec["lr"].value == pytest.approx(float(truth.lr_star(N, D)), rel=0.25)
        frame = fit.groups_frame()
        assert {"lr_star", "lr_lo", "lr_hi", "batch_star", "loss_star", "status", "near_n"} <= set(frame.columns)


def test_groups_that_do_not_vary_N_leave_its_exponent_unidentified() -> None:
    rng = np.random.default_rng(3)
    runs = HS.sweep(HS.HparamTruth(), rng, sizes=(1e8,), tokens_per_param=(5, 10, 20, 40))
    fit = fit_hparams(runs, 50)
    assert "lr_ND" in fit.skipped and "same N" in fit.skipped["lr_ND"]
    assert fit.recommend(1e9, 2e10, 1.2e20)["lr"] is None
    runs["N"] = runs["N"] * (1 + 0.001 * (runs["D"] / runs["D"].max()))  # N varies by 0.1%: not a span
    flagged = fit_hparams(runs, 50).laws["lr_ND"]
    assert not flagged.reliable() and "not identified" in flagged.doubts()[0]
    assert all(iv.kind == "unreliable" for iv in flagged.params.values())
    c = flagged.params["c"].value  # e^-6282 here: no number that cannot be, such as c = 0
    assert math.isnan(c) and any("beyond floating point" in d for d in flagged.doubts())
    assert flagged.predict_interval(N=1e9, D=2e10).kind == "unreliable"


def test_tuned_points_use_each_groups_L_star_and_fixed_the_grid_centre() -> None:
    d = bowl()
    tuned, _, notes = tuned_points(d, "tuned")
    assert len(tuned) == 1 and tuned["loss"].iloc[0] == pytest.approx(3.0, abs=1e-9) and "tuned loss" in notes[0]
    fixed, _, notes = tuned_points(d, "fixed")
    assert fixed["loss"].iloc[0] > 3.0 and "fixed setting" in notes[0]


# -- CSV ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def sweep_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    runs = HS.sweep(HS.HparamTruth(), np.random.default_rng(11), sizes=(5e7, 1e8, 2e8),
                    tokens_per_param=(10, 20, 40), n_lr=5, n_batch=3)
    path = tmp_path_factory.mktemp("hp") / "sweep.csv"
    runs.rename(columns={"lr": "lr_peak", "batch": "batch_size_tokens"}).drop(columns="C").to_csv(path, index=False)
    return path


def test_a_csv_with_lr_and_batch_columns_is_fitted_per_group(sweep_csv: Path) -> None:
    data = from_csv(sweep_csv)
    assert data.hparam_mode == "tuned" and len(data.points) == 9 and len(data.hparam_runs) == 9 * 15
    assert any("tuned loss" in n for n in data.notes) and data.conventions()["hparams"] == "tuned"
    fixed = from_csv(sweep_csv, hparams="fixed")
    assert fixed.fingerprint() != data.fingerprint()
    assert not np.allclose(fixed.points["loss"], data.points["loss"])
    centre = pd.read_csv(sweep_csv).groupby(["N", "D"]).nth(7)  # 5 lrs x 3 batches: lr 3rd, batch 2nd, row 7
    assert np.allclose(np.sort(fixed.points["loss"]), np.sort(centre["loss"]))


def test_fit_csv_prints_the_groups_and_laws_and_says_which_loss(sweep_csv: Path) -> None:
    code, out, err = run_cli("fit", "--csv", str(sweep_csv), "--law", "kaplan", "--bootstrap", "20")
    assert code == 0, err
    assert "Hyperparameter groups: 9" in out and "lr* = c N^a D^b" in out and "tuned loss L*" in out
    code, out, _ = run_cli("fit", "--csv", str(sweep_csv), "--law", "kaplan", "--bootstrap", "0", "--format", "json",
                           "--hparams", "fixed")
    assert code == 0
    doc = json.loads(out)
    assert doc["conventions"]["hparams"] == "fixed" and len(doc["hparams"]["groups"]) == 9


@pytest.mark.parametrize("change, words", [
    (lambda d: d.assign(lr_peak=np.where(d.index == 4, -1e-3, d["lr_peak"])), "non-positive or non-finite lr"),
    (lambda d: d.assign(beta2=np.where(d.index == 4, np.nan, 0.95)), "with non-finite beta2"),
    (lambda d: d.assign(group=["g"] * (len(d) - 1) + [""]), "empty group label"),
    (lambda d: d.assign(group=["g"] * (len(d) - 1) + ["lonely"]), "has one run"),
])
def test_bad_hyperparameter_input_is_one_line_exit_2(sweep_csv: Path, tmp_path: Path, change, words: str) -> None:
    bad = tmp_path / "bad.csv"
    change(pd.read_csv(sweep_csv)).to_csv(bad, index=False)
    code, out, err = run_cli("fit", "--csv", str(bad), "--law", "kaplan", "--bootstrap", "0")
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    with pytest.raises(FitError, match=words):
        from_csv(bad)


def test_bad_hparams_mode_is_refused(sweep_csv: Path) -> None:
    code, out, err = run_cli("fit", "--csv", str(sweep_csv), "--hparams", "best", "--bootstrap", "0")
    assert code == 2 and "--hparams must be tuned or fixed" in err and out == ""


# -- a sweep in the database -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def hp_db(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('hpdb') / 'hp.db'}"
    runs = HS.sweep(HS.HparamTruth(), np.random.default_rng(5), sizes=(5e7, 1e8, 2e8),
                    tokens_per_param=(10, 20, 40), n_lr=5, n_batch=3, noise=0.001)
    HS.store_sweep(url, runs, "hp")
    plain = runs.groupby(["N", "D"], as_index=False).nth(7)  # one setting per point: no groups
    HS.store_sweep(url, plain, "plain")
    tagged = runs[runs["N"] == runs["N"].min()].copy()  # labelled as a plan's hparams: labels its runs
    tagged["group"] = ["2x32x2 D=%g" % d for d in tagged["D"]]
    HS.store_sweep(url, tagged, "tagged")
    return url


def test_the_groups_a_plan_labels_are_the_groups_fitted(hp_db: str) -> None:
    from scaling.fitting import from_db

    data, _ = from_db(hp_db, "tagged")
    assert data.hparam_runs is not None and len(data.points) == 3
    assert set(data.hparam_runs["group"]) == {"2x32x2 D=%g" % d for d in data.points["D"]}


def test_a_sweep_with_groups_is_fitted_on_tuned_losses_and_recommends_lr_and_batch(hp_db: str) -> None:
    summary = fit_sweep(hp_db, "hp", "kaplan", 30, save=False)
    assert summary.n_points == 9 and summary.hparams is not None
    assert any("tuned loss" in n for n in summary.notes)
    rec = recommend(summary)
    h = rec.hparams
    assert h is not None and set(h) >= {"lr", "batch", "lr_why", "batch_why"}
    if h["lr"].kind != "unreliable":
        assert rec.run["lr"] == pytest.approx(h["lr"].value) and "lr =" in rec.table()
        assert h["N"] == rec.run["n_params"]  # lr* for the parameters the run's shape really has
    if h["batch"].kind != "unreliable":  # a whole number of sequences, as a plan requires
        assert rec.run["batch_tokens"] % rec.run["shape"]["context"] == 0
    assert "hyperparameters for N =" in rec.table()


def test_a_withheld_lr_or_batch_is_printed_as_none_with_its_reason(hp_db: str) -> None:
    """As in the report: a value the laws withhold is not printed, only why."""
    from scaling.fitting.core.intervals import withheld

    rec = recommend(fit_sweep(hp_db, "hp", "kaplan", 30, save=False))
    h = rec.hparams
    h["lr"] = withheld(Interval(0.0123456), "the law is flagged: test")
    h["lr_why"] = "not recommended: lr* = c N^a D^b is flagged (test)"
    h["batch"] = withheld(Interval(98765.0), "the law is flagged: test")
    h["batch_why"] = "not recommended: B* = d D^e is flagged (test)"
    text = " ".join(rec.table().split())  # the line may wrap
    line = text[text.index("hyperparameters for N"):]
    assert "lr = none (not recommended: lr* = c N^a D^b is flagged (test))" in line
    assert "batch = none (not recommended: B* = d D^e is flagged (test))" in line  # not "none tokens"
    assert "0.0123" not in line and "9.88e+04" not in line


def test_fit_shows_the_groups_when_no_loss_law_can_be_fitted(hp_db: str) -> None:
    """One model size: no loss law, but the groups' optima are still the answer (exit 0)."""
    code, out, err = run_cli("fit", "--db", hp_db, "--sweep", "tagged", "--bootstrap", "20")
    assert code == 0, err
    assert "Kaplan: not fitted" in out and "Hyperparameter groups: 3" in out and "2x32x2 D=" in out
    code, out, err = run_cli("recommend", "--db", hp_db, "--sweep", "tagged", "--bootstrap", "20")
    assert code == 2 and "no loss law could be fitted, so there is no N* to recommend" in err
    code, out, err = run_cli("fit", "--db", hp_db, "--sweep", "plain", "--law", "kaplan", "--bootstrap", "0")
    assert code == 0  # a sweep without groups is fitted as before


def test_the_notebook_fit_of_groups_without_a_loss_law_is_an_empty_frame(hp_db: str) -> None:
    import scaling

    fit = scaling.fit(hp_db, "tagged", bootstrap=20)
    assert fit.laws == {} and fit.hparams is not None and len(fit.hparams.groups) == 3
    frame = fit.to_frame()
    assert frame.empty and list(frame.index.names) == ["law", "parameter"]
    assert {"value", "lo", "hi", "se", "withheld"} <= set(frame.columns)


def test_a_sweep_without_groups_keeps_the_plans_rules_and_says_so(hp_db: str) -> None:
    summary = fit_sweep(hp_db, "plain", "kaplan", 0, save=False)
    assert summary.hparams is None and not any("hyperparameters" in n for n in summary.notes)
    rec = recommend(summary)
    assert rec.hparams is None
    assert any("no hyperparameter groups" in n for n in rec.notes)


def test_the_notebook_api_gives_groups_and_laws_as_frames(hp_db: str) -> None:
    import scaling.api as api

    h = api.hparams(hp_db, "hp", bootstrap=30)
    assert h is not None and len(h.groups) == 9
    assert len(h.groups_frame()) == 9 and {"law", "parameter", "value", "lo", "hi"} <= set(h.laws_frame().columns)
    lr = h.recommend(1e9, 2e10)["lr"]
    assert lr is not None and lr.value > 0 and (lr.interval is None) == (lr.withheld is not None)
    for N, D in ((-1, 1e9), (0, 0), (math.nan, 1e9), (1e9, math.inf)):  # refused in words, not a math error
        with pytest.raises(ArgumentError, match=r"recommend: [ND] must be a positive finite number"):
            h.recommend(N, D)
    assert api.hparams(hp_db, "plain") is None
    fitted = api.fit(hp_db, "hp", law="kaplan", bootstrap=20)
    assert fitted.hparams is not None and len(fitted.hparams.groups) == 9
    assert api.fit(hp_db, "plain", law="kaplan", bootstrap=0).hparams is None


def test_a_group_or_beta2_column_without_lr_or_batch_stays_a_description(sweep_csv: Path, tmp_path: Path) -> None:
    d = pd.read_csv(sweep_csv).drop(columns=["lr_peak", "batch_size_tokens"])
    path = tmp_path / "described.csv"
    d.assign(group="a", beta2=0.95).to_csv(path, index=False)
    data = from_csv(path)
    assert data.hparam_runs is None and data.hparam_mode is None and "hparams" not in data.conventions()


def test_a_group_that_did_not_vary_the_batch_is_left_out_of_the_batch_law() -> None:
    """Its batch is the plan's, not an optimum: counted, it would pull B*(D) to that value."""
    from scaling.fitting.hyperparams.hparams import GroupOptimum, fit_law

    def group(D: float, batch: dict) -> GroupOptimum:
        lr = Interval(1e-3, 9e-4, 1.1e-3, kind="percentile")
        return GroupOptimum("g", 1e8, D, 6e8 * D, 9, 9, "fitted", "", Interval(3.0), lr, batch)

    def varied(D: float) -> dict:
        b = 10 * D ** 0.5
        return Interval(b, b / 1.1, b * 1.1, kind="percentile")

    groups = [group(D, varied(D)) for D in (1e9, 2e9, 4e9, 8e9, 1.6e10)]
    groups += [group(D, Interval(1e6, kind="pinned", withheld="pinned: not varied")) for D in (1e9, 1.6e10)]
    law = fit_law("batch_D", groups, 0)
    assert law.n_groups == 5 and law.params["e"].value == pytest.approx(0.5)
    with pytest.raises(FitError, match="batch was not varied in any group"):
        fit_law("batch_D", groups[5:], 0)


def test_the_concrete_runs_batch_lies_in_its_interval_after_rounding_to_whole_sequences() -> None:
    """B* = 200 tokens [~150, ~210] with a context of 128: the run trains 256 tokens, so its interval
    is rounded the same way ([128, 256]), never left as [150, 210] beside a batch of 256."""
    from scaling.fitting.hyperparams.hparams import HparamFit, PowerLaw, apply_to_run

    reps = np.column_stack([np.log(np.linspace(150, 210, 400)), np.zeros(400)])  # B* = d D^0, d in [150, 210]
    law = PowerLaw("batch_D", "B* = d D^e", "batch", ("D",), {}, 5, replicates=reps,
                   theta=np.array([math.log(200.0), 0.0]))
    run = {"shape": {"context": 128}, "n_params": 1e6}
    rec, _ = apply_to_run(HparamFit(groups=[], laws={"batch_D": law}), run, 1e6, 2e7, 1.2e14, False, "the plan")
    assert rec["batch"].lo < 200 < rec["batch"].hi < 256
    lo, hi = run["batch_tokens_interval"]
    assert run["batch_tokens"] == 256 and lo <= 256 <= hi and (lo, hi) == (128, 256)


def test_a_law_whose_exponent_the_groups_do_not_determine_is_flagged() -> None:
    from scaling.fitting.hyperparams.hparams import GroupOptimum, fit_law

    def group(C: float, lr: float) -> GroupOptimum:
        iv = Interval(lr, lr / 1.1, lr * 1.1, kind="percentile")
        return GroupOptimum("g", 1e8, C / 6e8, C, 9, 9, "fitted", "", Interval(3.0), iv, Interval(1e5))

    groups = [group(C, lr) for C, lr in ((1e18, 1e-3), (1e18, 1e-1), (2.5e18, 1e-1), (2.5e18, 1e-3), (2.5e18, 1e-2))]
    law = fit_law("lr_C", groups, 200)
    assert not law.reliable() and all(iv.kind == "unreliable" for iv in law.params.values())
    assert "wider than 2" in " ".join(law.doubts()) or "could not identify" in " ".join(law.doubts())


def test_a_span_just_short_of_the_minimum_is_not_printed_as_the_minimum() -> None:
    """A span flagged as less than MIN_SPAN is printed with the digits that show it is less."""
    from scaling.fitting.hyperparams.hparams import MIN_SPAN, _identification

    doubts = _identification("batch_D", {"D": np.log([1e9, 1.5e9, 1e9 * MIN_SPAN * 0.9983])}, 5, 2)
    assert len(doubts) == 1 and f"spans a factor {MIN_SPAN:g} " not in doubts[0], doubts
    assert "spans a factor 1.997 " in doubts[0], doubts
    assert _identification("batch_D", {"D": np.log([1e9, 1e9 * MIN_SPAN * 0.9995])}, 5, 2) == []


def test_a_csv_with_copied_rows_is_refused_or_deduplicated_on_request(sweep_csv: Path, tmp_path: Path) -> None:
    """A copy of every row would double each group's runs and narrow its interval, silently."""
    twice = tmp_path / "twice.csv"
    text = sweep_csv.read_text()
    twice.write_text(text + text.split("\n", 1)[1])
    n = len(pd.read_csv(sweep_csv))
    code, out, err = run_cli("fit", "--csv", str(twice), "--law", "kaplan", "--bootstrap", "0")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert f"data row {n + 1} is identical to data row 1 ({n} such copies in all)" in err and "--drop-duplicates" in err
    deduplicated = from_csv(twice, drop_duplicates=True)
    assert len(deduplicated.hparam_runs) == len(from_csv(sweep_csv).hparam_runs) == 9 * 15
    assert f"dropped {n} of {2 * n} rows identical to an earlier row" in deduplicated.warnings[0]


@pytest.mark.parametrize("field, value, allowed", [
    ("beta2", 0.0, True), ("beta2", 0.95, True), ("beta2", 1.0, False), ("beta2", 1.5, False), ("beta2", -0.1, False),
    ("lr", 100.0, True), ("lr", 150.0, False),
])
def test_hparams_are_checked_by_one_rule_in_a_plan_and_a_csv(field: str, value: float, allowed: bool,
                                                              sweep_csv: Path, tmp_path: Path) -> None:
    """beta2 and lr: the plan's rule (scaling.rules.HPARAM_CHECKS) decides for a CSV's rows too."""
    from pydantic import ValidationError

    from scaling.orchestrator.hparam_groups import HparamsPlan
    from scaling.rules import HPARAM_CHECKS

    path = tmp_path / f"{field}.csv"
    d = pd.read_csv(sweep_csv)
    column = "lr_peak" if field == "lr" else field
    other = d[column] if column in d else 0.95
    d.assign(**{column: np.where(np.arange(len(d)) == 4, value, other)}).to_csv(path, index=False)
    code, _, err = run_cli("fit", "--csv", str(path), "--law", "kaplan", "--bootstrap", "0")
    why = HPARAM_CHECKS[field][1]
    try:
        HparamsPlan.model_validate({field: [value, 0.9 if field == "beta2" else 0.01]})
        plan_ok = True
    except ValidationError as exc:
        plan_ok = False
        assert why in str(exc)
    assert plan_ok is allowed
    if allowed:
        assert code == 0, err
    else:
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert f"data row 5, {field}={value!r}" in err and why in err


@pytest.mark.parametrize("odd", ["\u202e", "\n", "\x1b[31m"])
def test_a_group_label_with_a_control_character_is_refused_at_its_row(odd: str, sweep_csv: Path, tmp_path: Path) -> None:
    """It would reach the terminal in the groups table: a right-to-left override, a split row, a colour."""
    d = pd.read_csv(sweep_csv)
    labels = d.groupby(["N", "D"]).ngroup().map(lambda g: f"g{g}").to_numpy(object)
    labels[labels == labels[3]] = f"ev{odd}il"
    path = tmp_path / "labels.csv"
    d.assign(group=labels).to_csv(path, index=False)
    code, out, err = run_cli("fit", "--csv", str(path), "--law", "kaplan", "--bootstrap", "0")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert "column 'group', data row 1: the group label" in err and "contains control characters" in err
    assert odd not in err.strip()
