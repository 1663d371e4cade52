"""The memory model of a parallel layout: the bytes one rank needs, part by part (weights,
gradients, optimizer state, activations, buffers), the one model every fit check uses.

Torch-free, on :mod:`scaling.accounting`'s ZeRO state formulas, layouts and per-rank parameters: :func:`memory_per_rank` (any dp x tp x pp layout),
:func:`estimate_memory` (its data-parallel case), :func:`layer_activation_bytes` (what a block
keeps for backward, tensor by tensor). Measured against real steps by ``benchmarks/bench_memory.py``.
"""

from __future__ import annotations

from typing import Literal

from scaling.accounting import (
    Layout,
    MemoryEstimate,
    ParallelLayout,
    Precision,
    Recompute,
    Shape,
    Strategy,
    block_params_per_tp_rank,
    compute_bytes,
    data_parallel_params,
    fsdp_block_buffer_bytes,
    gather_bytes,
    gathered_bytes,
    model_state_bytes,
    own_expert_params,
)

#: Attention kernels as memory tells them apart: ``fused`` (flash-attn, SDPA's flash and
#: memory-efficient kernels, the CPU's SDPA: what this trainer runs) keeps no s x s scores;
#: ``math`` (SDPA's math fallback, plain softmax attention) keeps them.
AttentionMemory = Literal["fused", "math"]
ATTENTION_MEMORY: tuple[str, ...] = ("fused", "math")
#: Where the kernels run, as far as memory goes: CUDA in FP32 repeats grouped key/value heads.
MemoryDevice = Literal["cuda", "cpu"]
#: Bytes per logit at the step's peak, the backward of the FP32 log-softmax in any precision
#: (see :func:`loss_activation_bytes`; measured by ``benchmarks/bench_memory.py``).
LOGIT_BYTES = 12.0

def layer_activation_bytes(
    shape: Shape, micro_batch: int, tp: int = 1, sequence_parallel: bool = False, recompute: Recompute = "none",
    *, precision: Precision = "bf16", attention: AttentionMemory = "fused", device: MemoryDevice = "cuda",
    joined: bool | None = None,
) -> float:
    """Bytes one block of ``shape``'s family keeps for backward, counted tensor by tensor.

    What this trainer's blocks save, measured on the CPU with ``saved_tensors_hooks`` (Korthikanti
    et al. 2022 count the same way, for Megatron's blocks with dropout and math attention). Per
    token, with c the compute dtype's bytes (:func:`compute_bytes`):

    * each norm: its input, the FP32 residual stream (4h; autocast adds the 16-bit branch outputs
      to the FP32 embedding; llama's RMSNorm keeps its normalized input instead, as many bytes:
      CUDA's fused kernel and the CPU's ``llama.rms_norm`` alike), its FP32 1/rms (4; LayerNorm's
      mean too, 8); and its output as the next linear layers keep it:
      under autocast one c-byte copy per matrix product that reads it (gpt2: one, the fused QKV and
      the first MLP matrix; llama: one where its q, k, v and its gate and up are ``joined`` into one
      product each, ``scaling.trainer.families.llama.fused_projections``, which they are without
      tensor parallelism, else three and two), in FP32 the output itself (4h);
    * llama's qk-norm: the FP32 queries and keys it normalizes (4(h + kv); normalized, on the
      CPU) and a FP32 1/rms per head (4(a + kv heads));
    * attention: q, k and v (c(h + 2 kv); on CUDA in FP32 k and v repeated over the query heads,
      c(h + 2h), for SDPA's memory-efficient kernel, which takes no grouped heads) and the output,
      which the output projection takes as it is (ch); the fused kernels (flash-attn, SDPA's flash and memory-efficient kernels, on CUDA
      and the CPU) keep a FP32 log-sum-exp per head (4a) and never the s x s scores; ``math``
      attention (SDPA's math fallback, plain softmax) keeps the FP32 softmax and, under autocast,
      its c-byte copy ((4 + c) a s), the term Korthikanti's 5as/h stands for;
    * the MLP: gpt2's first matrix's output and GELU's (2 c ffn), llama's gate, SiLU, up and their
      product (4 c ffn);
    * llama's RoPE tables, cos and sin in the compute dtype for each position (2 c s head_dim; one
      table the blocks share, counted with each block: an overcount of a few MiB at most).

    Tensor parallelism splits attention's and the MLP's tensors over ``tp``, the norms' stay whole;
    sequence parallelism splits those too. ``selective`` recomputation drops the scores (nothing
    under a fused kernel), ``full`` keeps only the block's input (the FP32 residual, 4h).
    """
    s, b, h, t = shape.context, micro_batch, shape.d_model, tp
    tokens = s * b
    if recompute == "full":
        return 4.0 * tokens * h / (t if sequence_parallel else 1)
    if attention not in ATTENTION_MEMORY:
        raise ValueError(f"unknown attention {attention!r} (use one of {ATTENTION_MEMORY})")
    c = compute_bytes(precision)
    autocast = precision != "fp32"
    llama = shape.family_spec.norm == "rmsnorm"

    def norm(readers: int) -> float:
        kept = 4.0 * h + (4.0 if llama else 8.0)  # and 1/rms (and the mean)
        return kept + (c * h * readers if autocast else 4.0 * h)

    if joined is None:
        joined = autocast and tp == 1
    # llama's gate and up are joined too; a routed MLP's norm output keeps its two readers
    whole = norm(1 if joined or not llama else 3) + norm(1 if not llama or (joined and not shape.family_spec.routed) else 2)
    kv = shape.kv_heads * shape.head_dim
    # CUDA in FP32 repeats grouped key/value heads for the fused kernel (attention.expands_groups)
    kept_kv = h if device == "cuda" and not autocast and attention == "fused" else kv
    split = c * (2 * h + 2 * kept_kv) + c * shape.family_spec.mlp_activation_values(shape)
    if llama and shape.qk_norm:  # FP32 input (normalized, on the CPU), 1/rms per head
        split += 4.0 * (h + kv) + 4.0 * (shape.n_head + shape.kv_heads)
    if attention == "fused":
        split += 4.0 * shape.n_head
    elif recompute != "selective":
        split += (4 + (c if autocast else 0)) * shape.n_head * s
    rope = 2.0 * c * s * shape.head_dim if shape.family_spec.rope else 0.0
    if sequence_parallel:
        return tokens * (whole + split) / t + rope
    return tokens * (whole + split / t) + rope


def loss_activation_bytes(shape: Shape, micro_batch: int, precision: Precision = "bf16") -> float:
    """Bytes the last stage holds above its blocks at the step's peak, the start of backward.

    The final norm as a block's norm keeps it (one reader, the output layer), and per logit
    :data:`LOGIT_BYTES`: the FP32 log-softmax the cross-entropy keeps, and in its backward the
    gradient coming in and the one going out, 4 bytes each. (The forward's 16-bit logits, their
    FP32 copy and the log-softmax, 10 bytes under autocast, are gone by then; a z-loss, whose
    log-sum-exp keeps the FP32 logits, would add 4.)
    """
    tokens = shape.context * micro_batch
    h = shape.d_model
    c = compute_bytes(precision)
    llama = shape.family_spec.norm == "rmsnorm"
    norm = 4.0 * h + (4.0 if llama else 8.0)
    norm += c * h if precision != "fp32" else 4.0 * h
    return tokens * (norm + LOGIT_BYTES * shape.vocab_size)


def autocast_copy_bytes(shape: Shape, layout: ParallelLayout, precision: Precision) -> float:
    """The 16-bit copies of the weight matrices autocast makes in forward, which the linear layers
    keep for backward (the biases' copies they do not keep): the first stage's blocks (their
    tensor rank's part; under expert parallelism the rank's own experts only) and, on the one stage of an unpipelined run, the output layer. Under full
    recomputation too: autocast caches every copy until its context exits, after the loss. None in
    FP32, nor where FSDP2 gathers the matrices in bf16 already, but for a rank's own experts under
    expert parallelism, which FSDP2 leaves alone."""
    if precision == "fp32":
        return 0.0
    if layout.strategy in ("zero2", "zero3") and layout.dp > 1 and gather_bytes(precision) == 2:
        return float(compute_bytes(precision) * own_expert_params(shape, layout.ep))
    params = (shape.n_layer // layout.pp) * (shape.layer_matmul_params // layout.tp)
    if layout.ep > 1:  # the other ranks' experts
        params -= shape.family_spec.routed_expert_params(shape) - own_expert_params(shape, layout.ep)
    if layout.pp == 1:
        params += shape.vocab_size * shape.d_model
    return float(compute_bytes(precision) * params)


def fsdp_block_params(shape: Shape, tp: int = 1, ep: int = 1) -> int:
    """The parameters of the largest block FSDP2 gathers on one tensor rank: under expert
    parallelism an MoE block without its routed experts (each rank keeps its own whole, out of
    FSDP2), or a dense first block where that is larger."""
    block = block_params_per_tp_rank(shape, tp)
    if ep == 1 or not shape.family_spec.routed:
        return block
    spec = shape.family_spec
    moe = block - spec.routed_expert_params(shape) // (shape.n_layer - shape.n_dense_layers)
    if not shape.n_dense_layers:
        return moe
    dense = spec.attention_params(shape) // tp + spec.mlp_params(shape) + spec.layer_vector_params(shape)
    return max(moe, dense)


def in_flight(layout: ParallelLayout) -> float:
    """Micro-batches whose activations the first stage holds at once, as a multiple of its layers.

    GPipe runs every forward first (m); 1F1B holds p (at most m); interleaved 1F1B holds p
    times (1 + (p-1)/(p*v)) (Korthikanti et al. 2022, Sec. 4.2.3). One without pipelining.
    """
    p, m, v = layout.pp, layout.micro_batches, layout.chunks
    if p == 1:
        return 1.0
    if layout.schedule == "gpipe":
        return float(m)
    if layout.schedule == "1f1b":
        return float(min(p, m))
    return min(p, m) * (1.0 + (p - 1) / (p * v))


def memory_per_rank(
    shape: Shape,
    layout: ParallelLayout,
    precision: Precision = "bf16",
    margin: float = 0.10,
    mem_layout: Layout = "torch",
    *,
    attention: AttentionMemory = "fused",
    device: MemoryDevice = "cuda",
    cpu_offload: bool = False,
) -> MemoryEstimate:
    """Memory of the busiest rank (the first pipeline stage) at its peak: model state, activations, buffers.

    Model state: :func:`scaling.accounting.model_state_bytes` of the parameters this tensor and
    pipeline rank holds, sharded over ``dp`` by the ZeRO stage; under expert parallelism the rank's
    own experts (1/``ep`` of them, :func:`scaling.accounting.own_expert_params`) whole beside them. Activations: the first stage's
    ``n_layer/pp`` blocks (:func:`layer_activation_bytes` of the family, precision, attention
    kernel and device) times the micro-batches in flight, plus (without pipelining, where the
    same rank computes the loss) :func:`loss_activation_bytes`; full recomputation adds one
    block's full activations while it is replayed. Buffers: autocast's 16-bit weight copies
    (:func:`autocast_copy_bytes`), FSDP2's per-block gathers, or under pipelining the whole stage's
    gathered parameters and unsharded gradients, which torch's ``PipelineStage`` keeps until the
    step's last micro-batch. Gradients are counted whole, as they are from the second
    micro-batch of an accumulated step, and always under DDP; one micro-batch on one process
    peaks lower, by up to the gradients. This is the one memory model: :func:`estimate_memory`
    is its data-parallel case.

    ``cpu_offload`` (ZeRO-2/3 over several data-parallel ranks; FSDP2's ``CPUOffloadPolicy``): the
    sharded weights, their gradients and AdamW's state live in host memory, so the device holds
    none of them: only ZeRO-2's gathered copy, the blocks FSDP2 gathers and reduces, and the
    activations. Elsewhere the trainer refuses it (``scaling.trainer.spec.offload_problem``).
    """
    layout.check(shape)
    params, kept = data_parallel_params(shape, layout.tp, layout.pp, stage=0, ep=layout.ep)
    weights, grads, optim = model_state_bytes(params, precision, layout.strategy, layout.dp, mem_layout)
    if mem_layout == "torch" and layout.strategy == "zero2" and layout.dp > 1:
        # the gathered copy ZeRO-2 holds has its norms and embeddings in FP32 (see communication.dp_traffic)
        weights += gathered_bytes(params, kept, precision) - gather_bytes(precision) * params
    if cpu_offload and layout.strategy in ("zero2", "zero3") and layout.dp > 1:
        sharded = model_state_bytes(params, precision, "zero3", layout.dp, mem_layout)[0]
        weights = weights - sharded  # ZeRO-2's gathered copy stays on the device
        grads = optim = 0.0
    # the rank's own experts, sharded by ep alone: whole weights, gradients and AdamW state
    own = model_state_bytes(own_expert_params(shape, layout.ep), precision, "single", 1, mem_layout)
    weights, grads, optim = weights + own[0], grads + own[1], optim + own[2]
    b, t, sp = layout.micro_batch, layout.tp, layout.sequence_parallel
    kinds = {"precision": precision, "attention": attention, "device": device}
    per_layer = layer_activation_bytes(shape, b, t, sp, layout.recompute, **kinds)  # type: ignore[arg-type]
    layers = shape.n_layer // layout.pp
    acts = in_flight(layout) * layers * per_layer
    if layout.recompute == "full":
        acts += layer_activation_bytes(shape, b, t, sp, "none", **kinds)  # type: ignore[arg-type]
    if layout.pp == 1:
        acts += loss_activation_bytes(shape, b, precision)
    buffers = autocast_copy_bytes(shape, layout, precision)
    if layout.strategy in ("zero2", "zero3") and layout.dp > 1 and layout.pp > 1:
        # torch's PipelineStage defers FSDP2's reduce-scatter and resharding to the end of the
        # step: after its first backward a stage keeps its parameters gathered and accumulates
        # unsharded gradients, both in the dtype they are gathered in, until every micro-batch is done.
        buffers += 2.0 * gathered_bytes(params, kept, precision)
    elif layout.strategy in ("zero2", "zero3") and layout.dp > 1:
        # one tensor rank's block gathered and its gradients on their way to the reduce-scatter
        buffers += fsdp_block_buffer_bytes(fsdp_block_params(shape, t, layout.ep), shape.layer_norm_params, precision,
                                           layout.strategy, layout.dp)
    return MemoryEstimate.with_margin(
        layout.strategy, layout.world, weights=weights, gradients=grads, optimizer=optim,
        activations=acts, buffers=buffers, margin=margin,
    )


def estimate_memory(
    shape: Shape,
    micro_batch: int,
    precision: Precision = "bf16",
    strategy: Strategy = "ddp",
    workers: int = 1,
    checkpointing: bool = False,
    margin: float = 0.10,
    layout: Layout = "torch",
    *,
    attention: AttentionMemory = "fused",
    device: MemoryDevice = "cuda",
) -> MemoryEstimate:
    """Memory one of ``workers`` data-parallel workers needs (no tensor or pipeline parallelism):
    :func:`memory_per_rank` of that layout, with full recomputation for ``checkpointing``.

    ``margin`` is the fraction added for allocator fragmentation and communication buffers;
    ``layout`` chooses between the ZeRO paper's byte counts and this trainer's (see
    :func:`scaling.accounting.model_state_bytes`).
    """
    plan = ParallelLayout(dp=workers, strategy=strategy, micro_batch=micro_batch,
                          recompute="full" if checkpointing else "none")
    return memory_per_rank(shape, plan, precision, margin, layout, attention=attention, device=device)
