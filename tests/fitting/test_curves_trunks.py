"""Trunks as a source for Chinchilla: a plan of one WSD trunk per size (``cooldowns: predicted``), its
other budgets' final losses predicted by the curve law across sizes, and the analysis and recommendation
made from trained and predicted points together (a simulated sweep whose truth is known)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from in_process_sweep import train_plan
from scaling.curve_forms import ANNEALING, areas, curve_loss
from scaling.errors import PlanError
from scaling.fitting.analysis import Settings, SweepSource, analyse
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.core.intervals import summarise
from scaling.fitting.curves.data import Curve
from scaling.fitting.curves.fit import UNDETERMINED_WIDTH
from scaling.fitting.curves.trunks import branch_rate, predict_from_trunks, trunk_predictions, undetermined
from scaling.fmt import Interval
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.vocab import PREDICT_TOKENS_TAG

CURVE = {"form": ANNEALING, "L0": 1.7, "A": 0.5, "alpha": 0.5, "C": 0.6}
LAW = {"E": 0.0, "A": 60.0, "B": 1.0e-6, "alpha": 0.34, "beta": 1.0}
BUDGETS = [2.0e7, 4.0e7, 8.0e7, 1.6e8]
SIZES = [2.0e6, 5.0e6, 1.2e7, 3.0e7]


def plan_dict(models=SIZES, curve: bool = True, cooldowns: str = "predicted") -> dict:
    sim = {"law": LAW, "noise": 0.001, **({"curve": {**CURVE, "evals": 40}} if curve else {})}
    return {"name": "trunks", "simulate": sim, "train": {"schedule": {"warmup_steps": 50, "min_lr_ratio": 0.1}},
            "grid": [{"models": [{"N": n} for n in models],
                      "branches": {"tokens": BUDGETS, "cooldown_fraction": 0.2, "cooldowns": cooldowns}}]}


def write(tmp_path: Path, plan: dict) -> Path:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def true_final(spec: dict, N: float, steps: int) -> float:
    """The simulator's noiseless loss after the branch of ``steps`` steps leaving this trunk."""
    lr = branch_rate(spec, steps)
    theta = (CURVE["L0"], CURVE["A"], CURVE["alpha"], CURVE["C"])
    return float(curve_loss(ANNEALING, theta, areas(lr, [steps - 1]))[0]) + LAW["A"] / N ** LAW["alpha"]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> str:
    folder = tmp_path_factory.mktemp("trunks")
    url = f"sqlite:///{folder / 't.db'}"
    train_plan(write(folder, plan_dict()), url, folder)
    return url


def test_each_size_gets_one_wsd_trunk_to_the_largest_budget_tagged_with_the_budgets(tmp_path: Path) -> None:
    exp = expand(*load_plan(write(tmp_path, plan_dict())))
    assert len(exp.runs) == len(SIZES)
    for run in exp.runs:
        assert run.spec.schedule.kind == "wsd" and run.spec.schedule.decay_fraction == pytest.approx(0.2)
        assert run.spec.branch is None and not run.spec.execution.keep_steps
        assert run.spec.trained_tokens == pytest.approx(max(BUDGETS), rel=1e-3)
        assert [float(x) for x in run.spec.tags[PREDICT_TOKENS_TAG].split(",")] == BUDGETS


@pytest.mark.parametrize(("plan", "match"), [
    (plan_dict(models=SIZES[:2]), r"grid\.0\.models: .*at least 3 model sizes"),
    (plan_dict(curve=False), r"simulate.*add simulate\.curve"),
    (plan_dict(cooldowns="trained"), "simulated runs write no checkpoints"),
    (plan_dict(cooldowns="later"), "cooldowns"),
])
def test_bad_trunk_plans_are_one_line_naming_the_field(tmp_path: Path, plan: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match) as err:
        load_plan(write(tmp_path, plan))
    assert "p.yaml" in str(err.value) and "\n" not in str(err.value)


def test_cooldowns_are_predicted_within_their_intervals_near_the_truth(sweep: str) -> None:
    from scaling import db

    got = trunk_predictions(sweep, "trunks", 20)
    assert got is not None and got.law is not None and len(got.rows) == len(SIZES) * (len(BUDGETS) - 1)
    with db.connect(sweep) as res:
        specs = {r.run_key: (r.spec, float(r.N)) for r in res.runs(sweep="trunks").itertuples()}
    for row in got.rows.itertuples():
        spec, N = specs[row.run]
        truth = true_final(spec, N, int(round(row.D / spec["batch_tokens"])))
        assert row.lo <= row.loss <= row.hi
        assert row.loss == pytest.approx(truth, rel=0.005)
    assert "predicted, not trained" in got.notes[0]


def test_the_analysis_uses_trained_and_predicted_points_and_recommends(sweep: str) -> None:
    analysis = analyse(SweepSource(sweep, "trunks"), Settings(n_bootstrap=20), save=False)
    assert analysis.n_points == len(SIZES) * len(BUDGETS)  # one trained, three predicted per size
    assert any("predicted, not trained" in str(n) for n in analysis.notes)
    rec = analysis.recommendation
    assert rec is not None and rec.chosen is not None
    assert np.isfinite(rec.per_law[rec.chosen]["N"].value) and rec.per_law[rec.chosen]["N"].value > 0
    # no size was trained under two schedules, yet the schedule advice asks the law across sizes (which refuses a
    # run many times longer than its trunks, saying so)
    assert rec.schedule is not None and rec.schedule.get("across_sizes") is True
    assert rec.schedule.get("losses") or "longest curve" in rec.schedule["why_not"]


def test_predicted_points_widen_the_interval_on_n_star_by_the_predicting_laws_error() -> None:
    """Points of a Chinchilla world, most of them predicted by a law whose replicates move them together (as
    the curve law's do): approach 3's interval on N* carries that error, wider than with the points taken as
    measured, and still holds the true N*."""
    from dataclasses import replace

    from scaling.fitting.core.measurements import prepare
    from scaling.fitting.core.predicted import propagate
    from scaling.fitting.loss.parametric import ChinchillaParametric

    truth = {"E": 1.7, "A": 400.0, "alpha": 0.34, "B": 410.0, "beta": 0.28}
    rng = np.random.default_rng(0)
    N, D = (g.ravel() for g in np.meshgrid(np.geomspace(1e7, 1e9, 5), np.geomspace(1e9, 1e11, 4)))
    loss = truth["E"] + truth["A"] / N ** truth["alpha"] + truth["B"] / D ** truth["beta"]
    table = pd.DataFrame({"N": N, "D": D, "C": 6 * N * D, "loss": loss * np.exp(0.002 * rng.standard_normal(N.size))})
    data = prepare(table)
    keep = data.points["D"] < D.max()  # every budget below the largest predicted, as from trunks
    keys = data.points.loc[keep, ["N", "D"]].to_numpy()
    tilt = np.log(D.max() / keys[:, 1]) / np.log(D.max() / D.min())  # a replicate's error grows with the distance
    draws = data.points.loc[keep, "loss"].to_numpy() * np.exp(np.outer(0.02 * rng.standard_normal(8), tilt))
    law = ChinchillaParametric().fit(data).bootstrap(20, 0)
    C = 1e22
    before = law.optimal_interval(C)["N"]
    assert propagate(law, replace(data, predicted_draws=(keys, draws)), lambda d: ChinchillaParametric().fit(d), 6) >= 2
    after = law.optimal_interval(C)["N"]
    a, b = truth["alpha"], truth["beta"]  # Hoffmann et al.'s closed form, C = 6 N D
    true_n = (a * truth["A"] / (b * truth["B"])) ** (1 / (a + b)) * (C / 6) ** (b / (a + b))
    assert after.value == before.value
    assert after.hi / after.lo > 1.2 * before.hi / before.lo
    assert after.lo <= true_n <= after.hi
    assert any("predicted point(s) carried in" in n for n in law.notes_)


def synthetic_trunks(noise: float) -> list[tuple[dict, Curve, float]]:
    """Four WSD trunks of 800 steps (sizes 1M-30M) whose eval curves follow an annealing law whose floor falls
    with N, times lognormal ``noise``: what :func:`predict_from_trunks` reads from a sweep, without the sweep."""
    batch, total = 1000, 800
    rng = np.random.default_rng(0)
    out = []
    for N in (1e6, 3e6, 1e7, 3e7):
        spec = {"tokens": total * batch, "batch_tokens": batch, "optimizer": {"lr": 1e-3},
                "schedule": {"kind": "wsd", "warmup_steps": 40, "decay_fraction": 0.2, "min_lr_ratio": 0.1},
                "tags": {PREDICT_TOKENS_TAG: ",".join(str(s * batch) for s in (100, 200, 400, total))}}
        lr, steps = branch_rate(spec, total), np.arange(40, total, 20)
        theta = (2.0 + 1.5 * (N / 1e7) ** -0.3, 0.5, 0.5, 0.6)
        loss = curve_loss(ANNEALING, theta, areas(lr, steps)) * np.exp(noise * rng.standard_normal(steps.size))
        out.append((spec, Curve(f"trunk-{N:g}", lr, steps, N, total * batch, loss=loss), 6 * N * total * batch))
    return out


def test_a_bootstrap_whose_replicates_do_not_vary_predicts_no_cooldown() -> None:
    """Curves the law matches exactly: every replicate refits to the fit, which measures no error, so no predicted
    point is handed to the loss laws as if measured, and the law's doubt (not its wording) says why."""
    got = predict_from_trunks(synthetic_trunks(0.0), bootstrap=20)
    assert got.law is not None and not len(got.rows) and got.draws is None
    assert [d.kind for d in got.law.doubts()] == [DoubtKind.BOOTSTRAP]
    assert got.notes[0].startswith("predicted cooldowns: none") and str(got.law.doubts()[0]) in got.notes[0]
    assert all(iv.interval is None and iv.kind == "no spread" for iv in got.law.intervals().values())


def test_a_law_with_pinned_parameters_predicts_only_what_its_bootstrap_determines() -> None:
    """Noisy curves that pin the chosen law's parameters at bounds: with a bootstrap each predicted loss has a
    percentile interval narrower than UNDETERMINED_WIDTH of it, and is a point; without one nothing determines
    them, and none is."""
    trunks = synthetic_trunks(0.02)
    bare = predict_from_trunks(trunks, bootstrap=0)
    assert bare.law is not None and any(d.kind is DoubtKind.PINNED for d in bare.law.doubts())
    assert not len(bare.rows) and "no bootstrap measures them" in bare.notes[0]
    assert any(d.kind is DoubtKind.UNDETERMINED and "predicted cooldown" in d for d in bare.law.doubts())
    booted = predict_from_trunks(trunks, bootstrap=20)
    assert len(booted.rows) == 12 and booted.draws is not None and booted.draws.shape[1] == 12
    assert np.all(booted.rows["lo"] < booted.rows["loss"]) and np.all(booted.rows["loss"] < booted.rows["hi"])
    assert np.all(booted.rows["hi"] - booted.rows["lo"] <= UNDETERMINED_WIDTH * booted.rows["loss"])


def test_a_prediction_without_an_honest_interval_is_withheld_saying_why() -> None:
    """The rule each predicted loss passes: replicates that do not vary, or an interval wider than
    UNDETERMINED_WIDTH of the loss, withhold it; a determined one, or an undoubted law without a bootstrap, not."""
    flat = Interval.of(summarise(np.full(50, 3.0), 3.0))
    wide = Interval.of(summarise(np.linspace(2.7, 3.3, 50), 3.0))
    tight = Interval.of(summarise(np.linspace(2.99, 3.01, 50), 3.0))
    assert flat.interval is None and "do not vary" in str(undetermined(flat, True, False))
    assert "wider than 5%" in str(undetermined(wide, True, False))
    assert undetermined(tight, True, True) is None
    assert undetermined(Interval(3.0), False, False) is None
    assert "no bootstrap" in str(undetermined(Interval(3.0), False, True))
    assert "no finite positive loss" == undetermined(Interval(-1.0), True, False)
    assert "did not move from the fit" in str(undetermined(tight.without_interval("stalled"), True, False))


def test_a_second_analysis_of_unchanged_trunks_reads_the_stored_one_and_fits_nothing(
        sweep: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored analysis is looked up before any law is fitted: a second ``scaling fit`` of the same trunks fits
    neither the curve law across sizes, nor a size's curve law, nor a loss law, and its laws hold the very points
    (trained and predicted from the stored law) the first was fitted to."""
    import sqlite3

    import scaling.fitting.analysis as analysis_module
    import scaling.fitting.curves.sweep as sweep_module
    import scaling.fitting.curves.trunks as trunks_module

    url = f"sqlite:///{tmp_path / 't.db'}"
    with sqlite3.connect(sweep.removeprefix("sqlite:///")) as src, sqlite3.connect(tmp_path / "t.db") as dst:
        src.backup(dst)  # a copy of the shared sweep, whatever its write-ahead log holds
    settings = Settings(n_bootstrap=20, next_runs=False)
    first = analyse(SweepSource(url, "trunks"), settings)
    assert not first.reused and first.curves is not None and first.curves.joint is not None

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("fitted again although a stored analysis of these data exists")

    for module, name in ((trunks_module, "fit_joint"), (sweep_module, "fit_curves"), (analysis_module, "fit_one")):
        monkeypatch.setattr(module, name, refuse)
    second = analyse(SweepSource(url, "trunks"), settings)
    assert second.reused and second.stored_id == first.stored_id and second.n_points == first.n_points
    assert second.laws and all(law.data_.fingerprint() == first.fingerprint for law in second.laws.values())
    assert second.recommendation is not None and first.recommendation is not None
    assert second.recommendation.per_law == first.recommendation.per_law


def test_the_trunks_digest_follows_their_curves(sweep: str) -> None:
    """What a sweep's trunks predict from enters the stored analysis' key: another loss anywhere on a trunk's
    curve is another digest, the same trunks read twice the same."""
    from dataclasses import replace

    from scaling.fitting.curves.trunks import read_trunks, trunks_digest

    trunks = read_trunks(sweep, "trunks")
    assert trunks and trunks_digest(trunks) == trunks_digest(read_trunks(sweep, "trunks"))
    spec, curve, C = trunks[0]
    moved = replace(curve, loss=curve.loss + np.where(np.arange(curve.loss.size) == 3, 1e-6, 0.0))
    assert trunks_digest([(spec, moved, C), *trunks[1:]]) != trunks_digest(trunks)
    assert trunks_digest(None) == ""


def test_the_trunks_are_read_from_the_runs_the_analysis_read(sweep: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the sweep's completed runs, the trunks read only their curves, not the runs again."""
    from scaling.db.results import Results
    from scaling.fitting.curves.trunks import read_trunks, trunks_digest
    from scaling.fitting.moe.moe_data import completed_runs

    runs = completed_runs(sweep, "trunks")
    alone = read_trunks(sweep, "trunks")
    reads: list[dict] = []
    original = Results.runs

    def counted(self: Results, *args: object, **kwargs: object) -> object:
        reads.append(dict(kwargs))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Results, "runs", counted)
    given = read_trunks(sweep, "trunks", runs)
    assert given and not reads and trunks_digest(given) == trunks_digest(alone)


def test_a_stored_law_across_sizes_keeps_the_noise_its_predictions_are_checked_against() -> None:
    """A stored analysis predicts its trunks' cooldowns again from its stored law: that law withholds the
    predictions the fitted one withheld, so it keeps the evaluations' noise (its resolution) through JSON."""
    import json

    from scaling.fitting.core.base import jsonable
    from scaling.fitting.curves.joint import JointCurveLaw

    trunks = synthetic_trunks(0.02)
    law = predict_from_trunks(trunks, bootstrap=20).law
    assert law is not None and law.resolution() > 0
    again = JointCurveLaw.from_dict(json.loads(json.dumps(jsonable(law.to_dict()))))
    assert again.resolution() == pytest.approx(law.resolution(), rel=1e-12)
    fresh, reread = predict_from_trunks(trunks, law=law), predict_from_trunks(trunks, law=again)
    assert len(fresh.rows) == len(reread.rows) and fresh.notes[0] == reread.notes[0]
