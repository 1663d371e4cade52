"""Pipeline parallelism: the model split into ``pp`` stages by blocks, run by a torch schedule.

``build_pipeline(spec, rt)`` returns a :class:`Pipeline`, used by the loop in place of
:class:`~scaling.trainer.parallel.data_parallel.Parallel`. How stages are split, how the tied embedding stays
one, how the loss is counted once and how TP composes: docs/reference/modules.md.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from scaling.trainer.families.common import readout, through_blocks
from scaling.trainer.families.model import Decoder, build_meta_model, init_materialized, materialize
from scaling.trainer.precision import DTYPES, autocast
from scaling.trainer.runtime import Runtime, build_mesh, mesh_coords
from scaling.trainer.spec import PIPELINE_CHUNKS, RunSpec, pipeline_micro_batches

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

#: Target value the loss ignores (evaluation pads its last chunk with it).
IGNORE = -100
#: The tied parameter's name on every stage that holds it.
TIED = "wte.weight"


def split_blocks(n_layer: int, stages: int) -> list[range]:
    """Block indices of each stage: as even as possible, the first ``n_layer % stages`` one longer."""
    if not 1 <= stages <= n_layer:
        raise ValueError(f"{stages} stages cannot each hold a block of {n_layer}")
    base, extra = divmod(n_layer, stages)
    bounds = [0]
    for s in range(stages):
        bounds.append(bounds[-1] + base + (1 if s < extra else 0))
    return [range(bounds[s], bounds[s + 1]) for s in range(stages)]


def stages_of_rank(pp_rank: int, pp: int, chunks: int) -> list[int]:
    """The stage indices pipeline rank ``pp_rank`` runs (looped: ``pp_rank + k*pp``)."""
    return [pp_rank + k * pp for k in range(chunks)]


class StageModule(nn.Module):
    """Blocks ``blocks`` of a decoder (either family), with the embeddings on the first stage and
    norm + head on the last (which holds the token embedding too when the head is tied to it).

    Parameter names are the unsplit model's (the blocks sit in a ModuleDict keyed by their
    index). The forward maps token ids (first stage) or the residual stream (others) to the
    residual stream (cast to ``boundary_dtype``) or, on the last stage, logits.
    """

    def __init__(self, model: Decoder, blocks: range, first: bool, last: bool, boundary_dtype: torch.dtype) -> None:
        super().__init__()
        self.first, self.last = first, last
        self.context = model.cfg.context
        self.cfg = model.cfg
        self.boundary_dtype = boundary_dtype
        self.activation_checkpointing = False
        if first or (last and model.cfg.tied):
            self.wte = model.wte  # the last stage's output layer is tied to it
        self.wpe = model.wpe if first and isinstance(getattr(model, "wpe", None), nn.Embedding) else None
        self.blocks = nn.ModuleDict({str(i): model.blocks[i] for i in blocks})
        if last:
            self.ln_f = model.ln_f
            self.lm_head = model.lm_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            if x.size(1) > self.context:
                raise ValueError(f"sequence of {x.size(1)} tokens exceeds the context of {self.context}")
            x = self.wte(x)
            if self.wpe is not None:  # learned positions (gpt2); llama's RoPE is inside attention
                x = x + self.wpe(torch.arange(x.size(1), device=x.device))
        x = through_blocks(self, self.blocks.values(), x)
        if self.last:
            return readout(self.lm_head, self.ln_f(x), self.cfg)
        return x.to(self.boundary_dtype)


class RankModel(nn.Module):
    """Every part the stages of one rank hold, under the unsplit model's names.

    What checkpoints, the optimizer and the loop see as "the model" of this rank; the stage
    modules share its submodules.
    """

    def __init__(self, stages: list[StageModule]) -> None:
        super().__init__()
        for name in ("wte", "wpe"):
            for stage in stages:
                if getattr(stage, name, None) is not None:
                    setattr(self, name, getattr(stage, name))
                    break
        self.blocks = nn.ModuleDict({k: v for stage in stages for k, v in stage.blocks.items()})
        for name in ("ln_f", "lm_head"):
            for stage in stages:
                if hasattr(stage, name):
                    setattr(self, name, getattr(stage, name))


@dataclass
class Pipeline:
    """This rank's stages, their schedule and the hooks the loop needs (see the module docstring)."""

    spec: RunSpec
    rt: Runtime
    mesh: Any
    stage_modules: list[StageModule]
    stages: list[Any]
    schedule: Any
    model: nn.Module
    strategy: str  # the data-parallel strategy over "dp" ("single" when dp = 1)
    micro_batches: int
    tied_group: Any = None
    group: Any = None  # the data-parallel group (ZeRO-1's optimizer)
    #: Ranks whose step losses add up to the batch's: every rank of this rank's tensor coordinate
    #: (only the last stage holds a loss; its tensor ranks hold the same one). None: the world.
    loss_group: Any = None
    _weight: float = field(default=1.0, init=False)
    _logit_scale: float = field(default=1.0, init=False)
    _rows: Optional[list[torch.Tensor]] = field(default=None, init=False)  # per-row losses while scoring
    #: Draws the seed's weights when the pipeline was built without them (None: it was not).
    init_weights: Optional[Callable[[], None]] = field(default=None, init=False)
    _z_calls: Optional[list[torch.Tensor]] = field(default=None, init=False)  # each loss call's z-loss while a step trains
    #: This rank's part of the last step's mean z-loss (zero without a z-loss or off the last stage).
    z_part: Optional[torch.Tensor] = field(default=None, init=False)

    # -- where this rank sits -------------------------------------------------------------------
    @property
    def module(self) -> nn.Module:
        return self.model

    @property
    def pp(self) -> int:
        return self.spec.execution.pp

    @property
    def dp(self) -> int:
        return self.spec.execution.dp

    @property
    def tp(self) -> int:
        return self.spec.execution.tp

    @property
    def is_fsdp(self) -> bool:
        return self.strategy in ("zero2", "zero3")

    @property
    def has_first(self) -> bool:
        return any(m.first for m in self.stage_modules)

    @property
    def has_last(self) -> bool:
        return any(m.last for m in self.stage_modules)

    @property
    def layout(self) -> dict[str, Any]:
        """What the run's ``data`` event records about the pipeline."""
        return {"pp": self.pp, "dp": self.dp, "tp": self.tp, "pp_schedule": self.spec.execution.pp_schedule,
                "micro_batches": self.micro_batches}

    # -- one step ----------------------------------------------------------------------------------
    def _loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = logits.float()
        if self._logit_scale != 1.0:
            logits = logits * self._logit_scale
        if self._rows is not None:  # scoring: each row's summed loss, micro-batches in order
            per = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none", ignore_index=IGNORE)
            self._rows.append(per.view(targets.shape).sum(dim=1).detach())
            return per.sum()
        total = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="sum", ignore_index=IGNORE)
        coefficient = self.spec.model.z_loss
        if coefficient and self._z_calls is not None:  # training: the z-loss joins the gradient, not the loss
            z = coefficient * torch.logsumexp(logits, dim=-1).pow(2).sum()
            self._z_calls.append(z.detach() * self._weight)
            total = total + z
        return total * self._weight

    def _run(self, x: torch.Tensor, y: torch.Tensor, losses: list[torch.Tensor], train: bool) -> None:
        run = self.schedule.step if train else self.schedule.eval
        args = (x,) if self.has_first else ()
        kwargs = {"target": y, "losses": losses} if self.has_last else {}
        with autocast(self.spec.precision, self.rt.device):
            run(*args, **kwargs)

    def step(self, x: torch.Tensor, y: torch.Tensor, logit_scale: float = 1.0) -> torch.Tensor:
        """Forward and backward of this data-parallel rank's share ``(x, y)`` of the batch.

        Returns this rank's part of the global batch's mean loss (the last stage's; zero on the
        others): its sum over all ranks is the loss.
        """
        spec = self.spec
        self._weight = self.dp / (spec.sequences_per_batch * spec.model.context)
        self._logit_scale = logit_scale
        losses: list[torch.Tensor] = []
        self._z_calls = []
        try:
            self._run(x, y, losses, train=True)
            # The schedule's first step also calls the loss once on placeholder outputs to infer the
            # backward's shapes; only the last len(losses) calls are the micro-batches'.
            counted = self._z_calls[len(self._z_calls) - len(losses):] if losses else []
            self.z_part = torch.stack(counted).sum() / self.dp if counted else torch.zeros((), device=self.rt.device)
        finally:
            self._z_calls = None
        self._sync_tied_grad()
        if not losses:
            return torch.zeros((), device=self.rt.device)
        return torch.stack([t.detach() for t in losses]).sum() / self.dp - self.z_part

    def _sync_tied_grad(self) -> None:
        """All-reduce the tied embedding's gradient between the first and the last stage."""
        if self.tied_group is None:
            return
        params = dict(self.model.named_parameters())
        grad = params[TIED].grad
        local = grad.to_local() if hasattr(grad, "to_local") else grad
        dist.all_reduce(local, group=self.tied_group)

    @torch.no_grad()
    def eval_sums(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(summed token loss, tokens) of this rank's part of the held-out ``rows`` (windows of
        context + 1 tokens): data-parallel ranks take every dp-th window, the last stage sums;
        both are zero on other stages, so their sums over all ranks give the mean loss."""
        dev = self.rt.device
        _, dp_rank, _ = mesh_coords(self.rt.rank, self.dp, self.spec.execution.tp)
        mine = rows[dp_rank :: self.dp]
        per = math.ceil(len(rows) / self.dp)  # every dp rank runs the same number of chunks
        chunk = self.spec.sequences_per_batch // self.dp  # one share: the shapes the stages know
        total = torch.zeros((), dtype=torch.float64, device=dev)
        count = torch.zeros((), dtype=torch.float64, device=dev)
        self._weight, self._logit_scale = 1.0, 1.0
        for start in range(0, per, chunk):
            part = mine[start : start + chunk]
            x = torch.zeros(chunk, rows.size(1) - 1, dtype=torch.long)
            y = torch.full_like(x, IGNORE)
            x[: len(part)], y[: len(part)] = part[:, :-1], part[:, 1:]
            losses: list[torch.Tensor] = []
            self._run(x.to(dev), y.to(dev), losses, train=False)
            if losses:
                total += torch.stack(losses).double().sum()
                count += float((y != IGNORE).sum())
        return total, count

    @property
    def share(self) -> int:
        """Sequences of one data-parallel rank's share of a batch: the rows the stages' shapes expect."""
        return self.spec.sequences_per_batch // self.dp

    @torch.no_grad()
    def row_losses(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Each row's summed token loss (nats, float64) of ``(x, y)``, a share of ``(share, context)``
        tokens, through the schedule's evaluation: the last stage's figures, zeros on other stages."""
        dev = self.rt.device
        self._weight, self._logit_scale, self._rows = 1.0, 1.0, []
        try:
            self._run(x.to(dev), y.to(dev), [], train=False)
            rows = torch.cat(self._rows) if self._rows else torch.zeros(len(x), device=dev)
        finally:
            self._rows = None
        return rows.double()

    # -- the hooks Parallel has ----------------------------------------------------------------------
    def build_optimizer(self, param_groups: Iterable[dict[str, Any]], optimizer_class: type = torch.optim.AdamW,
                        **defaults: Any) -> torch.optim.Optimizer:
        """The optimizer over this rank's parameters (ZeRO-1: partitioned over the dp group)."""
        if self.strategy == "zero1":
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return ZeroRedundancyOptimizer(list(param_groups), optimizer_class=optimizer_class,
                                           process_group=self.group, **defaults)
        return optimizer_class(param_groups, **defaults)

    @contextlib.contextmanager
    def no_sync(self, enabled: bool = True) -> Iterator[None]:
        """The schedule defers gradient reduction to its last micro-batch itself."""
        yield

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip by the global gradient norm over every stage, shard and tensor rank, and return it.

        Each rank sums the squares of the gradients it holds and the sum runs over the world,
        each element counted once: a gradient replicated over "dp" (no FSDP2) or over "tp"
        (embeddings, norms, row-parallel biases) only where that coordinate is 0, and the last
        stage's copy of the tied embedding not at all.
        """
        from scaling.trainer.parallel.data_parallel import by_layout

        named = [(n, p) for n, p in self.model.named_parameters() if p.grad is not None]
        duplicate = self.has_last and not self.has_first
        _, dp_rank, tp_rank = mesh_coords(self.rt.rank, self.dp, self.tp)
        first_of = {"dp": dp_rank == 0, "tp": tp_rank == 0}
        square = torch.zeros((), dtype=torch.float32, device=self.rt.device)
        for name, p in named:
            if duplicate and name == TIED:
                continue
            sharded = _sharded_dims(p.grad)
            if all(dim in sharded or first for dim, first in first_of.items()):
                g = p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad
                square += g.detach().float().pow(2).sum()
        dist.all_reduce(square)
        total = square.sqrt()
        if max_norm > 0:
            for params in by_layout([p for _, p in named], lambda p: p.grad).values():  # foreach: one layout
                torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
        return total

    def grad_scaler(self, enabled: bool, device_type: str) -> Any:
        if enabled:
            raise ValueError("loss scaling (fp16) is not supported with pipelining")
        return torch.amp.GradScaler(device_type, enabled=False)

    def full_grads(self) -> dict[str, torch.Tensor]:
        """This rank's parameters' full gradients by name (gathers FSDP2 shards; for tests)."""
        out: dict[str, torch.Tensor] = {}
        for name, p in self.model.named_parameters():
            if p.grad is not None:
                g = p.grad
                out[name] = g.full_tensor() if hasattr(g, "full_tensor") else g.detach().clone()
        return out


def _sharded_dims(t: torch.Tensor) -> set[str]:
    """The mesh dimensions a DTensor is split over ("dp" by FSDP2, "tp" by the tensor split).

    Any placement that is neither replicated nor a pending sum splits the tensor: FSDP2 over an
    already tensor-split parameter uses ``_StridedShard``, for which ``is_shard()`` is False.
    """
    if not hasattr(t, "placements"):
        return set()
    names = t.device_mesh.mesh_dim_names or ()
    return {names[i] for i, p in enumerate(t.placements) if not (p.is_replicate() or p.is_partial())}


def _loss_group(mesh: DeviceMesh, rank: int) -> dist.ProcessGroup | None:
    """The ranks of this rank's tensor-parallel coordinate over every stage and data-parallel rank
    (all ranks call): the tensor ranks of a stage compute the same loss, so it is summed once."""
    grid = mesh.mesh  # (pp, dp, tp) global ranks
    if grid.size(2) == 1:
        return None  # the whole world
    mine = None
    for t in range(grid.size(2)):
        ranks = sorted(int(r) for r in grid[:, :, t].flatten())
        group = dist.new_group(ranks)
        if rank in ranks:
            mine = group
    return mine


def _tied_group(mesh: DeviceMesh, pp: int, rank: int) -> dist.ProcessGroup | None:
    """The group of the first and last stage of this rank's data/tensor column (all ranks call)."""
    grid = mesh.mesh  # (pp, dp, tp) global ranks
    mine = None
    for d in range(grid.size(1)):
        for t in range(grid.size(2)):
            ranks = sorted({int(grid[0, d, t]), int(grid[pp - 1, d, t])})
            group = dist.new_group(ranks)
            if rank in ranks:
                mine = group
    return mine


def _shard(stage: StageModule, spec: RunSpec, strategy: str, dp_mesh: DeviceMesh) -> None:
    """FSDP2 over the "dp" mesh dim for ``zero2``/``zero3`` (per block, then the stage, with the
    units of :func:`~scaling.trainer.parallel.data_parallel.shard_as_autocast`), in place; on the meta device,
    so each rank later allocates only its shard."""
    from scaling.trainer.parallel.data_parallel import shard_as_autocast

    shard_as_autocast(stage, list(stage.blocks.values()), spec.precision, reshard=strategy == "zero3", mesh=dp_mesh)


def _replicate(stage: StageModule, strategy: str, dp_mesh: DeviceMesh) -> nn.Module:
    """``stage`` (materialized) under DDP for ``ddp``/``zero1``; itself otherwise."""
    if strategy not in ("ddp", "zero1"):
        return stage
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = next(stage.parameters()).device
    ddp = DDP(stage, device_ids=[dev.index] if dev.type == "cuda" else None,
              process_group=dp_mesh.get_group(), gradient_as_bucket_view=True)
    # The schedule arms DDP's reducer itself, right before each step's last backward. A forward
    # outside ``no_sync`` would arm it too: the schedule's first step infers the stages' shapes
    # with such a forward, so a micro-batch's backward would also be reduced and DDP would record
    # the gradients' order twice, then fail rebuilding its buckets at the next step.
    ddp.require_backward_grad_sync = False
    return ddp


def _materialize_stages(full: Decoder, modules: list[StageModule], spec: RunSpec, device: torch.device,
                        initialize: bool = True) -> Optional[Callable[[], None]]:
    """Allocate this rank's stages on ``device`` and give them ``build_model(shape, seed)``'s weights.

    The stages share their submodules with ``full``, the meta-device model: only what this rank
    holds is allocated, the rest of ``full`` stays on meta, where :func:`init_materialized`'s
    writes cost nothing, so its replay of the whole model's draws lands on this rank's part.
    """
    for module in modules:
        materialize(module, device)
    # A rank with the embedding but not the head replaced ``wte.weight`` alone: tie the head to
    # it again, so the head's init (the tied weight's last draw) reaches the embedding.
    if spec.shape.tied:
        full.lm_head.weight = full.wte.weight

    def init() -> None:
        init_materialized(full, spec.shape, spec.seed, device)  # drawn on the run's device

    if not initialize:
        return init  # drawn later only if no checkpoint is loaded over the weights
    init()
    return None


def build_pipeline(spec: RunSpec, rt: Runtime, *, initialize: bool = True) -> Pipeline:
    """This rank's stages of ``spec``'s model, wrapped for its data-parallel strategy, and the schedule
    (``initialize=False``: weights allocated, drawn by ``init_weights()``; see ``build_parallel_model``)."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleInterleaved1F1B

    ex = spec.execution
    pp, dp, tp = ex.pp, ex.dp, ex.tp
    if rt.world_size != ex.workers:
        raise ValueError(f"execution.workers={ex.workers} but the world has {rt.world_size} processes")
    mesh = build_mesh(rt.device.type, rt.world_size, tp, pp)
    pp_rank, _, _ = mesh_coords(rt.rank, dp, tp)
    chunks = PIPELINE_CHUNKS[ex.pp_schedule]
    n_stages = pp * chunks
    split = split_blocks(spec.model.n_layer, n_stages)
    # torchtitan's order: stages built on the meta device, split over "tp" and sharded over "dp",
    # then only this rank's part allocated and initialized: no rank ever holds the whole model.
    full = build_meta_model(spec.shape)
    boundary = torch.float32  # the residual stream crosses stages as it flows in one process: FP32
    modules = []
    for s in stages_of_rank(pp_rank, pp, chunks):
        module = StageModule(full, split[s], first=s == 0, last=s == n_stages - 1, boundary_dtype=boundary)
        module.activation_checkpointing = ex.activation_checkpointing
        modules.append(module)
    if tp > 1:  # Megatron's split of each block over "tp"; embeddings, norm and head stay replicated
        from scaling.trainer.parallel.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(full, mesh["tp"], [b for m in modules for b in m.blocks.values()])

    from scaling.trainer.parallel.data_parallel import applied_strategy

    strategy = applied_strategy(spec, dp)  # the resolver's; refuses 'single' on dp > 1
    dp_mesh = mesh["dp"]
    if strategy in ("zero2", "zero3"):
        for m in modules:
            _shard(m, spec, strategy, dp_mesh)
    init_weights = _materialize_stages(full, modules, spec, rt.device, initialize)
    del full
    wrapped = [_replicate(m, strategy, dp_mesh) for m in modules]  # DDP broadcasts: after the init
    pp_group = mesh["pp"].get_group()
    stages = [PipelineStage(w, s, n_stages, rt.device, group=pp_group)
              for w, s in zip(wrapped, stages_of_rank(pp_rank, pp, chunks))]
    m = pipeline_micro_batches(spec.sequences_per_batch, dp, ex.micro_batch_size)
    pipe = Pipeline(spec=spec, rt=rt, mesh=mesh, stage_modules=modules, stages=stages, schedule=None,
                    model=modules[0] if chunks == 1 else RankModel(modules), strategy=strategy,
                    micro_batches=m, tied_group=_tied_group(mesh, pp, rt.rank) if spec.shape.tied else None,
                    group=dp_mesh.get_group(), loss_group=_loss_group(mesh, rt.rank))
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B, "interleaved_1f1b": ScheduleInterleaved1F1B}[ex.pp_schedule]
    target = stages if chunks > 1 else stages[0]
    pipe.schedule = kind(target, n_microbatches=m, loss_fn=pipe._loss, scale_grads=False)
    pipe.init_weights = init_weights
    return pipe
