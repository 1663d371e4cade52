"""Data parallelism for one run: DDP and ZeRO stages 1-3, applied to an architecture-only model.

``parallelize(model, spec, mesh)`` returns a :class:`Parallel` holding the wrapped module and
the few strategy hooks the loop needs, so the loop stays strategy-free. What each strategy
shards and how TP composes with it: docs/reference/modules.md.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Optional

import torch
import torch.distributed as dist
from torch import nn

from scaling.errors import SpecError
from scaling.trainer.runtime import build_mesh

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh

    from scaling.trainer.spec import RunSpec

STRATEGIES: tuple[str, ...] = ("ddp", "zero1", "zero2", "zero3")
FSDP_STRATEGIES: tuple[str, ...] = ("zero2", "zero3")
#: The data-parallel strategies that compose with tensor parallelism (they take DTensor parameters).
TP_STRATEGIES: tuple[str, ...] = FSDP_STRATEGIES


def tp_strategy_problem(strategy: str, tp: int, dp: int) -> str | None:
    """Why ``strategy`` over ``dp`` ranks cannot be combined with ``tp`` (None: it can)."""
    if tp > 1 and dp > 1 and strategy in ("ddp", "zero1"):
        return (f"{strategy} cannot be combined with tp={tp} on {dp} data-parallel ranks: use zero2 or zero3 "
                "(FSDP2 shards tensor-parallel DTensor parameters; DDP and ZeroRedundancyOptimizer do not take them)")
    return None


def default_backend(device: torch.device | str, cpu_offload: bool = False) -> str:
    """The collective backend for a device: NCCL for CUDA, gloo for the CPU.

    With CPU offload on CUDA both: the sharded parameters and their gradients live on the CPU,
    and the gradient norm's all-reduce of those CPU DTensors needs a CPU backend beside NCCL."""
    if torch.device(device).type != "cuda":
        return "gloo"
    return "cpu:gloo,cuda:nccl" if cpu_offload else "nccl"


def applied_strategy(spec: RunSpec, dp: int) -> str:
    """The strategy ``spec`` runs over ``dp`` data-parallel ranks: ``single`` on one, else the
    strategy the resolver placed (`scaling.trainer.resolve`; a RunSpec on several data-parallel ranks never
    says ``auto``). Raises :class:`SpecError` for one that cannot run there."""
    if dp == 1:
        return "single"  # one data-parallel rank: nothing to replicate or shard over
    name = spec.execution.strategy
    if name not in STRATEGIES:
        raise SpecError(f"execution.strategy: {name!r} is not a multi-worker strategy (use one of {STRATEGIES})")
    problem = tp_strategy_problem(name, spec.execution.tp, dp)
    if problem:
        raise SpecError(f"execution.strategy: {problem}")
    return name


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks of ``model``: the members of its ``nn.ModuleList`` children.

    Kept generic so the model file need not know about sharding: a GPT keeps its blocks in one
    ModuleList, and each block becomes one FSDP unit.
    """
    blocks: list[nn.Module] = []
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            blocks.extend(module)
    return blocks


@dataclass
class Parallel:
    """A model wrapped for one data-parallel strategy, and the hooks the loop needs.

    Attributes
    ----------
    module: the module to call for forward/backward (DDP wrapper or the FSDP2-sharded model).
    model: the underlying model (same object as ``module`` under FSDP2, ``module.module`` under
        DDP); parameter names (FQNs) are those of the unwrapped model in both cases.
    strategy: ``ddp``, ``zero1``, ``zero2`` or ``zero3`` over ``dp``; ``single`` when there is
        one data-parallel rank (tensor parallelism only).
    mesh: the data-parallel mesh; group: its process group (the one losses are summed over).
    tp: the tensor-parallel degree (1: none).
    """

    module: nn.Module
    model: nn.Module
    strategy: str
    mesh: Any = None
    group: Any = None
    tp: int = 1
    #: Draws the seed's weights when the model was built without them (None: it was not).
    init_weights: Optional[Callable[[], None]] = None
    #: This rank's own experts under expert parallelism: kept whole here, never sharded by ZeRO.
    experts: tuple[nn.Parameter, ...] = ()

    @property
    def is_fsdp(self) -> bool:
        return self.strategy in FSDP_STRATEGIES

    @property
    def data_parallel(self) -> bool:
        return self.strategy in STRATEGIES

    @property
    def loss_group(self) -> Any:
        """Ranks whose step losses add up to the batch's: the data-parallel group (tensor ranks repeat it)."""
        return self.group

    def build_optimizer(
        self, param_groups: Iterable[dict[str, Any]] | Iterable[torch.Tensor], optimizer_class: type = torch.optim.AdamW, **defaults: Any
    ) -> torch.optim.Optimizer:
        """The optimizer over this worker's parameters (build param groups from ``self.model``).

        zero1 wraps ``optimizer_class`` in a ZeroRedundancyOptimizer, which keeps each
        parameter's state on one rank only and broadcasts updated parameters after ``step``;
        under FSDP2 the parameters already are the local shards (DTensors), so a plain optimizer
        holds sharded state by construction. Under expert parallelism the rank's own experts
        stay out of ZeRO-1's partition: every rank's local optimizer updates its own experts
        (:func:`zero1_with_experts`).
        """
        if self.strategy == "zero1":
            if self.experts:
                return zero1_with_experts(list(param_groups), self.experts, optimizer_class, self.group, **defaults)
            from torch.distributed.optim import ZeroRedundancyOptimizer

            return ZeroRedundancyOptimizer(
                list(param_groups), optimizer_class=optimizer_class, process_group=self.group, **defaults
            )
        return optimizer_class(param_groups, **defaults)

    @contextlib.contextmanager
    def no_sync(self, enabled: bool = True) -> Iterator[None]:
        """Skip the gradient reduction inside (all micro-batches of an accumulation but the last).

        DDP and ZeRO-1 skip it: their gradients are whole on every rank anyway. ZeRO-2/3 do not:
        FSDP2 without gradient sync keeps every parameter's gradient unsharded (and in the reduce
        dtype, FP32) until the last micro-batch, 4Φ per rank instead of 4Φ/dp, which for a large
        model is more than all the rest of its state. So under FSDP2 each micro-batch's backward
        reduce-scatters into the sharded gradients, as torchtitan does: more traffic (counted by
        :func:`scaling.communication.dp_traffic`), the memory the planner counts.
        """
        if not enabled or not self.data_parallel or self.is_fsdp:
            yield
            return
        with self.module.no_sync():  # type: ignore[operator]
            yield

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        """Clip by the *global* gradient norm and return it (a plain tensor on every rank).

        See :func:`global_grad_norm`: under FSDP2 and tensor parallelism the gradients are
        DTensors on several meshes, which ``clip_grad_norm_`` cannot combine.
        """
        params = [p for p in self.module.parameters() if p.grad is not None]
        total = global_grad_norm([p.grad for p in params])
        if max_norm > 0:
            for group in by_layout(params, lambda p: p.grad).values():  # foreach ops take one layout
                torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)
        return total

    def grad_scaler(self, enabled: bool, device_type: str) -> Any:
        """A loss scaler for fp16: sharded gradients need the inf check all-reduced across ranks."""
        if self.is_fsdp:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            return ShardedGradScaler(device=device_type, enabled=enabled, process_group=self.group)
        return torch.amp.GradScaler(device_type, enabled=enabled)

    def full_grads(self) -> dict[str, torch.Tensor]:
        """Every parameter's full gradient by name (gathers FSDP2 shards; for tests and debugging)."""
        out: dict[str, torch.Tensor] = {}
        for name, p in self.model.named_parameters():
            if p.grad is None:
                continue
            g = p.grad
            # A replicated DTensor's full_tensor() is its local tensor itself: copy it too.
            out[name] = (g.full_tensor() if hasattr(g, "full_tensor") else g).detach().clone()
        return out


def zero1_with_experts(param_groups: list[Any], experts: tuple[nn.Parameter, ...], optimizer_class: type,
                       group: Any, **defaults: Any) -> torch.optim.Optimizer:
    """ZeRO-1 over every parameter but this rank's own ``experts``, which its local optimizer
    (``optim``, the one that steps and that checkpoints save) updates whole on every rank.

    ZeroRedundancyOptimizer partitions what it is given and broadcasts each updated parameter
    from the rank that owns it: an expert shard, different on every rank, must not be owned by
    one. So each group is handed over without the experts, which join the local optimizer's
    group of the same index (ZeRO copies each outer group's ``lr`` to the local group of its
    index at every step), and ``zero_grad`` clears the local optimizer's gradients too."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    class ExpertZero(ZeroRedundancyOptimizer):
        def zero_grad(self, set_to_none: bool = True) -> None:
            super().zero_grad(set_to_none)
            self.optim.zero_grad(set_to_none)

    own = {id(p) for p in experts}
    groups = [g if isinstance(g, dict) else {"params": [g]} for g in param_groups]
    shared = [{**g, "params": [p for p in g["params"] if id(p) not in own]} for g in groups]
    zero = ExpertZero(shared, optimizer_class=optimizer_class, process_group=group, **defaults)
    local = zero.optim.param_groups  # each a dict ZeRO's partition shares: replaced, not changed
    for i, g in enumerate(groups):
        local[i] = {**local[i], "params": local[i]["params"] + [p for p in g["params"] if id(p) in own]}
    return zero


def by_layout(tensors: list[torch.Tensor], of: Callable[[Any], Any] = lambda t: t) -> dict[Any, list[Any]]:
    """``tensors`` grouped by the DTensor mesh and placements of ``of(tensor)`` (plain tensors in one group)."""
    groups: dict[Any, list[Any]] = {}
    for t in tensors:
        x = of(t)
        key = (x.device_mesh, tuple(x.placements)) if hasattr(x, "device_mesh") else None
        groups.setdefault(key, []).append(t)
    return groups


def global_grad_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all ``grads`` together, over every shard on every mesh dimension.

    Gradients may be plain tensors, DTensors sharded over ``dp`` (FSDP2), over ``tp``, or over
    both; ``torch.nn.utils.clip_grad_norm_`` stacks the per-tensor norms and fails on DTensors
    of different meshes. So the norm is taken per group of equally laid-out gradients (each
    a DTensor whose ``full_tensor`` sums the partial squares of its shards, as torchtitan
    materializes it) and the groups' norms are combined.
    """
    norms = []
    for members in by_layout(grads).values():
        norm = torch.nn.utils.get_total_norm(members, 2.0, False, None)
        norms.append(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    if not norms:
        return torch.zeros(())
    if len(norms) == 1:
        return norms[0]
    return torch.linalg.vector_norm(torch.stack([n.float() for n in norms]), 2.0)


#: Modules whose parameters autocast hands to its kernels in the compute dtype (``F.linear``
#: casts weight and bias). Every other parameter (norms, embeddings) stays FP32 under autocast.
AUTOCAST_CAST_MODULES: tuple[type[nn.Module], ...] = (nn.Linear,)


def mixed_precision_policy(precision: str, *, cast: bool = True) -> Any:
    """FSDP2's policy for one unit: the dtype its parameters are gathered in, gradients reduced in FP32.

    ``cast``: the unit's parameters are ones autocast casts (:data:`AUTOCAST_CAST_MODULES`), so
    under bf16 they are gathered in bf16, which halves the all-gather and computes exactly what
    autocast computes; otherwise they are gathered in FP32, as autocast uses them. The unit's
    inputs are never cast, so the residual stream stays FP32 as on one process. The sharded
    parameters (the optimizer's master weights) stay FP32, matching the mixed-precision Adam
    recipe the accounting assumes. fp16 gathers in FP32 and relies on autocast and loss scaling
    only, so the scaler sees FP32 gradients as in the single-process loop.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if precision == "bf16" and cast:
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False)
    return MixedPrecisionPolicy(cast_forward_inputs=False)


def _owns_parameters(module: nn.Module) -> bool:
    return next(module.parameters(recurse=False), None) is not None


def shard_as_autocast(model: nn.Module, blocks: list[nn.Module], precision: str, *, reshard: bool,
                      **kwargs: Any) -> None:
    """FSDP2 over ``model`` in place, with units whose gathered parameters are what autocast computes with.

    Each block is one unit of its linear layers (gathered in the compute dtype) and one of its
    other parameter-holding modules, its norms (gathered in FP32). An untied output layer is a
    unit of its own in the compute dtype; the root unit holds what is left (embeddings, final
    norm, a tied output layer) in FP32, since an embedding lookup is not autocast and returns
    FP32 rows. So a ZeRO-2/3 run computes what one process does under autocast, at the cost of
    gathering norms and embeddings in FP32 (see :func:`scaling.communication.dp_traffic`). ``kwargs`` go
    to every ``fully_shard`` (``mesh``, ``offload_policy``).
    """
    from torch.distributed.fsdp import fully_shard

    cast, kept = mixed_precision_policy(precision), mixed_precision_policy(precision, cast=False)
    inside: set[int] = set()
    for block in blocks:
        norms = [m for m in block.modules() if _owns_parameters(m) and not isinstance(m, AUTOCAST_CAST_MODULES)]
        if norms and cast != kept:
            fully_shard(norms, reshard_after_forward=reshard, mp_policy=kept, **kwargs)
        fully_shard(block, reshard_after_forward=reshard, mp_policy=cast, **kwargs)
        inside.update(id(m) for m in block.modules())
    if cast != kept:
        rest = [m for m in model.modules() if id(m) not in inside and m is not model]
        uncast = {id(p) for m in rest if not isinstance(m, AUTOCAST_CAST_MODULES) for p in m.parameters(recurse=False)}
        for m in rest:  # an untied output layer: a tied one is the embedding, which stays FP32
            params = list(m.parameters(recurse=False))
            if isinstance(m, AUTOCAST_CAST_MODULES) and params and not any(id(p) in uncast for p in params):
                fully_shard(m, reshard_after_forward=reshard, mp_policy=cast, **kwargs)
    fully_shard(model, reshard_after_forward=reshard, mp_policy=kept, **kwargs)


def parallelize(
    model: nn.Module,
    spec: Any,
    mesh: Any = None,
    *,
    strategy: Optional[str] = None,
    blocks: Optional[Callable[[nn.Module], list[nn.Module]]] = None,
    device: Optional[torch.device] = None,
    init: Optional[Callable[[nn.Module], None]] = None,
) -> Parallel:
    """Wrap ``model`` (already on its device) for ``spec.execution.strategy`` over ``mesh``.

    Parameters
    ----------
    model: the architecture-only model, on this rank's device, identically initialized on
        every rank (DDP and ZeRO-1 broadcast rank 0's weights anyway; FSDP2 shards what it is
        given, so equal initialization matters there: seed before building).
    spec: the run's :class:`~scaling.trainer.spec.RunSpec`.
    mesh: a ``("pp", "dp", "tp")`` mesh from :func:`scaling.trainer.runtime.build_mesh` (built
        from ``spec.execution`` when None), or a 1-D data-parallel ``DeviceMesh``.
    strategy: overrides the spec's strategy (the resolver's: a RunSpec on several data-parallel ranks names one).
    blocks: how to find the FSDP units; defaults to :func:`transformer_blocks`.
    device: this rank's device (default: where the model's parameters are, or the current GPU).
    init: for a model on the meta device, what initializes it once materialized (see
        :func:`scaling.trainer.families.model.init_materialized`): it is sharded first (tensor
        parallelism, FSDP2), then allocated on ``device`` (the CPU under ``cpu_offload``) and
        initialized, so no rank ever holds the whole model; DDP and ZeRO-1 replicate the
        parameters and get them materialized before wrapping.
    """
    if not dist.is_initialized():
        raise RuntimeError("parallelize needs an initialized torch.distributed process group")
    on_meta = next(model.parameters()).device.type == "meta"
    if on_meta and init is None:
        raise ValueError("parallelize: a model on the meta device needs init, to initialize it once sharded")
    if device is None:
        device = next(model.parameters()).device
        if on_meta:
            device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")

    def materialized(target: torch.device) -> None:
        if on_meta:
            from scaling.trainer.families.model import materialize

            materialize(model, target)
            assert init is not None
            init(model)

    world = dist.get_world_size()
    tp = spec.execution.tp
    if mesh is None:
        mesh = build_mesh(device.type, world, tp, spec.execution.pp)
    dp_mesh, tp_mesh = _sub_meshes(mesh)
    dp = dp_mesh.size()
    if strategy is not None:
        spec = spec.model_copy(update={"execution": spec.execution.model_copy(update={"strategy": strategy})})
    name = applied_strategy(spec, dp)
    if spec.execution.cpu_offload and name not in FSDP_STRATEGIES:
        from scaling.trainer.sections import offload_problem

        raise SpecError(offload_problem(True, name, dp, spec.execution.pp) or "")
    group = dp_mesh.get_group()
    if hasattr(model, "activation_checkpointing"):  # the model recomputes each block itself
        model.activation_checkpointing = spec.execution.activation_checkpointing
    find_blocks = blocks or transformer_blocks
    if tp_mesh is not None and tp_mesh.size() > 1:
        from scaling.trainer.parallel.tensor_parallel import apply_tensor_parallel

        apply_tensor_parallel(model, tp_mesh, find_blocks(model))
    tp = tp_mesh.size() if tp_mesh is not None else 1
    experts: list[str] = []
    if spec.execution.ep > 1:  # a routed family's experts sharded over the data-parallel ranks
        from scaling.trainer.parallel.expert_parallel import apply_expert_parallel

        experts = apply_expert_parallel(model, dp_mesh)

    if dp == 1:  # tensor-parallel only
        materialized(device)
        return Parallel(module=model, model=model, strategy=name, mesh=dp_mesh, group=group, tp=tp)

    if name in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        materialized(device)  # every rank holds everything anyway (but its own experts, under ep)
        if experts:  # each rank's experts already see every rank's tokens: no all-reduce
            DDP._set_params_and_buffers_to_ignore_for_model(model, experts)
        # gradient_as_bucket_view: gradients live in DDP's communication buckets instead of
        # in a second copy, so DDP costs the 16 bytes/param the accounting counts, not 20.
        ddp = DDP(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            process_group=group,
            gradient_as_bucket_view=True,
        )
        return Parallel(module=ddp, model=model, strategy=name, mesh=dp_mesh, group=group, tp=tp,
                        experts=tuple(model.get_parameter(n) for n in experts))

    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy

    reshard = name == "zero3"
    offload = (
        CPUOffloadPolicy(pin_memory=device.type == "cuda") if spec.execution.cpu_offload else OffloadPolicy()
    )
    # each rank's own experts stay whole there (expert parallelism shards them already): FSDP2
    # neither gathers nor reduces them, and the optimizer holds their state whole
    ignored = {model.get_parameter(name) for name in experts} or None
    shard_as_autocast(model, find_blocks(model), spec.precision, reshard=reshard, mesh=dp_mesh,
                      offload_policy=offload, ignored_params=ignored)
    materialized(torch.device("cpu") if spec.execution.cpu_offload else device)
    return Parallel(module=model, model=model, strategy=name, mesh=dp_mesh, group=group, tp=tp,
                    experts=tuple(model.get_parameter(n) for n in experts))


def _sub_meshes(mesh: DeviceMesh) -> tuple[DeviceMesh, DeviceMesh | None]:
    """(data-parallel mesh, tensor-parallel mesh or None) of a mesh from ``build_mesh`` or a 1-D one."""
    names = mesh.mesh_dim_names or ()
    if "tp" in names:
        return mesh["dp"], mesh["tp"]
    return mesh, None
