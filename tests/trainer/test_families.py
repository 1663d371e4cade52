"""Model families: gpt2 keys unchanged, llama fields keyed and checked in one line, the llama model
(GQA, RoPE, qk-norm) against plain attention, its meta build, a real single-process run with a
z-loss, activation checkpointing and task scoring, and `scaling plan` printing published counts.

The multi-process layouts (tp2 x pp2 x dp2 zero3, tp2 x pp2 through the loop) are in
tests/distributed/test_pipeline.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from cli_run import run_main
from scaling import vocab as names
from scaling.db import connect
from scaling.errors import SpecError
from scaling.trainer import train
from scaling.trainer.spec import RunSpec

GPT2 = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 32}
LLAMA = {"n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "family": "llama", "context": 32}


def _spec(model: dict) -> RunSpec:
    return RunSpec.from_dict({"model": model, "tokens": 32 * 8 * 10, "batch_tokens": 32 * 8, "precision": "fp32"})


def test_a_gpt2_key_is_the_key_stored_before_families() -> None:
    """The gpt2 spec's key as computed by the code before `family` existed (stored databases hold it)."""
    spec = _spec(GPT2)
    assert spec.key == "50dc422c9f3f88cf"
    assert spec.model.model_dump(mode="json") == GPT2
    assert _spec({**GPT2, "family": "gpt2"}).key == spec.key  # stating the default changes nothing


def test_llama_fields_are_keyed_only_when_not_their_default() -> None:
    spec = _spec(LLAMA)
    dumped = spec.model.model_dump(mode="json")
    assert dumped == {**LLAMA, "vocab_size": 256}  # ffn 256 (8/3 d up to 256), theta, eps, untied: defaults, left out
    assert RunSpec.model_validate_json(spec.to_json()).key == spec.key
    assert _spec({**LLAMA, "ffn": 256}).key == spec.key  # the default, stated
    keys = {spec.key, _spec({**LLAMA, "ffn": 64}).key, _spec({**LLAMA, "n_kv_head": 1}).key,
            _spec({**LLAMA, "qk_norm": True}).key, _spec({**LLAMA, "rope_theta": 5e5}).key,
            _spec({**LLAMA, "tie_embeddings": True}).key, _spec({**LLAMA, "z_loss": 1e-4}).key,
            _spec({**LLAMA, "norm_eps": 1e-6}).key}
    assert len(keys) == 8  # each field is part of the key


@pytest.mark.parametrize("model,execution,message", [
    ({**LLAMA, "n_kv_head": 3}, {}, r"spec: model: n_kv_head \(3\) must divide n_head \(4\)"),
    ({**GPT2, "z_loss": 1e-4}, {}, r"model: z_loss: only for family 'llama' or 'moe'"),
    ({**GPT2, "ffn": 128}, {}, r"model: ffn: only for families 'llama', 'moe'"),
    ({**LLAMA, "d_model": 36}, {}, r"model: RoPE needs an even head size, got d_model/n_head = 9"),
    ({**LLAMA, "n_kv_head": 1}, {"workers": 2, "tp": 2}, r"execution: tp=2 does not divide n_kv_head \(1\)"),
])
def test_bad_family_fields_are_refused_in_one_line(model: dict, execution: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message) as err:
        RunSpec.from_dict({"model": model, "tokens": 2560, "batch_tokens": 256, "precision": "fp32",
                           "execution": execution})
    assert "\n" not in str(err.value)


def test_grouped_query_attention_with_rope_matches_plain_attention() -> None:
    """The kernel's GQA (SDPA's enable_gqa) equals repeating each kv head over its query group."""
    from scaling.trainer.families.attention import causal_attention, masked_softmax_attention
    from scaling.trainer.families.llama import apply_rope, rope_angles

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, 16, 8, generator=g) for h in (4, 2, 2))
    cos, sin = rope_angles(16, 8, 10000.0, torch.device("cpu"))
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    expected = masked_softmax_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1))
    torch.testing.assert_close(causal_attention(q, k, v), expected, rtol=1e-5, atol=1e-6)
    # RoPE makes the score of two positions depend on their distance only.
    x = torch.randn(1, 1, 1, 8, generator=g).expand(1, 1, 16, 8)
    rotated = apply_rope(x, cos, sin)
    scores = rotated[0, 0] @ rotated[0, 0].T
    assert torch.allclose(scores[3, 1], scores[9, 7], atol=1e-5) and not torch.allclose(scores[3, 1], scores[3, 2])


@pytest.mark.parametrize("extra", [{"qk_norm": True}, {"tie_embeddings": True, "n_kv_head": 1}])
def test_the_meta_build_gets_the_single_process_weights(extra: dict) -> None:
    from scaling.trainer.families.model import build_meta_model, build_model, init_materialized, materialize

    shape = _spec({**LLAMA, **extra}).shape
    reference = build_model(shape, 7)
    meta = build_meta_model(shape)
    materialize(meta, torch.device("cpu"))
    init_materialized(meta, shape, 7)
    assert (meta.lm_head.weight is meta.wte.weight) == shape.tied
    for (name, a), (_, b) in zip(reference.named_parameters(), meta.named_parameters()):
        assert torch.equal(a, b), name


def test_a_llama_run_trains_with_its_z_loss_and_scores_its_task(make_spec, registered, tmp_path: Path) -> None:
    """24 real steps: the loss falls, the z-loss is its own metric (not in train/loss), MFU is
    recorded, the built-in task is scored, and activation checkpointing changes no loss."""
    model = {**LLAMA, "qk_norm": True, "z_loss": 1e-3}
    spec = make_spec(model=model, evals={"next_line": True})
    recomputed = make_spec(model=model, execution={"activation_checkpointing": True})
    url = registered(spec)
    result = train(spec, url, tmp_path / "a")
    assert result.status == "completed" and result.steps == 24
    db = connect(url)
    metrics = db.metrics(run_keys=[spec.key])
    by_name = {n: metrics[metrics["name"] == n].sort_values("step")["value"].tolist() for n in set(metrics["name"])}
    losses, z = by_name[names.TRAIN_LOSS], by_name[names.Z_LOSS]
    assert len(z) == len(losses) and all(0 < v < 1e-3 * 60 for v in z)  # 1e-3 (log Z)^2, log Z about ln 256
    assert losses[-1] < losses[0] and result.final_eval_loss < math.log(256)
    assert names.MFU in by_name
    acc = by_name.get(f"{names.TASK_PREFIX}{names.NEXT_LINE}/{names.TASK_ACC}")
    assert acc and all(0.0 <= a <= 1.0 for a in acc)
    again = train(recomputed, None, tmp_path / "b")  # the same key: trained without a database
    assert again.steps == 24
    assert again.final_eval_loss == pytest.approx(result.final_eval_loss, rel=1e-6)


@pytest.mark.parametrize("vocab,context,model,total", [
    (32000, 4096, {"n_layer": 32, "d_model": 4096, "n_head": 32, "ffn": 11008}, "6,738,415,616"),
    (128256, 8192, {"n_layer": 32, "d_model": 4096, "n_head": 32, "n_kv_head": 8, "ffn": 14336}, "8,030,261,248"),
])
def test_scaling_plan_prints_the_published_llama_counts(vocab: int, context: int, model: dict, total: str,
                                                         tmp_path: Path) -> None:
    plan = {"name": "published", "simulate": {"law": {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}},
            "model": {"family": "llama", "vocab_size": vocab, "context": context, "rope_theta": 500000.0},
            "conventions": {"params": "total"}, "train": {"batch_tokens": 4 * 1024 * 1024},
            "grid": [{"tokens": [2e12], "models": [model]}]}
    path = tmp_path / "plan.yaml"
    path.write_text(json.dumps(plan))  # JSON is YAML
    out = run_main("plan", str(path))
    assert out.code == 0, out.err
    assert total in out.out and "llama" in out.out


def test_the_family_example_plans_are_one_ladder_in_two_families() -> None:
    """examples/families-{gpt2,llama}.yaml (compared in docs/guides/compare.md) differ only in their
    name and model family: the same data, recipe and budgets, each point the same depth, width and heads."""
    from scaling.orchestrator.expand import grid_points
    from scaling.orchestrator.plan import load_plan

    examples = Path(__file__).resolve().parents[2] / "examples"
    (gpt2, _), (llama, _) = (load_plan(examples / f"families-{f}.yaml") for f in ("gpt2", "llama"))
    assert (gpt2.name, llama.name) == ("families-gpt2", "families-llama")
    skip = {"name", "model", "grid"}
    assert gpt2.model_dump(exclude=skip) == llama.model_dump(exclude=skip)
    sections = [{k: v for k, v in plan.model.model_dump().items() if k != "family"} for plan in (gpt2, llama)]
    assert sections[0] == sections[1] and (gpt2.model.family, llama.model.family) == ("gpt2", "llama")
    points = [[(p.budget, p.shape.n_layer, p.shape.d_model, p.shape.n_head, p.shape.family) for p in grid_points(plan)[0]]
              for plan in (gpt2, llama)]
    assert [p[:4] for p in points[0]] == [p[:4] for p in points[1]] and len(points[0]) == 13
    assert {p[4] for p in points[0]} == {"gpt2"} and {p[4] for p in points[1]} == {"llama"}


def test_a_llama_plan_expands_into_llama_runs_and_serializes() -> None:
    """The plan's model section keeps its llama fields through a dump (the sweep stores the plan),
    a point's own n_kv_head and ffn override it, and a target N becomes a llama shape."""
    from scaling.orchestrator.plan import ModelPlan, ModelPoint

    section = ModelPlan(family="llama", n_kv_head=1, z_loss=1e-4, head_size=16, aspect_ratio=16, context=32)
    dumped = section.model_dump(mode="json")
    assert dumped["family"] == "llama" and dumped["n_kv_head"] == 1 and "qk_norm" not in dumped
    assert ModelPlan.model_validate(dumped) == section
    assert "family" not in ModelPlan().model_dump(mode="json")  # a gpt2 plan dumps as before
    explicit = ModelPoint(n_layer=2, d_model=64, n_head=4, n_kv_head=2, ffn=96).shape(section, "non_embedding")
    assert (explicit.family, explicit.kv_heads, explicit.hidden) == ("llama", 2, 96)
    sized = ModelPoint(N=1e5).shape(section, "non_embedding")
    assert sized.family == "llama" and sized.kv_heads == 1 and sized.head_dim == 16
    with pytest.raises(ValueError, match="z_loss: only for family 'llama' or 'moe'"):
        ModelPlan(z_loss=1e-4)


#: Keys of specs of every existing family computed before the family registry existed: stored
#: databases hold them, so a refactoring of the families must leave them as they are.
PINNED_KEYS = {
    "50dc422c9f3f88cf": GPT2,
    "b1b52cc536f5d06b": {**GPT2, "parametrization": "mup", "base_width": 32},
    "e9744a08c5e14042": LLAMA,
    "df0efd470f6eb811": {**LLAMA, "tie_embeddings": True, "qk_norm": True, "rope_theta": 5e5, "norm_eps": 1e-6, "ffn": 64},
    "a6d7ec956d926ccc": {**LLAMA, "parametrization": "mup", "base_width": 16, "z_loss": 1e-4},
}


@pytest.mark.parametrize("key,model", PINNED_KEYS.items())
def test_the_keys_of_existing_families_are_pinned(key: str, model: dict) -> None:
    assert _spec(model).key == key


def _family_branches(path: Path) -> list[str]:
    """``x.family == "..."`` (or ``!=``, ``in``, ``not in`` a literal) anywhere in ``path``'s syntax tree."""
    import ast

    def names_family(node: ast.AST) -> bool:
        return (isinstance(node, ast.Name) and node.id == "family") or (
            isinstance(node, ast.Attribute) and node.attr == "family")

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return True
        return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and any(literal(e) for e in node.elts)

    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(names_family(s) for s in sides) and any(literal(s) for s in sides):
                found.append(f"{path}:{node.lineno}")
    return found


def test_no_module_outside_the_registry_branches_on_a_family_name() -> None:
    """Every family fact is asked of ``scaling.families.FAMILIES[name]``: only the registry and the
    families' own modules may compare a family with a name."""
    root = Path(__file__).resolve().parents[2] / "scaling"
    allowed = {root / "families.py", *(root / "trainer" / "families").glob("*.py")}
    found = [hit for path in sorted(root.rglob("*.py")) if path not in allowed for hit in _family_branches(path)]
    assert found == []


def test_the_branch_finder_sees_a_branch(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('def f(shape):\n    return 1 if shape.family == "llama" else family in ("gpt2",)\n')
    assert _family_branches(path) == [f"{path}:2", f"{path}:2"]
