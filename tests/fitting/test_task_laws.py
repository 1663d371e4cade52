"""Downstream task laws against a simulated truth; a CSV's task columns and its bad inputs.

The truth: a task loss (bits per byte) of the Chinchilla form in (N, D) and an accuracy that is
a sigmoid of it (the OLMo ladder's form), with noise, drawn with numpy over an IsoFLOP grid with
four evaluations per run. The fit must find it, its intervals must contain their estimates, a
sigmoid whose transition lies outside the data must be flagged and its prediction shown without
an interval, and every bad CSV must be refused in one line with exit 2.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_run import run_cli
from scaling.fitting.tasks.task_data import TaskData
from scaling.fitting.tasks.task_laws import MISFIT_RATIO, fit_tasks

STEP1 = dict(E=0.6, A=40.0, B=300.0, alpha=0.30, beta=0.32)
STEP2 = dict(a=0.6, k=-6.0, L0=1.1, b=0.25)


def task_loss(N, D):
    t = STEP1
    return t["E"] + t["A"] / np.power(N, t["alpha"]) + t["B"] / np.power(D, t["beta"])


def accuracy(L, s=STEP2):
    return s["a"] / (1.0 + np.exp(-s["k"] * (L - s["L0"]))) + s["b"]


def exp_accuracy(L, eps=0.75, k=2.0, gamma=2.0):
    """Gadre et al.'s exponential error, 1 - (eps - k exp(-gamma L)): 0.85 at the floor E, 0.25 as L grows."""
    return 1.0 - (eps - k * np.exp(-gamma * L))


def simulated(seed: int = 0, budgets=(1e17, 3e17, 1e18, 3e18, 1e19), step2=STEP2, form=accuracy) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for C in budgets:
        for N in np.geomspace(2e7, 6e8, 5) * (C / 1e18) ** 0.5:
            D = C / (6 * N)
            for f in (0.25, 0.5, 0.75, 1.0):
                L = task_loss(N, D * f) * math.exp(rng.normal(0, 0.005))
                rows.append(dict(run_key=f"{C:.0e}-{N:.4g}", N=N, D=D * f, C=6 * N * D * f, tokens=D * f,
                                 final=f == 1.0,
                                 task="sim", acc=(accuracy(L, step2) if form is accuracy else form(L))
                                 + rng.normal(0, 0.005), acc_norm=np.nan, bpb=L,
                                 loss=np.nan))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def fitted():
    return fit_tasks(TaskData(simulated(), 6.0, "simulated"), n_bootstrap=40, grid="coarse")


def test_the_two_steps_find_the_simulated_truth_and_the_chain_predicts_beyond_it(fitted) -> None:
    law = fitted.laws["sim"]
    p = law.curves["sigmoid"].params_
    assert p["k"] == pytest.approx(STEP2["k"], rel=0.15) and p["L0"] == pytest.approx(STEP2["L0"], abs=0.05)
    assert law.step1.params_["beta"] == pytest.approx(STEP1["beta"], abs=0.05)
    assert law.reliable("sigmoid") and law.step1.reliable()
    for iv in list(law.curves["sigmoid"].intervals().values()) + list(law.step1.intervals().values()):
        if iv.kind == "percentile":
            assert iv.lo <= iv.value <= iv.hi
    N, D = 1e9, 2e10  # ten times the largest budget
    pred = law.predict_interval(N, D)
    truth = float(accuracy(task_loss(N, D)))
    iv = pred["sigmoid"]
    assert iv.lo <= iv.value <= iv.hi
    assert iv.lo - 0.01 <= truth <= iv.hi + 0.01 and abs(iv.value - truth) < 0.02
    true_L = float(task_loss(N, D))
    assert pred["task_loss"].lo <= true_L * 1.01 and pred["task_loss"].hi >= true_L * 0.99
    bt = law.backtest
    assert bt["sigmoid_mean_abs_error"] < 0.02 and len(bt["held_out"]) == 5
    frame = fitted.frame(N, D)
    assert set(frame["form"]) == {"sigmoid", "exp"} and (frame["task"] == "sim").all()
    assert "task sim" in fitted.table() and "backtest" in fitted.table()


def test_a_sigmoid_whose_transition_the_data_never_reach_is_flagged_and_predicts_no_interval() -> None:
    # accuracy still near chance everywhere measured: the transition lies far below the losses seen
    far = dict(a=0.6, k=-6.0, L0=-1.5, b=0.25)
    fits = fit_tasks(TaskData(simulated(step2=far, budgets=(1e17, 3e17, 1e18)), 6.0, "flat"), n_bootstrap=20,
                     grid="small", run_backtest=False)
    law = fits.laws["sim"]
    assert not law.reliable("sigmoid")
    iv = law.predict_interval(1e9, 2e10)["sigmoid"]
    assert iv.kind == "unreliable" and (iv.lo is None) and (iv.hi is None)
    assert all(v.kind == "unreliable" for v in law.curves["sigmoid"].reported_intervals().values()
               if v.kind != "pinned")


def test_a_form_that_fits_the_evaluations_worse_than_the_other_is_flagged_and_gets_no_interval(fitted) -> None:
    """A sigmoid truth bending to chance: the exponential form cannot follow it, fits with residuals well
    above the sigmoid's, and its confident intervals would miss; it is flagged, its value shown bare."""
    law = fitted.laws["sim"]
    sd = {f: c.residual_sd_ for f, c in law.curves.items()}
    assert sd["exp"] > MISFIT_RATIO * sd["sigmoid"]
    assert law.misfit("exp") and not law.misfit("sigmoid") and law.admissible() == ["sigmoid"]
    assert not law.reliable("exp") and law.reliable("sigmoid")
    assert any("x those of the sigmoid" in d for d in law.doubts("exp"))
    p = law.predict_interval(1e9, 2e10)
    assert p["exp"].kind == "unreliable" and (p["exp"].lo is None)
    assert p["sigmoid"].kind == "percentile" and not p["sigmoid"].form_spread


def test_forms_that_fit_equally_well_share_an_interval_holding_both_predictions() -> None:
    """An exponential truth: the sigmoid fits it as well over the measured losses, yet the two part beyond
    them; which holds is not known, so each form's interval holds both forms' predictions."""
    law = fit_tasks(TaskData(simulated(form=exp_accuracy), 6.0, "exp truth"), n_bootstrap=40, grid="coarse",
                    run_backtest=False).laws["sim"]
    assert law.admissible() == ["sigmoid", "exp"] and law.reliable("exp") and law.reliable("sigmoid")
    N, D = 1e9, 2e10
    p = law.predict_interval(N, D)
    lo, hi = p["sigmoid"].lo, p["sigmoid"].hi
    assert (p["exp"].lo, p["exp"].hi) == (lo, hi)
    for form in ("sigmoid", "exp"):
        assert lo <= p[form].value <= hi
    assert lo <= float(exp_accuracy(task_loss(N, D))) <= hi
    if p["sigmoid"].form_spread or p["exp"].form_spread:
        assert any("to hold the predictions of sigmoid and exp" in n for n in p["notes"])


# -- a CSV's task columns -----------------------------------------------------------------------------
def _csv(tmp_path: Path, extra: dict | None = None, name: str = "ladder.csv") -> Path:
    ev = simulated(budgets=(1e17, 1e18, 1e19))
    fin = ev[ev["final"]].reset_index(drop=True)
    df = pd.DataFrame({"N": fin["N"], "D": fin["D"], "loss": 2.0 + fin["bpb"], "acc_sim": fin["acc"],
                       "bpb_sim": fin["bpb"]})
    for k, v in (extra or {}).items():
        df[k] = v
    p = tmp_path / name
    df.to_csv(p, index=False)
    return p


def test_fit_csv_reads_task_columns_and_prints_both_steps(tmp_path: Path) -> None:
    # every evaluation a row (columns run and tokens): the loss laws fit the final ones, step 2 all
    code, out, err = run_cli("fit", "--csv", str(_checkpoints_csv(tmp_path)), "--law", "approach3", "--bootstrap",
                             "10", "--format", "json")
    assert code == 0, err
    d = json.loads(out)
    law = d["tasks"]["laws"]["sim"]
    assert law["loss_source"] == "bpb" and set(law["step2"]) == {"sigmoid", "exp"}
    assert d["laws"]["approach3"]["n_points"] == 15  # neither task columns nor checkpoints kept any point apart
    assert law["step2"]["sigmoid"]["n_points"] == 60 and law["step2"]["sigmoid"]["n_runs"] == 15
    assert any("45 intermediate evaluation(s) of 15 runs" in n for n in d["tasks"]["notes"])


@pytest.mark.parametrize("extra, message", [
    ({"acc_sim": 1.5}, "must lie in [0, 1]"),
    ({"err_other": 42.0}, "an error rate must lie in [0, 1]"),
    ({"bpb_sim": -1.0}, "bits per byte must be positive"),
    ({"task/sim/f1": 0.5}, "unknown task measurement 'f1'"),
    ({"task/sim/acc": 0.5}, "both give acc of task 'sim'"),
    ({"acc_<script>": 0.5}, "task name"),
    ({"acc_sim": "lots"}, "cannot read 'lots'"),
    ({"chance_sim": 1.5}, "a chance level is a fraction in [0, 1)"),
    ({"chance_other": 0.25}, "a task with no accuracy column"),
    ({"chance_sim": [0.25] * 14 + [0.5]}, "a task has one chance level"),
])
def test_bad_task_columns_are_refused_in_one_line(tmp_path: Path, extra: dict, message: str) -> None:
    code, out, err = run_cli("fit", "--csv", str(_csv(tmp_path, extra)), "--law", "approach3", "--bootstrap", "0")
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_chance_column_gives_the_tasks_chance_level(tmp_path: Path) -> None:
    from scaling.fitting.core.measurements import from_csv
    from scaling.fitting.tasks.task_laws import tasks_from_csv

    p = _csv(tmp_path, {"chance_sim": 0.25})
    data = from_csv(p)
    assert tasks_from_csv(str(p), data).chance == {"sim": 0.25}
    assert not any("chance" in c for c in data.points.columns)  # not a description of the run


def test_the_task_columns_see_the_rows_the_loss_fit_kept_after_drop_duplicates(tmp_path: Path) -> None:
    """A copied row left out by --drop-duplicates is not another evaluation of the tasks either."""
    from scaling.fitting.core.measurements import from_csv
    from scaling.fitting.tasks.task_laws import tasks_from_csv

    once = _csv(tmp_path)
    twice = tmp_path / "twice.csv"
    text = once.read_text()
    twice.write_text(text + text.split("\n", 1)[1])
    data = from_csv(twice, drop_duplicates=True)
    got = tasks_from_csv(str(twice), data).evals
    want = tasks_from_csv(str(once), from_csv(once)).evals
    assert len(got) == len(want) == len(data.points) == 15
    pd.testing.assert_frame_equal(got.reset_index(drop=True), want.reset_index(drop=True))


def test_an_unknown_task_name_is_refused(tmp_path: Path) -> None:
    code, _, err = run_cli("fit", "--csv", str(_csv(tmp_path)), "--law", "approach3", "--bootstrap", "0",
                           "--task", "nope")
    assert code == 2 and "no task 'nope'" in err


def test_an_isoflop_ladder_whose_task_loss_is_not_of_chinchilla_form_is_fitted_along_the_frontier() -> None:
    # task loss of compute along N*(C) = 0.1 C^0.5, with a parabola in ln N about it: the (N, D) form is
    # flagged (its parameters are not determined), approach 2 on the task loss is not
    from scaling.fitting.loss.isoflop import ChinchillaIsoFLOP
    from scaling.fitting.tasks.task_laws import FRONTIER_NOTE

    def frontier_loss(N, C):
        return 0.3 + 8 * C ** -0.06 + 0.08 * np.log(N / (0.1 * C ** 0.5)) ** 2

    rng = np.random.default_rng(0)
    rows = []
    for C in (1e17, 1e18, 1e19):
        for N in np.geomspace(0.25, 4, 5) * 0.1 * C ** 0.5:
            L = frontier_loss(N, C) * math.exp(rng.normal(0, 0.002))
            rows.append(dict(run_key=f"{C:.0e}-{N:.4g}", N=N, D=C / (6 * N), C=C, tokens=C / (6 * N), final=True,
                             task="sim", acc=accuracy(L, dict(a=0.6, k=-10.0, L0=1.05, b=0.25)) + rng.normal(0, 0.003),
                             acc_norm=np.nan, bpb=L, loss=np.nan))
    law = fit_tasks(TaskData(pd.DataFrame(rows), 6.0, "ladder"), n_bootstrap=30, grid="small").laws["sim"]
    assert isinstance(law.step1, ChinchillaIsoFLOP) and law.step1.notes_[0].startswith(FRONTIER_NOTE)
    C = 1e20
    N = 0.1 * C ** 0.5
    p = law.predict_interval(N, C / (6 * N))
    iv = p["task_loss"]
    assert iv.lo <= iv.value <= iv.hi and abs(iv.value / frontier_loss(N, C) - 1) < 0.01
    assert p["sigmoid"].lo <= p["sigmoid"].value <= p["sigmoid"].hi


def test_a_step_the_sigmoid_cannot_resolve_flags_it_and_shows_no_interval() -> None:
    """Accuracy that jumps between two evaluations: the slope runs to its bound, so the form is
    flagged and none of its parameters gets an interval (a ceiling a = 1 alone flags nothing)."""
    from scaling.fitting.tasks.task_curves import Sigmoid

    rng = np.random.default_rng(0)
    L = np.linspace(2.0, 3.0, 40)
    acc = np.where(L < 2.5, 0.8, 0.3) + rng.normal(0, 0.005, L.size)
    curve = Sigmoid().fit(L, acc, np.repeat(np.arange(10), 4)).bootstrap(30)
    assert "k" in curve.pinned_
    assert any("k is pinned" in d for d in curve.doubts()) and not curve.reliable()
    shown = curve.reported_intervals()
    assert shown["k"].kind == "pinned" and all(shown[n].kind == "unreliable" for n in ("a", "L0", "b"))
    assert all("unreliable: unreliable" not in shown[n].withheld for n in ("a", "L0", "b"))


def test_a_hyperparameter_group_gives_the_task_law_its_tuned_run_only() -> None:
    import pandas as pd

    from scaling.fitting.tasks.task_data import best_of_groups

    runs = pd.DataFrame({"run_key": list("abcdef"), "hparam_group": ["g1", "g1", "g1", "g2", "g2", None],
                         "loss": [3.1, 2.9, np.nan, 4.0, 3.5, 5.0]})
    assert best_of_groups(runs)["run_key"].tolist() == ["b", "e", "f"]
    assert best_of_groups(runs.drop(columns="hparam_group"))["run_key"].tolist() == list("abcdef")


# -- a CSV with intermediate evaluations (columns run and tokens) -------------------------------------
def _checkpoints_csv(tmp_path: Path, edit=None, name: str = "checkpoints.csv") -> Path:
    """The simulated ladder with every evaluation a row: run, N, D (the run's total), tokens (seen by then)."""
    ev = simulated(budgets=(1e17, 1e18, 1e19))
    df = pd.DataFrame({"run": ev["run_key"], "N": ev["N"], "D": ev.groupby("run_key")["D"].transform("max"),
                       "tokens": ev["tokens"], "loss": 2.0 + ev["bpb"], "acc_sim": ev["acc"], "bpb_sim": ev["bpb"]})
    if edit is not None:
        df = edit(df)
    p = tmp_path / name
    df.to_csv(p, index=False)
    return p


def test_intermediate_evaluations_are_read_as_a_sweeps_checkpoints_and_the_loss_laws_see_final_rows(
        tmp_path: Path) -> None:
    """What ``scaling fit --csv``, ``scaling.tasks(csv=...)`` and ``scaling recommend --csv`` read (from_csv and
    tasks_from_csv): the loss points of the final rows alone, and every evaluation for step 2 as from_db
    gives a sweep's (D and C spent by then, final on the last)."""
    from scaling.fitting.core.measurements import from_csv
    from scaling.fitting.tasks.task_laws import tasks_from_csv

    every, finals = _checkpoints_csv(tmp_path), _csv(tmp_path)
    data, data_finals = from_csv(every), from_csv(finals)
    cols = ["N", "D", "C", "loss"]
    pd.testing.assert_frame_equal(data.points[cols].reset_index(drop=True),
                                  data_finals.points[cols].reset_index(drop=True))
    td = tasks_from_csv(str(every), data)
    truth = simulated(budgets=(1e17, 1e18, 1e19))
    got = td.evals.sort_values(["run_key", "tokens"]).reset_index(drop=True)
    want = truth.sort_values(["run_key", "tokens"]).reset_index(drop=True)
    assert (got["run_key"] == want["run_key"]).all() and (got["final"] == want["final"]).all()
    for c in ("N", "D", "C", "tokens", "acc", "bpb"):
        np.testing.assert_allclose(got[c].to_numpy(float), want[c].to_numpy(float), rtol=1e-9)
    fits = fit_tasks(td, n_bootstrap=10, grid="coarse", run_backtest=False)
    curve = fits.laws["sim"].curves["sigmoid"]
    assert curve.n_points_ == 60 and curve.n_groups_ == 15  # the bootstrap resamples the 15 runs


def _twice(df: pd.DataFrame) -> pd.DataFrame:
    """Row 1's run and tokens again, with another measurement (an identical row is refused as a copy)."""
    again = df.iloc[[1]].copy()
    number = again.select_dtypes("number").columns.difference(["N", "D", "tokens"])[0]
    again[number] = again[number] * 1.01
    return pd.concat([df, again], ignore_index=True)


@pytest.mark.parametrize("edit, row, message", [
    (lambda df: df.assign(D=np.where(df.index == 2, df["D"] * 2, df["D"])), "data row 3: ", "the same on every row"),
    (lambda df: df.assign(N=np.where(df.index == 6, df["N"] * 2, df["N"])), "data row 7: run ", "has N = "),
    (lambda df: df.assign(tokens=np.where(df.index == 5, df["D"] * 1.5, df["tokens"])), "data row 6: ",
     "above the run's total D"),
    (_twice, "data row 61: ", "is given twice at tokens"),
    (lambda df: df.drop(columns="D"), "", "needs the run's total tokens in a column 'D'"),
    (lambda df: df.drop(columns="run"), "columns 'D', 'tokens' all give D", "name each row's run in a column 'run'"),
])
def test_bad_intermediate_evaluations_are_refused_naming_the_row(tmp_path: Path, edit, row: str, message: str) -> None:
    code, out, err = run_cli("fit", "--csv", str(_checkpoints_csv(tmp_path, edit)), "--law", "approach3",
                             "--bootstrap", "0")
    assert code == 2 and row in err and message in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_more_than_a_million_evaluations_are_refused(tmp_path: Path) -> None:
    from scaling.fitting.tasks.task_evaluations import MAX_ROWS

    p = tmp_path / "huge.csv"
    p.write_text("run,N,D,tokens,loss\n" + "".join(f"r,1e8,2e9,{1 + i},3\n" for i in range(MAX_ROWS + 1)))
    code, _, err = run_cli("fit", "--csv", str(p), "--law", "approach3", "--bootstrap", "0")
    assert code == 2 and "1,000,001 rows, more than the 1,000,000" in err and len(err.strip().splitlines()) == 1


# -- accuracies are probabilities ---------------------------------------------------------------------
def test_a_ladder_whose_unconstrained_fits_overshoot_1_predicts_only_between_chance_and_1() -> None:
    """Accuracy rising to a ceiling of 1 with noise: Gadre et al.'s form fitted without bounds predicts more
    than 1 at the targets (checked here), so does the sigmoid near a task loss of 0. The fitted forms,
    their bootstrap replicates and the chained intervals stay in [chance, 1] at every task loss."""
    from scipy.optimize import least_squares

    from scaling.fitting.tasks.task_curves import CURVES

    chance = 0.25
    ev = simulated(seed=2, step2=dict(a=0.75, k=-5.0, L0=1.2, b=chance))
    ev["acc"] = (ev["acc"] + np.random.default_rng(12).normal(0, 0.02, len(ev))).clip(0, 1)
    targets = [(1e9, 2e10), (1e10, 2e11)]  # 10x and 100x past the largest budget in N
    raw = least_squares(lambda p: 1 - p[0] + p[1] * np.exp(-p[2] * ev["bpb"]) - ev["acc"], [1.0, 3.0, 1.3]).x
    assert 1 - raw[0] + raw[1] * np.exp(-raw[2] * task_loss(*targets[1])) > 1.05  # the unconstrained form overshoots

    law = fit_tasks(TaskData(ev, 6.0, "near 1", chance={"sim": chance}), n_bootstrap=40, grid="coarse",
                    run_backtest=False).laws["sim"]
    assert law.chance == chance
    L = np.concatenate([np.linspace(0.0, 5.0, 201), [50.0]])
    for form, curve in law.curves.items():
        assert set(curve.params_) == set(CURVES[form].param_names)
        assert ((curve.predict(L) >= chance) & (curve.predict(L) <= 1.0)).all(), form
        np.testing.assert_allclose(type(curve).from_dict(curve.to_dict()).predict(L), curve.predict(L), rtol=1e-12)
        rows = curve.replicate_rows()
        ok = rows[np.isfinite(rows).all(axis=1)]
        reps = np.array([curve.accuracy_of(ok, np.full(len(ok), x)) for x in L])
        assert ((reps >= chance - 1e-12) & (reps <= 1.0 + 1e-12)).all(), form
        for N, D in targets:
            iv = law.predict_interval(N, D)[form]
            assert all(chance <= v <= 1.0 for v in (iv.value, iv.lo, iv.hi) if v is not None and math.isfinite(v))
    exp = law.curves["exp"]
    assert "k" in exp.pinned_ and "accuracy 1 at the task loss floor" in exp.pinned_["k"]  # the bound it runs into
    assert exp.reported_intervals()["k"].kind == "pinned" and "k" in law.to_dict()["step2"]["exp"]["pinned"]


def test_a_flagged_step_1_still_gives_the_chain_its_interval_where_the_bootstrap_determines_it() -> None:
    """Two budgets: step 1's E and A are not determined on their own (the law is flagged, its parameters
    shown without intervals), yet the paired bootstrap of both steps pins the accuracy at the asked point;
    the interval is given, holds the truth, and the prediction's notes keep step 1's doubts."""
    law = fit_tasks(TaskData(simulated(budgets=(1e17, 1e18)), 6.0, "two budgets"), n_bootstrap=40, grid="coarse",
                    run_backtest=False).laws["sim"]
    assert not law.step1.reliable() and not law.reliable("sigmoid") and law.curves["sigmoid"].reliable()
    assert all(iv.kind in ("unreliable", "pinned") for iv in law.step1.reported_intervals().values())
    N, D = 1e9, 2e10
    p = law.predict_interval(N, D)
    iv = p["sigmoid"]
    assert iv.kind == "percentile" and iv.determined_at_point and iv.hi - iv.lo <= 0.2
    assert iv.lo <= float(accuracy(task_loss(N, D))) <= iv.hi
    assert any(n.startswith("sigmoid: step 1 is flagged (the data do not determine") for n in p["notes"])
    assert p["task_loss"].kind == "unreliable"  # step 1's own prediction keeps its flag


def test_the_ladder_recipe_fits_step_1_under_its_bounds(tmp_path: Path) -> None:
    """OLMo's step-1 recipe (one start, parameters >= 0, L-BFGS-B): its fit and every bootstrap refit keep
    A, B >= 1 and alpha, beta >= 0, and it describes the task losses it was fitted to."""
    fits = fit_tasks(TaskData(simulated(budgets=(1e17, 1e18, 1e19)), 6.0, "simulated"), n_bootstrap=12,
                     recipe="ladder", run_backtest=False)
    step1 = fits.laws["sim"].step1
    assert step1.get_settings()["recipe"] == "ladder" and step1.n_starts_ == 1
    p = step1.params_
    assert p["A"] >= 1 and p["B"] >= 1 and p["alpha"] >= 0 and p["beta"] >= 0 and p["E"] > 0
    reps = step1.replicates_[np.isfinite(step1.replicates_).all(axis=1)]
    assert len(reps) >= 6 and (reps[:, 1:3] >= 1 - 1e-9).all() and (reps[:, 3:] >= -1e-9).all()
    finals = fits.laws["sim"].evals.query("final")
    pred = step1.predict(finals["N"].to_numpy(float), finals["D"].to_numpy(float))
    assert np.max(np.abs(pred / finals["x"].to_numpy(float) - 1)) < 0.03
    code, out, err = run_cli("fit", "--csv", str(_csv(tmp_path)), "--law", "approach2", "--bootstrap", "0",
                             "--step1-recipe", "ladder", "--format", "json")
    assert code == 0, err
    assert json.loads(out)["tasks"]["laws"]["sim"]["step1"]["settings"]["recipe"] == "ladder"


def test_an_unknown_step1_recipe_is_refused_in_one_line(tmp_path: Path) -> None:
    code, _, err = run_cli("fit", "--csv", str(_csv(tmp_path)), "--law", "approach3", "--bootstrap", "0",
                           "--step1-recipe", "olmo")
    assert code == 2 and "--step1-recipe must be one of grid, ladder" in err and len(err.strip().splitlines()) == 1
