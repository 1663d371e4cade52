"""Expert parallelism: a routed family's experts sharded over the data-parallel ranks, tokens sent
to their experts' rank and back by all-to-all (GShard, Lepikhin et al. 2020; Switch).

Each of ``ep`` ranks holds ``n_experts / ep`` experts (its slice of the stacked matrices, a DTensor
sharded on the expert dimension, so checkpoints hold every expert once). In forward a rank sorts
its routed token copies by expert, which groups them by the rank that holds the expert; one
all-to-all exchanges the counts, one the tokens; each rank runs its experts on what it received
and a last all-to-all returns the outputs, which the rank weights and sums as without experts
parallelism. The all-to-alls are differentiable (their backward is the reverse exchange).

Composition: data parallel over the same ranks (``ep`` equals ``dp``) with DDP or ZeRO-1/2/3, the
experts left out of it (each rank's experts see every rank's tokens already: their gradient is
the sum over the ranks, scaled by 1/dp to data parallelism's mean). DDP ignores them; FSDP2
(ZeRO-2/3) takes them as ``ignored_params``, neither gathered nor reduced; ZeRO-1 partitions the
other parameters and every rank's local optimizer updates its own experts whole
(``scaling.trainer.parallel.data_parallel.zero1_with_experts``). Beside tensor parallelism
(ZeRO-2/3, which take its DTensors) the experts go over the data-parallel mesh dimension: tensor
parallelism splits attention only, so the tensor ranks of a pair hold the same tokens and each
exchanges them with its own data-parallel column. Not with a pipeline: the family has no
pipeline split. What composes is one torch-free rule,
``scaling.layout.expert_parallel_problem``, which the spec and the layout search apply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch
    from torch import nn
    from torch.autograd.function import FunctionCtx
    from torch.distributed import ProcessGroup
    from torch.distributed.device_mesh import DeviceMesh


def expert_modules(model: "nn.Module") -> list["nn.Module"]:
    """The modules holding stacked experts (those that can be sharded: ``shard_experts``)."""
    return [m for m in model.modules() if hasattr(m, "shard_experts")]


def apply_expert_parallel(model: "nn.Module", mesh: DeviceMesh) -> list[str]:
    """Shard every expert module of ``model`` over the 1-D ``mesh`` in place; the names of the
    parameters it sharded (which data parallelism must leave alone)."""
    names = []
    for prefix, module in model.named_modules():
        if hasattr(module, "shard_experts"):
            names += [f"{prefix}.{name}" for name in module.shard_experts(mesh)]
    return names


def _all_to_all(x: "torch.Tensor", out_splits: list[int], in_splits: list[int], group: ProcessGroup | None) -> "torch.Tensor":
    import torch
    import torch.distributed as dist

    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


def exchange(x: "torch.Tensor", out_splits: list[int], in_splits: list[int], group: ProcessGroup | None) -> "torch.Tensor":
    """``x``'s rows sent to the ranks of ``group`` in chunks of ``in_splits``, those received in
    chunks of ``out_splits``; differentiable (the gradient travels back the same way)."""
    import torch

    class AllToAll(torch.autograd.Function):
        @staticmethod
        def forward(ctx: FunctionCtx, inp: torch.Tensor) -> torch.Tensor:
            return _all_to_all(inp, out_splits, in_splits, group)

        @staticmethod
        def backward(ctx: FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
            return _all_to_all(grad, in_splits, out_splits, group)

    return AllToAll.apply(x)


def dispatch_and_combine(xs: "torch.Tensor", counts: "torch.Tensor", group: ProcessGroup | None,
                         run: Callable[[int, "torch.Tensor"], "torch.Tensor"]) -> "torch.Tensor":
    """The outputs of the experts for the routed copies ``xs`` (sorted by expert, ``counts`` per
    global expert), in ``xs``' order, with the experts spread over ``group``: ``run(j, rows)``
    applies this rank's local expert ``j`` to ``rows``."""
    import torch
    import torch.distributed as dist

    ep = dist.get_world_size(group)
    local = counts.numel() // ep
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts.contiguous(), group=group)  # [source, local expert] counts
    send = counts.view(ep, local).sum(dim=1).tolist()
    grid = received.view(ep, local).tolist()  # grid[s][j]: rows from rank s for local expert j
    recv = [sum(row) for row in grid]
    rows = exchange(xs, recv, send, group).split([n for row in grid for n in row])  # (s0,j0), (s0,j1), ...
    outputs = []
    for j in range(local):
        mine = torch.cat([rows[s * local + j] for s in range(ep)])
        outputs.append(run(j, mine).split([grid[s][j] for s in range(ep)]))
    back = torch.cat([outputs[j][s] for s in range(ep) for j in range(local)])
    return exchange(back, send, recv, group)
