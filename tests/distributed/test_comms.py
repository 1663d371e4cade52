"""The communication cost model: closed forms, agreement with the accounting, and real traffic.

The last group runs the trainer's strategies (``scaling.trainer.parallel.data_parallel``) on two real gloo
processes and counts what they hand to ``torch.distributed``: each collective function is
wrapped by a counter that records the tensor's bytes and then calls the real collective
(counting, not mocking: the collectives run and the step trains). DDP all-reduces its buckets
in C++, out of Python's sight, so there the stock ``allreduce_hook`` from torch's
``ddp_comm_hooks`` is registered: it issues the same bucket all-reduce through
``torch.distributed.all_reduce``, where the counter sees it.
"""

from __future__ import annotations

import os
from collections import defaultdict
from typing import Any

import pytest
from _workers import TINY_LLAMA, spawn

from scaling.accounting import FAMILIES, Shape, model_state_bytes
from scaling.communication import (
    LINKS,
    Cluster,
    Link,
    bubble_fraction,
    collective_time,
    copy_bytes,
    dp_traffic,
    host_share,
    reduce_bytes,
    step_comm_time,
    step_traffic,
    wire_bytes,
)
from scaling.accounting import ParallelLayout, params_per_rank
from scaling.memory import in_flight, layer_activation_bytes, memory_per_rank

TINY = Shape(n_layer=2, d_model=32, n_head=2, vocab_size=256, context=16)


# -- closed forms ---------------------------------------------------------------------------


def test_wire_bytes_of_ring_collectives() -> None:
    assert wire_bytes("all_reduce", 1200, 4) == 1800  # 2 * 3 * 1200 / 4
    assert wire_bytes("all_gather", 1200, 4) == 900
    assert wire_bytes("reduce_scatter", 1200, 3) == 800
    assert wire_bytes("send_recv", 1200, 2) == 1200
    assert wire_bytes("all_reduce", 1200, 1) == 0
    # An all-gather plus a reduce-scatter moves what one all-reduce does (sequence parallelism).
    assert wire_bytes("all_gather", 999, 8) + wire_bytes("reduce_scatter", 999, 8) == pytest.approx(
        wire_bytes("all_reduce", 999, 8)
    )
    with pytest.raises(ValueError, match="unknown collective"):
        wire_bytes("alltoall", 1, 2)


def test_alpha_beta_time() -> None:
    link = Link("test", alpha=1e-5, beta=1e-9)
    # Ring all-reduce on 4 ranks: 6 steps, 1.5 K bytes.
    assert collective_time("all_reduce", 1e6, 4, link) == pytest.approx(6e-5 + 1.5e-3)
    # Binomial broadcast on 4 ranks: 2 levels, each passing the whole payload.
    assert collective_time("broadcast", 1e6, 4, link) == pytest.approx(2e-5 + 2e-3)
    assert collective_time("gather", 1e6, 4, link) == pytest.approx(3e-5 + 0.75e-3)


def test_gloo_algorithms_and_copies() -> None:
    """gloo's own algorithms as ProcessGroupGloo runs them, against the textbook ones."""
    link = Link("g", alpha=1e-5, beta=1e-9, copy_beta=2e-9, library="gloo")
    # reduce-scatter is a whole all-reduce on a clone, then its chunk copied out: K + K/n copied.
    assert collective_time("reduce_scatter", 1e6, 4, link) == pytest.approx(6e-5 + 1.5e-3 + 2e-9 * 1.25e6)
    assert collective_time("all_reduce", 1e6, 4, link) == pytest.approx(6e-5 + 1.5e-3)
    # all-gather passes each chunk in two halves (2(n-1) messages) and copies its flat output.
    assert collective_time("all_gather", 1e6, 4, link) == pytest.approx(6e-5 + 0.75e-3 + 2e-3)
    # reduce: ring reduce-scatter then a gather at the root, 2(n-1)K/n through the root in n steps.
    assert collective_time("reduce", 1e6, 4, link) == pytest.approx(4e-5 + 1.5e-3)
    # scatter and gather post every message at once: one latency; gather copies K at the root.
    assert collective_time("scatter", 1e6, 4, link) == pytest.approx(1e-5 + 0.75e-3)
    assert collective_time("gather", 1e6, 4, link) == pytest.approx(1e-5 + 0.75e-3 + 2e-3)
    # The tree broadcast is the same algorithm in both libraries.
    assert collective_time("broadcast", 1e6, 4, link) == pytest.approx(2e-5 + 2e-3)
    assert copy_bytes("all_gather", 1e6, 4) == 0.0  # nccl copies nothing
    # Reductions add each received chunk on the CPU: (n-1)K/n per rank (Thakur et al.'s gamma).
    adding = Link("g", alpha=1e-5, beta=1e-9, copy_beta=2e-9, library="gloo", reduce_beta=3e-9)
    assert collective_time("all_reduce", 1e6, 4, adding) == pytest.approx(6e-5 + 1.5e-3 + 3e-9 * 0.75e6)
    assert collective_time("reduce_scatter", 1e6, 4, adding) == pytest.approx(
        6e-5 + 1.5e-3 + 2e-9 * 1.25e6 + 3e-9 * 0.75e6)
    assert collective_time("reduce", 1e6, 4, adding) == pytest.approx(4e-5 + 1.5e-3 + 3e-9 * 0.75e6)
    for kind in ("broadcast", "scatter", "gather", "all_gather", "send_recv"):  # nothing to add up
        assert reduce_bytes(kind, 1e6, 4, "gloo") == 0.0
    assert reduce_bytes("all_reduce", 1e6, 4) == 0.0  # nccl reduces inside its copies
    assert copy_bytes("reduce_scatter", 1e6, 1, "gloo") == 0.0
    assert LINKS["loopback_gloo"].library == "gloo" and LINKS["nvlink"].library == "nccl"
    with pytest.raises(ValueError, match="unknown collective library"):
        copy_bytes("all_gather", 1, 2, "mpi")  # type: ignore[arg-type]


def test_ranks_sharing_cores_wait_their_turn() -> None:
    """n ranks on fewer cores: latency shares n/cores; bytes share as many ranks as work at once."""
    assert host_share("all_reduce", 4, None) == 1.0 and host_share("all_reduce", 4, 4) == 1.0
    assert host_share("all_reduce", 4, 2) == 2.0  # a ring keeps every rank busy
    assert host_share("scatter", 4, 2) == 1.0  # bound by the root
    assert host_share("scatter", 4, 2, "latency") == 2.0  # but every receiver must wake up
    # Binomial broadcast on 4 ranks: 2 busy at level 0 (x1 on 2 cores), 4 at level 1 (x2).
    assert host_share("broadcast", 4, 2) == pytest.approx(1.5)
    # On 3 ranks both levels keep 2 busy: no slowdown on 2 cores.
    assert host_share("broadcast", 3, 2) == 1.0
    link = Link("t", alpha=1e-5, beta=1e-9)
    shared = collective_time("all_reduce", 1e6, 4, link, cores=2)
    assert shared == pytest.approx(2 * collective_time("all_reduce", 1e6, 4, link))
    assert collective_time("scatter", 1e6, 4, link, cores=2) == pytest.approx(2 * 3e-5 + 0.75e-3)


def test_bubble_fraction() -> None:
    assert bubble_fraction(4, 12) == pytest.approx(3 / 15)
    assert bubble_fraction(4, 12, "gpipe") == bubble_fraction(4, 12, "1f1b")
    assert bubble_fraction(4, 12, "interleaved", chunks=2) == pytest.approx(3 / 27)
    assert bubble_fraction(1, 8) == 0.0
    # Narayanan et al.'s ratio, bubble / ideal = (p-1)/(v m), is the same statement.
    f = bubble_fraction(8, 16, "interleaved", chunks=4)
    assert f / (1 - f) == pytest.approx(7 / 64)


def test_zero_paper_volumes() -> None:
    """ZeRO-1/2 move what DDP moves; ZeRO-3 1.5x (Rajbhandari et al. 2020, Sec. 7)."""
    phi, n = 10**6, 8

    def volume(strategy: str) -> float:
        return sum(t.wire_bytes_per_step for t in dp_traffic(phi, strategy, n, "bf16", layout="zero"))

    ddp = volume("ddp")
    assert ddp == pytest.approx(2 * 2 * phi * (n - 1) / n)
    assert volume("zero1") == pytest.approx(ddp)
    assert volume("zero2") == pytest.approx(ddp)
    assert volume("zero3") == pytest.approx(1.5 * ddp)
    assert dp_traffic(phi, "ddp", 1, "bf16") == []


def test_tensor_parallel_traffic_megatron() -> None:
    shape = Shape(n_layer=4, d_model=64, n_head=4, vocab_size=256, context=32)
    layout = ParallelLayout(tp=2, micro_batch=3, micro_batches=5)
    traffic = step_traffic(shape, layout, "bf16")
    assert {t.kind for t in traffic} == {"all_reduce"}
    act = 2 * 3 * 32 * 64  # b*s*h in 16 bits
    # 2 all-reduces per block forward, 2 backward, per micro-batch.
    assert sum(t.calls for t in traffic) == 4 * 4 * 5
    assert all(t.payload == act for t in traffic)
    full = step_traffic(shape, ParallelLayout(tp=2, micro_batch=3, micro_batches=5, recompute="full"), "bf16")
    assert sum(t.calls for t in full) == 6 * 4 * 5  # the replayed forward all-reduces again
    sp = step_traffic(shape, ParallelLayout(tp=2, micro_batch=3, micro_batches=5, sequence_parallel=True), "bf16")
    assert {t.kind for t in sp} == {"all_gather", "reduce_scatter"}
    assert sum(t.wire_bytes_per_step for t in sp) == pytest.approx(sum(t.wire_bytes_per_step for t in traffic))


def test_pipeline_traffic() -> None:
    shape = Shape(n_layer=8, d_model=64, n_head=4, vocab_size=256, context=32)
    traffic = step_traffic(shape, ParallelLayout(pp=4, micro_batches=6, micro_batch=2), "bf16")
    p2p = [t for t in traffic if t.kind == "send_recv"]
    # fwd + bwd, m micro-batches, of the FP32 residual stream (4 bytes) whatever the compute precision
    assert sum(t.bytes_per_step for t in p2p) == 2 * 6 * (4 * 2 * 32 * 64)
    inter = step_traffic(
        shape, ParallelLayout(pp=4, micro_batches=6, micro_batch=2, schedule="interleaved", chunks=2), "bf16"
    )
    # The first rank's two chunks send forward (and receive backward) twice per micro-batch, and
    # its second chunk also receives forward (and sends backward): v*pp - 1 = 7 boundaries, not 3.
    assert sum(t.bytes_per_step for t in inter if t.kind == "send_recv") == 3 * sum(t.bytes_per_step for t in p2p)
    tied = [t for t in traffic if t.kind == "all_reduce"]
    assert tied[0].payload == 4 * 256 * 64  # the tied embedding's FP32 gradient, first <-> last stage


def test_params_per_rank() -> None:
    shape = Shape(n_layer=8, d_model=512, n_head=8, vocab_size=256, context=64)
    assert params_per_rank(shape) == shape.params_total
    h = shape.d_model
    blocks = sum(params_per_rank(shape, 1, 4, s) for s in range(4)) - shape.vocab_size * h
    assert blocks == shape.params_total  # the last stage's tied copy is the only duplicate
    # Tensor parallelism splits all but LayerNorms and row-parallel biases (6h per block).
    per_tp = params_per_rank(shape, 4, 1)
    assert per_tp == (shape.params_total - shape.params_embedding - 2 * h - 8 * 6 * h) // 4 + (
        shape.params_embedding + 2 * h + 8 * 6 * h
    )
    big = Shape(n_layer=32, d_model=4096, n_head=32, vocab_size=256, context=2048)
    assert params_per_rank(big, 8, 4, stage=1) == pytest.approx(big.params_total / 32, rel=0.01)


def test_block_activations_split_over_tensor_and_sequence_parallel_ranks() -> None:
    """gpt2 in bf16 keeps 36h + 16 + 4a bytes a token (Korthikanti's 34h + 5as for Megatron's block
    with dropout and math attention): 12h + 16 in the norms' inputs, statistics and 16-bit copies,
    which stay whole on every tensor rank, and 24h + 4a in attention and the MLP, which split."""
    shape = Shape(n_layer=4, d_model=64, n_head=4, vocab_size=256, context=32)
    s, b, h, a, t = 32, 2, 64, 4, 4
    sb = s * b
    assert layer_activation_bytes(shape, b) == sb * (36 * h + 16 + 4 * a)
    assert layer_activation_bytes(shape, b, t) == sb * (12 * h + 16 + (24 * h + 4 * a) / t)
    assert layer_activation_bytes(shape, b, t, True) == sb * (36 * h + 16 + 4 * a) / t
    assert layer_activation_bytes(shape, b, t, True, "selective") == sb * (36 * h + 16 + 4 * a) / t  # no scores to drop
    assert layer_activation_bytes(shape, b, 1, False, "full") == 4 * sb * h  # the FP32 residual
    assert layer_activation_bytes(shape, b, precision="fp32") == sb * (64 * h + 16 + 4 * a)
    math = layer_activation_bytes(shape, b, attention="math")
    assert math == sb * (36 * h + 16 + 6 * a * s)
    assert layer_activation_bytes(shape, b, t, True, "selective", attention="math") == sb * (36 * h + 16) / t


@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("family", FAMILIES)
def test_fused_attention_keeps_no_scores_and_math_attention_does(family: str, precision: str) -> None:
    """Per token, a block under flash-attn or SDPA keeps the same bytes at any context; under math
    attention the FP32 softmax (and, in 16 bits, its copy) add (4 + 2) a s, or 4 a s in FP32."""
    def per_token(context: int, attention: str) -> float:
        shape = Shape(2, 256, 4, 256, context, family=family)
        rope = 8 * context * shape.head_dim if shape.family_spec.rope else 0  # RoPE's angles, per position
        return (layer_activation_bytes(shape, 1, precision=precision, attention=attention) - rope) / context  # type: ignore[arg-type]

    assert per_token(2048, "fused") == per_token(256, "fused")
    scores = 6 if precision == "bf16" else 4
    assert per_token(2048, "math") - per_token(2048, "fused") == pytest.approx(4 * (scores * 2048 - 4))
    assert per_token(2048, "math") - per_token(256, "math") == 4 * scores * (2048 - 256)


def test_llama_blocks_keep_its_swiglu_one_cast_per_product_and_narrower_keys_and_values() -> None:
    """llama in bf16 on CUDA, by hand: norms 4h + 2h each (q, k, v and gate, up joined: one cast
    each), q and the output 2h each, k and v 2 kv each, SwiGLU 4 x 2 ffn, the log-sum-exp 4a,
    RoPE's tables 4 s head_dim; the same on the CPU (its RMSNorm keeps the normalized input, as
    many bytes as CUDA's keeps of the input); each norm's 1/rms is 4 bytes. Under tensor parallelism the layers read the norm output one by
    one (three and two copies); in FP32 on CUDA k and v are repeated over the query heads."""
    shape = Shape(2, 256, 4, 256, 512, family="llama", n_kv_head=2)
    h, kv, f, a, s, hd, b = 256, 128, 768, 4, 512, 64, 3
    cuda = s * b * (12 * h + 8 + 4 * h + 4 * kv + 8 * f + 4 * a) + 4 * s * hd
    assert layer_activation_bytes(shape, b) == cuda
    assert layer_activation_bytes(shape, b, device="cpu") == cuda
    assert layer_activation_bytes(shape, b, 2) == s * b * (18 * h + 8 + (4 * h + 4 * kv + 8 * f + 4 * a) / 2) + 4 * s * hd
    fp32 = s * b * (8 * h + 8 * h + 8 + 8 * h + 8 * h + 16 * f + 4 * a) + 8 * s * hd
    assert layer_activation_bytes(shape, b, precision="fp32") == fp32
    assert layer_activation_bytes(shape, b, precision="fp32", device="cpu") == fp32 - s * b * 8 * (h - kv)


def test_memory_model_at_the_issue_shape() -> None:
    """d 2,048, 16 heads, context 2,048 in bf16: gpt2 keeps 36 sbh a block (Korthikanti counts 114)."""
    shape = Shape(24, 2048, 16, 50257, 2048)
    sbh = 2048 * 2048
    assert layer_activation_bytes(shape, 1) / sbh == pytest.approx(36, abs=0.05)
    assert layer_activation_bytes(shape, 1, attention="math") / sbh == pytest.approx(36 + 6 * 16, abs=0.05)


def test_in_flight_micro_batches() -> None:
    assert in_flight(ParallelLayout(pp=4, micro_batches=16, schedule="gpipe")) == 16
    assert in_flight(ParallelLayout(pp=4, micro_batches=16)) == 4
    assert in_flight(ParallelLayout(pp=4, micro_batches=2)) == 2
    assert in_flight(ParallelLayout(pp=4, micro_batches=16, schedule="interleaved", chunks=2)) == pytest.approx(
        4 * (1 + 3 / 8)
    )


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3"])
@pytest.mark.parametrize("precision", ["bf16", "fp32"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_memory_without_tp_pp_is_state_activations_and_buffers_by_hand(strategy: str, precision: str,
                                                                        recompute: str) -> None:
    """The data-parallel case of the one memory model, against the formulas written out."""
    from scaling.accounting import fsdp_buffer_bytes

    layout = ParallelLayout(dp=4, strategy=strategy, micro_batch=3, recompute=recompute)
    est = memory_per_rank(TINY, layout, precision)  # type: ignore[arg-type]
    s, b, h, a, L, v = TINY.context, 3, TINY.d_model, TINY.n_head, TINY.n_layer, TINY.vocab_size
    c = 2 if precision == "bf16" else 4
    layer = s * b * ((36 if precision == "bf16" else 64) * h + 16 + 4 * a)  # 16: the LayerNorms' mean and 1/std
    loss = s * b * (4 * h + 8 + c * h + 12 * v)  # the final norm, the logits
    acts = (L * 4 * s * b * h + layer if recompute == "full" else L * layer) + loss
    state = model_state_bytes(TINY.params_total, precision, strategy, 4)  # type: ignore[arg-type]
    if strategy == "zero2" and precision == "bf16":  # its gathered norms and embeddings are FP32: 2 bytes more
        state = (state[0] + 2 * (TINY.params_embedding + 2 * h + L * 4 * h), *state[1:])
    buffers = fsdp_buffer_bytes(TINY, precision, strategy, 4)  # type: ignore[arg-type]
    if precision == "bf16" and strategy in ("ddp", "zero1"):  # autocast's copies of the matrices
        buffers += 2 * (L * 12 * h * h + v * h)
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes) == pytest.approx(state)
    assert est.activations_bytes == pytest.approx(acts) and est.buffers_bytes == pytest.approx(buffers)
    assert est.total_bytes == pytest.approx(1.1 * (sum(state) + acts + buffers))


def test_memory_with_tp_and_pp() -> None:
    shape = Shape(n_layer=8, d_model=256, n_head=8, vocab_size=256, context=128)
    layout = ParallelLayout(dp=2, tp=2, pp=4, strategy="zero1", micro_batches=8, micro_batch=2,
                            sequence_parallel=True)
    est = memory_per_rank(shape, layout, "bf16")
    params = params_per_rank(shape, 2, 4, 0)
    assert (est.weights_bytes, est.gradients_bytes, est.optimizer_bytes) == model_state_bytes(
        params, "bf16", "zero1", 2
    )
    # 1F1B: p micro-batches of L/p blocks on the first stage, sequence-parallel (/tp).
    per_layer = 128 * 2 * (36 * 256 + 16 + 4 * 8) / 2
    assert est.activations_bytes == pytest.approx(4 * 2 * per_layer)
    gpipe = memory_per_rank(shape, ParallelLayout(dp=2, tp=2, pp=4, strategy="zero1", micro_batches=8,
                                                  micro_batch=2, sequence_parallel=True, schedule="gpipe"))
    assert gpipe.activations_bytes == pytest.approx(2 * est.activations_bytes)


def test_layout_checks() -> None:
    with pytest.raises(ValueError, match="n_head"):
        ParallelLayout(tp=4).check(Shape(n_layer=2, d_model=64, n_head=2))
    with pytest.raises(ValueError, match="n_layer"):
        ParallelLayout(pp=3).check(Shape(n_layer=4, d_model=64, n_head=2))
    with pytest.raises(ValueError, match="interleaved"):
        ParallelLayout(pp=2, chunks=2)
    with pytest.raises(ValueError, match="sequence_parallel"):
        ParallelLayout(sequence_parallel=True)
    with pytest.raises(ValueError, match="node"):
        step_comm_time(TINY, ParallelLayout(tp=2), Cluster(gpus_per_node=1))


def test_tensor_group_stays_inside_a_node() -> None:
    """tp on NVLink; dp crosses nodes once tp*dp exceeds one; time scales with the link."""
    shape = Shape(n_layer=4, d_model=1024, n_head=16, vocab_size=256, context=1024)
    cluster = Cluster(gpus_per_node=8, intra=LINKS["nvlink"], inter=LINKS["infiniband"])
    inside = ParallelLayout(dp=2, tp=4)
    across = ParallelLayout(dp=4, tp=4)
    assert cluster.link("tp", across) is cluster.intra
    assert cluster.link("dp", inside) is cluster.intra and cluster.link("dp", across) is cluster.inter
    t_in, t_across = step_comm_time(shape, inside, cluster), step_comm_time(shape, across, cluster)
    assert t_in["tp"] == pytest.approx(t_across["tp"])
    assert t_across["dp"] > t_in["dp"]


# -- what actually crosses the wire ---------------------------------------------------------

COUNTED = ("all_reduce", "broadcast", "all_gather_single", "reduce_scatter_single",
           "all_gather_into_tensor", "reduce_scatter_tensor", "all_gather", "reduce_scatter",
           "send", "recv", "isend", "irecv", "reduce", "scatter", "gather")
KIND = {"all_gather_single": "all_gather", "all_gather_into_tensor": "all_gather",
        "reduce_scatter_single": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter"}


def _payload(name: str, args: tuple, kwargs: dict) -> int:
    """Bytes of the full tensor a collective works on (its K)."""
    if name in ("all_gather_single", "all_gather_into_tensor"):
        t = kwargs.get("output_tensor", kwargs.get("output", args[0] if args else None))
    elif name in ("reduce_scatter_single", "reduce_scatter_tensor"):
        t = kwargs.get("input", args[1] if len(args) > 1 else None)
    else:
        t = kwargs.get("tensor", args[0] if args else None)
    if isinstance(t, (list, tuple)):
        return sum(x.numel() * x.element_size() for x in t)
    return t.numel() * t.element_size()


class CountingCollectives:
    """Wraps ``torch.distributed``'s collective functions: record (kind, bytes), then call the real one."""

    def __init__(self) -> None:
        self.calls: dict[str, list[int]] = defaultdict(list)
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> "CountingCollectives":
        import torch.distributed as dist

        for name in COUNTED:
            real = getattr(dist, name, None)
            if real is None:
                continue
            self._saved[name] = real

            def counted(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
                self.calls[KIND.get(_name, _name)].append(_payload(_name, args, kwargs))
                return _real(*args, **kwargs)

            setattr(dist, name, counted)
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch.distributed as dist

        for name, real in self._saved.items():
            setattr(dist, name, real)


#: (strategy, precision, micro-batches, family): a llama's RMSNorms and untied head under bf16 ZeRO-3 too.
CASES = [("ddp", "fp32", 1, "gpt2"), ("ddp", "bf16", 2, "gpt2"), ("zero1", "fp32", 1, "gpt2"),
         ("zero2", "bf16", 2, "gpt2"), ("zero3", "fp32", 1, "gpt2"), ("zero3", "bf16", 2, "gpt2"),
         ("zero3", "bf16", 1, "llama")]


def _traffic_worker(rank: int, world: int) -> dict:
    """One training step per case on this rank; the collectives it issued, by kind."""
    import torch
    import torch.distributed as dist

    from scaling.trainer.families.model import build_model
    from scaling.trainer.parallel.data_parallel import parallelize
    from scaling.trainer.spec import RunSpec

    out = {}
    for strategy, precision, micro_batches, family in CASES:
        spec = RunSpec.from_dict({
            "model": TINY_LLAMA if family == "llama" else TINY.as_dict(), "tokens": 64 * 10, "batch_tokens": 64,
            "precision": precision,
            "execution": {"workers": world, "strategy": strategy},
        })
        torch.manual_seed(0)
        par = parallelize(build_model(spec.shape, spec.seed), spec)
        opt = par.build_optimizer(par.model.parameters(), lr=1e-3)
        if not par.is_fsdp:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            par.module.register_comm_hook(par.group, default_hooks.allreduce_hook)
        g = torch.Generator().manual_seed(rank)
        dtype = torch.bfloat16 if precision == "bf16" else torch.float32
        with CountingCollectives() as counter:
            for i in range(micro_batches):
                x = torch.randint(0, 256, (2, TINY.context), generator=g)
                with par.no_sync(i < micro_batches - 1):
                    with torch.autocast("cpu", dtype=dtype, enabled=precision == "bf16"):
                        logits = par.module(x)
                    loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), x.flatten())
                    loss.backward()
            opt.step()
        dist.barrier()
        out[(strategy, precision, micro_batches, family)] = dict(counter.calls)
    return out


@pytest.fixture(scope="module")
def wire(tmp_path_factory) -> list[dict]:
    """Every case's collectives on both ranks of one real 2-process gloo group."""
    pytest.importorskip("torch")
    return spawn(_traffic_worker, 2, str(tmp_path_factory.mktemp("wire")))


@pytest.mark.parametrize("strategy,precision,micro_batches,family", CASES)
def test_model_bytes_equal_what_crosses_the_wire(strategy: str, precision: str, micro_batches: int, family: str,
                                                  wire) -> None:
    """Per collective kind, the bytes handed to torch.distributed in one step equal the model's payload.

    Exact: DDP's buckets are views of the gradients without padding, and FSDP2 pads each
    parameter's first dimension to a multiple of the world size, which every dimension of this
    model already is at 2 ranks.
    """
    layout = ParallelLayout(dp=2, strategy=strategy, micro_batches=micro_batches, micro_batch=2)  # type: ignore[arg-type]
    expected: dict[str, float] = defaultdict(float)
    shape = Shape(**TINY_LLAMA) if family == "llama" else TINY
    for t in step_traffic(shape, layout, precision):  # type: ignore[arg-type]
        expected[t.kind] += t.bytes_per_step
    for rank, by_case in enumerate(wire):
        calls = by_case[(strategy, precision, micro_batches, family)]
        measured = {kind: float(sum(sizes)) for kind, sizes in calls.items()}
        assert measured == dict(expected), f"rank {rank}: {calls}"


def test_module_is_torch_free() -> None:
    """The planner imports the communication and memory models on machines without torch."""
    import subprocess
    import sys

    code = "import sys, scaling.communication, scaling.memory; assert 'torch' not in sys.modules, 'torch imported'"
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


@pytest.mark.parametrize("strategy", ["zero2", "zero3"])
def test_cpu_offload_takes_the_shards_off_the_device(strategy: str) -> None:
    """Under FSDP2's CPU offload the device holds no sharded weights, gradients or optimizer state:
    only ZeRO-2's gathered copy, the per-block buffers and the activations stay."""
    layout = ParallelLayout(dp=4, strategy=strategy, micro_batch=2, micro_batches=2)  # type: ignore[arg-type]
    on, off = memory_per_rank(TINY, layout, "bf16"), memory_per_rank(TINY, layout, "bf16", cpu_offload=True)
    sharded = model_state_bytes(TINY.params_total, "bf16", "zero3", 4)[0]
    assert off.weights_bytes == pytest.approx(on.weights_bytes - sharded)
    assert (off.gradients_bytes, off.optimizer_bytes) == (0.0, 0.0)
    assert (off.activations_bytes, off.buffers_bytes) == (on.activations_bytes, on.buffers_bytes)
    ddp = ParallelLayout(dp=4, strategy="ddp", micro_batch=2)
    assert memory_per_rank(TINY, ddp, "bf16", cpu_offload=True) == memory_per_rank(TINY, ddp, "bf16")


def test_grouped_heads_in_fp32_on_cuda_are_counted_repeated() -> None:
    """CUDA's FP32 attention repeats grouped key/value heads for SDPA's memory-efficient kernel
    (``attention.expands_groups``): a block keeps what the same block with every head its own
    keeps; in bf16, and on the CPU, the groups stay grouped and keep less."""
    gqa = Shape(n_layer=2, d_model=256, n_head=8, n_kv_head=2, vocab_size=256, context=128, family="llama")
    mha = Shape(n_layer=2, d_model=256, n_head=8, n_kv_head=8, vocab_size=256, context=128, family="llama")
    assert layer_activation_bytes(gqa, 2, precision="fp32") == layer_activation_bytes(mha, 2, precision="fp32")
    for precision, device in (("bf16", "cuda"), ("fp32", "cpu")):
        kinds = {"precision": precision, "device": device}
        assert layer_activation_bytes(gqa, 2, **kinds) < layer_activation_bytes(mha, 2, **kinds)  # type: ignore[arg-type]


#: A tiny MoE with a dense first block, its 4 experts over the 2 ranks.
TINY_MOE = {"n_layer": 2, "d_model": 32, "n_head": 4, "vocab_size": 256, "context": 16, "family": "moe",
            "n_experts": 4, "top_k": 2, "expert_ffn": 24, "n_dense_layers": 1}


#: The data-parallel strategies expert parallelism composes with, each leaving the experts out.
EP_CASES = ("ddp", "zero1", "zero2", "zero3")


def _expert_traffic_worker(rank: int, world: int) -> dict:
    """Per strategy, one bf16 step of two micro-batches of TINY_MOE with ep = 2, counting its collectives
    (all-to-alls counted by the tensor each rank hands over: its input)."""
    import torch
    import torch.distributed as dist

    from scaling.trainer.families.model import build_model
    from scaling.trainer.parallel.data_parallel import parallelize
    from scaling.trainer.spec import RunSpec

    out = {}
    real = dist.all_to_all_single
    for strategy in EP_CASES:
        spec = RunSpec.from_dict({"model": TINY_MOE, "tokens": 64 * 10, "batch_tokens": 64, "precision": "bf16",
                                  "execution": {"workers": world, "strategy": strategy, "ep": world}})
        torch.manual_seed(0)
        par = parallelize(build_model(spec.shape, spec.seed), spec)
        opt = par.build_optimizer(par.model.parameters(), lr=1e-3)
        if not par.is_fsdp:
            from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

            par.module.register_comm_hook(par.group, default_hooks.allreduce_hook)
        sent: list[int] = []

        def counted(output: Any, input: Any, *args: Any, _sent: list = sent, **kwargs: Any) -> Any:
            _sent.append(input.numel() * input.element_size())
            return real(output, input, *args, **kwargs)

        g = torch.Generator().manual_seed(rank)
        dist.all_to_all_single = counted
        try:
            with CountingCollectives() as counter:
                for i in range(2):
                    x = torch.randint(0, 256, (2, TINY_MOE["context"]), generator=g)
                    with par.no_sync(i < 1):
                        with torch.autocast("cpu", dtype=torch.bfloat16):
                            logits = par.module(x)
                        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), x.flatten()).backward()
                opt.step()
        finally:
            dist.all_to_all_single = real
        dist.barrier()
        out[strategy] = {"all_to_all": sent, **dict(counter.calls)}
    return out


@pytest.fixture(scope="module")
def expert_wire(tmp_path_factory) -> list[dict]:
    """Every strategy's collectives under ep = 2 on both ranks of one real 2-process gloo group."""
    pytest.importorskip("torch")
    return spawn(_expert_traffic_worker, 2, str(tmp_path_factory.mktemp("expert-wire")))


@pytest.mark.parametrize("strategy", EP_CASES)
def test_expert_parallel_bytes_equal_what_crosses_the_wire(strategy: str, expert_wire) -> None:
    """The all-to-alls two ranks hand over in a real step, summed over the ranks, equal the model's payload
    on each (a rank sends its own routed copies and returns those it received: as many, over the ranks, as
    it sent); data parallelism (DDP's all-reduce, ZeRO-1's broadcasts, FSDP2's gathers and reduce-scatters)
    moves the rest of the model, never the experts."""
    layout = ParallelLayout(dp=2, ep=2, strategy=strategy, micro_batches=2, micro_batch=2)  # type: ignore[arg-type]
    shape = Shape(**TINY_MOE)
    expected: dict[str, float] = defaultdict(float)
    for t in step_traffic(shape, layout, "bf16"):
        expected[t.kind] += t.bytes_per_step
    ranks = [by_strategy[strategy] for by_strategy in expert_wire]
    assert sum(sum(r["all_to_all"]) for r in ranks) == 2 * expected.pop("all_to_all")
    for r in ranks:
        assert len(r["all_to_all"]) == sum(t.calls for t in step_traffic(shape, layout, "bf16") if t.group == "ep")
        assert {kind: float(sum(sizes)) for kind, sizes in r.items() if kind != "all_to_all"} == dict(expected), r
