"""The planner under expert parallelism: the all-to-alls in the communication model, the experts'
states in the memory model, and the layout search choosing ``ep``; every figure written out by hand.

The shape: 4 blocks of d = 64 (4 heads, untied, vocab 256, context 32), the first dense (SwiGLU of
llama_ffn(64) = 256), three of 8 experts of 128, top-2. Its parameters: embedding and output
2 x 256 x 64 = 32,768, final norm 64; per block attention 4 x 64^2 = 16,384 and norms 128; the
dense MLP 3 x 64 x 256 = 49,152; per MoE block a router 64 x 8 = 512 and experts 8 x 3 x 64 x 128
= 196,608. Total 32,832 + 4 x 16,512 + 49,152 + 3 x 197,120 = 739,392, of which the routed
experts 3 x 196,608 = 589,824.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scaling.accounting import GIB, ParallelLayout, Shape, fsdp_block_buffer_bytes
from scaling.communication import LINKS, collective_time, step_comm_time, step_traffic, wire_bytes
from scaling.layout import Machine, Request, choose, expert_parallel_problem, layouts
from scaling.memory import memory_per_rank

SHAPE = Shape(4, 64, 4, 256, 32, family="moe", n_experts=8, top_k=2, expert_ffn=128, n_dense_layers=1)
TOTAL, EXPERTS = 739_392, 589_824
DENSE = TOTAL - EXPERTS  # 149,568: what data parallelism synchronizes under ep
OWN = EXPERTS // 4  # 147,456: one rank's experts at ep = 4


def test_the_shapes_counts_are_the_hand_counts() -> None:
    assert SHAPE.params_total == TOTAL
    assert SHAPE.family_spec.routed_expert_params(SHAPE) == EXPERTS


def test_all_to_all_moves_the_other_ranks_share_in_n_minus_1_steps() -> None:
    assert wire_bytes("all_to_all", 4000.0, 4) == 3000.0
    assert wire_bytes("all_to_all", 4000.0, 1) == 0.0
    link = LINKS["nvlink"]
    assert collective_time("all_to_all", 4000.0, 4, link) == pytest.approx(3 * link.alpha + 3000.0 * link.beta)


def test_the_all_to_alls_of_a_step_by_hand() -> None:
    """Per MoE block (3) and micro-batch (3): b*s*k = 2 x 32 x 2 = 128 routed copies of 64 values,
    dispatched in FP32 (32,768 bytes) and combined in bf16 (16,384), the reverse in backward, and
    the 8 int64 counts (64 bytes) forward; DDP all-reduces the FP32 gradients of the rest only."""
    lay = ParallelLayout(dp=4, ep=4, micro_batch=2, micro_batches=3)
    traffic = step_traffic(SHAPE, lay, "bf16")
    ep = [(t.kind, t.n, t.payload, t.calls) for t in traffic if t.group == "ep"]
    assert ep == [("all_to_all", 4, 64, 9), ("all_to_all", 4, 32_768, 9), ("all_to_all", 4, 16_384, 9),
                  ("all_to_all", 4, 16_384, 9), ("all_to_all", 4, 32_768, 9)]
    (dp,) = [t for t in traffic if t.group == "dp"]
    assert (dp.kind, dp.payload, dp.calls) == ("all_reduce", 4 * DENSE, 1)
    assert sum(t.wire_bytes_per_step for t in traffic if t.group == "ep") == 0.75 * 9 * (64 + 2 * 32_768 + 2 * 16_384)
    # full recomputation replays the forward's three exchanges; fp32 sends 4 bytes each way
    replayed = step_traffic(SHAPE, replace(lay, recompute="full"), "fp32")
    assert [t.calls for t in replayed if t.group == "ep"] == [18, 18, 18, 9, 9]
    assert {t.payload for t in replayed if t.group == "ep" and t.payload > 64} == {32_768}
    # without expert parallelism the experts' gradients are all-reduced with the rest, and nothing is exchanged
    plain = step_traffic(SHAPE, replace(lay, ep=1), "bf16")
    assert [(t.group, t.payload) for t in plain] == [("dp", 4 * TOTAL)]


def test_the_expert_group_is_timed_on_its_link() -> None:
    lay = ParallelLayout(dp=4, ep=4, micro_batch=2, micro_batches=3)
    link = LINKS["nvlink"]
    by_group = step_comm_time(SHAPE, lay, Machine(1, 8).cluster, "bf16")
    expected = 9 * sum(collective_time("all_to_all", k, 4, link) for k in (64, 32_768, 16_384)) + 9 * sum(
        collective_time("all_to_all", k, 4, link) for k in (16_384, 32_768))
    assert by_group["ep"] == pytest.approx(expected)
    assert by_group["dp"] == pytest.approx(collective_time("all_reduce", 4 * DENSE, 4, link))


@pytest.mark.parametrize("strategy", ["ddp", "single"])
def test_each_rank_holds_its_share_of_the_experts_states(strategy: str) -> None:
    """Under bf16 the trainer keeps FP32 weights and gradients and AdamW's two FP32 moments: 16
    bytes a parameter; a rank holds the rest and a quarter of the experts."""
    dp = 4 if strategy == "ddp" else 1
    lay = ParallelLayout(dp=dp, ep=dp, strategy=strategy, micro_batch=2)  # type: ignore[arg-type]
    mem = memory_per_rank(SHAPE, lay, "bf16")
    held = DENSE + EXPERTS // dp
    assert (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes) == (4 * held, 4 * held, 8 * held)
    if dp > 1:
        whole = memory_per_rank(SHAPE, replace(lay, ep=1), "bf16")
        assert whole.model_state_bytes - mem.model_state_bytes == 16 * (EXPERTS - OWN)
        # autocast's bf16 copies of the matrices: the other ranks' experts are not cast here
        assert whole.buffers_bytes - mem.buffers_bytes == 2 * (EXPERTS - OWN)


@pytest.mark.parametrize("strategy", ["zero1", "zero2", "zero3"])
def test_under_zero_a_rank_shards_the_rest_and_keeps_its_own_experts_whole(strategy: str) -> None:
    """ZeRO shards what data parallelism synchronizes (DENSE) over the 4 ranks; the rank's own experts
    keep FP32 weights, gradients and both AdamW moments whole (16 bytes each)."""
    mem = memory_per_rank(SHAPE, ParallelLayout(dp=4, ep=4, strategy=strategy, micro_batch=2), "bf16")  # type: ignore[arg-type]
    assert mem.optimizer_bytes == 8 * DENSE / 4 + 8 * OWN
    assert mem.gradients_bytes == (4 * DENSE if strategy == "zero1" else 4 * DENSE / 4) + 4 * OWN
    if strategy == "zero3":
        assert mem.weights_bytes == 4 * DENSE / 4 + 4 * OWN
        # FSDP2 gathers the dense first block, the largest without experts (attention 16,384, SwiGLU
        # 49,152, norms 128); autocast's bf16 copies of the rank's own experts, which FSDP2 leaves alone
        assert mem.buffers_bytes == 2 * OWN + fsdp_block_buffer_bytes(65_664, 128, "bf16", "zero3", 4)


def test_expert_parallelism_composes_with_data_and_tensor_parallelism() -> None:
    assert expert_parallel_problem(SHAPE, 4, 4, 1, 1, "ddp") is None
    assert all(expert_parallel_problem(SHAPE, 4, 4, 1, 1, s) is None for s in ("zero1", "zero2", "zero3"))
    assert "must equal the data-parallel ranks (2)" in expert_parallel_problem(SHAPE, 4, 2, 1, 1, "ddp")
    assert expert_parallel_problem(SHAPE, 2, 2, 2, 1, "zero2") is None  # beside tensor parallelism too
    assert "has no pipeline split" in expert_parallel_problem(SHAPE, 2, 2, 1, 2, "zero2")
    # fp16's loss scaler takes the experts' DTensor gradients beside FSDP2's only
    assert "with fp16 needs strategy zero2 or zero3" in expert_parallel_problem(SHAPE, 4, 4, 1, 1, "zero1", "fp16")
    assert expert_parallel_problem(SHAPE, 4, 4, 1, 1, "zero2", "fp16") is None
    assert "does not divide n_experts (8)" in expert_parallel_problem(SHAPE, 3, 3, 1, 1, "ddp")
    dense = Shape(4, 64, 4, 256, 32, family="llama")
    assert "has no experts" in expert_parallel_problem(dense, 2, 2, 1, 1, "ddp")


# -- the search -------------------------------------------------------------------------------------


#: A Mixtral-like MoE block at laptop scale: experts dominate the parameters.
BIG = Shape(8, 1024, 16, 32000, 1024, family="moe", n_experts=8, top_k=2, expert_ffn=3584)


def _request(shape: Shape, sequences: int, limit_gib: float, machine: Machine = Machine(2, 4)) -> Request:
    flops = shape.flops_per_token("6N_attention", "total") * sequences * shape.context
    return Request(shape, "bf16", 8, sequences, flops, 3e14, limit_gib * GIB, machine, 0.001)


def test_the_search_shards_big_experts_where_their_gradients_would_cost_more_than_the_tokens() -> None:
    """8 sequences a step over two nodes: all-reducing 0.70B expert parameters' gradients costs more
    than sending 8 x 1024 x 2 routed tokens to their experts and back. The rest is ZeRO-2's: it gathers
    bf16 weights and reduce-scatters FP32 gradients, less than DDP's FP32 all-reduce. (Tensor
    parallelism fixed off: with it the search splits attention four ways and the experts two.)"""
    choice = choose(replace(_request(BIG, 8, 80.0), tp=1))
    best = choice.best
    assert best is not None and best.layout.ep == 8 and best.layout.dp == 8 and best.strategy == "zero2"
    assert "ep8" in best.label()
    feasible = [c for c in choice.considered if c.fits]
    assert all(best.step_s <= c.step_s for c in feasible)
    ep1 = min((c for c in feasible if c.layout.ep == 1), key=lambda c: c.step_s)
    assert best.comm_s["ep"] > 0 and best.comm_s["dp"] < ep1.comm_s["dp"]
    assert any(r.short.startswith("ep=8: ") and "faster than ep=1" in r.short for r in choice.reasons)


def test_the_search_keeps_small_experts_on_every_rank_when_tokens_are_many() -> None:
    """A small MoE on a large batch: the all-to-alls of 512 sequences cost more than the experts' gradients."""
    shape = Shape(4, 256, 4, 256, 512, family="moe", n_experts=8, top_k=2, expert_ffn=256)
    choice = choose(_request(shape, 512, 80.0, Machine(1, 8)))
    best = choice.best
    assert best is not None and best.layout.ep == 1
    assert {lay.ep for lay, _ in layouts(choice.request) if lay.tp == 1} == {1, 8}
    assert {lay.ep for lay, _ in layouts(choice.request) if lay.tp == 4} == {1, 2}
    assert any(r.short == "ep=1: all-to-alls cost more" for r in choice.reasons)


def test_under_ddp_the_search_shards_the_experts_when_whole_ones_do_not_fit() -> None:
    """0.80B parameters (0.70B of them experts) under DDP in 8 GiB a rank: 13.6 GiB at least with
    every expert on every rank, under 8 with an eighth of them."""
    choice = choose(replace(_request(BIG, 64, 8.0, Machine(1, 8)), strategy="ddp"))
    best = choice.best
    assert best is not None and best.layout.ep == 8 and best.memory.total_gib < 8
    assert not any(c.fits for c in choice.considered if c.layout.ep == 1)
    assert any(r.short.startswith("ep=8: ep=1 needs 13.6 GiB") for r in choice.reasons)


def test_a_fixed_ep_is_kept_and_a_dense_family_is_never_split() -> None:
    req = _request(BIG, 8, 80.0)
    assert {lay.ep for lay, _ in layouts(replace(req, ep=1))} == {1}
    assert {(lay.ep, lay.dp, lay.strategy) for lay, _ in layouts(replace(req, ep=8))} == {
        (8, 8, s) for s in ("ddp", "zero1", "zero2", "zero3")}
    dense = Shape(8, 1024, 16, 32000, 1024, family="llama")
    assert {lay.ep for lay, _ in layouts(_request(dense, 8, 80.0))} == {1}
    # beside tensor parallelism the experts go over the data-parallel ranks, under FSDP2
    assert {(lay.tp, lay.dp, lay.strategy) for lay, _ in layouts(replace(req, ep=4))} == {
        (2, 4, "zero2"), (2, 4, "zero3")}
    assert {lay.strategy for lay, _ in layouts(replace(req, ep=8, precision="fp16"))} == {"zero2", "zero3"}
    # CPU offload would leave a rank's own experts on the host (FSDP2 offloads only its shards)
    assert {lay.ep for lay, _ in layouts(replace(req, cpu_offload=True))} == {1}
    # ep must divide the experts: 8 experts over 8 ranks, not 3 of 6 (two experts short)
    assert {lay.ep for lay, _ in layouts(replace(req, workers=6, sequences=6))} == {1}


def test_a_plans_moe_run_is_placed_with_the_chosen_ep(tmp_path) -> None:
    """`strategy: auto` on 8 GPUs over two nodes: the run's execution takes tp = 4 inside each node and
    ep = 2 over its two data-parallel ranks (ZeRO-2), and a plan that fixes ep = 1 keeps every expert
    on every rank."""
    import yaml

    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan

    def planned(resources: dict) -> object:
        plan = {"name": "moe-layout",
                "model": {"family": "moe", "n_experts": 8, "top_k": 2, "expert_ffn": 3584, "context": 256},
                "train": {"precision": "bf16", "batch_tokens": 2048},
                "resources": {"gpus_per_worker": 1, "workers": 8, "device_memory_gib": 80,
                              "cluster": {"nodes": 2, "gpus_per_node": 4}, **resources},
                "grid": [{"models": [{"n_layer": 8, "d_model": 1024, "n_head": 16}], "tokens": [1e7]}]}
        path = tmp_path / "plan.yaml"
        path.write_text(yaml.safe_dump(plan))
        (run,) = expand(*load_plan(path), resolve=False).runs
        return run

    run = planned({})
    ex = run.spec.execution
    assert (ex.ep, ex.dp, ex.tp, ex.strategy) == (2, 2, 4, "zero2")
    assert any(r.long.startswith("ep=2: each rank holds 4 of 8 experts") for r in run.layout.reasons)
    fixed = planned({"ep": 1}).spec.execution
    assert fixed.ep == 1 and fixed.strategy != "single"
