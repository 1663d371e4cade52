"""Accounting: parameter counts against the torch module, FLOPs by hand, memory per ZeRO stage,
the shape policy."""

from __future__ import annotations

import math

import pytest

from scaling.accounting import (
    GIB,
    Shape,
    ShapePolicy,
    model_state_bytes,
)

GPT2_SMALL = Shape(12, 768, 12, 50257, 1024)


def test_gpt2_small_counts() -> None:
    assert GPT2_SMALL.params_total == 124_439_808
    assert GPT2_SMALL.params_non_embedding == 85_056_000
    assert GPT2_SMALL.params_embedding == (50257 + 1024) * 768
    assert GPT2_SMALL.params("total") == GPT2_SMALL.params_total


@pytest.mark.parametrize(
    "shape", [GPT2_SMALL, Shape(1, 32, 2, 256, 32), Shape(6, 384, 6, 256, 256), Shape(3, 96, 3, 1000, 77)]
)
def test_counts_match_a_direct_count_of_the_torch_module(shape: Shape) -> None:
    torch = pytest.importorskip("torch")
    from scaling.trainer.families.gpt2 import GPT

    with torch.device("meta"):
        model = GPT(shape)
    params = dict(model.named_parameters())  # the tied head appears once
    embedding = params["wte.weight"].numel() + params["wpe.weight"].numel()
    total = sum(p.numel() for p in params.values())
    assert (total, total - embedding, embedding) == (
        shape.params_total,
        shape.params_non_embedding,
        shape.params_embedding,
    )


def test_flops_per_token_by_hand() -> None:
    shape = Shape(n_layer=2, d_model=64, n_head=4, vocab_size=256, context=32)
    n = 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64  # 100,224
    assert shape.params_non_embedding == n
    assert shape.flops_per_token("6N") == 6 * n
    assert shape.flops_per_token("6N", "total") == 6 * (n + (256 + 32) * 64)
    # Chinchilla, App. F, per token: embeddings 2Vd; per layer QKV 6d^2, logits 2sd, softmax 3hs,
    # reduction 2sd, projection 2d^2, MLP 16d^2; final logits 2dV. Training = 3x forward.
    per_layer = 6 * 64**2 + 2 * 32 * 64 + 3 * 4 * 32 + 2 * 32 * 64 + 2 * 64**2 + 16 * 64**2
    forward = 2 * 256 * 64 + 2 * per_layer + 2 * 64 * 256
    assert forward == 279_296  # 32,768 + 2 x 106,880 + 32,768
    assert shape.flops_per_token("6N_attention") == 3 * forward
    assert shape.training_flops(1e6) == 6 * n * 1e6
    with pytest.raises(ValueError, match="unknown flops convention"):
        shape.flops_per_token("7N")  # type: ignore[arg-type]


def test_model_state_bytes_follow_the_zero_formulas() -> None:
    phi, n = 1_000_000_000, 8
    total = {s: sum(model_state_bytes(phi, "bf16", s, n, "zero")) for s in ("ddp", "zero1", "zero2", "zero3")}
    assert total["ddp"] == 16 * phi
    assert total["zero1"] == pytest.approx(4 * phi + 12 * phi / n)
    assert total["zero2"] == pytest.approx(2 * phi + 14 * phi / n)
    assert total["zero3"] == pytest.approx(16 * phi / n)
    assert sum(model_state_bytes(phi, "fp32", "ddp", n, "zero")) == 16 * phi
    # This trainer's layout: FP32 weights and gradients under autocast (4 + 4 + 8 bytes).
    torch_total = {s: model_state_bytes(phi, "bf16", s, n, "torch") for s in ("ddp", "zero1", "zero2", "zero3")}
    assert sum(torch_total["ddp"]) == 16 * phi
    assert torch_total["zero1"] == pytest.approx((4 * phi, 4 * phi, 8 * phi / n))
    assert torch_total["zero2"] == pytest.approx((4 * phi / n + 2 * phi, 4 * phi / n, 8 * phi / n))
    assert sum(torch_total["zero3"]) == pytest.approx(16 * phi / n)
    assert model_state_bytes(phi, "fp32", "zero2", n, "torch")[0] == pytest.approx(4 * phi / n + 4 * phi)
    assert sum(model_state_bytes(phi, "bf16", "single", 1)) == 16 * phi
    # On one worker every stage costs the same; with more workers each stage saves more.
    assert len({sum(model_state_bytes(phi, "bf16", s, 1)) for s in ("ddp", "zero1", "zero2", "zero3")}) == 1
    assert total["ddp"] > total["zero1"] > total["zero2"] > total["zero3"]
    with pytest.raises(ValueError, match="unknown strategy"):
        model_state_bytes(phi, "bf16", "zero4", n)  # type: ignore[arg-type]


def activation_bytes(shape: Shape, micro_batch: int, precision: str, checkpointing: bool = False) -> float:
    from scaling.memory import estimate_memory

    return estimate_memory(shape, micro_batch, precision, "single", 1, checkpointing).activations_bytes  # type: ignore[arg-type]


def test_activation_memory_by_hand_and_with_checkpointing() -> None:
    s, b, h, a, L, v = 1024, 4, 768, 12, 12, 50257
    layer = s * b * (36 * h + 16 + 4 * a)  # a gpt2 block in bf16 under a fused attention kernel
    loss = s * b * (4 * h + 8 + 2 * h + 12 * v)  # the final LayerNorm's input, statistics, 16-bit copy; the logits
    assert activation_bytes(GPT2_SMALL, 4, "bf16") == pytest.approx(L * layer + loss)
    fp32_layer, fp32_loss = s * b * (64 * h + 16 + 4 * a), s * b * (8 * h + 8 + 12 * v)
    assert activation_bytes(GPT2_SMALL, 4, "fp32") == pytest.approx(L * fp32_layer + fp32_loss)
    ckpt = activation_bytes(GPT2_SMALL, 4, "bf16", checkpointing=True)
    assert ckpt == pytest.approx(L * 4 * s * b * h + layer + loss)  # each block's FP32 input, one block replayed
    assert ckpt - loss < (activation_bytes(GPT2_SMALL, 4, "bf16") - loss) / 2  # the logits remain
    assert activation_bytes(GPT2_SMALL, 8, "bf16") == pytest.approx(2 * activation_bytes(GPT2_SMALL, 4, "bf16"))


def test_estimate_adds_a_margin_and_more_sharding_needs_less() -> None:
    from scaling.memory import estimate_memory

    big = Shape(48, 4096, 32, 50257, 2048)  # ~9.9B parameters
    est = estimate_memory(big, 1, "bf16", "zero3", 8, checkpointing=True)
    block = (big.params_per_layer - 4 * 4096) * 2 + 4 * 4096 * 4  # linear layers in bf16, LayerNorms in FP32
    # one block's gradients: in bf16, their FP32 copy for the reduce-scatter, and the new FP32 shard
    grads = block + 4 * (big.params_per_layer - 4 * 4096) + 4 * big.params_per_layer / 8
    assert est.buffers_bytes == pytest.approx(2 * block + grads)  # 2 blocks gathered + 1 of grads
    assert estimate_memory(big, 1, "bf16", "zero2", 8).buffers_bytes == pytest.approx(grads)
    assert est.total_bytes == pytest.approx(1.1 * (est.model_state_bytes + est.activations_bytes + est.buffers_bytes))
    copies = 2 * (48 * big.layer_matmul_params + 50257 * 4096)  # autocast's bf16 matrices, kept for backward
    assert estimate_memory(big, 1, "bf16", "zero1", 8).buffers_bytes == copies
    assert estimate_memory(big, 1, "fp32", "zero1", 8).buffers_bytes == 0
    sizes = [estimate_memory(big, 1, "bf16", s, 8, True).total_bytes for s in ("ddp", "zero1", "zero2", "zero3")]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > 2 * sizes[-1]
    # Which stage a run takes is the resolver's (tests/distributed/test_strategy.py).
    assert estimate_memory(GPT2_SMALL, 1, "bf16", "single", 1).total_bytes < 80 * GIB


def test_shape_policy() -> None:
    policy = ShapePolicy()  # d_model / n_layer = 64, head size 64
    shape = policy.shape_for(85e6)
    assert (shape.n_layer, shape.d_model, shape.n_head) == (12, 768, 12)
    for target in (1e5, 1e6, 3e6, 1e7, 1e8, 1e9):
        got = policy.shape_for(target)
        assert got.d_model % 64 == 0 and got.n_head == got.d_model // 64
        assert abs(math.log(got.params_non_embedding / target)) < 0.35  # near in log space
    wide = ShapePolicy(aspect_ratio=128, head_size=32).shape_for(1e7)
    assert wide.d_model % 32 == 0 and wide.d_model / wide.n_layer > 64
    total = policy.shape_for(2e7, convention="total")
    assert abs(math.log(total.params_total / 2e7)) < 0.35
    for bad in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="positive"):
            policy.shape_for(bad)
    with pytest.raises(ValueError, match="multiple of n_head"):
        Shape(2, 100, 3)


def test_batch_problem_refuses_partial_sequences_and_idle_workers() -> None:
    from scaling.batching import batch_problem

    assert batch_problem(1024, 256) is None and batch_problem(1024, 256, workers=4) is None
    assert "less than one sequence" in (batch_problem(100, 256) or "")
    assert "not a whole number of sequences of context 256 (use 768 or 1024)" in (batch_problem(1000, 256) or "")
    assert "cannot feed 5 workers" in (batch_problem(1024, 256, workers=5) or "")


@pytest.mark.parametrize(
    "batch, world, requested, expected",
    [(10, 1, None, 10), (10, 3, None, 4), (10, 4, None, 3), (10, 3, 2, 2), (9, 1, 4, 3), (10, 1, 4, 4), (8, 2, 100, 4)],
)
def test_micro_batch_size_is_the_largest_forward_pass(batch: int, world: int, requested: int | None,
                                                      expected: int) -> None:
    """The one derivation of b: the largest micro-batch any rank runs when micro_batches splits the batch."""
    from scaling.batching import micro_batch_size, micro_batches

    assert micro_batch_size(batch, world, requested) == expected
    shares = [(r + 1) * batch // world - r * batch // world for r in range(world)]
    parts = [micro_batches(batch, world, share, requested) for share in shares]
    assert len({len(p) for p in parts}) == 1, "every rank runs as many micro-batches"
    assert max(c for p in parts for _, c in p) == expected


# -- the Llama family ----------------------------------------------------------------------

LLAMA2_7B = Shape(32, 4096, 32, 32000, 4096, family="llama", ffn=11008)
LLAMA3_8B = Shape(32, 4096, 32, 128256, 8192, family="llama", n_kv_head=8, ffn=14336, rope_theta=500000.0)


def test_published_llama_counts() -> None:
    """Meta's published totals: Llama 2 7B 6,738,415,616 (its default ffn is the 11,008 given);
    Llama 3 8B 8,030,261,248 with 8 kv heads; both untied, so the output layer is an embedding matrix."""
    assert LLAMA2_7B.params_total == 6_738_415_616
    assert Shape(32, 4096, 32, 32000, 4096, family="llama").ffn == 11008  # int(2 * 4d / 3) up to 256
    assert LLAMA2_7B.params_embedding == 2 * 32000 * 4096
    assert LLAMA2_7B.params_non_embedding == 32 * (4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096) + 4096
    assert LLAMA3_8B.params_total == 8_030_261_248
    assert LLAMA3_8B.params_total - LLAMA3_8B.params_embedding == LLAMA3_8B.params_non_embedding
    assert GPT2_SMALL.params_total == 124_439_808  # unchanged by the families


@pytest.mark.parametrize("shape", [
    Shape(2, 64, 4, 256, 32, family="llama"),
    Shape(2, 64, 4, 256, 32, family="llama", n_kv_head=1, ffn=96, qk_norm=True),
    Shape(3, 96, 6, 1000, 77, family="llama", n_kv_head=2, tie_embeddings=True),
])
def test_llama_counts_match_a_direct_count_of_the_torch_module(shape: Shape) -> None:
    torch = pytest.importorskip("torch")
    from scaling.trainer.families.model import build_meta_model

    model = build_meta_model(shape)
    params = dict(model.named_parameters())  # a tied head appears once
    embedding = params["wte.weight"].numel() + (0 if shape.tied else params["lm_head.weight"].numel())
    total = sum(p.numel() for p in params.values())
    matmul = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert (total, total - embedding, embedding) == (
        shape.params_total, shape.params_non_embedding, shape.params_embedding)
    assert matmul == shape.params_matmul  # every Linear, the output layer included (tied or not)


def test_model_flops_per_token_is_palms_count() -> None:
    """6 per matmul parameter (no embedding lookup) + 12 L H Q T, for both families."""
    gpt = Shape(2, 64, 4, 256, 32)
    assert gpt.params_matmul == 2 * 12 * 64 * 64 + 256 * 64  # the tied output layer counts, the lookup not
    assert gpt.model_flops_per_token() == 6 * gpt.params_matmul + 12 * 2 * 4 * 16 * 32
    # GPT-2 small as nanoGPT's estimate_mfu counts it (6N with N = non-embedding-position params, + 12LHQT),
    # less the norms and biases, which are no matmuls: 6 * (85,056,000 - 12 * 13 * 768 - 2 * 768 + 50257 * 768).
    small = GPT2_SMALL.model_flops_per_token()
    assert small == 6 * (12 * 12 * 768**2 + 50257 * 768) + 12 * 12 * 12 * 64 * 1024
    llama = Shape(2, 64, 4, 256, 32, family="llama", n_kv_head=2, ffn=160)
    per_layer = 2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 160  # q, o; k, v of 2 kv heads; gate, up, down
    assert llama.model_flops_per_token() == 6 * (2 * per_layer + 256 * 64) + 12 * 2 * 4 * 16 * 32
    # Chinchilla's count (the 6N_attention convention) follows the family's matrices too.
    forward = 2 * 256 * 64 + 2 * (2 * 64 * (64 + 2 * 32) + 2 * 32 * 64 + 3 * 4 * 32 + 2 * 32 * 64 + 2 * 64 * 64
                                  + 2 * 3 * 64 * 160) + 2 * 64 * 256
    assert llama.flops_per_token("6N_attention") == 3 * forward


@pytest.mark.parametrize("fields,message", [
    ({"family": "llama", "n_kv_head": 3}, r"n_kv_head \(3\) must divide n_head \(4\)"),
    ({"n_kv_head": 2}, r"n_kv_head: only for families 'llama', 'moe'"),
    ({"qk_norm": True}, r"qk_norm: only for families 'llama', 'moe'"),
    ({"family": "mamba"}, r"unknown family 'mamba'"),
    ({"family": "llama", "rope_theta": 0.5}, "rope_theta must be a finite number above 1"),
    ({"family": "llama", "d_model": 60}, r"RoPE needs an even head size, got d_model/n_head = 15"),
])
def test_family_fields_are_checked(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Shape(**{"n_layer": 2, "d_model": 64, "n_head": 4, **fields})


def test_kv_heads_must_split_over_tp() -> None:
    shape = Shape(2, 64, 4, family="llama", n_kv_head=1)
    assert shape.tp_problem(2) == "tp=2 does not divide n_kv_head (1)"
    assert Shape(2, 64, 4, family="llama", n_kv_head=2).tp_problem(2) is None


def test_the_shape_policy_sizes_both_families() -> None:
    for family in ({}, {"family": "llama", "n_kv_head": 2}):
        policy = ShapePolicy(aspect_ratio=32, head_size=32, **family)  # type: ignore[arg-type]
        for target in (1e5, 1e6, 1e7):
            shape = policy.shape_for(target)
            assert shape.family == family.get("family", "gpt2")
            assert shape.head_dim == 32 and shape.n_head % shape.kv_heads == 0
            assert abs(math.log(shape.params_non_embedding / target)) < 0.35


@pytest.mark.parametrize("n_kv_head, target", [(5, 1e6), (7, 1e7), (3, 3e6)])
def test_a_target_with_kv_heads_gets_the_nearest_shape_whose_heads_they_divide(n_kv_head: int, target: float) -> None:
    """Widths step by n_kv_head heads, so the nearest such shape is found, not one several times larger."""
    shape = ShapePolicy(family="llama", n_kv_head=n_kv_head).planned_shape(target)
    assert shape.n_head % n_kv_head == 0 and 0.7 < shape.params("non_embedding") / target < 1.4


@pytest.mark.parametrize("n_kv_head, target, label, factor", [(7, 1e6, "1x448/7h", "2.5x larger"),
                                                              (3, 1e4, "1x192/3h", "44.3x larger")])
def test_a_target_no_shape_comes_near_is_refused_saying_how_far(n_kv_head: int, target: float, label: str,
                                                                 factor: str) -> None:
    with pytest.raises(ValueError, match=f"is {label} with N=.*{factor} \\(more than 2x from its target\\)"):
        ShapePolicy(family="llama", n_kv_head=n_kv_head).planned_shape(target)
