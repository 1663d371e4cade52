"""The communication model of a parallel layout (data x tensor x pipeline, ZeRO 0-3, experts over
the data-parallel ranks): what each collective of a step moves and how long it takes.

Torch-free, on :mod:`scaling.accounting`'s shapes, byte conventions and layouts
(:class:`~scaling.accounting.ParallelLayout`, what each rank holds), so the planner can compare
layouts on machines without torch: :func:`step_traffic` (each collective of a step),
:func:`collective_time` / :func:`step_comm_time` (alpha-beta times), :func:`bubble_fraction`
(the pipeline's idle share). The memory a layout needs is :mod:`scaling.memory`'s. The model and
its sources: docs/reference/internals.md ("Communication model").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from scaling.accounting import (
    SCHEDULES,
    STATE_BYTES,
    STRATEGIES,
    Layout,
    ParallelLayout,
    Precision,
    Schedule,
    Shape,
    Strategy,
    compute_bytes,
    data_parallel_params,
    gather_bytes,
    gathered_bytes,
)

Collective = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather", "send_recv",
    "all_to_all",
]
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "scatter", "gather", "send_recv",
    "all_to_all",
)
Group = Literal["dp", "tp", "pp", "ep"]
#: The groups a step's collectives run in: data, tensor, pipeline and expert parallel.
GROUPS: tuple[str, ...] = ("dp", "tp", "pp", "ep")
Library = Literal["nccl", "gloo"]
LIBRARIES: tuple[str, ...] = ("nccl", "gloo")


# -- collectives ------------------------------------------------------------------------


def wire_bytes(kind: str, payload: float, n: int) -> float:
    """Bytes one rank sends (and receives) for one collective on a payload of ``payload`` bytes.

    Ring all-reduce 2(n-1)K/n; all-gather, reduce-scatter, scatter and gather (n-1)K/n (at the
    root, the busiest rank); all-to-all (n-1)K/n (the rows for the other ranks: K spread evenly over
    the n ranks, as balanced routing spreads an MoE's tokens); broadcast and reduce K (pipelined);
    point-to-point K. Zero for n = 1.
    """
    _check_kind(kind)
    if n < 1:
        raise ValueError(f"group size must be at least 1, got {n}")
    if n == 1 and kind != "send_recv":
        return 0.0
    if kind == "all_reduce":
        return 2.0 * (n - 1) * payload / n
    if kind in ("all_gather", "reduce_scatter", "scatter", "gather", "all_to_all"):
        return (n - 1) * payload / n
    return float(payload)  # broadcast, reduce, send_recv


def latency_steps(kind: str, n: int, library: Library = "nccl") -> float:
    """Message steps (each paying the latency alpha) of one collective on ``n`` ranks.

    ``nccl`` (the textbook algorithms): ring all-reduce 2(n-1); ring all-gather / reduce-scatter,
    linear scatter / gather and the pairwise-exchange all-to-all (n-1); binomial-tree broadcast
    and reduce ceil(log2 n); point-to-point 1 (gloo's all-to-all exchanges pairwise too). ``gloo`` (PyTorch's ProcessGroupGloo on the gloo library) differs where its
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
    if kind in ("all_gather", "reduce_scatter", "scatter", "gather", "all_to_all"):
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


def ep_traffic(shape: Shape, layout: ParallelLayout, precision: Precision) -> list[Traffic]:
    """Expert-parallel all-to-alls of one step on one rank (GShard's dispatch and combine;
    ``scaling.trainer.parallel.expert_parallel``).

    Per MoE layer (the first ``n_dense_layers`` have none) and micro-batch, over the ``ep`` ranks:
    in forward the tokens per expert (``n_experts`` int64 counts), the b*s*top_k routed copies of the
    norm's output dispatched to their experts' ranks (d_model values each, in FP32: the residual
    stream's norm keeps FP32 under autocast) and the experts' outputs combined back (in the compute
    dtype); in backward the same two exchanges reversed, the outputs' gradients (compute dtype) and
    the dispatched copies' (FP32). Full recomputation replays the forward's three. The payload K is
    what a rank hands over: its own copies, as many as it receives under balanced routing.
    """
    if layout.ep == 1:
        return []
    layers = max(0, shape.n_layer // layout.pp - shape.n_dense_layers)
    assert shape.top_k is not None and shape.n_experts is not None
    copies = layout.micro_batch * shape.context * shape.top_k * shape.d_model
    fp32, c = compute_bytes("fp32"), compute_bytes(precision)
    forward = layers * layout.micro_batches * (2 if layout.recompute == "full" else 1)
    backward = layers * layout.micro_batches
    ep = layout.ep
    return [
        Traffic("ep", "all_to_all", ep, 8.0 * shape.n_experts, forward, "tokens per expert, forward"),
        Traffic("ep", "all_to_all", ep, fp32 * copies, forward, "routed tokens dispatched, forward"),
        Traffic("ep", "all_to_all", ep, c * copies, forward, "experts' outputs combined, forward"),
        Traffic("ep", "all_to_all", ep, c * copies, backward, "outputs' gradients returned, backward"),
        Traffic("ep", "all_to_all", ep, fp32 * copies, backward, "routed tokens' gradients returned, backward"),
    ]


def step_traffic(
    shape: Shape, layout: ParallelLayout, precision: Precision = "bf16", mem_layout: Layout = "torch"
) -> list[Traffic]:
    """Every collective one step issues on the busiest rank (the first stage's tensor rank 0).

    Data parallelism synchronizes what :func:`scaling.accounting.data_parallel_params` counts: under
    expert parallelism not the rank's own experts, whose gradients the all-to-alls already sum."""
    layout.check(shape)
    params, kept = data_parallel_params(shape, layout.tp, layout.pp, stage=0, ep=layout.ep)
    traffic = dp_traffic(params, layout.strategy, layout.dp, precision, layout.micro_batches, kept, mem_layout)
    return traffic + tp_traffic(shape, layout, precision) + pp_traffic(shape, layout, precision) + ep_traffic(
        shape, layout, precision)


# -- time ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """Where ranks sit: ``gpus_per_node`` per node, ``intra`` and ``inter`` links between them.

    Ranks are placed tensor-innermost, then data, then pipeline (Megatron's order), so the
    tensor group stays inside a node; the data group crosses nodes when tp*dp exceeds a node,
    the expert group (data-parallel ranks) when tp*ep does, the pipeline group when tp*dp*pp does.
    """

    gpus_per_node: int = 8
    intra: Link = field(default_factory=lambda: LINKS["nvlink"])
    inter: Link = field(default_factory=lambda: LINKS["infiniband"])

    def link(self, group: str, layout: ParallelLayout) -> Link:
        span = {"tp": layout.tp, "dp": layout.tp * layout.dp, "ep": layout.tp * layout.ep, "pp": layout.world}[group]
        return self.intra if span <= self.gpus_per_node else self.inter


def step_comm_time(
    shape: Shape, layout: ParallelLayout, cluster: Cluster, precision: Precision = "bf16"
) -> dict[str, float]:
    """Seconds of communication per step by group (:data:`GROUPS`), not overlapped with compute.

    Raises ValueError when the tensor group does not fit in one node.
    """
    if layout.tp > cluster.gpus_per_node:
        raise ValueError(f"tp={layout.tp} does not fit a node of {cluster.gpus_per_node} GPUs")
    out = dict.fromkeys(GROUPS, 0.0)
    for t in step_traffic(shape, layout, precision):
        out[t.group] += t.calls * collective_time(t.kind, t.payload, t.n, cluster.link(t.group, layout))
    return out
