"""Plan expansion and `scaling plan`: grid forms, rules, bounds, ordering, the examples."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from scaling.errors import PlanError
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import Plan, load_plan
from scaling.orchestrator.planning import plan_summary

ROOT = Path(__file__).resolve().parents[2]


def _plan(**over) -> Plan:
    base = {
        "name": "t",
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": {"batch_tokens": 1024, "precision": "fp32"},
        "grid": [{"models": [1e4], "tokens": [1e6]}],
    }
    base.update(over)
    return Plan.from_dict(base)


def test_models_times_tokens_and_tokens_per_param() -> None:
    plan = _plan(grid=[
        {"models": [1e4, 4e4], "tokens": [1e6, 2e6]},
        {"models": [{"n_layer": 2, "d_model": 32, "n_head": 2}], "tokens_per_param": [20, 40]},
    ], seeds=[0, 1])
    runs = expand(plan).runs
    assert len(runs) == (2 * 2 + 1 * 2) * 2
    tpp = [r for r in runs if r.kind == "tokens_per_param"]
    assert sorted(round(r.spec.tokens / r.spec.n_params) for r in tpp) == [20, 20, 40, 40]
    assert len({r.key for r in runs}) == len(runs)
    flops = [r.spec.flops for r in runs]
    assert flops == sorted(flops), "smallest compute first"


def test_isoflop_budget_bounds_and_rules() -> None:
    plan = _plan(
        grid=[{"models": [3e3, 1e4, 3e4, 1e5], "compute": [1e12, 1e13],
               "bounds": {"min_tokens_per_param": 5, "max_tokens_per_param": 2000}}],
        rules={"lr": "1e-2 * (N / 1e4) ** -0.5", "batch_tokens": "max(1024, D / 500)"},
    )
    exp = expand(plan)
    for r in exp.runs:
        # D = C / (6N), trained in whole batches: C counts what is trained, at most one batch more
        assert r.spec.tokens == pytest.approx(r.budget / r.spec.flops_per_token, rel=1e-3)
        assert 0 <= r.spec.flops - r.spec.flops_per_token * r.spec.tokens < r.spec.flops_per_token * r.spec.batch_tokens
        assert r.spec.optimizer.lr == pytest.approx(1e-2 * (r.spec.n_params / 1e4) ** -0.5)
        assert r.spec.batch_tokens % 64 == 0 and r.spec.batch_tokens >= max(1024, r.spec.tokens / 500) - 64
        assert 5 <= r.spec.tokens / r.spec.n_params <= 2000
        assert r.spec.tags["rule.lr"] == "1e-2 * (N / 1e4) ** -0.5"
        assert r.spec.tags["budget"] in ("1e+12", "1e+13")
    assert exp.notes and all("dropped" in n for n in exp.notes)
    assert len(exp.runs) + len(exp.notes) == 8


def test_keys_ignore_execution() -> None:
    a = expand(_plan()).runs[0]
    b = expand(_plan(resources={"workers": 2, "cpus_per_worker": 2}, train={"batch_tokens": 1024,
               "precision": "fp32", "threads": 2, "checkpoint_interval": 7})).runs[0]
    assert a.key == b.key
    assert b.spec.execution.workers == 2 and b.strategy == "ddp"


def test_example_plan_shape() -> None:
    plan, source = load_plan(ROOT / "examples" / "plan.yaml")
    exp = expand(plan, source)
    budgets: dict[float, list[int]] = {}
    for r in exp.runs:
        budgets.setdefault(r.budget, []).append(r.spec.n_params)
    assert len(budgets) >= 3 and all(len(v) >= 4 for v in budgets.values())
    assert not exp.notes


def test_gpu_cluster_plan_resolves() -> None:
    s = plan_summary(ROOT / "examples" / "gpu-cluster.yaml")
    Ns = [r["N"] for r in s["runs"]]
    assert min(Ns) < 2e7 and max(Ns) > 9e8
    Cs = {r["budget"] for r in s["runs"] if r["budget"] is not None}  # the large rungs have no budget
    assert min(Cs) == 1e17 and max(Cs) == 1e20
    assert all(r["memory_gib"] <= 80 and r["strategy"] in ("ddp", "zero1", "zero2", "zero3") for r in s["runs"])


def test_plan_command_json(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.cli import main

    monkeypatch.setattr(sys, "argv", ["scaling", "plan", str(ROOT / "examples" / "plan.yaml"), "--format", "json"])
    main()
    out = json.loads(capsys.readouterr().out)
    assert out["totals"]["runs"] == len(out["runs"]) >= 12
    row = out["runs"][0]
    for col in ("key", "N", "shape", "D", "C", "tokens_per_param", "epochs", "memory_gib", "strategy", "est_seconds"):
        assert col in row
    assert 0 < row["epochs"] < 1


def test_size_run_from_a_stored_plan() -> None:
    from scaling.orchestrator.expand import size_run

    plan = {
        "name": "s",
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 64},
        "train": {"batch_tokens": 2048, "precision": "fp32"},
        "rules": {"lr": "1e-2 * (N / 1e4) ** -0.5"},
        "resources": {"device_memory_gib": 1},
        "grid": [{"models": [1e4], "tokens": [1e6]}],
    }
    out = size_run(plan, N=4e4, D=1e6, C=2.4e11)
    assert set(out) == {"shape", "n_params", "lr", "batch_tokens", "memory_gib", "strategy"}
    assert out["n_params"] == pytest.approx(4e4, rel=0.3)
    assert out["lr"] == pytest.approx(1e-2 * (out["n_params"] / 1e4) ** -0.5)
    assert out["batch_tokens"] == 2048
    assert out["strategy"] == "single"
    assert 0 < out["memory_gib"] < 1
    assert math.isfinite(out["memory_gib"])
    # The stored form of a plan (its JSON dump, as the sweep stores it) sizes the same run.
    stored = Plan.from_dict(plan).model_dump(mode="json")
    assert size_run(stored, N=4e4, D=1e6, C=2.4e11) == out


def test_plan_sections_are_the_specs_own() -> None:
    """Every default of a run comes from the spec: a plan that says nothing gives a default RunRequest."""
    from scaling.trainer.spec import RunRequest
    from scaling.trainer.sections import ExecutionSpec

    spec = expand(Plan.from_dict({"name": "d", "grid": [{"models": [{"n_layer": 1, "d_model": 64, "n_head": 1}],
                                                          "tokens": [1e5]}]}), resolve=False).runs[0].spec
    default = RunRequest(model=spec.model, tokens=spec.tokens)
    resolved, defaults = spec.key_fields(), default.key_fields()
    assert (defaults.pop("precision"), resolved.pop("precision")) in {("auto", "fp32"), ("auto", "bf16")}
    assert resolved == defaults  # everything else is the spec's own default; precision is resolved here
    differ = {k for k, v in spec.execution.model_dump().items() if v != getattr(ExecutionSpec(), k)}
    assert differ == {"strategy", "device"}  # resolved by the planner: single, cpu


def test_micro_batch_has_one_derivation() -> None:
    """The planner's memory estimate uses the micro-batch the trainer runs (scaling.accounting)."""
    from scaling.batching import micro_batches

    for seqs, workers, requested in [(10, 1, None), (10, 3, None), (10, 3, 2), (10, 2, 3), (10, 4, 1), (9, 1, 4)]:
        plan = _plan(train={"batch_tokens": 64 * seqs, "precision": "fp32"},
                     resources={"workers": workers, "micro_batch_size": requested})
        run = expand(plan, resolve=False).runs[0]
        shares = [(r + 1) * seqs // workers - r * seqs // workers for r in range(workers)]
        trained = max(count for share in shares for _, count in micro_batches(seqs, workers, share, requested))
        assert run.spec.micro_batch == trained, (seqs, workers, requested)


def test_batch_is_whole_sequences_from_plan_to_spec() -> None:
    from scaling.errors import PlanError, SpecError
    from scaling.trainer.spec import RunSpec

    with pytest.raises(PlanError, match=r"train.batch_tokens: 1000 is not a whole number of sequences .*768 or 1024"):
        Plan.from_dict({"name": "b", "model": {"context": 256}, "train": {"batch_tokens": 1000},
                        "grid": [{"models": [1e4], "tokens": [1e6]}]})
    with pytest.raises(SpecError, match="batch_tokens: 1000 is not a whole number"):
        RunSpec.from_dict({"model": {"n_layer": 1, "d_model": 8, "n_head": 1, "context": 256},
                           "tokens": 10_000, "batch_tokens": 1000})
    # A batch from a rule is rounded once to whole sequences and stored as trained.
    run = expand(_plan(rules={"batch_tokens": 1000}), resolve=False).runs[0]
    assert run.spec.batch_tokens == 1024 and run.spec.sequences_per_batch * 64 == 1024


def test_grid_size_is_counted_before_expanding() -> None:
    from scaling.errors import PlanError

    plan = _plan(grid=[{"models": [1e4, 2e4], "tokens": [1e6, 2e6, 3e6]}], seeds=[0, 1])
    assert plan.run_count() == 12
    huge = [{"models": [1e4 + i for i in range(100)], "tokens": [1e6 + 1000 * i for i in range(10_000)]}]
    with pytest.raises(PlanError, match=r"grid: the grid has 1,000,000 runs .* more than 100,000"):
        _plan(grid=huge)


def test_grid_blocks_vary_the_family_and_the_parametrization() -> None:
    """One plan: a standard gpt2 block, a μP block and a llama block (which drops the plan's μP
    width only when it says standard); each run's model section is its block's, keyed apart."""
    plan = _plan(
        model={"aspect_ratio": 16, "head_size": 16, "context": 64, "parametrization": "mup", "base_width": 32},
        grid=[
            {"models": [{"n_layer": 2, "d_model": 64, "n_head": 4}], "tokens": [1e6], "model": {"parametrization": "standard"}},
            {"models": [{"n_layer": 2, "d_model": 64, "n_head": 4}], "tokens": [1e6]},
            {"models": [{"n_layer": 2, "d_model": 64, "n_head": 4}], "tokens": [1e6], "model": {"family": "llama"}},
        ])
    models = [r.spec.model.model_dump(mode="json") for r in sorted(expand(plan).runs, key=lambda r: r.block)]
    assert [m.get("family", "gpt2") for m in models] == ["gpt2", "gpt2", "llama"]
    assert [m.get("parametrization") for m in models] == [None, "mup", "mup"]
    assert models[2]["base_width"] == 32
    from scaling.orchestrator.planning import shape_label

    labels = [shape_label(r.spec.shape) for r in sorted(expand(plan).runs, key=lambda r: r.block)]
    assert labels[:2] == ["2x64/4h", "2x64/4h mup base 32"] and labels[2].endswith("llama ffn 256 mup base 32")
    with pytest.raises(PlanError, match=r"^plan: grid\.0\.model: base_width: only with parametrization mup$"):
        _plan(grid=[{"models": [1e4], "tokens": [1e6], "model": {"base_width": 32}}])
