"""The expansion's stages one at a time: shared -> grid_points -> run_requests -> placed -> ordered.

Nothing here reads the machine (``OFFLINE``): the stages are plain functions of the plan.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace

import pytest

from scaling.orchestrator.expand import (
    GridPoint,
    expand,
    grid_points,
    ordered,
    placed,
    run_requests,
    shared,
)
from scaling.orchestrator.plan import Plan
from scaling.trainer.resolve import OFFLINE, SIMULATED
from scaling.trainer.spec import RunRequest, RunSpec


def _plan(**over) -> Plan:
    base = {
        "name": "st",
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": {"batch_tokens": 1024},
        "rules": {"lr": "1e-2 * (N / 1e4) ** -0.5"},
        "seeds": [0, 1],
        "grid": [{"models": [1e4, 4e4], "tokens": [1e6, 2e6]}],
    }
    base.update(over)
    return Plan.from_dict(base)


def test_shared_decides_precision_once_and_leaves_a_simulated_plan_alone() -> None:
    facts = shared(_plan(), host=OFFLINE)
    assert facts.plan.train.precision == "fp32" and facts.precision.requested == "auto"
    assert "not probed" in facts.precision.reason and facts.plan.data.fingerprint is None  # OFFLINE reads no data
    law = {"law": {"E": 1.7, "A": 400, "B": 400, "alpha": 0.34, "beta": 0.28}}
    sim = shared(_plan(simulate=law), host=OFFLINE)
    assert sim.plan.train.precision == "auto" and sim.precision.reason == SIMULATED


def test_grid_points_are_models_times_values_times_seeds_with_the_rules_applied() -> None:
    plan = shared(_plan(), host=OFFLINE).plan
    points, notes = grid_points(plan)
    assert len(points) == 2 * 2 * 2 and notes == []
    assert {(p.model, p.tokens, p.seed) for p in points} == {(m, D, s) for m in (0, 1) for D in (1e6, 2e6) for s in (0, 1)}
    for p in points:
        N = p.shape.params(plan.conventions.params)
        assert p.lr == pytest.approx(1e-2 * (N / 1e4) ** -0.5) and p.batch == 1024
        assert p.loc == ("grid", 0, "tokens", int(p.tokens == 2e6)) and p.budget is None
    with pytest.raises(FrozenInstanceError):
        points[0].seed = 3  # type: ignore[misc]


def test_isoflop_points_drop_what_is_out_of_bounds_with_a_note() -> None:
    plan = _plan(grid=[{"models": [3e3, 1e4, 1e5], "compute": [1e12],
                        "bounds": {"max_tokens_per_param": 1000}}], seeds=[0])
    points, notes = grid_points(plan)
    assert [p.budget for p in points] == [1e12] * len(points) and len(points) + len(notes) == 3
    assert notes and all("dropped" in n and "max_tokens_per_param" in n for n in notes)


def test_run_requests_key_each_run_once_and_leave_the_placement_to_the_resolver() -> None:
    plan = shared(_plan(grid=[{"models": [1e4], "tokens": [1e6]}] * 2, resources={"workers": 2}), host=OFFLINE).plan
    points, _ = grid_points(plan)
    requests, notes = run_requests(plan, points)
    assert len(points) == 4 and len(requests) == 2  # the second block repeats the first
    assert notes == [f"duplicate run {r.request.key} (grid.1) listed once" for r in requests]
    for r in requests:
        assert type(r.request) is RunRequest and r.request.placement_pending()
        assert r.request.execution.model_fields_set >= {"workers"} and "tp" not in r.request.execution.model_fields_set


def test_a_point_carries_its_own_fields_and_tags_into_its_request() -> None:
    """The hook a stage between grid_points and run_requests uses (e.g. one point per hyperparameter setting)."""
    plan = shared(_plan(seeds=[0]), host=OFFLINE).plan
    point = grid_points(plan)[0][0]
    tuned = replace(point, lr=3e-3, overrides={"optimizer": {"beta2": 0.99}}, tags={"group": "g1"})
    (plain,), _ = run_requests(plan, [point])
    (other,), _ = run_requests(plan, [tuned])
    spec = other.request
    assert spec.optimizer.lr == 3e-3 and spec.optimizer.beta2 == 0.99 and spec.optimizer.beta1 == 0.9
    assert spec.tags["group"] == "g1" and spec.tags["grid"] == "tokens"
    assert spec.key != plain.request.key


def test_placed_turns_requests_into_resolved_specs_and_ordered_sorts_them() -> None:
    plan = shared(_plan(resources={"workers": 2}), host=OFFLINE).plan
    requests, _ = run_requests(plan, grid_points(plan)[0])
    runs = placed(plan, requests, host=OFFLINE)
    assert all(type(r.spec) is RunSpec and r.spec.execution.strategy != "auto" for r in runs)
    assert all(r.layout is not None and r.memory_gib > 0 and r.strategy == r.spec.execution.strategy for r in runs)
    assert [r.key for r in runs] == [r.request.key for r in requests]  # placing never changes a key
    flops = [r.spec.flops for r in ordered(runs)]
    assert flops == sorted(flops)


def test_expand_is_the_stages_in_order() -> None:
    plan = _plan()
    facts = shared(plan, host=OFFLINE)
    requests, _ = run_requests(facts.plan, grid_points(facts.plan)[0])
    by_hand = ordered(placed(facts.plan, requests, host=OFFLINE))
    assert [r.spec for r in by_hand] == expand(plan, resolve=False).specs
    assert [r.spec for r in by_hand] == expand(plan, resolve=False).specs  # nothing carried between calls


def test_a_branches_point_becomes_a_trunk_and_its_branches() -> None:
    plan = _plan(seeds=[0], grid=[{"models": [1e4], "branches": {"tokens": [1024 * 20, 1024 * 40]}}])
    points, _ = grid_points(plan)
    assert [p.kind for p in points] == ["branches"] and isinstance(points[0], GridPoint)
    requests, _ = run_requests(plan, points)
    trunk, *branches = [r.request for r in requests]
    assert trunk.branch is None and trunk.execution.keep_steps
    assert [b.branch.parent for b in branches] == [trunk.key] * 2  # type: ignore[union-attr]


@pytest.mark.parametrize("example, keys_digest", [
    ("sim-hparams.yaml", "6072b646a34f6cfb"),  # the sha256 of its keys, one a line, as first stored
    ("cpu-hparams.yaml", "7f9245c53df7f192"),
])
def test_a_groups_runs_derived_from_one_validated_run_are_the_runs_validated_one_by_one(
        example: str, keys_digest: str) -> None:
    """A hyperparameter group's runs that differ in lr, beta2 and name alone are copies of one
    validated, placed run (`scaling plan` at 100,000 runs): each equals its own request validated and
    resolved on its own, field for field and key for key, and the keys are those stored before."""
    import hashlib
    from pathlib import Path

    from scaling.orchestrator.expand import hparam_points, point_request
    from scaling.orchestrator.plan import load_plan
    from scaling.trainer.resolve import resolve

    plan, source = load_plan(Path(__file__).resolve().parents[2] / "examples" / example)
    facts = shared(plan, source, OFFLINE)
    points = hparam_points(facts.plan, grid_points(facts.plan, source)[0], source)
    requests, _ = run_requests(facts.plan, points, source)
    assert len(requests) == len(points) and sum(r.template is not None for r in requests) > len(points) / 2
    derived = placed(facts.plan, requests, source, OFFLINE)
    own = [resolve(point_request(facts.plan, p, source), facts.plan.block_resources(p.block).host(
        probe=OFFLINE.probe, data=False)) for p in points]
    assert [r.spec.model_dump() for r in derived] == [o.spec.model_dump() for o in own]
    assert [r.key for r in derived] == [RunSpec.model_validate(o.spec.model_dump()).key for o in own]
    assert [r.memory_gib for r in derived] == [o.choice.best.memory.total_gib if o.choice else 0.0 for o in own]
    keys = [r.key for r in expand(plan, source, resolve=False).runs]
    assert hashlib.sha256("\n".join(keys).encode()).hexdigest()[:16] == keys_digest
