"""Adaptive sweeps: refit after each slice, add the ranked slice, stop when N* is known or the budget is spent.

The sweeps here run simulated runs (`scaling.trainer.simulate`) through real Ray, the real
scheduler and a real SQLite database, from 1e18 to 1e24 FLOPs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
import yaml

from scaling import vocab
from scaling.errors import PlanError

pytestmark = pytest.mark.usefixtures("shared_ray")  # in-process sweeps join the session's Ray

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}


def adaptive_plan(path: Path, name: str, runs_dir: Path, *, ratio: float, max_compute: float, **target: Any) -> Path:
    plan = {
        "name": name,
        "runs_dir": str(runs_dir),
        "simulate": {"law": LAW, "noise": 0.005, "seed": 0},
        "train": {"batch_tokens": 4 * 1024 * 1024},
        "resources": {"num_cpus": 2},
        "adaptive": {
            "target": {"law": "approach2", "quantity": "N_opt", "at_compute": 1e24, "interval_ratio": ratio,
                       "interval": "bootstrap", **target},
            "max_compute": max_compute,
            "batch": 5,
        },
        "grid": [{"models": [float(n) for n in np.geomspace(1.5e7, 6e9, 9)], "compute": [1e18, 1e19, 1e20]}],
    }
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def sweep(plan: Path, url: str, lines: list[str] | None = None):
    from scaling.orchestrator.sweep import run_sweep

    return run_sweep(plan, db=url, fit=False, report=False, echo=(lines.append if lines is not None else lambda s: None))


def decisions(url: str, sweep_name: str) -> list[dict[str, Any]]:
    from scaling.db import connect

    with connect(url) as res:
        ev = res.events(sweep=sweep_name, kinds=[vocab.ADAPTIVE_DECISION])
    return list(ev["detail"])


def runs_of(url: str, sweep_name: str) -> pd.DataFrame:
    from scaling.db import connect

    with connect(url) as res:
        return res.runs(sweep=sweep_name)


def test_adaptive_sweep_on_ray_stops_when_met_and_reruns_idempotently(tmp_path: Path, sqlite_url: str) -> None:
    plan = adaptive_plan(tmp_path / "plan.yaml", "adapt", tmp_path / "runs", ratio=3.0, max_compute=1e24)
    lines: list[str] = []
    first = sweep(plan, sqlite_url, lines)
    out = first.adaptive
    assert out.status == "met", out.message
    assert first.outcome.ok and not first.outcome.skipped
    stored = decisions(sqlite_url, "adapt")
    assert [d["round"] for d in stored] == list(range(len(stored))) and len(stored) >= 2
    assert [d["action"] for d in stored] == ["add"] * (len(stored) - 1) + ["stop"]
    for d in stored:  # what was fitted, the interval, what was added and why
        assert d["fit"]["law"] == "approach2" and d["fit"]["n_points"] > 0 and d["message"]
        assert d["spent"] <= d["max_compute"]
    for d in stored[:-1]:
        assert d["added"]["C"] > 0 and len(d["added"]["keys"]) >= 2 and d["added"]["why"]
    last = stored[-1]["fit"]
    assert last["ratio"] <= 3.0 and last["lo"] <= last["value"] <= last["hi"]
    runs = runs_of(sqlite_url, "adapt")
    assert set(runs["status"]) == {vocab.COMPLETED}
    added_keys = {k for d in stored[:-1] for k in d["added"]["keys"]}
    assert added_keys <= set(runs["run_key"]) and len(runs) == 27 + len(added_keys)
    assert runs["C"].max() > 1e20  # slices beyond the grid were trained
    assert any("adaptive round 0" in line for line in lines) and "target met" in lines[-1]

    from scaling.reports import write_report  # the report draws the interval against compute from the events

    page = write_report(sqlite_url, "adapt", tmp_path / "report.html", fit="stored").read_text()
    assert 'id="adaptive"' in page and "adaptive_interval" in page and "Stopped: <strong>met</strong>" in page
    assert page.count("<li>round ") == len(stored)

    again = sweep(plan, sqlite_url)
    assert again.adaptive.status == "met" and again.adaptive.replayed == len(stored) - 1
    assert again.outcome.completed == [] and len(again.outcome.skipped) == len(runs)
    assert decisions(sqlite_url, "adapt") == stored  # the same decisions, not logged twice
    assert len(runs_of(sqlite_url, "adapt")) == len(runs)


def test_adaptive_sweep_stops_when_the_budget_is_spent_and_continues_when_raised(tmp_path: Path, sqlite_url: str) -> None:
    grid_compute = 9 * (1e18 + 1e19 + 1e20)  # the grid alone, about 1e21 FLOPs
    plan = adaptive_plan(tmp_path / "plan.yaml", "tight", tmp_path / "runs", ratio=1.01, max_compute=1.2 * grid_compute)
    out = sweep(plan, sqlite_url).adaptive
    assert out.status == "budget" and "budget spent" in out.message
    stored = decisions(sqlite_url, "tight")
    assert stored[-1]["action"] == "stop" and stored[-1]["reason"] == "budget"
    assert stored[-1]["candidates"] and all(not c["affordable"] for c in stored[-1]["candidates"])
    spent = runs_of(sqlite_url, "tight")["C"].sum()
    assert spent <= 1.2 * grid_compute

    adaptive_plan(tmp_path / "plan.yaml", "tight", tmp_path / "runs", ratio=1.01, max_compute=5 * grid_compute)
    more = sweep(plan, sqlite_url).adaptive
    assert more.replayed == len(stored) - 1 and more.status == "budget"
    after = decisions(sqlite_url, "tight")
    assert after[: len(stored)] == stored  # the earlier stop stays in the record ...
    resumed = after[len(stored)]  # ... and the same round is decided again under the new budget
    assert (resumed["round"], resumed["action"]) == (stored[-1]["round"], "add")
    assert after[-1]["reason"] == "budget" and after[-1]["round"] > resumed["round"]
    assert spent < runs_of(sqlite_url, "tight")["C"].sum() <= 5 * grid_compute

    # back to the original budget: the grid alone is within it (the slices are not "the grid's own"),
    # so the sweep replays what was added, trains nothing new and stops for the budget
    n_runs = len(runs_of(sqlite_url, "tight"))
    adaptive_plan(tmp_path / "plan.yaml", "tight", tmp_path / "runs", ratio=1.01, max_compute=1.2 * grid_compute)
    back = sweep(plan, sqlite_url)
    assert back.adaptive.status == "budget" and "grid's own" not in back.adaptive.message, back.adaptive.message
    assert f"left of {1.2 * grid_compute:.3g}" in back.adaptive.message  # this budget, not the raised one's stop
    assert back.outcome.completed == [] and len(runs_of(sqlite_url, "tight")) == n_runs


# -- the decision alone (no Ray) -------------------------------------------------------------------
def _slices(budgets: list[float], *, shift: float = 0.0, n: int = 5, noise: float = 0.003, seed: int = 0) -> pd.DataFrame:
    from scaling.fitting.loss.synthetic import chinchilla_loss, chinchilla_optimal_N

    rng = np.random.default_rng(seed)
    rows = []
    for C in budgets:
        Ns = float(chinchilla_optimal_N(C, LAW)) * np.exp(np.linspace(-1, 1, n) + shift)
        Ds = C / (6 * Ns)
        for N, D, L in zip(Ns, Ds, chinchilla_loss(Ns, Ds, LAW) * np.exp(rng.normal(0, noise, n))):
            rows.append((N, D, C, L))
    return pd.DataFrame(rows, columns=["N", "D", "C", "loss"])


def _decide(points: pd.DataFrame, *, ratio: float, max_compute: float, spent: float, round_: int = 0,
            cost_of: Any = lambda C, sizes: C * len(sizes), **extra: Any):
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.core.measurements import prepare
    from scaling.orchestrator.adaptive import decide
    from scaling.orchestrator.adaptive_spec import AdaptivePlan

    spec = AdaptivePlan.model_validate({"target": {"at_compute": 1e22, "interval_ratio": ratio, "interval": "bootstrap"},
                                        "max_compute": max_compute, **extra})
    try:
        law, error = fit_data(prepare(points), "approach2", n_bootstrap=100).laws["approach2"], None
    except Exception as exc:  # noqa: BLE001 - the decision must handle a law that cannot be fitted
        law, error = None, str(exc)
    return decide(round_, spec, law=law, fit_error=error, points=points, spent=spent, fit_info={},
                  cost_of=cost_of)


def test_decision_met_ranked_budget_and_rounds() -> None:
    pts = _slices([1e18, 3e18, 1e19, 3e19])
    met = _decide(pts, ratio=50.0, max_compute=1e30, spent=1e20)
    assert (met.action, met.reason) == ("stop", "met") and met.fit["ratio"] <= 50
    ranked = _decide(pts, ratio=1.0001, max_compute=1e30, spent=1e20)
    assert (ranked.action, ranked.reason) == ("add", "ranked") and len(ranked.added["sizes"]) == 5
    assert ranked.added["C"] in {c["C"] for c in ranked.candidates} and ranked.added["C"] > 3e19
    n_star = math.exp(np.mean(np.log(ranked.added["sizes"])))  # the sizes bracket the law's N* there
    from scaling.fitting.loss.synthetic import chinchilla_optimal_N

    assert 0.7 < n_star / float(chinchilla_optimal_N(ranked.added["C"], LAW)) < 1.4
    best = max((c for c in ranked.candidates if c["affordable"]), key=lambda c: c["gain_per_flop"])
    assert best["C"] == ranked.added["C"]
    broke = _decide(pts, ratio=1.0001, max_compute=1e20 + 1e19, spent=1e20)
    assert (broke.action, broke.reason) == ("stop", "budget") and "left of" in broke.message
    capped = _decide(pts, ratio=1.0001, max_compute=1e30, spent=1e20, round_=3, max_rounds=3)
    assert (capped.action, capped.reason) == ("stop", "rounds")


def test_decision_extends_a_slice_whose_optimum_is_at_its_edge() -> None:
    pts = pd.concat([_slices([1e18, 3e18, 1e19]), _slices([3e19], shift=2.5)], ignore_index=True)
    d = _decide(pts, ratio=1.0001, max_compute=1e30, spent=1e20)
    assert (d.action, d.reason) == ("add", "extend") and d.added["C"] == pytest.approx(3e19)
    edge = pts[np.isclose(pts["C"], 3e19)]
    assert max(d.added["sizes"]) < edge["N"].min()  # the optimum lies below the slice's smallest size


def test_decision_stops_when_every_slice_on_offer_is_already_trained() -> None:
    """A slice that adds no run (its sizes all trained) narrows nothing: the loop stops, not repeats it."""
    d = _decide(_slices([1e18, 3e18, 1e19, 3e19]), ratio=1.0001, max_compute=1e30, spent=1e20,
                cost_of=lambda C, sizes: 0.0)
    assert (d.action, d.reason) == ("stop", "no_gain") and "cannot narrow further" in d.message
    assert d.candidates and all(c["cost"] == 0 for c in d.candidates)


def test_decision_without_a_fit_says_why() -> None:
    d = _decide(_slices([1e18]), ratio=1.5, max_compute=1e30, spent=1e19)
    assert (d.action, d.reason) == ("stop", "no_fit") and "approach2 not fitted" in d.message


# -- the plan -----------------------------------------------------------------------------------
def test_plan_checks(tmp_path: Path) -> None:
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    path = adaptive_plan(tmp_path / "p.yaml", "p", tmp_path / "runs", ratio=1.5, max_compute=1e22)
    data = yaml.safe_load(path.read_text())
    data["grid"] = [{"models": [1e12], "compute": [1e24]}]  # ~1e12 parameters: simulated, so no memory check
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlanError, match=r"p\.yaml:\d+: adaptive\.max_compute: 1e\+22 FLOPs is less than the grid's own 1e\+24"):
        expand(*load_plan(path))  # the budget includes the grid: the loop could add nothing
    data["adaptive"]["max_compute"] = 1e25
    path.write_text(yaml.safe_dump(data))
    runs = expand(load_plan(path)[0]).runs
    assert runs[0].spec.n_params > 5e11 and runs[0].memory_gib == 0.0
    from scaling.orchestrator.planning import plan_summary

    notes = plan_summary(path)["notes"]  # `scaling plan` lists the grid; it says what the loop may add
    assert any(n.startswith("adaptive:") and "max_compute = 1e+25 FLOPs" in n for n in notes), notes
    for bad, field in ((dict(data, adaptive={**data["adaptive"], "batch": 2}), "adaptive.batch"),
                       (dict(data, adaptive={**data["adaptive"], "target": {"at_compute": 1e21, "interval_ratio": 1.0}}),
                        "adaptive.target.interval_ratio"),
                       (dict(data, simulate={"law": {**LAW, "alpha": -1}}), "simulate.law.alpha"),
                       (dict(data, simulate={"law": {**LAW, "E": 1.7e308}}), "simulate.law.E"),
                       (dict(data, simulate={"law": {**LAW, "B": 1e300}}), "simulate.law.B"),
                       (dict(data, grid=[{"models": [1e8], "branches": {"tokens": [1e9, 1e10]}}]), "grid.0.branches")):
        path.write_text(yaml.safe_dump(bad))
        with pytest.raises(PlanError, match=field.replace(".", r"\.")):
            load_plan(path)
    data["resources"] = {"workers": 2, "strategy": "ddp"}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(PlanError, match="one worker"):
        expand(load_plan(path)[0])


def test_an_adaptive_sweep_whose_law_cannot_be_fitted_stops_as_no_fit(tmp_path: Path, sqlite_url: str) -> None:
    """A flat simulated law (A = B = 1e-6: the loss is E plus noise) leaves approach 3 undetermined: the
    loop stops for want of a fit, stores no slice it cannot train (cost inf, kept as None) and says
    "unreliable" once."""
    path = adaptive_plan(tmp_path / "plan.yaml", "flat", tmp_path / "runs", ratio=3.0, max_compute=1e22,
                         law="approach3")
    data = yaml.safe_load(path.read_text())
    data["simulate"]["law"] = {**LAW, "A": 1e-6, "B": 1e-6}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    lines: list[str] = []
    out = sweep(path, sqlite_url, lines).adaptive
    assert out.status == "no_fit", out.message
    stored = decisions(sqlite_url, "flat")
    assert stored[-1]["reason"] == "no_fit"
    for d in stored:
        assert "inf FLOPs" not in d["message"] and "unreliable: unreliable" not in d["message"], d["message"]
        assert all(c["cost"] is not None for c in d["candidates"]), d["candidates"]
        if d["added"]:
            assert d["added"]["cost"] is not None and all(math.isfinite(n) for n in d["added"]["sizes"])
    assert not any("Traceback" in line for line in lines)


def test_decision_skips_slices_the_plan_cannot_train() -> None:
    """A slice whose cost is inf (the plan refuses its sizes) is neither ranked nor called too dear."""
    d = _decide(_slices([1e18, 3e18, 1e19, 3e19]), ratio=1.0001, max_compute=1e30, spent=1e20,
                cost_of=lambda C, sizes: math.inf)
    assert d.action == "stop" and d.reason in ("no_gain", "no_fit") and "can be trained" in d.message
    assert d.candidates == [] and "inf" not in d.message


def test_decision_says_unreliable_once() -> None:
    """A law's doubt that starts with "unreliable:" is quoted without that prefix, not doubled."""
    from scaling.fitting.sweep_fit import fit_data
    from scaling.fitting.core.measurements import prepare
    from scaling.orchestrator.adaptive import decide
    from scaling.orchestrator.adaptive_spec import AdaptivePlan

    pts = _slices([1e18, 3e18, 1e19, 3e19])
    law = fit_data(prepare(pts), "approach2", n_bootstrap=50).laws["approach2"]
    from scaling.fitting.core.doubts import DoubtKind

    law.add_unreliable(DoubtKind.ILL_CONDITIONED, "the Fisher information is near-singular")
    spec = AdaptivePlan.model_validate({"target": {"at_compute": 1e22, "interval_ratio": 1.0001,
                                                   "interval": "bootstrap"}, "max_compute": 1e30})
    d = decide(0, spec, law=law, fit_error=None, points=pts, spent=1e20, fit_info={},
               cost_of=lambda C, sizes: C * len(sizes))
    assert "; unreliable: the Fisher information is near-singular" in d.message, d.message
    assert "unreliable: unreliable" not in d.message


@pytest.mark.parametrize("at_compute", [1e300, 1e10])
def test_a_target_budget_far_outside_the_grid_is_refused_at_its_line(tmp_path: Path, at_compute: float) -> None:
    """N* at 1e300 FLOPs (or 1e10, below a 1e18-1e20 grid) is nothing a fit of the grid can say: the plan
    is refused at adaptive.target.at_compute, as recommend refuses a budget that far from the data."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    path = adaptive_plan(tmp_path / "p.yaml", "p", tmp_path / "runs", ratio=1.5, max_compute=1e22,
                         at_compute=at_compute)
    with pytest.raises(PlanError, match=r"p\.yaml:\d+: adaptive\.target\.at_compute: .* more than 1e\+06x outside "
                                        r"the grid's budgets \(1e\+18 to 1e\+20 FLOPs\)"):
        expand(*load_plan(path))
    path = adaptive_plan(tmp_path / "p.yaml", "p", tmp_path / "runs", ratio=1.5, max_compute=1e22, at_compute=1e25)
    assert expand(*load_plan(path)).runs  # 1e5x beyond: what an adaptive sweep is for
