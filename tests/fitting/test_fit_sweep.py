"""Fits of a sweep in the results database: stored, reused while the data are unchanged; the CLI."""

from __future__ import annotations

from dataclasses import replace

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_run import run_completed

from scaling.fitting import fit_sweep, from_db, from_dict, recommend

ROOT = Path(__file__).resolve().parents[2]


def test_from_db_reads_points_conventions_and_curves(db_url: str, make_sweep) -> None:
    make_sweep(db_url)
    data, sweep = from_db(db_url)  # the latest sweep
    assert sweep == "synth"
    assert len(data.points) == 28
    assert data.conventions()["params"] == "non_embedding" and data.flops_per_param_token == 6.0
    assert data.curves is not None and data.curves["run_key"].nunique() == 28


def test_fit_sweep_stores_and_reuses(db_url: str, make_sweep) -> None:
    from scaling.db import connect

    make_sweep(db_url)
    first = fit_sweep(db_url, "synth", law="chinchilla", n_bootstrap=20)
    assert set(first.laws) == {"approach1", "approach2", "approach3"} and not first.reused
    with connect(db_url) as res:
        fits = res.fits("synth")
    # one row: the whole analysis, keyed by the data's fingerprint and the settings
    assert len(fits) == 1 and fits["law"].iloc[0] == "analysis" and fits["fingerprint"].str.startswith(first.fingerprint).all()
    restored = from_dict(fits["result"].iloc[0]["laws"]["approach2"])
    assert restored.params_["a"] == pytest.approx(first.laws["approach2"].params_["a"])

    again = fit_sweep(db_url, "synth", law="chinchilla", n_bootstrap=20)
    assert again.reused and again.stored_id == int(fits["id"].iloc[0])
    assert again.laws["approach3"].params_ == pytest.approx(first.laws["approach3"].params_)
    assert again.recommendation.to_dict() == first.recommendation.to_dict()

    other = fit_sweep(db_url, "synth", law="approach2", n_bootstrap=30)  # other settings: a new fit
    assert not other.reused
    make_sweep(db_url, seed=1, budgets=(1e19,))  # more completed runs: new data
    changed = fit_sweep(db_url, "synth", law="approach2", n_bootstrap=30)
    assert not changed.reused and changed.fingerprint != first.fingerprint


def test_recommend_fits_nothing_and_the_orchestrator_sizes_its_run_by_the_plan(db_url: str, make_sweep,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """recommend takes the sweep's fits and a budget: every way to fit or read data refuses here. Its run is
    the defaults'; the plan stored with the sweep sizes it in the orchestrator, which changes nothing else."""
    from scaling.fitting.core import base, measurements, sweep_data
    from scaling.fitting.hyperparams import hparams
    from scaling.fitting import analysis, sweep_fit
    from scaling.orchestrator.expand import size_recommendation, size_run, stored_plan, sweep_recommendation

    plan = yaml.safe_load((ROOT / "examples" / "plan.yaml").read_text())
    make_sweep(db_url, plan=plan)
    fit = fit_sweep(db_url, n_bootstrap=10)  # the count moves intervals, not what recommend reads

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("recommend fitted a law or read data")

    for owner, name in ((analysis, "fit_sweep"), (sweep_fit, "fit_data"), (analysis, "fit_csv"), (analysis, "analyse"),
                        (sweep_data, "from_db"), (measurements, "from_csv"), (base.Law, "fit"),
                        (hparams, "fit_law")):
        monkeypatch.setattr(owner, name, refuse)
    assert recommend(fit) is fit.recommendation  # the analysis' own budget: its own answer
    rec = recommend(fit, 1e20)
    assert not rec.next_runs and any(n.kind == "next runs" for n in rec.notes)  # ranked at the analysis' budget only
    rec = replace(rec, next_runs=fit.recommendation.next_runs)
    assert {"approach2", "approach3"} <= set(rec.per_law)
    assert rec.agreement["N_ratio"] < 2.0
    assert rec.next_runs and rec.next_runs[0]["reduction"] > 0
    assert "Compute-optimal run at C = 1e+20" in rec.table()
    assert rec.run is not None and rec.run_source.startswith("defaults") and rec.run["lr"] is None
    assert rec.notes[rec.target.notes_at] == "the run is sized with the defaults: no plan was given to size it"

    stored = stored_plan(db_url, fit.sweep)
    assert stored is not None
    sized = size_recommendation(rec, stored)
    t = rec.target
    assert sized.run_source == "the plan's rules" and sized.run == size_run(stored, t.N, t.D, t.C)
    assert sized.run["shape"]["n_layer"] >= 1 and sized.run["n_params"] > 0 and sized.run["lr"] > 0
    assert sized.notes[t.notes_at].startswith("lr and batch of the concrete run come from the plan's rules")
    # the plan's run needs no note on its sizing; the other notes stay as they were, in order
    assert sized.notes[:t.notes_at] + sized.notes[t.notes_at + 1:] == \
        rec.notes[:t.notes_at] + rec.notes[t.notes_at + 2:]
    assert (sized.per_law, sized.chosen, sized.next_runs) == (rec.per_law, rec.chosen, rec.next_runs)
    assert sweep_recommendation(db_url, fit, 1e20).run == sized.run  # the commands' composition
    assert size_recommendation(sized, None).notes[t.notes_at] == \
        "the sweep has no stored plan; the run is sized with the defaults"
    broken = size_recommendation(sized, {**stored, "model": {"family": "none"}})
    assert broken.run == rec.run and broken.notes[t.notes_at].startswith("the plan's rules could not size the run (")
    monkeypatch.undo()  # fitting again, for a sweep whose stored plan text safe_yaml refuses
    make_sweep(db_url, "hostile", plan="a: &x 1\nb: *x\n")
    hostile = sweep_recommendation(db_url, fit_sweep(db_url, "hostile", n_bootstrap=30), 1e20)
    assert hostile.run_source.startswith("defaults")
    assert hostile.notes[t.notes_at].startswith("the stored plan could not be read (the plan stored with sweep 'hostile'")


def test_recommend_never_imports_the_orchestrator_trainer_torch_or_ray(db_url: str, make_sweep) -> None:
    """recommend on a sweep's fits sizes its run by the defaults, and nothing past db is imported."""
    plan = yaml.safe_load((ROOT / "examples" / "plan.yaml").read_text())
    make_sweep(db_url, plan=plan)
    code = (
        "import sys; from scaling.fitting import fit_sweep, recommend\n"
        f"rec = recommend(fit_sweep({db_url!r}, n_bootstrap=10, next_runs=False), 1e20)\n"
        "assert rec.run is not None and rec.run_source.startswith('defaults'), rec.run_source\n"
        "assert any('no plan was given' in n for n in rec.notes), rec.notes\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'ray') "
        "or m.startswith(('scaling.orchestrator', 'scaling.trainer'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert ast.literal_eval(out.stdout) == [], out.stdout


def _cli(*args: str) -> subprocess.CompletedProcess:
    return run_completed(*args)  # in-process: tests/test_cli_usage.py calls the console script


def test_cli_fit_and_recommend(sqlite_url: str, make_sweep, tmp_path: Path) -> None:
    make_sweep(sqlite_url)
    out = _cli("fit", "--db", sqlite_url, "--law", "chinchilla", "--bootstrap", "20", "--format", "json")
    assert out.returncode == 0, out.stderr
    d = json.loads(out.stdout)
    assert d["laws"]["approach3"]["intervals"]["alpha"]["lo"] is not None
    out = _cli("recommend", "--db", sqlite_url, "--bootstrap", "20")
    assert out.returncode == 0, out.stderr
    assert "Chinchilla 3 (parametric)" in out.stdout and "narrower" in out.stdout


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ("N,D,loss\n1e8,1e9,3.0\n1e8,2e9,2.9\n", "two model sizes"),
        ("N,D,loss\n1e8,1e9,3.0\n2e8,1e9,-1\n", "non-positive or non-finite loss"),
        ("N,loss\n1e8,3.0\n", "need tokens or FLOPs"),
    ],
)
def test_cli_degenerate_input_exits_2(tmp_path: Path, rows: str, message: str) -> None:
    p = tmp_path / "bad.csv"
    p.write_text(rows)
    out = _cli("fit", "--csv", str(p), "--law", "kaplan")
    assert out.returncode == 2
    assert message in out.stderr and "Traceback" not in out.stderr
