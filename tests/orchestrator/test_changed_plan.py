"""A plan changed between two sweeps of one name adds points; it never retrains a point differently.

No Ray here: the refusal comes before anything is scheduled. The first plan's runs are put in
the states a real sweep leaves them in through the store's own API (claim, finish).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from scaling.cli import main
from scaling.db import Store, claimant_id, connect
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.orchestrator.sweep import register

pytestmark = pytest.mark.usefixtures("shared_ray")  # in-process sweeps join the session's Ray

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}


def _plan(path: Path, runs_dir: Path, *, E: float = 1.8, models: tuple[float, ...] = (1e7, 1e8)) -> Path:
    plan: dict[str, Any] = {
        "name": "changed", "runs_dir": str(runs_dir),
        "simulate": {"law": {**LAW, "E": E}, "noise": 0.005, "seed": 0},
        "train": {"batch_tokens": 4 * 1024 * 1024}, "resources": {"num_cpus": 2},
        "grid": [{"models": list(models), "compute": [1e19]}],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["scaling", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code), capsys.readouterr().err


def _register(plan_path: Path, url: str) -> list[str]:
    plan, source = load_plan(plan_path)
    return register(Store(url), plan, expand(plan, source))


def test_a_changed_plan_may_not_retrain_a_point_the_sweep_holds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = _register(_plan(tmp_path / "a.yaml", tmp_path / "runs"), url)
    store = Store(url)
    store.claim(first[0], claimant_id(), sweep="changed")
    store.finish(first[0], "completed", final_eval_loss=3.0, sweep="changed")
    store.claim(first[1], claimant_id(), sweep="changed")  # still running

    changed = _plan(tmp_path / "b.yaml", tmp_path / "runs", E=2.5)
    for extra in (["--dry-run"], []):
        code, err = _cli(["sweep", str(changed), "--db", url, *extra], capsys, monkeypatch)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert "already holds run" in err and "simulate.law.E" in err and "another sweep name" in err, err
    with connect(url) as results:
        assert sorted(results.runs(sweep="changed")["run_key"]) == sorted(first)  # nothing registered

    # the same plan with one more size only adds that point
    grown = _register(_plan(tmp_path / "c.yaml", tmp_path / "runs", models=(1e7, 1e8, 1e9)), url)
    assert len(grown) == 1


def test_a_point_that_never_completed_may_be_retrained_by_a_corrected_plan(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = _register(_plan(tmp_path / "a.yaml", tmp_path / "runs"), url)
    store = Store(url)
    store.claim(first[0], claimant_id(), sweep="changed")
    store.finish(first[0], "failed", error="diverged", sweep="changed")  # the other one never started
    again = _register(_plan(tmp_path / "b.yaml", tmp_path / "runs", E=2.5), url)
    assert len(again) == 2 and not set(again) & set(first)


def test_ad_hoc_runs_may_share_a_point(tmp_path: Path) -> None:
    """`scaling train` registers without the rule: an lr probe of one model is several runs at one point."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    store = Store(url)
    specs = []
    for E, name in ((1.8, "a"), (2.5, "b")):
        plan, source = load_plan(_plan(tmp_path / f"{name}.yaml", tmp_path / "runs", E=E, models=(1e7,)))
        specs.append(expand(plan, source).runs[0].spec)
    store.register("probe", [specs[0].record()])
    store.claim(specs[0].key, claimant_id(), sweep="probe")
    store.finish(specs[0].key, "completed", final_eval_loss=3.0, sweep="probe")
    assert store.register("probe", [specs[1].record()]) == [specs[1].key]


def test_runs_a_changed_plan_replaces_are_superseded_not_pending(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """An interrupted and a pending run whose points a changed plan (another corpus or law) trains
    under new keys are superseded: `scaling status` neither counts them pending nor as compute to
    spend; undoing the change makes them pending again and supersedes the others."""
    from scaling import vocab
    from scaling.orchestrator.status import sweep_status

    url = f"sqlite:///{tmp_path / 'r.db'}"
    first = _register(_plan(tmp_path / "a.yaml", tmp_path / "runs"), url)
    store = Store(url)
    store.claim(first[0], claimant_id(), sweep="changed")
    store.finish(first[0], "interrupted", sweep="changed")  # the other one never started
    before = sweep_status(url, "changed")
    again = _register(_plan(tmp_path / "b.yaml", tmp_path / "runs", E=2.5), url)
    status = sweep_status(url, "changed")
    assert status["counts"] == {vocab.SUPERSEDED: 2, vocab.PENDING: 2}, status["counts"]
    assert status["flops_total"] == pytest.approx(before["flops_total"])  # the new runs only, not both
    from cli_run import run_main

    shown = run_main("status", "--db", url, "--sweep", "changed")
    words = " ".join(shown.out.split())
    assert shown.code == 0 and "4 (2 pending, 2 superseded)" in words and "2 run(s) a later plan replaced" in words, words

    assert _register(_plan(tmp_path / "a2.yaml", tmp_path / "runs"), url) == []  # the change undone
    with connect(url) as results:
        runs = results.runs(sweep="changed").set_index("run_key")["status"]
    assert set(runs[again]) == {vocab.SUPERSEDED}  # the runs it had replaced are claimed as pending ones
    assert [store.claim(key, claimant_id(), sweep="changed") for key in first] == [2, 1]
