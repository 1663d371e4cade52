"""The mixture-of-experts family: exact total and active counts (Mixtral 8x7B's published ones and
the torch module's own), dropless routing against a per-token reference, the balancing bias,
a tiny MoE sweep trained for real with its router metrics, `scaling plan` printing both counts,
and the Hugging Face export (Mixtral, Qwen3-MoE) with equal logits or a one-line refusal."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from cli_run import run_main
from scaling import vocab as names
from scaling.accounting import Shape
from scaling.errors import UserError

#: Mixtral 8x7B (Jiang et al. 2024; its Hugging Face config): 46,702,792,704 parameters, 12,879,925,248 active.
MIXTRAL = {"n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "expert_ffn": 14336,
           "n_experts": 8, "top_k": 2}
TINY_MOE = {"family": "moe", "n_kv_head": 2, "n_experts": 4, "top_k": 2, "expert_ffn": 24}


def test_mixtral_counts_are_exact() -> None:
    shape = Shape(vocab_size=32000, context=4096, family="moe", **MIXTRAL)
    assert shape.params_total == 46_702_792_704
    assert shape.params_active == 12_879_925_248
    assert shape.params("total") == shape.params_active  # the laws' N: the active parameters
    assert shape.flops_per_token("6N", "total") == 6 * 12_879_925_248
    dense = Shape(32, 4096, 32, 32000, 4096, family="llama", n_kv_head=8, ffn=2 * 14336)  # top-2 as one MLP
    router = 32 * 4096 * 8
    assert shape.model_flops_per_token() == dense.model_flops_per_token() + 6 * router  # MFU counts active FLOPs


@pytest.mark.parametrize("extra", [{}, {"n_shared_experts": 1, "n_dense_layers": 1, "qk_norm": True},
                                   {"top_k": 1, "tie_embeddings": True, "router": "sigmoid", "balance": "bias"}])
def test_the_module_has_the_counted_parameters(extra: dict) -> None:
    from scaling.trainer.families.model import build_meta_model

    shape = Shape(3, 32, 4, 97, 16, **{**TINY_MOE, **extra})
    model = build_meta_model(shape)
    trained = {name: p for name, p in model.named_parameters() if p.requires_grad}
    assert sum(p.numel() for p in trained.values()) == shape.params_total
    # a token uses, of each stacked expert matrix, top_k of its n_experts slices
    routed = sum(p.numel() for name, p in trained.items() if ".mlp.experts." in name)
    active = shape.params_total - routed + routed * shape.top_k // shape.n_experts
    assert active == shape.params_active < shape.params_total


def test_routing_is_dropless_and_matches_a_per_token_reference() -> None:
    from scaling.trainer.families.model import build_model
    from scaling.trainer.families.moe import MoE

    shape = Shape(1, 32, 4, 97, 16, **{**TINY_MOE, "n_shared_experts": 1})
    layer = next(m for m in build_model(shape, 0).modules() if isinstance(m, MoE))
    x = torch.randn(3, 16, 32)
    out = layer(x)
    flat = x.reshape(-1, 32)
    scores = (flat @ layer.router.weight.t()).softmax(-1)
    top = scores.topk(2, dim=-1)
    expected = layer.shared(flat)
    for t in range(flat.size(0)):
        w = top.values[t] / top.values[t].sum()
        for weight, e in zip(w, top.indices[t]):
            e = int(e)
            h = F.silu(flat[t] @ layer.experts.gate[e].t()) * (flat[t] @ layer.experts.up[e].t())
            expected[t] += weight * (h @ layer.experts.down[e].t())
    torch.testing.assert_close(out.reshape(-1, 32), expected, atol=1e-5, rtol=1e-5)
    assert int(layer.load.sum()) == flat.size(0) * 2  # every token reached both its experts
    assert layer.aux_loss is not None and float(layer.aux_loss.detach()) > 0


def test_the_balancing_bias_moves_toward_idle_experts() -> None:
    from scaling.trainer.families.model import build_model
    from scaling.trainer.families.moe import MoE, update_balance_bias

    shape = Shape(1, 32, 4, 97, 16, **{**TINY_MOE, "balance": "bias", "bias_rate": 0.01})
    model = build_model(shape, 0)
    layer = next(m for m in model.modules() if isinstance(m, MoE))
    update_balance_bias(model, torch.tensor([[10.0, 0.0, 5.0, 5.0]]))
    assert layer.balance_bias.tolist() == pytest.approx([-0.01, 0.01, 0.0, 0.0])
    assert not layer.balance_bias.requires_grad


def test_a_tiny_moe_sweep_trains_and_records_its_router(tmp_path: Path) -> None:
    """Two MoE runs of a real plan (one with the balancing bias and shared experts), trained by
    the real trainer as a sweep trains them: the loss falls, every step's experts took all the
    routed tokens, and the balance metrics say how evenly."""
    from in_process_sweep import train_plan
    from scaling.db import connect

    plan = {"name": "moe-tiny", "data": {"source": "builtin"},
            "model": {**TINY_MOE, "vocab_size": 256, "context": 32},
            "train": {"precision": "fp32", "batch_tokens": 32 * 8, "optimizer": {"lr": 3e-3}, "threads": 1,
                      "log_interval": 1, "eval_interval": 1000, "eval_tokens": 32 * 16, "checkpoint_interval": 1000},
            "grid": [{"tokens": [32 * 8 * 12], "models": [
                {"n_layer": 2, "d_model": 32, "n_head": 4},
                {"n_layer": 2, "d_model": 32, "n_head": 4, "n_experts": 8, "expert_ffn": 12}]}]}
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(plan))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    train_plan(path, url, tmp_path / "runs", run_folders=True)
    db = connect(url)
    runs = db.runs("moe-tiny")
    assert len(runs) == 2 and set(runs["status"]) == {names.COMPLETED}
    metrics = db.metrics(run_keys=list(runs["run_key"]))
    experts = []
    for key in runs["run_key"]:
        mine = metrics[metrics["run_key"] == key]
        by = {n: mine[mine["name"] == n].sort_values("step")["value"].tolist() for n in set(mine["name"])}
        n_experts = sum(1 for name in by if name.startswith(names.MOE_EXPERT_PREFIX))
        experts.append(n_experts)
        losses = by[names.TRAIN_LOSS]
        assert losses[-1] < losses[0] and all(math.isfinite(v) for v in losses)
        assert all(v >= 1.0 for v in by[names.MOE_LOAD_MAX]) and all(0 <= v <= 1.0 for v in by[names.MOE_LOAD_MIN])
        assert all(0 < v < 1 for v in by[names.MOE_AUX_LOSS])  # 0.01 x E x sum f P, about 0.01
        per_expert = [by[names.expert_tokens_metric(e)] for e in range(n_experts)]
        routed = 8 * 32 * 2 * 2  # tokens x top_k x MoE blocks, every step
        assert all(sum(step) == routed for step in zip(*per_expert))
        assert len(by[names.TRAIN_LOSS]) == 12
    assert sorted(experts) == [4, 8]


def test_scaling_plan_prints_mixtral_total_and_active(tmp_path: Path) -> None:
    plan = {"name": "mixtral", "simulate": {"law": {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}},
            "model": {"family": "moe", "vocab_size": 32000, "context": 4096, "rope_theta": 1e6},
            "conventions": {"params": "total"}, "train": {"batch_tokens": 4 * 1024 * 1024},
            "grid": [{"tokens": [2e12], "models": [MIXTRAL]}]}
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(plan))
    out = run_main("plan", str(path))
    assert out.code == 0, out.err
    assert "46,702,792,704" in out.out and "12,879,925,248" in out.out and "moe 8x14336 top2" in out.out


@pytest.mark.parametrize("extra,target", [({}, "Mixtral"), ({"qk_norm": True, "n_dense_layers": 1}, "Qwen3Moe")])
def test_the_export_computes_our_logits(extra: dict, target: str) -> None:
    from scaling.trainer.export import logit_difference, to_hf
    from scaling.trainer.families.model import build_model

    ours = build_model(Shape(3, 32, 4, 97, 16, **{**TINY_MOE, **extra}), 3).eval()
    hf = to_hf(ours)
    assert type(hf).__name__ == f"{target}ForCausalLM"
    diff, scale = logit_difference(ours, hf)
    assert scale > 0.1 and diff < 1e-5


def test_the_export_loads_back_with_auto_model(tmp_path: Path) -> None:
    """Random norm weights (ones would hide a norm mapped to the wrong place), saved and loaded back."""
    from transformers import AutoModelForCausalLM

    from scaling.trainer.export import to_hf
    from scaling.trainer.families.model import build_model

    ours = build_model(Shape(2, 32, 4, 97, 16, **TINY_MOE), 5).eval()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if ".ln_" in name or name.startswith("ln_f"):
                p.uniform_(0.5, 1.5)
    to_hf(ours).save_pretrained(tmp_path)
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path).float().eval()
    idx = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=idx).logits, ours(idx), atol=1e-5, rtol=0)


@pytest.mark.parametrize("extra,why", [({"n_shared_experts": 1}, "shared experts"), ({"router": "sigmoid"}, "router sigmoid"),
                                       ({"n_dense_layers": 1}, "dense first layers without qk_norm")])
def test_a_shape_no_target_computes_is_refused_in_one_line(extra: dict, why: str) -> None:
    from scaling.trainer.export import to_hf
    from scaling.trainer.families.model import build_model

    with pytest.raises(UserError, match=why) as info:
        to_hf(build_model(Shape(2, 32, 4, 97, 16, **{**TINY_MOE, **extra}), 0))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("fields,message", [
    ({"n_experts": 1}, "n_experts must be at least 2"),
    ({"top_k": 5}, r"top_k must be between 1 and n_experts \(4\)"),
    ({"n_dense_layers": 2}, r"n_dense_layers must be between 0 and n_layer - 1 \(1\)"),
    ({"router": "tanh"}, "router must be one of softmax, sigmoid"),
])
def test_moe_fields_are_checked(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Shape(2, 32, 4, **{**TINY_MOE, **fields})


def test_moe_fields_belong_to_the_moe_family_and_pipelines_are_refused() -> None:
    from scaling.layout import shape_problem

    with pytest.raises(ValueError, match=r"n_experts: only for family 'moe' \(not a field of 'llama'\)"):
        Shape(2, 32, 4, family="llama", n_experts=4)
    assert shape_problem(Shape(2, 32, 4, **TINY_MOE), 1, 2) == "pp=2: family 'moe' has no pipeline split"
    assert shape_problem(Shape(2, 32, 4, **TINY_MOE), 2, 1) is None  # attention split, experts whole


def test_a_trained_moe_run_exports_through_the_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scaling train` then `scaling export --hf`: the checkpoint (its balancing biases included)
    loads through the trainer's path and the folder loads with AutoModelForCausalLM, logits equal."""
    import yaml
    from transformers import AutoModelForCausalLM

    from scaling.db import connect
    from scaling.trainer.export import find_run, load_ours, run_shape
    from scaling.trainer.checkpoints import checkpoint

    spec = {"model": {**TINY_MOE, "n_layer": 2, "d_model": 32, "n_head": 4, "context": 32},
            "tokens": 32 * 8 * 6, "batch_tokens": 32 * 8, "eval_tokens": 32 * 8, "optimizer": {"lr": 1e-2},
            "execution": {"eval_interval": 6, "checkpoint_interval": 6, "threads": 1}, "evals": {"next_line": False}}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{tmp_path / 'results.db'}"
    monkeypatch.chdir(tmp_path)
    got = run_main("train", "spec.yaml", "--db", url)
    assert got.code == 0 and "completed, 6 steps" in got.out, got
    (row,) = connect(url).runs(sweep="adhoc").to_dict("records")
    got = run_main("export", row["run_key"], "--hf", str(tmp_path / "hf"), "--db", url)
    assert got.code == 0, got.err
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").float().eval()
    assert type(hf).__name__ == "MixtralForCausalLM" and hf.config.num_local_experts == 4
    run_dir = tmp_path / "scaling_runs" / "adhoc" / row["run_key"]
    ours = load_ours(checkpoint.checkpoints(run_dir)[-1], run_shape(find_run(url, row["run_key"])))
    idx = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(hf(input_ids=idx).logits, ours(idx), atol=1e-5, rtol=0)


@pytest.mark.parametrize("model,execution,message", [
    ({}, {"workers": 4, "strategy": "ddp", "ep": 2}, r"ep=2 must equal the data-parallel ranks \(4\)"),
    ({"n_experts": 3}, {"workers": 2, "strategy": "ddp", "ep": 2}, r"ep=2 does not divide n_experts \(3\)"),
    ({"family": "llama"}, {"workers": 2, "strategy": "ddp", "ep": 2}, "ep=2: family 'llama' has no experts"),
    ({}, {"workers": 2, "strategy": "zero3", "ep": 2, "cpu_offload": True}, "execution.cpu_offload cannot be combined with ep=2"),
    ({}, {"workers": 4, "strategy": "zero3", "pp": 2, "ep": 2}, "ep=2 cannot be combined with pp=2: family 'moe' has no pipeline split"),
])
def test_expert_parallel_layouts_it_cannot_run_are_refused(model: dict, execution: dict, message: str) -> None:
    from scaling.errors import SpecError
    from scaling.trainer.spec import RunSpec

    fields = {**TINY_MOE, "n_layer": 2, "d_model": 32, "n_head": 4, "context": 32, **model}
    if fields["family"] == "llama":
        fields = {k: v for k, v in fields.items() if k not in ("n_experts", "top_k", "expert_ffn")}
    with pytest.raises(SpecError, match=f"execution: {message}"):
        RunSpec.from_dict({"model": fields, "tokens": 32 * 8 * 4, "batch_tokens": 32 * 8, "precision": "fp32",
                           "execution": execution})


@pytest.mark.parametrize("strategy", ["ddp", "zero1"])
def test_fp16_expert_parallelism_needs_fsdp(strategy: str) -> None:
    """fp16's loss scaler cannot unscale a rank's own experts beside DDP's plain gradients, nor outside
    ZeRO-1's groups (ZeRO-2/3 run it: every gradient there is a DTensor)."""
    from scaling.errors import SpecError
    from scaling.trainer.spec import RunSpec

    fields = {"model": {**TINY_MOE, "n_layer": 2, "d_model": 32, "n_head": 4, "context": 32}, "tokens": 32 * 8 * 4,
              "batch_tokens": 32 * 8, "precision": "fp16", "execution": {"workers": 2, "strategy": strategy, "ep": 2}}
    with pytest.raises(SpecError, match=f"ep=2 with fp16 needs strategy zero2 or zero3, not {strategy}"):
        RunSpec.from_dict(fields)
    RunSpec.from_dict({**fields, "execution": {**fields["execution"], "strategy": "zero2"}})


def test_the_memory_model_counts_a_rank_its_share_of_the_experts() -> None:
    """Under ep=2 a rank holds half the routed experts (the router, shared experts, dense blocks
    and attention whole), and DDP all-reduces only what it replicates."""
    from scaling.accounting import ParallelLayout, params_per_rank
    from scaling.communication import step_traffic
    from scaling.memory import memory_per_rank

    shape = Shape(3, 32, 4, 97, 16, **{**TINY_MOE, "n_shared_experts": 1, "n_dense_layers": 1})
    routed = 2 * 4 * 3 * 32 * 24  # MoE blocks x experts x an expert's three matrices
    assert params_per_rank(shape) == shape.params_total
    assert params_per_rank(shape, ep=2) == shape.params_total - routed // 2
    whole, split = ParallelLayout(dp=2), ParallelLayout(dp=2, ep=2)
    assert memory_per_rank(shape, split).weights_bytes == memory_per_rank(shape, whole).weights_bytes * (
        params_per_rank(shape, ep=2) / shape.params_total)
    reduced = [sum(t.bytes_per_step for t in step_traffic(shape, lay) if t.group == "dp") for lay in (whole, split)]
    assert reduced[1] < reduced[0]


def test_a_rolled_back_step_leaves_no_load_behind(make_spec, registered, tmp_path: Path) -> None:
    """A spike rolls back (a poisoned batch): the void step's forward passes counted tokens per
    expert, which no later step may report; every logged step's experts took exactly its copies."""
    from scaling.db import connect
    from scaling.trainer import train

    model = {**TINY_MOE, "n_layer": 1, "d_model": 32, "n_head": 4, "context": 32, "balance": "bias"}
    spec = make_spec(model=model, faults={"poison_steps": [13]}, spike={"window": 20},
                     execution={"log_interval": 1})
    url = registered(spec)
    result = train(spec, url, tmp_path)
    assert result.status == "completed" and result.rollbacks == 1
    metrics = connect(url).metrics(run_keys=[spec.key])
    per_step: dict[int, float] = {}
    for name, step, value in zip(metrics["name"], metrics["step"], metrics["value"]):
        if name.startswith(names.MOE_EXPERT_PREFIX):
            per_step[step] = per_step.get(step, 0.0) + value
    assert len(per_step) >= spec.steps and set(per_step.values()) == {8 * 32 * 2}  # tokens x top_k, one MoE block
