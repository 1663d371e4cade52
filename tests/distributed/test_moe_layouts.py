"""A tiny MoE on two gloo workers tracks the single-process loss trajectory step by step under
DDP, ZeRO-1, ZeRO-3, tensor parallelism (its attention split, its experts whole on each rank) and
expert parallelism (two experts on each rank, tokens exchanged by all-to-all) under DDP and ZeRO-1/2/3,
which also resumes from a checkpoint in its layout; on four workers, tensor and expert parallelism together.

The MoE balances by DeepSeek-V3's bias, whose update reads the step's tokens per expert summed
over the micro-batches and ranks, so every layout routes every token as the single process does;
it has a shared expert and a dense first block. (Switch's auxiliary loss is computed per
micro-batch, as Megatron computes it, so its gradient depends on the split: it cannot track
the single process to fp32 precision and is not held to it here.)
"""

from __future__ import annotations

import functools
import tempfile

import pytest

from _workers import run_spec, spawn, train_worker, trajectory, until_fault_each

#: As test_trajectory's fp32 tolerance: only the order of reductions differs.
FP32_RTOL = 1e-5
MOE = {"n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "context": 32, "family": "moe",
       "n_experts": 4, "top_k": 2, "expert_ffn": 24, "n_shared_experts": 1, "n_dense_layers": 1,
       "balance": "bias", "bias_rate": 0.01}
LAYOUTS = {"ddp": {"strategy": "ddp"}, "zero1": {"strategy": "zero1"}, "zero3": {"strategy": "zero3"},
           "tp2": {"strategy": "ddp", "tp": 2}, "ep2": {"strategy": "ddp", "ep": 2},
           **{f"ep2-{s}": {"strategy": s, "ep": 2} for s in ("zero1", "zero2", "zero3")}}


#: Layouts whose run is cut by a fault at step 6 and resumed in the same layout from step 4's checkpoint:
#: each rank's own experts (and, under ZeRO-1, their optimizer state outside the partition) round-trip.
RESUMED = ("ep2", "ep2-zero1", "ep2-zero2", "ep2-zero3")


def _spec(layout: dict, cut: bool) -> str:
    over = {"faults": {"raise_at_step": 6, "raise_attempts": 1}} if cut else {}
    execution = {"micro_batch_size": 2, "checkpoint_interval": 4, **{k: v for k, v in layout.items() if k != "strategy"}}
    return run_spec(layout["strategy"], model=MOE, execution=execution, **over).to_json()


@functools.cache
def _reference() -> list[tuple[int, float]]:
    """The single process's ten losses (computed once for both tests)."""
    with tempfile.TemporaryDirectory() as tmp:
        expected = trajectory(train_worker(0, 1, run_spec("single", workers=1, model=MOE).to_json(), tmp))
    assert [s for s, _ in expected] == list(range(1, 11))
    return expected


@pytest.mark.slow
def test_an_moe_tracks_the_single_process_in_every_layout(tmp_path) -> None:
    expected = _reference()
    runs = [(_spec(layout, False), str(tmp_path / name)) for name, layout in LAYOUTS.items()]
    cut = [(_spec(LAYOUTS[name], True), str(tmp_path / f"{name}-cut")) for name in RESUMED]
    outs = spawn(until_fault_each, 2, str(tmp_path), runs + cut, 1)
    for i, name in enumerate(LAYOUTS):
        rank0, rank1 = outs[0][i], outs[1][i]
        assert rank0["fault"] is None and trajectory(rank0) == trajectory(rank1), name
        steps, losses = zip(*trajectory(rank0))
        assert list(steps) == [s for s, _ in expected], name
        assert list(losses) == pytest.approx([v for _, v in expected], rel=FP32_RTOL, abs=0), name
    assert all(out["fault"] is not None for out in outs[0][len(runs):])  # cut at step 6
    resumed = spawn(until_fault_each, 2, str(tmp_path), cut, 2)
    for name, out in zip(RESUMED, resumed[0]):
        assert out["fault"] is None and out["result"]["resumed_from"] == 4, name
        steps, losses = zip(*trajectory(out))
        assert list(steps) == list(range(5, 11)), name
        assert list(losses) == pytest.approx([dict(expected)[s] for s in steps], rel=FP32_RTOL, abs=0), name


@pytest.mark.slow
def test_an_moe_tracks_the_single_process_with_tensor_and_expert_parallelism(tmp_path) -> None:
    """tp2 x ep2 on four ranks: each tensor pair splits attention and sends the same tokens to the
    experts of its data-parallel column, which FSDP2 (ZeRO-2, ZeRO-3) leaves whole."""
    expected = _reference()
    runs = [(run_spec(s, model=MOE, workers=4, execution={"micro_batch_size": 2, "tp": 2, "ep": 2}).to_json(),
             str(tmp_path / s)) for s in ("zero2", "zero3")]
    outs = spawn(until_fault_each, 4, str(tmp_path), runs, 1)
    for i, name in enumerate(("zero2", "zero3")):
        assert all(trajectory(outs[r][i]) == trajectory(outs[0][i]) for r in range(1, 4)), name
        steps, losses = zip(*trajectory(outs[0][i]))
        assert list(steps) == [s for s, _ in expected], name
        assert list(losses) == pytest.approx([v for _, v in expected], rel=FP32_RTOL, abs=0), name
