"""A tiny MoE on two gloo workers tracks the single-process loss trajectory step by step under
DDP, ZeRO-1, ZeRO-3, tensor parallelism (its attention split, its experts whole on each rank) and
expert parallelism (two experts on each rank, tokens exchanged by all-to-all).

The MoE balances by DeepSeek-V3's bias, whose update reads the step's tokens per expert summed
over the micro-batches and ranks, so every layout routes every token as the single process does;
it has a shared expert and a dense first block. (Switch's auxiliary loss is computed per
micro-batch, as Megatron computes it, so its gradient depends on the split: it cannot track
the single process to fp32 precision and is not held to it here.)
"""

from __future__ import annotations

import tempfile

import pytest

from _workers import run_spec, spawn, train_each, train_worker, trajectory

#: As test_trajectory's fp32 tolerance: only the order of reductions differs.
FP32_RTOL = 1e-5
MOE = {"n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "context": 32, "family": "moe",
       "n_experts": 4, "top_k": 2, "expert_ffn": 24, "n_shared_experts": 1, "n_dense_layers": 1,
       "balance": "bias", "bias_rate": 0.01}
LAYOUTS = {"ddp": {"strategy": "ddp"}, "zero1": {"strategy": "zero1"}, "zero3": {"strategy": "zero3"},
           "tp2": {"strategy": "ddp", "tp": 2}, "ep2": {"strategy": "ddp", "ep": 2},
           "ep2-zero1": {"strategy": "zero1", "ep": 2}, "ep2-zero2": {"strategy": "zero2", "ep": 2}, "ep2-zero3": {"strategy": "zero3", "ep": 2}}


@pytest.mark.slow
def test_an_moe_tracks_the_single_process_in_every_layout(tmp_path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        expected = trajectory(train_worker(0, 1, run_spec("single", workers=1, model=MOE).to_json(), tmp))
    assert [s for s, _ in expected] == list(range(1, 11))
    runs = [(run_spec(layout["strategy"], model=MOE,
                      execution={"micro_batch_size": 2, **{k: v for k, v in layout.items() if k != "strategy"}}).to_json(),
             str(tmp_path / name)) for name, layout in LAYOUTS.items()]
    outs = spawn(train_each, 2, str(tmp_path), runs)
    for i, name in enumerate(LAYOUTS):
        rank0, rank1 = outs[0][i], outs[1][i]
        assert trajectory(rank0) == trajectory(rank1), name
        steps, losses = zip(*trajectory(rank0))
        assert list(steps) == [s for s, _ in expected], name
        assert list(losses) == pytest.approx([v for _, v in expected], rel=FP32_RTOL, abs=0), name
