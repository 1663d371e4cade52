"""Downstream tasks in a real database: read back, recommended, reported; a sweep without tasks is unchanged.

The sweep is written through the real ``scaling.db.Store`` (register, claim, log_metrics, finish)
with eval loss and ``task/<task>/<kind>`` metrics at four evaluations per run, drawn from a known
task loss and a sigmoid accuracy (numpy), as the simulated trainer writes them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from scaling import vocab as names
from scaling.db import Store
from scaling.fitting.tasks.task_columns import metric_name

TASK = "arc_sim"


def _store(url: str, sweep: str, with_tasks: bool, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    records, rows = [], []
    for C in (1e17, 4e17, 1.6e18):
        for j, N in enumerate(np.geomspace(1.5e7, 4e8, 4) * (C / 1e18) ** 0.5):
            D = C / (6 * N)
            key = f"{sweep}-{C:.0e}-{j}"
            records.append({"key": key, "N": float(N), "N_total": float(N) * 1.1, "n_layer": 2, "d_model": 64,
                            "n_head": 4, "vocab_size": 256, "context": 64, "D": float(D), "C": float(C), "seed": 0,
                            "spec": {"params_convention": "non_embedding", "flops_convention": "6N"}})
            rows.append((key, N, D))
    with Store(url) as store:
        store.register(sweep, records)
        for key, N, D in rows:
            assert store.claim(key, "test-host") == 1
            metrics, loss = [], math.nan
            for step, f in enumerate((0.25, 0.5, 0.75, 1.0), start=1):
                t = D * f
                loss = (1.8 + 480 / N ** 0.35 + 2100 / t ** 0.37) * math.exp(rng.normal(0, 0.003))
                metrics.append((step, t, 6 * N * t, names.EVAL_LOSS, loss))
                if with_tasks:
                    bpb = (0.6 + 40 / N ** 0.3 + 300 / t ** 0.32) * math.exp(rng.normal(0, 0.004))
                    acc = 0.6 / (1 + math.exp(6.0 * (bpb - 1.1))) + 0.25 + rng.normal(0, 0.004)
                    metrics += [(step, t, 6 * N * t, metric_name(TASK, "bpb"), bpb),
                                (step, t, 6 * N * t, metric_name(TASK, "acc"), acc)]
            # the data event a run scoring a four-choice task file records (its chance level 0.25)
            events = [(0, names.DATA, {"tasks": {TASK: {"items": 100, "chance": 0.25}}})] if with_tasks else []
            store.log_metrics(key, metrics, events=events)
            store.finish(key, "completed", final_eval_loss=loss, final_train_loss=loss)


@pytest.fixture(scope="module")
def db_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('tasks') / 'tasks.db'}"
    _store(url, "plain", with_tasks=False)
    _store(url, "ladder", with_tasks=True)
    return url


def test_task_metrics_are_read_back_with_every_checkpoint(db_url: str) -> None:
    from scaling.fitting.tasks.task_laws import tasks_from_db

    td = tasks_from_db(db_url, "ladder")
    assert td.tasks() == [TASK] and len(td.evals) == 48 and int(td.evals["final"].sum()) == 12
    assert td.evals[["acc", "bpb", "loss"]].notna().all().all()
    assert tasks_from_db(db_url, "plain").tasks() == []


def test_a_csv_of_the_sweeps_evaluations_reads_back_as_the_sweep(db_url: str, tmp_path: Path) -> None:
    """The CSV path (columns run and tokens) gives step 2 the same evaluations as the sweep's database."""
    from scaling.fitting.core.measurements import from_csv
    from scaling.fitting.tasks.task_laws import tasks_from_csv, tasks_from_db

    swept = tasks_from_db(db_url, "ladder").evals.sort_values(["run_key", "tokens"]).reset_index(drop=True)
    total = swept.groupby("run_key")["D"].transform("max")
    path = tmp_path / "ladder.csv"
    swept.assign(run=swept["run_key"], D=total, **{f"acc_{TASK}": swept["acc"], f"bpb_{TASK}": swept["bpb"],
                                                   f"chance_{TASK}": 0.25})[
        ["run", "N", "D", "tokens", "loss", f"acc_{TASK}", f"bpb_{TASK}", f"chance_{TASK}"]].to_csv(path, index=False)
    read = tasks_from_csv(str(path), from_csv(path))
    got = read.evals.sort_values(["run_key", "tokens"]).reset_index(drop=True)
    assert (got["run_key"] == swept["run_key"]).all() and (got["final"] == swept["final"]).all()
    for c in ("N", "D", "C", "tokens", "acc", "bpb", "loss"):
        np.testing.assert_allclose(got[c].to_numpy(float), swept[c].to_numpy(float), rtol=1e-12, err_msg=c)
    assert read.chance == tasks_from_db(db_url, "ladder").chance == {TASK: 0.25}


def test_recommend_predicts_each_tasks_accuracy_with_an_interval(db_url: str) -> None:
    from scaling.fitting import fit_sweep, recommend

    rec = recommend(fit_sweep(db_url, "ladder", n_bootstrap=20))
    p = rec.tasks[TASK]["sigmoid"]
    assert p.lo <= p.value <= p.hi and 0.25 < p.value < 0.86
    assert f"{TASK} [sigmoid]" in rec.table() and rec.to_dict()["tasks"][TASK]["exp"]["value"] is not None


def test_the_report_has_a_task_section_only_when_the_runs_evaluated_tasks(db_url: str, tmp_path: Path) -> None:
    import pandas as pd

    from scaling.reports import write_report
    from scaling.reports.blocks import Page
    from scaling.reports.figures_tasks import task_section
    from scaling.reports.report_data import ReportData

    with_tasks = write_report(db_url, "ladder", tmp_path / "ladder.html", fit="memory").read_text()
    assert '<section id="tasks">' in with_tasks and 'id="task-predictions"' in with_tasks
    assert 'data-figure="task-0-compute"' in with_tasks and 'data-figure="task-0-loss"' in with_tasks
    # the section is the report's only change, and it is empty for a sweep whose runs evaluated no task
    page = Page()
    assert task_section(ReportData(sweep="plain", runs=pd.DataFrame()), page) == "" and page.figures == []


def test_compare_gives_task_law_differences_between_sweeps(db_url: str) -> None:
    from scaling.fitting.tasks.task_laws import fit_tasks, tasks_from_db
    from scaling.reports.compare import exponent_difference
    from scaling.reports.compare_tasks import task_differences

    _store(db_url, "ladder-b", with_tasks=True, seed=1)
    fits = {s: fit_tasks(tasks_from_db(db_url, s), n_bootstrap=20, run_backtest=False) for s in ("ladder", "ladder-b")}
    rows, notes = task_differences({**fits, "plain": None}, exponent_difference)
    assert {(r["law"], r["exponent"]) for r in rows} == {
        (f"task:{TASK}:step1", "alpha"), (f"task:{TASK}:step1", "beta"), (f"task:{TASK}:sigmoid", "k"),
        (f"task:{TASK}:sigmoid", "L0"), (f"task:{TASK}:exp", "gamma")}
    assert all(r["first"] == "ladder" and r["second"] == "ladder-b" for r in rows)
    for r in rows:  # the same truth drawn twice: no difference is significant, every interval holds its value
        if r["difference"].kind == "percentile":
            assert r["difference"].lo <= r["difference"].value <= r["difference"].hi
    assert task_differences({"plain": None, "ladder": fits["ladder"]}, exponent_difference) == ([], [])


def test_compare_reads_each_sweeps_stored_task_laws_and_fits_none(db_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The task differences are those of the task laws each sweep's stored analysis holds: no task law,
    loss law or analysis is fitted for the comparison."""
    from scaling.fitting import analysis, fit_sweep
    from scaling.fitting.core import base
    from scaling.fitting.tasks import task_laws
    from scaling.reports.compare import load_comparison

    for sweep, seed in (("cmp-a", 3), ("cmp-b", 4)):
        _store(db_url, sweep, with_tasks=True, seed=seed)
    stored = {s: fit_sweep(db_url, s, n_bootstrap=20) for s in ("cmp-a", "cmp-b")}

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the comparison fitted a law")

    for owner, name in ((analysis, "_fit"), (base.Law, "fit"), (task_laws, "fit_tasks"), (task_laws, "fit_task")):
        monkeypatch.setattr(owner, name, refuse)
    c = load_comparison(db_url, ["cmp-a", "cmp-b"], fit="sweep")
    rows = {(r["law"], r["exponent"]): r for r in c.differences if r["law"].startswith("task:")}
    assert (f"task:{TASK}:step1", "alpha") in rows
    alpha = [stored[s].tasks.laws[TASK].step1.intervals()["alpha"].value for s in ("cmp-a", "cmp-b")]
    row = rows[f"task:{TASK}:step1", "alpha"]
    if row["difference"].kind != "unreliable":
        assert row["difference"].value == pytest.approx(alpha[1] - alpha[0], rel=1e-9)


def test_accuracy_is_drawn_on_0_1_with_chance_dashed_and_never_shown_outside(db_url: str) -> None:
    from scaling.fitting.tasks.task_laws import ChainedAccuracy, fit_tasks, task_lines, tasks_from_db
    from scaling.fmt import Interval
    from scaling.reports.figures_tasks import (accuracy_interval, accuracy_vs_compute, accuracy_vs_loss,
                                               frontier_prediction)

    td = tasks_from_db(db_url, "ladder")
    assert td.chance == {TASK: 0.25}
    law = fit_tasks(td, n_bootstrap=20, grid="coarse", run_backtest=False).laws[TASK]
    frontier = frontier_prediction(law, lambda C: 0.1 * C ** 0.5, 6.0, 1e17, 1e22)
    C = 1e22
    prediction = law.predict_interval(0.1 * C ** 0.5, C / (0.6 * C ** 0.5))
    for fig in (accuracy_vs_compute(law, frontier, prediction), accuracy_vs_loss(law, prediction)):
        assert tuple(fig.layout.yaxis.range) == (0, 1)
        dashed = [s for s in fig.layout.shapes if s.line.dash == "dash"]
        assert len(dashed) == 1 and dashed[0].y0 == dashed[0].y1 == 0.25
        for trace in fig.data:
            y = np.asarray(trace.y, dtype=float)
            assert ((y[np.isfinite(y)] >= 0) & (y[np.isfinite(y)] <= 1)).all(), trace.name
    # The bounded fits cannot produce an accuracy outside [0, 1]: the report's own check is given one by hand.
    impossible = ChainedAccuracy(1.05, 0.528, 1.21, kind="percentile")
    bad = {**prediction, "sigmoid": impossible}
    bad_frontier = {"sigmoid": (np.array([1e20, 1e21]), [Interval(0.9, 0.8, 1.0, kind="percentile"),
                                                        Interval(1.3, 1.1, 1.6, kind="percentile")])}
    fig = accuracy_vs_compute(law, bad_frontier, bad)
    drawn = np.concatenate([np.asarray(t.y, dtype=float) for t in fig.data])
    assert not (drawn[np.isfinite(drawn)] > 1).any()
    shown = accuracy_interval(impossible)
    assert "1.05" not in shown and "1.21" not in shown and "outside [0, 1]" in shown
    lines = "\n".join(task_lines({TASK: bad}))
    assert "1.05" not in lines and "not shown (outside [0, 1]" in lines
