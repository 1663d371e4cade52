"""Each strategy's gradients on two real gloo processes equal the single-process gradients."""

from __future__ import annotations

import pytest
import torch

from _workers import (TINY_LLAMA, build_model, forward_dtypes, forward_dtypes_worker, global_batch, grads_worker,
                      reference_grads, spawn, tiny_spec)


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3", "zero3+offload"])
def test_gradients_match_single_process(strategy: str, tmp_path) -> None:
    torch.set_num_threads(1)
    name, _, offload = strategy.partition("+")
    spec = tiny_spec(name, cpu_offload=bool(offload))
    ref = reference_grads(spec)
    results = spawn(grads_worker, 2, str(tmp_path), spec)
    for rank, grads in enumerate(results):
        assert grads.keys() == ref.keys(), rank
        for name, g in grads.items():
            # Averaged, not summed: a sum would be off by a factor of 2 (FSDP2 on gloo < torch 2.9).
            torch.testing.assert_close(g, ref[name], rtol=1e-5, atol=1e-7, msg=f"rank {rank} {name}")


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_zero2_and_zero3_in_bf16_compute_in_the_dtypes_of_autocast(family: str, tmp_path) -> None:
    """Every module of a ZeRO-2/3 bf16 forward takes and returns the dtypes it does on one process
    under autocast: embeddings return FP32 rows, norms and the residual stream between blocks stay
    FP32, linear layers return bf16. The linear layers' parameters arrive gathered in bf16 (the
    cast autocast makes anyway: half the all-gather), the others in FP32."""
    llama = TINY_LLAMA if family == "llama" else None  # RMSNorms (qk-norm too), no positions, an untied head
    spec = tiny_spec("single", "bf16", llama)
    model = build_model(spec)
    single = forward_dtypes(model, global_batch(spec)[0][:2])
    cast = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    if spec.shape.tied:  # the output layer is the token embedding: gathered in FP32 with it, cast by autocast
        cast.discard("lm_head")
    assert single["wte"][2] == single["blocks.0"][0] == single["blocks.0.ln_1"][2] == torch.float32
    assert single["lm_head"][2] == torch.bfloat16
    strategies = ["zero2", "zero3"]
    for rank, by_strategy in enumerate(spawn(forward_dtypes_worker, 2, str(tmp_path), strategies, llama)):
        for strategy in strategies:
            seen = by_strategy[strategy]
            assert seen.keys() == single.keys()
            for name, (given, params, returned) in seen.items():
                what = f"rank {rank} {strategy} {name}"
                assert (given, returned) == (single[name][0], single[name][2]), what
                assert set(params) <= ({torch.bfloat16} if name in cast else {torch.float32}), what
