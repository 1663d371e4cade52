"""Communication and memory per rank of a parallel layout (data x tensor x pipeline, ZeRO 0-3).

Torch-free, reusing :mod:`scaling.accounting`'s shapes and byte conventions, so the planner can
compare layouts on machines without torch: :func:`step_traffic` (each collective of a step),
:func:`collective_time` / :func:`step_comm_time` (alpha-beta times), :func:`memory_per_rank`.
The model and its sources: docs/reference/internals.md ("Communication model").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from scaling.accounting import (
    STATE_BYTES,
    STRATEGIES,
    Layout,
    MemoryEstimate,
    Precision,
    Shape,
    Strategy,
    compute_bytes,
    fsdp_block_buffer_bytes,
    gather_bytes,
    model_state_bytes,
)

Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather", "send_recv"
]
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather", "send_recv"
)
Group = Literal["dp", "tp", "pp"]
Library = Literal["nccl", "gloo"]
LIBRARIES: tuple[str, ...] = ("nccl", "gloo")
Schedule = Literal["gpipe", "1f1b", "interleaved"]
SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b", "interleaved")
#: The trainer's schedule names (``execution.pp_schedule``) as this model's (schedule, model
#: chunks per pipeline rank): the one place the two namings meet (the trainer's interleaved
#: schedule runs two chunks per rank).
TRAINER_SCHEDULES: dict[str, tuple[Schedule, int]] = {
    "1f1b": ("1f1b", 1),
    "gpipe": ("gpipe", 1),
    "interleaved_1f1b": ("interleaved", 2),
}
Recompute = Literal["none", "selective", "full"]
RECOMPUTES: tuple[str, ...] = ("none", "selective", "full")
#: Attention kernels as memory tells them apart: ``fused`` (flash-attn, SDPA's flash and
#: memory-efficient kernels, the CPU's SDPA: what this trainer runs) keeps no s x s scores;
#: ``math`` (SDPA's math fallback, plain softmax attention) keeps them.
AttentionMemory = Literal["fused", "math"]
ATTENTION_MEMORY: tuple[str, ...] = ("fused", "math")
#: Where the kernels run, as far as memory goes: the CPU's RMSNorm keeps more for backward.
MemoryDevice = Literal["cuda", "cpu"]
#: Bytes per logit at the step's peak, the backward of the FP32 log-softmax in any precision
#: (see :func:`loss_activation_bytes`; measured by ``benchmarks/bench_memory.py``).
LOGIT_BYTES = 12.0


# -- collectives ------------------------------------------------------------------------


def wire_bytes(kind: str, payload: float, n: int) -> float:
    """Bytes one rank sends (and receives) for one collective on a payload of ``payload`` bytes.

    Ring all-reduce 2(n-1)K/n; all-gather, reduce-scatter, scatter and gather (n-1)K/n (at the
    root, the busiest rank); broadcast and reduce K (pipelined); point-to-point K. Zero for n = 1.
    """
    _check_kind(kind)
    if n < 1:
        raise ValueError(f"group size must be at least 1, got {n}")
    if n == 1 and kind != "send_recv":
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) * payload / n
    if kind in ("all_gather", "reduce_scatter", "scatter", "gather"):
        return (n - 1) * payload / n
    return float(payload)  # broadcast, reduce, send_recv


def latency_steps(kind: str, n: int, library: Library = "nccl") -> float:
    """Message steps (each paying the latency alpha) of one collective on ``n`` ranks.

    ``nccl`` (the textbook algorithms): ring all-reduce 2(n-1); ring all-gather / reduce-scatter
    and linear scatter / gather (n-1); binomial-tree broadcast and reduce ceil(log2 n);
    point-to-point 1. ``gloo`` (PyTorch's ProcessGroupGloo on the gloo library) differs where its
    algorithms do: its all-gather passes each chunk in two halves, 2(n-1); its reduce-scatter is
    a whole all-reduce, 2(n-1); its reduce is a ring reduce-scatter then a gather at the root, n;
    its scatter and gather post every message from the root at once, 1.
    """
    _check_kind(kind)
    _check_library(library)
    if n == 1:
        return 0.0 if kind != "send_recv" else 1.0
    if library == "gloo":
        if kind in ("all_reduce", "reduce_scatter", "all_gather"):
            return 2.0 * (n - 1)
        if kind == "reduce":
            return float(n)
        if kind in ("scatter", "gather"):
            return 1.0
    if kind == "all_reduce":
        return 2.0 * (n - 1)
    if kind in ("all_gather", "reduce_scatter", "scatter", "gather"):
        return float(n - 1)
    if kind in ("broadcast", "reduce"):
        return float(math.ceil(math.log2(n)))
    return 1.0


def bandwidth_bytes(kind: str, payload: float, n: int, library: Library = "nccl") -> float:
    """Bytes on the critical path of one collective: what beta multiplies in the alpha-beta model.

    As :func:`wire_bytes`, except that a binomial-tree broadcast or reduce passes the whole
    payload once per tree level (ceil(log2 n) times). Under ``gloo`` (PyTorch's
    ProcessGroupGloo on the gloo library): reduce is a ring reduce-scatter followed by a gather
    at the root, 2(n-1)K/n through the root; reduce-scatter all-reduces the whole input and keeps
    its own chunk, 2(n-1)K/n like all-reduce.
    """
    if n > 1 and library == "gloo" and kind in ("reduce", "reduce_scatter"):
        return 2.0 * (n - 1) * payload / n
    if kind in ("broadcast", "reduce") and n > 1:
        return latency_steps(kind, n, library) * payload
    return wire_bytes(kind, payload, n)


def copy_bytes(kind: str, payload: float, n: int, library: Library = "nccl") -> float:
    """Bytes a rank copies in its own memory around one collective (what ``Link.copy_beta`` multiplies).

    Zero under ``nccl``. ProcessGroupGloo gathers into a fresh flat buffer and copies it out
    (all-gather: K; gather: K at the root), and its reduce-scatter clones the input before the
    all-reduce and copies its chunk out (K + K/n).
    """
    _check_kind(kind)
    _check_library(library)
    if library != "gloo" or n == 1:
        return 0.0
    if kind in ("all_gather", "gather"):
        return float(payload)
    if kind == "reduce_scatter":
        return payload + payload / n
    return 0.0


def reduce_bytes(kind: str, payload: float, n: int, library: Library = "nccl") -> float:
    """Bytes a rank adds into its buffer in one collective (what ``Link.reduce_beta`` multiplies).

    The gamma term of Thakur, Rabenseifner and Gropp (2005). Zero under ``nccl``, whose kernels
    reduce as they copy, overlapped with the transfer. Under ``gloo`` a rank reduces each chunk
    it receives before passing it on: (n-1)K/n in a ring all-reduce, in a reduce-scatter (a whole
    all-reduce) and in a reduce (a ring reduce-scatter, then a gather at the root).
    """
    _check_kind(kind)
    _check_library(library)
    if library != "gloo" or n == 1 or kind not in ("all_reduce", "reduce_scatter", "reduce"):
        return 0.0
    return (n - 1) * payload / n


def host_share(kind: str, n: int, cores: int | None, term: Literal["latency", "bytes"] = "bytes") -> float:
    """How many times slower a collective's ``term`` runs when its ``n`` ranks share ``cores`` cores of one host.

    A rank copying, reducing or waking up needs a core, so a phase in which ``a`` ranks work at
    once takes max(1, a / cores) times as long. Every rank wakes up for every collective, so the
    latency term shares n / cores. For the bytes, rings (all-reduce, all-gather, reduce-scatter,
    reduce) keep all ``n`` ranks busy; a binomial-tree broadcast doubles its busy ranks each
    level (the mean over levels); scatter, gather and point-to-point are bound by one rank (the
    root, or the sender), so sharing costs their bytes nothing. ``None``: a core or device per rank.
    """
    _check_kind(kind)
    if cores is None or n <= cores:
        return 1.0
    if term == "latency":
        return n / cores
    if kind in ("scatter", "gather", "send_recv"):
        return 1.0
    if kind == "broadcast":
        levels = math.ceil(math.log2(n))
        busy = [2 * min(2**level, n - 2**level) for level in range(levels)]
        return sum(max(1.0, b / cores) for b in busy) / levels
    return n / cores


def _check_library(library: str) -> None:
    if library not in LIBRARIES:
        raise ValueError(f"unknown collective library {library!r} (use one of {LIBRARIES})")


def _check_kind(kind: str) -> None:
    if kind not in COLLECTIVES:
        raise ValueError(f"unknown collective {kind!r} (use one of {COLLECTIVES})")


@dataclass(frozen=True)
class Link:
    """One interconnect for the alpha-beta model: ``alpha`` s per message step, ``beta`` s per byte.

    Figures in :data:`LINKS` are round numbers from vendor specifications (per-direction bandwidth
    of one GPU's link; latency of a small NCCL collective step); calibrate with
    ``benchmarks/bench_collectives.py`` before trusting absolute times.
    """

    name: str
    alpha: float
    beta: float
    #: seconds per byte of a rank's own memory copies around a collective (:func:`copy_bytes`)
    copy_beta: float = 0.0
    #: whose algorithms run over the link: ``nccl`` (rings and trees) or ``gloo``
    library: Library = "nccl"
    #: seconds per byte a rank reduces (:func:`reduce_bytes`): the reduction's arithmetic
    reduce_beta: float = 0.0

    @classmethod
    def from_bandwidth(
        cls, name: str, alpha: float, bytes_per_second: float, copy_beta: float = 0.0, library: Library = "nccl",
        reduce_beta: float = 0.0,
    ) -> "Link":
        return cls(name, alpha, 1.0 / bytes_per_second, copy_beta, library, reduce_beta)


LINKS: dict[str, Link] = {
    "nvlink": Link.from_bandwidth("nvlink", 5e-6, 450e9),  # NVLink 4 (H100 SXM), per direction
    "pcie": Link.from_bandwidth("pcie", 10e-6, 25e9),  # PCIe Gen4 x16, achievable
    "infiniband": Link.from_bandwidth("infiniband", 10e-6, 50e9),  # NDR 400 Gb/s per GPU
    "roce": Link.from_bandwidth("roce", 15e-6, 25e9),  # 200 Gb/s RoCE per GPU
    # gloo over TCP loopback with its own algorithms, as bench_collectives fitted it on a 2-core host
    "loopback_gloo": Link.from_bandwidth("loopback_gloo", 155e-6, 2.6e9, copy_beta=0.26e-9, library="gloo",
                                         reduce_beta=0.59e-9),
}


def collective_time(kind: str, payload: float, n: int, link: Link, cores: int | None = None) -> float:
    """Seconds for one collective: alpha * steps + beta * bytes on the critical path + copy_beta *
    bytes copied locally + reduce_beta * bytes reduced, with the steps, bytes, copies and
    reductions of ``link.library``'s algorithms; times :func:`host_share` when the ``n`` ranks
    share ``cores`` cores of one host."""
    lib = link.library
    latency = link.alpha * latency_steps(kind, n, lib) * host_share(kind, n, cores, "latency")
    data = (link.beta * bandwidth_bytes(kind, payload, n, lib) + link.copy_beta * copy_bytes(kind, payload, n, lib)
            + link.reduce_beta * reduce_bytes(kind, payload, n, lib))
    return latency + data * host_share(kind, n, cores, "bytes")


# -- layouts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ParallelLayout:
    """How one run is laid out on ``dp * tp * pp`` ranks.

    ``strategy`` is the data-parallel strategy over ``dp`` (accounting's names). A step runs
    ``micro_batches`` micro-batches of ``micro_batch`` sequences on each data-parallel rank
    (gradient accumulation without pipelining; the pipeline's micro-batches with it).
    ``chunks`` is the number of model chunks per pipeline rank (``interleaved`` only).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    strategy: Strategy = "ddp"
    micro_batches: int = 1
    micro_batch: int = 1
    sequence_parallel: bool = False
    recompute: Recompute = "none"
    schedule: Schedule = "1f1b"
    chunks: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "micro_batches", "micro_batch", "chunks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r} (use one of {STRATEGIES})")
        if self.recompute not in RECOMPUTES:
            raise ValueError(f"unknown recompute {self.recompute!r} (use one of {RECOMPUTES})")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"unknown schedule {self.schedule!r} (use one of {SCHEDULES})")
        if self.chunks > 1 and self.schedule != "interleaved":
            raise ValueError("chunks > 1 needs the interleaved schedule")
        if self.sequence_parallel and self.tp == 1:
            raise ValueError("sequence_parallel needs tp > 1")

    @property
    def world(self) -> int:
        return self.dp * self.tp * self.pp

    def check(self, shape: Shape) -> None:
        """Raise ValueError when ``shape`` cannot be split this way (heads, MLP, layers)."""
        problem = shape.tp_problem(self.tp)
        if problem:
            raise ValueError(problem)
        if shape.n_layer % (self.pp * self.chunks):
            raise ValueError(f"pp*chunks={self.pp * self.chunks} must divide n_layer ({shape.n_layer})")


def bubble_fraction(pp: int, micro_batches: int, schedule: Schedule = "1f1b", chunks: int = 1) -> float:
    """Fraction of a pipelined step spent idle: (p-1) / (v*m + p-1).

    Narayanan et al. (2021, Sec. 2.2) give the bubble as (p-1)/m of the ideal time for GPipe
    and 1F1B, and (p-1)/(v*m) for the interleaved schedule with v chunks per rank; as a share
    of the whole step that is (p-1)/(v*m + p-1).
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r} (use one of {SCHEDULES})")
    v = chunks if schedule == "interleaved" else 1
    return (pp - 1) / (v * micro_batches + pp - 1)


# -- what each rank holds -----------------------------------------------------------------


def block_params_per_tp_rank(shape: Shape, tp: int) -> int:
    """One block's parameters on one tensor rank: matrices and column biases split, the rest kept.

    gpt2: two LayerNorms (4h) and the row-parallel output biases of attention and MLP (2h) are
    replicated; QKV (3h^2 + 3h), the output projection (h^2), the MLP (8h^2 + 4h) are split.
    llama: the RMSNorms are replicated, every matrix is split.
    """
    replicated = shape.layer_replicated_params
    split = shape.params_per_layer - replicated
    return split // tp + replicated


def params_per_rank(shape: Shape, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
    """Parameters one tensor rank of pipeline ``stage`` holds (before ZeRO sharding over dp).

    Blocks are split evenly over stages; the embeddings (and positions) sit on the first
    stage, the final norm and the output layer (an untied one, or a copy of the tied
    embedding) on the last. Equal to ``shape.params_total`` for tp = pp = 1.
    """
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} is outside 0..{pp - 1}")
    n = (shape.n_layer // pp) * block_params_per_tp_rank(shape, tp)
    if stage == 0:
        n += shape.params_input_embedding
    if stage == pp - 1:
        n += shape.params_final_norm + shape.params_output
        if pp > 1 and shape.tied:
            n += shape.vocab_size * shape.d_model  # the output layer's copy of the tied embedding
    return n


def cast_params_per_rank(shape: Shape, tp: int = 1, pp: int = 1, stage: int = 0) -> int:
    """Of :func:`params_per_rank`, those FSDP2 gathers in the compute dtype: the linear layers,
    weights and biases, which autocast casts: the blocks' and an untied output layer.

    The rest (norms, embeddings, a tied output layer, which is the token embedding) FSDP2
    gathers in FP32 (:func:`scaling.trainer.parallel.data_parallel.shard_as_autocast`).
    """
    if not 0 <= stage < pp:
        raise ValueError(f"stage {stage} is outside 0..{pp - 1}")
    n = (shape.n_layer // pp) * (block_params_per_tp_rank(shape, tp) - shape.layer_norm_params)
    if stage == pp - 1 and not shape.tied:
        n += shape.params_output
    return n


def gathered_bytes(params: int, kept: int, precision: Precision) -> float:
    """Bytes of ``params`` parameters as FSDP2 gathers them, ``kept`` of them (norms, embeddings) in FP32."""
    return float(gather_bytes(precision) * (params - kept) + 4 * kept)


# -- traffic ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Traffic:
    """One collective a step issues: ``calls`` times on a payload of ``payload`` bytes, over ``n`` ranks."""

    group: Group
    kind: Collective
    n: int
    payload: float
    calls: float
    what: str

    @property
    def bytes_per_step(self) -> float:
        """Payload bytes per step (the sum of the tensors handed to the collective)."""
        return self.calls * self.payload

    @property
    def wire_bytes_per_step(self) -> float:
        """Bytes this rank sends per step for it (see :func:`wire_bytes`)."""
        return self.calls * wire_bytes(self.kind, self.payload, self.n)


def dp_traffic(
    params: int,
    strategy: Strategy,
    dp: int,
    precision: Precision,
    micro_batches: int = 1,
    kept: int = 0,
    layout: Layout = "torch",
) -> list[Traffic]:
    """Data-parallel collectives of one step for a rank holding ``params`` parameters.

    Gradients are synchronised once per step (accumulation skips the others), except under
    FSDP2 (ZeRO-2/3 of ``layout="torch"``), which reduce-scatters every micro-batch's gradients
    so that they stay sharded (``scaling.trainer.parallel.data_parallel.Parallel.no_sync``). ``layout="zero"``
    counts the ZeRO paper's (Rajbhandari et al. 2020, Sec. 7): DDP all-reduces 16-bit gradients;
    ZeRO-1/2 reduce-scatter them and all-gather the updated 16-bit parameters (same 2(n-1)/n
    volume); ZeRO-3 all-gathers parameters in forward and again in backward (1.5x DDP).
    ``layout="torch"`` counts what this trainer issues: DDP and ZeRO-1 all-reduce FP32
    gradients, and ZeroRedundancyOptimizer then broadcasts each updated FP32 parameter from its
    owner; ZeRO-2/3 (FSDP2) all-gather the parameters every micro-batch forward, ZeRO-3 again in
    backward (the trainer reshards every unit, the root included), and reduce-scatter FP32
    gradients every micro-batch. They gather what autocast casts in :func:`gather_bytes` and the ``kept`` others
    (norms, embeddings; :func:`cast_params_per_rank`) in FP32, as autocast computes with them.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r} (use one of {STRATEGIES})")
    if dp == 1 or strategy == "single":
        return []
    weight_b, grad_b, _ = STATE_BYTES[layout][precision]
    m = micro_batches
    if layout == "zero":
        if strategy == "ddp":
            return [Traffic("dp", "all_reduce", dp, grad_b * params, 1, "gradients")]
        out = [Traffic("dp", "reduce_scatter", dp, grad_b * params, 1, "gradients")]
        if strategy in ("zero1", "zero2"):
            return out + [Traffic("dp", "all_gather", dp, weight_b * params, 1, "updated parameters")]
        return out + [
            Traffic("dp", "all_gather", dp, weight_b * params, m, "parameters, forward"),
            Traffic("dp", "all_gather", dp, weight_b * params, m, "parameters, backward"),
        ]
    if strategy == "ddp":
        return [Traffic("dp", "all_reduce", dp, grad_b * params, 1, "gradients")]
    if strategy == "zero1":
        return [
            Traffic("dp", "all_reduce", dp, grad_b * params, 1, "gradients"),
            Traffic("dp", "broadcast", dp, weight_b * params, 1, "updated parameters from their owners"),
        ]
    gathered = gathered_bytes(params, kept, precision)
    out = [
        Traffic("dp", "all_gather", dp, gathered, m, "parameters, forward"),
        Traffic("dp", "reduce_scatter", dp, grad_b * params, m, "gradients, every micro-batch"),
    ]
    if strategy == "zero3":
        out.append(Traffic("dp", "all_gather", dp, gathered, m, "parameters, backward"))
    return out


def tp_traffic(shape: Shape, layout: ParallelLayout, precision: Precision) -> list[Traffic]:
    """Tensor-parallel collectives of one step on one rank (Megatron; Korthikanti et al. 2022, Sec. 4.2.2).

    Per block and micro-batch: 2 all-reduces of b*s*h activations in forward and 2 in backward
    (plus the forward's 2 again when full recomputation replays the block); with sequence
    parallelism each becomes an all-gather and a reduce-scatter of the same b*s*h tensor.
    """
    if layout.tp == 1:
        return []
    act = compute_bytes(precision) * layout.micro_batch * shape.context * shape.d_model
    layers = shape.n_layer // layout.pp
    forward_passes = 2 if layout.recompute == "full" else 1
    per_pass = 2 * layers * layout.micro_batches
    calls = {"forward": per_pass * forward_passes, "backward": per_pass}
    out: list[Traffic] = []
    for phase, n_calls in calls.items():
        if layout.sequence_parallel:
            out.append(Traffic("tp", "all_gather", layout.tp, act, n_calls, f"activations, {phase}"))
            out.append(Traffic("tp", "reduce_scatter", layout.tp, act, n_calls, f"activations, {phase}"))
        else:
            out.append(Traffic("tp", "all_reduce", layout.tp, act, n_calls, f"activations, {phase}"))
    return out


def pp_traffic(shape: Shape, layout: ParallelLayout, precision: Precision) -> list[Traffic]:
    """Pipeline point-to-point traffic of one step on the first stage, and the tied-embedding sync.

    A micro-batch's b*s*h activations cross each of the v*pp - 1 stage boundaries forward and
    their gradient backward (v model chunks per rank under the interleaved schedule, 1
    otherwise). The first rank runs stages 0, pp, ..., (v-1)*pp: it sends forward from each of
    its v stages and receives forward into the v - 1 that are not the first, and the reverse
    backward. The residual stream crosses in FP32 whatever the compute precision (it stays FP32
    inside a stage too, as under autocast on one process). With sequence parallelism the
    boundary tensor is already split over the tensor ranks (/tp). The first and last stage
    all-reduce the tied embedding's gradient (vocab*h) once per step.
    """
    if layout.pp == 1:
        return []
    act = compute_bytes("fp32") * layout.micro_batch * shape.context * shape.d_model
    if layout.sequence_parallel:
        act /= layout.tp
    v = layout.chunks
    m = layout.micro_batches
    grad_b = STATE_BYTES["torch"][precision][1]
    out = [
        Traffic("pp", "send_recv", 2, act, v * m, "activations sent, forward"),
        Traffic("pp", "send_recv", 2, act, v * m, "activation gradients received, backward"),
    ]
    if v > 1:
        out += [
            Traffic("pp", "send_recv", 2, act, (v - 1) * m, "activations received, forward"),
            Traffic("pp", "send_recv", 2, act, (v - 1) * m, "activation gradients sent, backward"),
        ]
    out.append(Traffic("pp", "all_reduce", 2, grad_b * shape.vocab_size * shape.d_model, 1, "tied embedding gradient"))
    return out


def step_traffic(
    shape: Shape, layout: ParallelLayout, precision: Precision = "bf16", mem_layout: Layout = "torch"
) -> list[Traffic]:
    """Every collective one step issues on the busiest rank (the first stage's tensor rank 0)."""
    layout.check(shape)
    params = params_per_rank(shape, layout.tp, layout.pp, stage=0)
    kept = params - cast_params_per_rank(shape, layout.tp, layout.pp, stage=0)
    traffic = dp_traffic(params, layout.strategy, layout.dp, precision, layout.micro_batches, kept, mem_layout)
    return traffic + tp_traffic(shape, layout, precision) + pp_traffic(shape, layout, precision)


# -- time ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """Where ranks sit: ``gpus_per_node`` per node, ``intra`` and ``inter`` links between them.

    Ranks are placed tensor-innermost, then data, then pipeline (Megatron's order), so the
    tensor group stays inside a node; the data group crosses nodes when tp*dp exceeds a node,
    the pipeline group when tp*dp*pp does.
    """

    gpus_per_node: int = 8
    intra: Link = field(default_factory=lambda: LINKS["nvlink"])
    inter: Link = field(default_factory=lambda: LINKS["infiniband"])

    def link(self, group: str, layout: ParallelLayout) -> Link:
        span = {"tp": layout.tp, "dp": layout.tp * layout.dp, "pp": layout.world}[group]
        return self.intra if span <= self.gpus_per_node else self.inter


def step_comm_time(
    shape: Shape, layout: ParallelLayout, cluster: Cluster, precision: Precision = "bf16"
) -> dict[str, float]:
    """Seconds of communication per step by group (``dp``, ``tp``, ``pp``), not overlapped with compute.

    Raises ValueError when the tensor group does not fit in one node.
    """
    if layout.tp > cluster.gpus_per_node:
        raise ValueError(f"tp={layout.tp} does not fit a node of {cluster.gpus_per_node} GPUs")
    out = {"dp": 0.0, "tp": 0.0, "pp": 0.0}
    for t in step_traffic(shape, layout, precision):
        out[t.group] += t.calls * collective_time(t.kind, t.payload, t.n, cluster.link(t.group, layout))
    return out


# -- memory -------------------------------------------------------------------------------


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
      to the FP32 embedding), its FP32 1/rms (4; LayerNorm's mean too, 8); on the CPU llama's
      composite RMSNorm also its normalized input (4h; CUDA's fused one keeps only the input);
      and its output as the next linear layers keep it:
      under autocast one c-byte copy per matrix product that reads it (gpt2: one, the fused QKV and
      the first MLP matrix; llama: one where its q, k, v and its gate and up are ``joined`` into one
      product each, ``scaling.trainer.families.llama.fused_projections``, which they are without
      tensor parallelism, else three and two), in FP32 the output itself (4h);
    * llama's qk-norm: the FP32 queries and keys it normalizes (4(h + kv)), on the CPU their
      normalized copy too, and a FP32 1/rms per head (4(a + kv heads));
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
    llama = shape.family == "llama"

    def norm(readers: int) -> float:
        kept = 4.0 * h * (2 if llama and device == "cpu" else 1) + (4.0 if llama else 8.0)  # and 1/rms (and the mean)
        return kept + (c * h * readers if autocast else 4.0 * h)

    if joined is None:
        joined = autocast and tp == 1
    whole = norm(1 if joined or not llama else 3) + norm(1 if joined or not llama else 2)
    kv = shape.kv_heads * shape.head_dim
    # CUDA in FP32 repeats grouped key/value heads for the fused kernel (attention.expands_groups)
    kept_kv = h if device == "cuda" and not autocast and attention == "fused" else kv
    split = c * (2 * h + 2 * kept_kv) + (4 if llama else 2) * c * shape.hidden
    if llama and shape.qk_norm:  # FP32 input (and on the CPU its normalized copy), 1/rms per head
        split += 4.0 * (h + kv) * (2 if device == "cpu" else 1) + 4.0 * (shape.n_head + shape.kv_heads)
    if attention == "fused":
        split += 4.0 * shape.n_head
    elif recompute != "selective":
        split += (4 + (c if autocast else 0)) * shape.n_head * s
    rope = 2.0 * c * s * shape.head_dim if llama else 0.0
    if sequence_parallel:
        return tokens * (whole + split) / t + rope
    return tokens * (whole + split / t) + rope


def loss_activation_bytes(shape: Shape, micro_batch: int, precision: Precision = "bf16",
                          device: MemoryDevice = "cuda") -> float:
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
    llama = shape.family == "llama"
    norm = 4.0 * h * (2 if llama and device == "cpu" else 1) + (4.0 if llama else 8.0)
    norm += c * h if precision != "fp32" else 4.0 * h
    return tokens * (norm + LOGIT_BYTES * shape.vocab_size)


def autocast_copy_bytes(shape: Shape, layout: ParallelLayout, precision: Precision) -> float:
    """The 16-bit copies of the weight matrices autocast makes in forward, which the linear layers
    keep for backward (the biases' copies they do not keep): the first stage's blocks (their
    tensor rank's part) and, on the one stage of an unpipelined run, the output layer. Under full
    recomputation too: autocast caches every copy until its context exits, after the loss. None in
    FP32, nor where FSDP2 gathers the matrices in bf16 already."""
    if precision == "fp32" or (layout.strategy in ("zero2", "zero3") and layout.dp > 1 and gather_bytes(precision) == 2):
        return 0.0
    params = (shape.n_layer // layout.pp) * (shape.layer_matmul_params // layout.tp)
    if layout.pp == 1:
        params += shape.vocab_size * shape.d_model
    return float(compute_bytes(precision) * params)


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
    pipeline rank holds, sharded over ``dp`` by the ZeRO stage. Activations: the first stage's
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
    params = params_per_rank(shape, layout.tp, layout.pp, stage=0)
    kept = params - cast_params_per_rank(shape, layout.tp, layout.pp, stage=0)
    weights, grads, optim = model_state_bytes(params, precision, layout.strategy, layout.dp, mem_layout)
    if mem_layout == "torch" and layout.strategy == "zero2" and layout.dp > 1:
        # the gathered copy ZeRO-2 holds has its norms and embeddings in FP32 (see dp_traffic)
        weights += gathered_bytes(params, kept, precision) - gather_bytes(precision) * params
    if cpu_offload and layout.strategy in ("zero2", "zero3") and layout.dp > 1:
        sharded = model_state_bytes(params, precision, "zero3", layout.dp, mem_layout)[0]
        weights = weights - sharded  # ZeRO-2's gathered copy stays on the device
        grads = optim = 0.0
    b, t, sp = layout.micro_batch, layout.tp, layout.sequence_parallel
    kinds = {"precision": precision, "attention": attention, "device": device}
    per_layer = layer_activation_bytes(shape, b, t, sp, layout.recompute, **kinds)  # type: ignore[arg-type]
    layers = shape.n_layer // layout.pp
    acts = in_flight(layout) * layers * per_layer
    if layout.recompute == "full":
        acts += layer_activation_bytes(shape, b, t, sp, "none", **kinds)  # type: ignore[arg-type]
    if layout.pp == 1:
        acts += loss_activation_bytes(shape, b, precision, device)
    buffers = autocast_copy_bytes(shape, layout, precision)
    if layout.strategy in ("zero2", "zero3") and layout.dp > 1 and layout.pp > 1:
        # torch's PipelineStage defers FSDP2's reduce-scatter and resharding to the end of the
        # step: after its first backward a stage keeps its parameters gathered and accumulates
        # unsharded gradients, both in the dtype they are gathered in, until every micro-batch is done.
        buffers += 2.0 * gathered_bytes(params, kept, precision)
    elif layout.strategy in ("zero2", "zero3") and layout.dp > 1:
        # one tensor rank's block gathered and its gradients on their way to the reduce-scatter
        buffers += fsdp_block_buffer_bytes(block_params_per_tp_rank(shape, t), shape.layer_norm_params, precision,
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
