"""The results of one simulated sweep, compared with what they were when this file was written, and
fitted once.

A small sweep of the simulated trainer with hyperparameter groups and two downstream tasks
(:mod:`sweep_golden`) is trained in this process; its loss, hyperparameter and task fits, the
recommendation, the closing answer and the report's visible text are compared with
``tests/data/sweep_golden.json``: numbers within a relative tolerance, texts with their numbers
masked and then compared as numbers (:func:`sweep_golden.differences`), never as formatted digits,
so that the golden holds on any machine. That it does is tested too: the same sweep fitted again in
subprocesses under other BLAS thread counts and another BLAS kernel (OpenBLAS's Sandy Bridge one,
whose last bits differ from the Haswell one's) is still the golden one. A change to how results are
computed or worded shows here as a list of differences; a deliberate one is recorded by running this
file with ``SCALING_UPDATE_GOLDEN=1`` and reviewing the diff of the JSON.

The sweep's analysis (an ``Analysis``) is made once: the recommendation, the closing answer and the
report handed them fit nothing again (every fit counted by a spy on the fitting entry points).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import sweep_golden as G

GOLDEN = Path(__file__).resolve().parent / "data" / "sweep_golden.json"


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("golden")
    url, sweep, _ = G.build(folder)
    unfitted = folder / "unfitted.db"  # the trained sweep before any fit is stored (a consistent copy)
    with sqlite3.connect(folder / "results.db") as source, sqlite3.connect(unfitted) as copy:
        source.backup(copy)
    plan = G.plan_dict(folder)
    return {"url": url, "sweep": sweep, "folder": folder, "plan": plan, "unfitted": unfitted,
            "snapshot": json.loads(json.dumps(G.snapshot(url, sweep, plan, folder)))}


def test_a_simulated_sweeps_results_are_the_golden_ones(swept: dict[str, Any]) -> None:
    snapshot = swept["snapshot"]
    if os.environ.get("SCALING_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    differences = G.differences(snapshot, json.loads(GOLDEN.read_text()))
    assert not differences, "\n".join(differences[:20])


#: Other machines' arithmetic, as far as one machine can show it: one BLAS thread, and two threads
#: with another CPU's kernels (OpenBLAS picks its kernels by CPU; OPENBLAS_CORETYPE overrides it).
BLAS_SETTINGS = {
    "one thread": {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
    "two threads, Sandy Bridge kernels": {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2",
                                          "MKL_NUM_THREADS": "2", "OPENBLAS_CORETYPE": "Sandybridge"},
}


@pytest.mark.slow
def test_the_golden_holds_under_other_blas_thread_counts_and_kernels(swept: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    """The trained sweep fitted from scratch in one subprocess per BLAS setting (both at once) is
    the golden one within its tolerance: the golden says what the results are, not which CPU ran them."""
    tests = Path(__file__).resolve().parent
    path = os.pathsep.join([str(tests.parent), str(tests), os.environ.get("PYTHONPATH", "")])
    jobs = {}
    for i, (name, blas) in enumerate(BLAS_SETTINGS.items()):
        folder = tmp_path / f"blas{i}"
        folder.mkdir()
        (folder / "results.db").write_bytes(swept["unfitted"].read_bytes())
        env = {**os.environ, **blas, "PYTHONPATH": path}
        env.pop("SCALING_UPDATE_GOLDEN", None)
        jobs[name] = (folder / "snapshot.json", subprocess.Popen(
            [sys.executable, str(tests / "sweep_golden.py"), str(folder), str(folder / "snapshot.json")],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    golden = json.loads(GOLDEN.read_text())
    for name, (out, job) in jobs.items():
        log, _ = job.communicate(timeout=600)
        assert job.returncode == 0, f"{name}: {log[-3000:]}"
        differences = G.differences(json.loads(out.read_text()), golden)
        assert not differences, f"{name}:\n" + "\n".join(differences[:20])


def test_the_comparison_tolerates_the_last_digit_and_nothing_that_changes_what_is_said() -> None:
    """The comparison itself: a bound printed one unit off in its last digit (as another CPU prints
    it), a column widened by a longer number and a line cut elsewhere are the golden; a number off by
    more than the tolerance, a count off by one, a changed word or a missing key are not."""
    assert not G.differences(["A │ 33.16 │ [16.09, 48.76]"], ["A │ 33.16 │ [16.09, 48.77]"])
    assert not G.differences({"lo": 16.0901}, {"lo": 16.09})
    assert not G.differences(["x │  0.0947 │", "━━━━━━╇━━━━━━━"], ["x │ 0.09472 │", "━━━━━━╇━━━━━━━━"])
    assert not G.differences(["spans 3.5 orders of magnitude) …"], ["spans 3.51 orders of magnitude) of …"])
    assert not G.differences(["N* 558K [356K, 1.24M]"], ["N* 558K [356K, 1.241M]"])
    assert G.differences(["A │ 33.16 │ [16.09, 48.76]"], ["A │ 33.16 │ [16.09, 49.76]"])
    assert G.differences({"lo": 16.2}, {"lo": 16.09})
    assert G.differences(["16 points"], ["17 points"])
    assert not G.differences(["run 9e8942ba"], ["run 9e8942ba"])  # a run key is text, not 9e8942
    assert G.differences(["run 9e8942ba"], ["run 9f8942ba"])
    assert G.differences(["chosen: approach 3"], ["left out: approach 3"])
    assert G.differences({"a": 1.0}, {"a": 1.0, "b": 2.0})
    assert G.differences({"n": 20}, {"n": 21}) and G.differences([1.0, 2.0], [1.0])


@pytest.fixture
def fits_counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many times each kind of fit runs: a loss law (or a task's step 1), an accuracy curve, a
    hyperparameter law."""
    from scaling.fitting.core import base
    from scaling.fitting.hyperparams import hparams
    from scaling.fitting.tasks import task_curves

    counts = {"law": 0, "curve": 0, "hparam law": 0}

    def counting(what: str, fn: Any) -> Any:
        def spy(*args: Any, **kwargs: Any) -> Any:
            counts[what] += 1
            return fn(*args, **kwargs)
        return spy

    monkeypatch.setattr(base.Law, "fit", counting("law", base.Law.fit))
    monkeypatch.setattr(task_curves.AccuracyCurve, "fit", counting("curve", task_curves.AccuracyCurve.fit))
    monkeypatch.setattr(hparams, "fit_law", counting("hparam law", hparams.fit_law))
    return counts


def test_a_stored_sweep_fit_is_not_fitted_again(swept: dict[str, Any], fits_counted: dict[str, int],
                                               tmp_path: Path) -> None:
    """Once the sweep's analysis is stored (the golden snapshot stored it), analysing the sweep again, the
    recommendation and closing answer on it, and the report on it (handed, or read back) fit nothing."""
    from scaling.fitting import fit_sweep
    from scaling.fitting.brief import brief
    from scaling.orchestrator.expand import sweep_recommendation
    from scaling.reports import write_report

    url, sweep = swept["url"], swept["sweep"]
    analysis = fit_sweep(url, sweep, n_bootstrap=G.BOOTSTRAP)
    assert analysis.reused and analysis.hparams is not None and analysis.tasks
    rec = sweep_recommendation(url, analysis)  # the closing answer's call
    assert brief(rec) and rec.tasks and rec.hparams is not None and rec.run_source == "the plan's rules"
    handed = write_report(url, sweep, tmp_path / "handed.html", analysis=analysis, recommendation=rec).read_text()
    assert "Downstream tasks" in handed and "Hyperparameters" in handed
    assert fits_counted == {"law": 0, "curve": 0, "hparam law": 0}, "a stored or handed fit was fitted again"
    read_back = write_report(url, sweep, tmp_path / "report.html", fit="stored")  # `scaling report --fit stored`
    assert "Downstream tasks" in read_back.read_text() and "Hyperparameters" in read_back.read_text()
    assert fits_counted == {"law": 0, "curve": 0, "hparam law": 0}, "`scaling report --fit stored` fitted"


@pytest.fixture
def fitting_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every way to fit anything raises: a loss law, an accuracy curve, a hyperparameter law, the groups'
    optima, the task laws, the runs worth adding (which refit approach 3's bootstrap)."""
    import importlib

    from scaling.fitting.core import base
    from scaling.fitting.hyperparams import hparams
    from scaling.fitting.tasks import task_curves, task_laws

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a stored sweep was fitted again")

    analysis, recommend = (importlib.import_module(f"scaling.fitting.{m}") for m in ("analysis", "recommend"))

    for owner, name in ((base.Law, "fit"), (base.Law, "bootstrap"), (task_curves.AccuracyCurve, "fit"),
                        (hparams, "fit_law"), (hparams, "fit_hparams"), (task_laws, "fit_tasks"),
                        (recommend, "candidate_runs"), (analysis, "fit_one"), (analysis, "hparam_fit")):
        monkeypatch.setattr(owner, name, refuse)


def test_readers_of_a_stored_sweep_fit_nothing(swept: dict[str, Any], fitting_refused: None, tmp_path: Path) -> None:
    """`scaling report`, the closing answer of `scaling sweep`, `scaling recommend`, scaling.hparams() and
    scaling.tasks() read the stored analysis (with every fit entry point raising); the report's headline run
    is the closing answer's."""
    import scaling
    from cli_run import run_completed
    from scaling.cli.sweep_cmds import answer
    from scaling.orchestrator.sweep import SweepResult
    from scaling.reports.html import next_budget, recommend_for
    from scaling.reports.report_data import ReportData

    url, sweep = swept["url"], swept["sweep"]
    out = run_completed("report", "--db", url, "--sweep", sweep, "-o", str(tmp_path / "r.html"))
    assert out.returncode == 0, out.stderr
    out = run_completed("recommend", "--db", url, "--sweep", sweep, "--bootstrap", str(G.BOOTSTRAP))
    assert out.returncode == 0, out.stderr
    assert scaling.hparams(db=url, sweep=sweep) is not None and scaling.tasks(db=url, sweep=sweep).params

    from scaling.fitting import SweepSource, analyse

    stored = analyse(SweepSource(url, sweep))  # what `scaling report` and the closing answer read
    closing = answer(SweepResult(sweep, url, None, fit=stored))
    assert closing[0].startswith("recommended next run") and "as a run: " in closing[3]
    from scaling.orchestrator.expand import sweep_recommendation

    sized = sweep_recommendation(url, stored)
    data = ReportData.load(url, sweep, sweep_fit=stored, recommendation=sized)
    headline = recommend_for(data, next_budget(data))
    assert headline is sized  # the report's headline is the closing answer's recommendation, sized alike
    from scaling.fitting.core.wording import run_line

    assert closing[3] == f"  as a run: {run_line(headline.run, headline.run_source, headline.hparams)}"
