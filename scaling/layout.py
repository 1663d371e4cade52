"""Choosing a run's parallel layout: dp x tp x pp, ZeRO stage, micro-batches, pipeline schedule, and
for a routed family whether its experts are sharded over the data-parallel ranks (ep).

Torch-free, on :mod:`scaling.communication`, :mod:`scaling.memory` and :mod:`scaling.accounting`:
the planner calls it for every run whose strategy is ``auto``. The fastest layout that fits memory
per rank wins, with its communication counted as not overlapped (an upper bound); docs/reference/internals.md
("Layout search") gives the step-time model and why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional

from scaling.accounting import GIB, MemoryEstimate, Precision, Shape
from scaling.communication import (
    GROUPS,
    LINKS,
    Cluster,
    Traffic,
    bubble_fraction,
    collective_time,
    latency_steps,
    step_traffic,
)
from scaling.accounting import TRAINER_SCHEDULES, ParallelLayout
from scaling.memory import MemoryDevice, memory_per_rank

#: The trainer's schedule names (``resources.pp_schedule``) as the cost model's (schedule, chunks),
#: in the order that breaks ties.
SCHEDULES: dict[str, tuple[str, int]] = dict(TRAINER_SCHEDULES)
#: Data-parallel strategies, least sharding first (the tie-break order).
DP_STRATEGIES: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3")
#: With tensor parallelism the data-parallel dim is FSDP2 (``fully_shard``): DDP and
#: ZeroRedundancyOptimizer do not take tensor-parallel (DTensor) parameters. Pipeline stages are
#: plain modules, so every strategy wraps them.
TP_STRATEGIES: tuple[str, ...] = ("zero2", "zero3")
#: DDP all-reduces gradients in buckets of this size (torch's default ``bucket_cap_mb=25``).
DDP_BUCKET_BYTES = 25 * 2**20
#: Parameter tensors of one block (two LayerNorms, QKV, output projection, two MLP matrices,
#: each with its bias) and outside the blocks (token and position embeddings, final LayerNorm).
TENSORS_PER_BLOCK = 12
TENSORS_OUTSIDE = 4


@dataclass(frozen=True)
class Machine:
    """The cluster a run is laid out on: ``nodes`` of ``gpus_per_node`` ranks, and their links."""

    nodes: int = 1
    gpus_per_node: int = 8
    intra: str = "nvlink"
    inter: str = "infiniband"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise ValueError("nodes and gpus_per_node must be at least 1")
        for link in (self.intra, self.inter):
            if link not in LINKS:
                raise ValueError(f"unknown link {link!r} (use one of {', '.join(LINKS)})")

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def cluster(self) -> Cluster:
        return Cluster(self.gpus_per_node, LINKS[self.intra], LINKS[self.inter])

    @property
    def bandwidth_ratio(self) -> float:
        """How many times the intra-node link's bandwidth exceeds the inter-node link's."""
        return LINKS[self.inter].beta / LINKS[self.intra].beta


@dataclass(frozen=True)
class Request:
    """What one run needs laid out, and the fields the user fixed (None: the search chooses)."""

    shape: Shape
    precision: Precision
    workers: int
    sequences: int  # sequences per global batch
    flops_per_step: float  # real FLOPs of one optimizer step, all ranks together
    rate: float  # FLOP/s one rank achieves
    memory_limit_bytes: float
    machine: Machine = Machine()
    step_overhead_s: float = 0.0
    layer_overhead_s: float = 0.0  # fixed cost of one layer's forward + backward on one micro-batch
    checkpointing: bool = False
    cpu_offload: bool = False  # FSDP2 keeps the shards on the host (memory.memory_per_rank)
    tp: Optional[int] = None
    pp: Optional[int] = None
    schedule: Optional[str] = None
    strategy: Optional[str] = None
    micro_batch_size: Optional[int] = None
    ep: Optional[int] = None  # experts sharded over this many data-parallel ranks (None: searched)
    device: MemoryDevice = "cuda"  # where the kernels run, for what a block keeps (memory.layer_activation_bytes)


@dataclass(frozen=True)
class Candidate:
    """One layout with its memory per rank and estimated step time (seconds)."""

    layout: ParallelLayout
    schedule: str  # the trainer's name (resources.pp_schedule)
    memory: MemoryEstimate
    compute_s: float
    bubble_s: float
    comm_s: dict[str, float]
    overhead_s: float
    fits: bool

    @property
    def step_s(self) -> float:
        return self.compute_s + self.bubble_s + self.comm_total_s + self.overhead_s

    @property
    def comm_total_s(self) -> float:
        return sum(self.comm_s.values())

    @property
    def strategy(self) -> str:
        return self.layout.strategy

    def label(self) -> str:
        """``dp2 tp8 pp2 ddp 1f1b 512x1``: degrees (``ep4`` too under expert parallelism), strategy,
        schedule, micro-batches x sequences."""
        lay = self.layout
        parts = [f"dp{lay.dp}", f"tp{lay.tp}", f"pp{lay.pp}", *([f"ep{lay.ep}"] if lay.ep > 1 else []), lay.strategy]
        if lay.pp > 1:
            parts.append(self.schedule)
        parts.append(f"{lay.micro_batches}x{lay.micro_batch}")
        return " ".join(parts)

    def _order(self) -> tuple[float, ...]:
        lay = self.layout
        strat = DP_STRATEGIES.index(lay.strategy) if lay.strategy in DP_STRATEGIES else -1
        sched = list(SCHEDULES).index(self.schedule)
        return (self.step_s, lay.tp * lay.pp, lay.pp, lay.ep, strat, sched, -lay.micro_batch)


@dataclass(frozen=True)
class Reason:
    """Why one part of the layout was chosen: a short phrase for tables and a full sentence."""

    short: str
    long: str


@dataclass
class Choice:
    """The layouts a run could take (``options``) and the fastest that fits (None when none fits).

    Candidates are evaluated lazily and once (:meth:`candidate`); :meth:`fastest` skips every
    layout whose lower bound (its time without communication) already exceeds the best found.
    """

    request: Request
    options: list[tuple[ParallelLayout, str]]
    best: Optional[Candidate] = None
    reasons: list[Reason] = field(default_factory=list)
    _memo: dict[int, Candidate] = field(default_factory=dict, repr=False)

    def candidate(self, i: int) -> Candidate:
        c = self._memo.get(i)
        if c is None:
            lay, name = self.options[i]
            c = self._memo[i] = evaluate(self.request, lay, name)
        return c

    def where(self, pred: Callable[[ParallelLayout], bool]) -> list[int]:
        """Indices of the options whose layout satisfies ``pred``."""
        return [i for i, (lay, _) in enumerate(self.options) if pred(lay)]

    def fastest(self, indices: Optional[list[int]] = None) -> Optional[Candidate]:
        """The fastest option that fits among ``indices`` (default: all), ties to the simpler.

        Branch and bound: options are visited by their lower bound (:func:`lower_bound`), and
        the search stops once that bound exceeds the best step time found, which no later option
        can then beat. Exact: the bound never exceeds an option's step time.
        """
        pool = range(len(self.options)) if indices is None else indices
        order = sorted((lower_bound(self.request, self.options[i][0]), i) for i in pool)
        best: Optional[Candidate] = None
        for bound, i in order:
            if best is not None and bound > best.step_s:
                break
            c = self.candidate(i)
            if c.fits and (best is None or c._order() < best._order()):
                best = c
        return best

    @property
    def considered(self) -> list[Candidate]:
        """Every option, evaluated."""
        return [self.candidate(i) for i in range(len(self.options))]

    @property
    def feasible(self) -> list[Candidate]:
        return [c for c in self.considered if c.fits]

    def decision(self) -> Decision:
        assert self.best is not None, "no layout fits"
        return Decision(self.best, tuple(self.reasons), len(self.options), summary_line(self))

    @property
    def smallest(self) -> Candidate:
        """The candidate needing the least memory per rank (what an error reports)."""
        return min(self.considered, key=lambda c: c.memory.total_bytes)


@dataclass(frozen=True)
class Decision:
    """What a planned run keeps of its :class:`Choice`: the chosen layout and why (no alternatives)."""

    best: Candidate
    reasons: tuple[Reason, ...]
    considered: int
    summary: str


# -- enumeration ------------------------------------------------------------------------------


def divisors(n: int) -> list[int]:
    """The divisors of ``n``, ascending (in O(sqrt n): a plan may ask for a million workers)."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def split(sequences: int, dp: int, requested: Optional[int]) -> tuple[int, int]:
    """(micro-batch size, micro-batches) of the largest data-parallel share, as
    :func:`scaling.batching.micro_batches` splits it (in closed form: no list per micro-batch)."""
    largest = -(-sequences // dp)
    size = min(requested or largest, largest)
    m = -(-largest // size)
    return -(-largest // m), m


def _micro_batch_splits(req: Request, dp: int) -> list[tuple[int, int]]:
    """(size, count) of micro-batches to try on ``dp`` ranks: the user's size, or powers of two up
    to a rank's share."""
    if req.micro_batch_size is not None:
        return [split(req.sequences, dp, req.micro_batch_size)]
    share = -(-req.sequences // dp)
    sizes = {share}
    b = 1
    while b < share:
        sizes.add(b)
        b *= 2
    return sorted({split(req.sequences, dp, s) for s in sizes})


def _strategies(req: Request, dp: int, tp: int, pp: int) -> tuple[str, ...]:
    if req.workers == 1:
        return ("single",)
    if dp == 1:
        return (req.strategy,) if req.strategy else ("ddp",)  # nothing to shard over one rank
    if req.strategy:
        return (req.strategy,)
    return DP_STRATEGIES if tp == 1 else TP_STRATEGIES


def _expert_strategies(req: Request, dp: int, tp: int, pp: int) -> list[tuple[int, str]]:
    """(ep, strategy) pairs a layout of these degrees may take."""
    strategies = _strategies(req, dp, tp, pp)
    return [(ep, strategy) for ep in expert_degrees(req, dp, tp, pp) for strategy in strategies
            if not expert_parallel_problem(req.shape, ep, dp, tp, pp, strategy, req.precision)]


def shape_problem(shape: Shape, tp: int, pp: int, chunks: int = 1) -> Optional[str]:
    """Why ``shape`` cannot be split into tp tensor ranks and pp stages (of ``chunks`` each), or None."""
    problem = shape.tp_problem(tp)
    if problem:
        return problem
    if pp > 1 and not shape.family_spec.pipelines:
        return f"pp={pp}: family {shape.family!r} has no pipeline split"
    if shape.n_layer % (pp * chunks):
        stages = f"pp={pp}" + (f" x {chunks} chunks" if chunks > 1 else "")
        return f"{stages} does not divide n_layer ({shape.n_layer})"
    return None


#: The data-parallel strategies expert parallelism composes with: each shards (ZeRO) or replicates
#: (DDP) the rest of the model, and leaves a rank's own experts whole there, unreduced.
EP_STRATEGIES: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3")


def expert_parallel_problem(shape: Shape, ep: int, dp: int, tp: int, pp: int, strategy: str,
                            precision: str = "bf16") -> Optional[str]:
    """Why ``shape`` cannot shard its experts over ``ep`` ranks in this layout, or None: the one rule
    the search and the trainer's spec both apply (``scaling.trainer.parallel.expert_parallel``).

    The experts go over every data-parallel rank, under any data-parallel strategy (fp16: ZeRO-2/3)
    and beside tensor parallelism (which splits attention only: each tensor rank exchanges the same
    tokens with its own data-parallel column), not a pipeline."""
    if ep == 1:
        return None
    if not shape.family_spec.routed:
        return f"ep={ep}: family {shape.family!r} has no experts"
    if pp > 1:
        return (f"ep={ep} cannot be combined with pp={pp}: family {shape.family!r} has no pipeline split "
                "(the loop adds the router's loss and counts its load per micro-batch, which a pipeline "
                "schedule runs inside its stages)")
    if ep != dp:
        return f"ep={ep} must equal the data-parallel ranks ({dp}): the experts are sharded over all of them"
    if strategy not in (*EP_STRATEGIES, "auto"):
        return f"ep={ep} needs strategy {', '.join(EP_STRATEGIES)} or auto, not {strategy}"
    if precision == "fp16" and strategy in ("ddp", "zero1"):
        return (f"ep={ep} with fp16 needs strategy zero2 or zero3, not {strategy}: the loss scaler cannot unscale a "
                "rank's own experts (DTensor gradients) beside plain ones, nor outside ZeRO-1's groups; or use bf16")
    if shape.n_experts % ep:
        return f"ep={ep} does not divide n_experts ({shape.n_experts})"
    return None


def expert_degrees(req: Request, dp: int, tp: int, pp: int) -> list[int]:
    """The ``ep`` a layout of these degrees may take: the request's, else 1 and (for a routed family
    whose experts split evenly over them, without CPU offload, which a rank's own experts escape)
    every data-parallel rank."""
    if req.ep is not None:
        return [req.ep]
    if dp > 1 and not req.cpu_offload and not expert_parallel_problem(req.shape, dp, dp, tp, pp, "auto"):
        return [1, dp]
    return [1]


def layouts(req: Request) -> Iterator[tuple[ParallelLayout, str]]:
    """Every (layout, trainer schedule name) of ``req.workers`` ranks that the shape and batch allow."""
    for tp in divisors(req.workers):
        if (req.tp is not None and tp != req.tp) or req.machine.gpus_per_node % tp:
            continue  # a tensor-parallel group stays inside one node, and nodes hold whole groups
        for pp in divisors(req.workers // tp):
            if req.pp is not None and pp != req.pp:
                continue
            dp = req.workers // (tp * pp)
            if req.ep is not None and req.ep > 1 and (pp, dp) != (1, req.ep):
                continue  # experts parallel over every data-parallel rank, without a pipeline
            if req.sequences < dp or (pp > 1 and req.sequences % dp):
                continue  # a pipeline's ranks take equal shares (its buffers have one shape)
            names = ["1f1b"] if pp == 1 else [req.schedule] if req.schedule else list(SCHEDULES)
            for name in names:
                kind, chunks = SCHEDULES[name] if pp > 1 else ("1f1b", 1)
                if shape_problem(req.shape, tp, pp, chunks):
                    continue
                for ep, strategy in _expert_strategies(req, dp, tp, pp):
                    for b, m in _micro_batch_splits(req, dp):
                        if pp > 1 and b * m != req.sequences // dp:
                            continue  # a stage's micro-batches are equal
                        if chunks > 1 and m % pp:
                            continue  # the interleaved schedule runs micro-batches in rounds of pp
                        if pp > 1 and name == "1f1b" and m < pp:
                            continue  # 1F1B keeps every stage busy: at least one micro-batch per stage
                        yield ParallelLayout(
                            dp=dp, tp=tp, pp=pp, strategy=strategy,  # type: ignore[arg-type]
                            micro_batches=m, micro_batch=b,
                            recompute="full" if req.checkpointing else "none",
                            schedule=kind, chunks=chunks, ep=ep,  # type: ignore[arg-type]
                        ), name if pp > 1 else (req.schedule or "1f1b")


# -- evaluation -------------------------------------------------------------------------------


def messages(shape: Shape, layout: ParallelLayout, t: Traffic) -> int:
    """How many separate collectives the trainer issues for one data-parallel ``Traffic`` entry.

    :func:`scaling.communication.step_traffic` counts bytes per tensor handed over; the latency is paid
    per message: DDP all-reduces one bucket at a time, ZeroRedundancyOptimizer broadcasts each
    parameter tensor, FSDP2 gathers and reduces each unit (every block, and the root).
    """
    if t.group != "dp":
        return 1
    blocks = shape.n_layer // layout.pp
    if t.kind == "all_reduce":
        return max(1, math.ceil(t.payload / DDP_BUCKET_BYTES))
    if t.kind == "broadcast":
        return TENSORS_PER_BLOCK * blocks + TENSORS_OUTSIDE
    return blocks + 1  # FSDP2 units: one per block, and the root's


def comm_seconds(req: Request, layout: ParallelLayout) -> dict[str, float]:
    """Seconds of communication per step by group: :func:`scaling.communication.step_comm_time`'s alpha-beta
    times, plus the latency of every extra message of :func:`messages`."""
    cluster = req.machine.cluster
    links = {g: cluster.link(g, layout) for g in GROUPS}
    out = dict.fromkeys(GROUPS, 0.0)
    for t in step_traffic(req.shape, layout, req.precision):
        link = links[t.group]
        out[t.group] += t.calls * collective_time(t.kind, t.payload, t.n, link)
        if t.group == "dp":
            extra = messages(req.shape, layout, t) - 1
            out["dp"] += t.calls * extra * link.alpha * latency_steps(t.kind, t.n, link.library)
    return out


def _compute_and_bubble(req: Request, layout: ParallelLayout) -> tuple[float, float]:
    dispatch = req.layer_overhead_s * layout.micro_batches * (req.shape.n_layer // layout.pp)
    compute = req.flops_per_step / (req.rate * req.workers) + dispatch
    f = bubble_fraction(layout.pp, layout.micro_batches, layout.schedule, layout.chunks)
    return compute, compute * f / (1.0 - f)


def lower_bound(req: Request, layout: ParallelLayout) -> float:
    """A layout's step time without its communication: never more than :attr:`Candidate.step_s`
    (the same sums, in the same order, with communication's non-negative term as zero)."""
    compute, bubble = _compute_and_bubble(req, layout)
    return compute + bubble + 0.0 + req.step_overhead_s


def evaluate(req: Request, layout: ParallelLayout, schedule: str) -> Candidate:
    """Memory per rank and step time of one layout (no communication time when it does not fit:
    an infeasible layout is never timed against the others)."""
    memory = memory_per_rank(req.shape, layout, req.precision, device=req.device, cpu_offload=req.cpu_offload)
    fits = memory.total_bytes <= req.memory_limit_bytes
    compute, bubble = _compute_and_bubble(req, layout)
    comm = comm_seconds(req, layout) if fits else dict.fromkeys(GROUPS, math.nan)
    return Candidate(layout, schedule, memory, compute, bubble, comm, req.step_overhead_s, fits)


def choose(req: Request) -> Choice:
    """The layouts of ``req`` and the fastest that fits (see the module docstring), with reasons."""
    choice = Choice(req, list(layouts(req)))
    choice.best = choice.fastest()
    if choice.best is not None:
        choice.reasons = explain(choice)
    return choice


def no_layout_problem(req: Request) -> str:
    """Why no layout of ``req`` exists at all (no candidate to evaluate)."""
    if req.tp is not None and req.machine.gpus_per_node % req.tp:
        return (f"tp={req.tp} does not divide a node's {req.machine.gpus_per_node} ranks: a tensor-parallel "
                "group stays inside one node, and nodes hold whole groups")
    problem = shape_problem(req.shape, req.tp or 1, req.pp or 1, SCHEDULES[req.schedule or "1f1b"][1])
    if problem:
        return problem
    splits = [tp * pp for tp in divisors(req.workers) if not req.machine.gpus_per_node % tp
              and (req.tp is None or tp == req.tp) for pp in divisors(req.workers // tp)
              if (req.pp is None or pp == req.pp) and not shape_problem(req.shape, tp, pp)]
    if splits and req.sequences < req.workers // max(splits):
        return (f"{req.sequences} sequences per batch cannot feed {req.workers} workers: this shape splits over "
                f"tp*pp = {max(splits)} at most, leaving {req.workers // max(splits)} data-parallel ranks; "
                "raise batch_tokens or use fewer workers")
    return (f"no split of {req.workers} workers into dp*tp*pp suits this shape and batch "
            f"({req.sequences} sequences, tp dividing {req.machine.gpus_per_node} per node, "
            "a pipeline's ranks taking equal shares in equal micro-batches)")


# -- reasons ----------------------------------------------------------------------------------


def _seconds_against(alt_s: float, best_s: float) -> str:
    """"A s per step against B s", with the digits that tell them apart (or that they tie)."""
    for digits in (3, 4, 5, 6):
        a, b = f"{alt_s:.{digits}g}", f"{best_s:.{digits}g}"
        if a != b:
            return f"{a} s per step against {b} s"
    return f"the same {best_s:.3g} s per step (a tie, resolved toward fewer model-parallel ranks)"


def _faster(alt_s: float, best_s: float) -> str:
    """How much faster the chosen layout is than ``alt_s``: a factor, a percentage, or a tie."""
    r = alt_s / best_s
    if r >= 1.01:
        return f"{r:.2f}x faster than"
    return f"{100 * (r - 1):.2g}% faster than" if r > 1 else "ties with"


def _gib(c: Candidate) -> str:
    return f"{c.memory.total_gib:.3g} GiB"


def _bytes(n: float) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.3g} B"


def _wire(req: Request, c: Candidate, group: str) -> float:
    return sum(t.wire_bytes_per_step for t in step_traffic(req.shape, c.layout, req.precision) if t.group == group)


@dataclass
class _Why:
    """The reasons ``choice.best`` won, gathered dimension by dimension (see :func:`explain`)."""

    choice: Choice
    out: list[Reason] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.req, best = self.choice.request, self.choice.best
        assert best is not None
        self.best, self.lay = best, best.layout
        self.limit = f"{self.req.memory_limit_bytes / GIB:.3g} GiB"
        total = self.req.shape.params_total
        self.params = f"{total / 1e9:.3g}B params" if total >= 1e8 else f"{total / 1e6:.3g}M params"

    def others(self, pred: Callable[[ParallelLayout], bool]) -> list[int]:
        return self.choice.where(pred)

    def fastest(self, indices: list[int]) -> Optional[Candidate]:
        return self.choice.fastest(indices)

    def least(self, indices: list[int]) -> Candidate:
        return min((self.choice.candidate(i) for i in indices), key=lambda c: c.memory.total_bytes)

    def if_any(self, pred: Callable[[ParallelLayout], bool], short: str, detail: Callable[[Candidate], str]) -> None:
        """A reason against the fastest layout ``pred`` admits (``detail`` compares it), when one fits."""
        alt = self.fastest(self.others(pred))
        if alt is not None:
            self.out.append(Reason(short, detail(alt)))

    def tensor(self) -> None:
        """Tensor parallelism."""
        req, best, lay, m, limit, params = self.req, self.best, self.lay, self.req.machine, self.limit, self.params
        out = self.out
        if req.tp is None and req.workers > 1:
            if lay.tp > 1:
                alts = self.others(lambda x: x.tp < lay.tp)
                alt = self.fastest(alts)
                where = f"inside one node ({m.gpus_per_node} per node, {m.intra})"
                if alt is None and alts:
                    low = self.least(alts)
                    out.append(Reason(
                        f"tp={lay.tp}: tp<{lay.tp} needs {_gib(low)}",
                        f"tp={lay.tp} {where}: {params} do not fit a {limit} device at tp<{lay.tp} "
                        f"(least memory there: {_gib(low)} per rank with {low.label()})"))
                elif alt is not None:
                    out.append(Reason(
                        f"tp={lay.tp}: {_faster(alt.step_s, best.step_s)} tp={alt.layout.tp}",
                        f"tp={lay.tp} {where}: the best layout with tp={alt.layout.tp} ({alt.label()}) would take "
                        f"{_seconds_against(alt.step_s, best.step_s)}"))
            else:
                self.if_any(lambda x: x.tp > 1, "tp=1: TP all-reduces cost more", lambda alt: (
                    f"tp=1: tensor parallelism's activation all-reduces ({_bytes(_wire(req, alt, 'tp'))} per step "
                    f"for {alt.label()}) would cost more than they save ({_seconds_against(alt.step_s, best.step_s)})"))

    def pipeline(self) -> None:
        """Pipeline parallelism."""
        req, best, lay, m, limit = self.req, self.best, self.lay, self.req.machine, self.limit
        out = self.out
        if req.pp is None and req.workers > 1:
            if lay.pp > 1:
                crossing = m.nodes > 1 and lay.world > m.gpus_per_node
                alts = self.others(lambda x: x.tp == lay.tp and x.pp == 1)
                alt = self.fastest(alts)
                pp_bytes = _wire(req, best, "pp")
                if crossing:
                    slower = (f"{m.inter} is {m.bandwidth_ratio:.0f}x slower than {m.intra}, and "
                              if m.bandwidth_ratio > 1.05 else "")
                    head = (f"pp={lay.pp} across nodes: {slower}PP moves only activations "
                            f"({_bytes(pp_bytes)} per step)")
                else:
                    head = f"pp={lay.pp} inside one node: it moves only activations ({_bytes(pp_bytes)} per step)"
                if alt is None and alts:
                    low = self.least(alts)
                    out.append(Reason(
                        f"pp={lay.pp}: pp=1 needs {_gib(low)}",
                        f"{head}; with pp=1 at tp={lay.tp} the model does not fit {limit} "
                        f"(least: {_gib(low)} per rank with {low.label()})"))
                elif alt is not None:
                    dp_bytes = _wire(req, alt, "dp")
                    short = (f"pp={lay.pp}: sends {_bytes(pp_bytes)}, DP would move {_bytes(dp_bytes)}"
                             if dp_bytes > pp_bytes else f"pp={lay.pp}: {_faster(alt.step_s, best.step_s)} pp=1")
                    out.append(Reason(
                        short,
                        f"{head}, where data parallelism over those ranks ({alt.label()}) would move "
                        f"{_bytes(dp_bytes)} per step and take {_seconds_against(alt.step_s, best.step_s)}"))
                else:
                    out.append(Reason(f"pp={lay.pp}", head))
            else:
                self.if_any(lambda x: x.pp > 1, "pp=1: no bubble", lambda alt: (
                    f"pp=1: no pipeline bubble; the best pipelined layout ({alt.label()}, bubble "
                    f"{alt.bubble_s:.3g} s) would take {_seconds_against(alt.step_s, best.step_s)}"))

    def strategy(self) -> None:
        """The data-parallel strategy."""
        req, best, lay, limit = self.req, self.best, self.lay, self.limit
        out, choice = self.out, self.choice
        if req.strategy is None and lay.dp > 1:
            same = self.others(lambda x: (x.tp, x.pp, x.dp, x.ep) == (lay.tp, lay.pp, lay.dp, lay.ep)
                               and x.strategy != lay.strategy)
            rank = DP_STRATEGIES.index
            lighter = [choice.candidate(i) for i in same if rank(choice.options[i][0].strategy) < rank(lay.strategy)]
            alt = self.fastest(same)
            if lighter and not any(c.fits for c in lighter):
                out.append(Reason(
                    f"{lay.strategy}: least sharding that fits",
                    f"{lay.strategy} over dp={lay.dp}: the least sharding that fits {limit} "
                    f"({', '.join(sorted({c.strategy for c in lighter}))} need more)"))
            elif alt is not None:
                out.append(Reason(
                    f"{lay.strategy}: fastest DP",
                    f"{lay.strategy} over dp={lay.dp}: the fastest data-parallel strategy here "
                    f"({_bytes(_wire(req, best, 'dp'))} per step; {alt.strategy} would take "
                    f"{_seconds_against(alt.step_s, best.step_s)})"))
            else:
                out.append(Reason(lay.strategy, f"{lay.strategy} over dp={lay.dp}"))

    def experts(self) -> None:
        """Expert parallelism (a routed family's experts over the data-parallel ranks)."""
        req, best, lay = self.req, self.best, self.lay
        if req.ep is not None or not req.shape.family_spec.routed or lay.dp == 1:
            return
        if lay.ep > 1:
            alts = self.others(lambda x: x.ep == 1)
            alt = self.fastest(alts)
            a2a = _bytes(_wire(req, best, "ep"))
            head = f"ep={lay.ep}: each rank holds {req.shape.n_experts // lay.ep} of {req.shape.n_experts} experts"
            if alt is None and alts:
                low = self.least(alts)
                self.out.append(Reason(
                    f"ep={lay.ep}: ep=1 needs {_gib(low)}",
                    f"{head}; with every expert on every rank the model does not fit {self.limit} "
                    f"(least: {_gib(low)} per rank with {low.label()})"))
            elif alt is not None:
                self.out.append(Reason(
                    f"ep={lay.ep}: {_faster(alt.step_s, best.step_s)} ep=1",
                    f"{head}, their tokens exchanged by all-to-all ({a2a} per step), where keeping every expert on "
                    f"every rank ({alt.label()}) would all-reduce their gradients too ({_bytes(_wire(req, alt, 'dp'))} "
                    f"per step against {_bytes(_wire(req, best, 'dp'))}) and take {_seconds_against(alt.step_s, best.step_s)}"))
        else:
            self.if_any(lambda x: x.ep > 1, "ep=1: all-to-alls cost more", lambda alt: (
                f"ep=1: every rank holds every expert; sharding them ({alt.label()}) would exchange the routed tokens "
                f"by all-to-all ({_bytes(_wire(req, alt, 'ep'))} per step) and take "
                f"{_seconds_against(alt.step_s, best.step_s)}"))

    def micro_batches(self) -> None:
        """Micro-batches."""
        req, best, lay = self.req, self.best, self.lay
        out, choice = self.out, self.choice
        if req.micro_batch_size is None:
            larger = self.others(lambda x: (x.dp, x.tp, x.pp, x.ep, x.strategy) == (lay.dp, lay.tp, lay.pp, lay.ep,
                                                                                  lay.strategy)
                                 and x.micro_batch > lay.micro_batch)
            same = [choice.candidate(i) for i in larger]
            if same and not any(c.fits for c in same):
                out.append(Reason(
                    f"micro-batch {lay.micro_batch}: largest that fits",
                    f"micro-batch {lay.micro_batch} x {lay.micro_batches}: the largest that fits (larger ones need "
                    f"{_gib(min(same, key=lambda c: c.memory.total_bytes))} or more)"))
            elif lay.pp > 1:
                f = best.bubble_s / (best.compute_s + best.bubble_s)
                n = f"{lay.micro_batches} micro-batch{'es' if lay.micro_batches != 1 else ''}"
                out.append(Reason(
                    f"{n}: bubble {f:.1%}",
                    f"{n} of {lay.micro_batch}: the bubble is {f:.1%} of the step ({best.schedule})"))


def explain(choice: Choice) -> list[Reason]:
    """Why ``choice.best`` won, one reason per dimension the search was free to choose.

    Each reason compares the best feasible layout that differs in that dimension only where the
    search could have chosen it, and says whether the alternative does not fit or is slower.
    """
    why = _Why(choice)
    why.tensor()
    why.pipeline()
    why.strategy()
    why.experts()
    why.micro_batches()
    return why.out


def summary_line(choice: Choice) -> str:
    """``<layout>: <step> s/step = compute + bubble + comm; k of n layouts fit``."""
    best = choice.best
    assert best is not None
    return (f"{best.label()}: {best.step_s:.3g} s per step = compute {best.compute_s:.3g} + bubble "
            f"{best.bubble_s:.3g} + communication {best.comm_total_s:.3g} (not overlapped) + overhead "
            f"{best.overhead_s:.3g}; the fastest of {len(choice.options)} layouts that fits "
            f"{choice.request.memory_limit_bytes / GIB:.3g} GiB per rank")
