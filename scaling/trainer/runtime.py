"""Where this process trains: device, rank, world size (from ``torch.distributed`` when initialized).

The loop is written once for one process and for many: it asks the :class:`Runtime` whether it
is the main rank (the only one that writes to the database) and how to share a batch, and goes
through :func:`scaling.trainer.parallel.parallelize` only when the world has several processes.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import torch
import torch.distributed as dist
from torch import nn

from scaling.errors import ResourceError


@dataclass(frozen=True)
class Runtime:
    """This process's place in the run."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @classmethod
    def current(cls, device: str = "auto") -> "Runtime":
        """The runtime of this process: ``torch.distributed``'s rank and world if initialized.

        ``device``: ``auto`` takes this rank's GPU when CUDA is available, else the CPU.
        """
        if device == "cuda" and not torch.cuda.is_available():
            raise ResourceError("execution.device: 'cuda' requested but no CUDA device is available")
        use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        if dist.is_available() and dist.is_initialized():
            rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
        else:
            rank, world, backend = 0, 1, None
        local = int(os.environ.get("LOCAL_RANK", "0")) if world > 1 else 0
        if use_cuda:
            index = local % torch.cuda.device_count()
            torch.cuda.set_device(index)
            dev = torch.device("cuda", index)
        else:
            dev = torch.device("cpu")
        return cls(device=dev, rank=rank, world_size=world, local_rank=local, backend=backend)

    # -- collectives that are no-ops on one process -----------------------------------------
    def sum(self, value: torch.Tensor) -> torch.Tensor:
        """The sum of ``value`` over ranks (every rank gets it)."""
        if not self.distributed:
            return value
        out = value.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def build_mesh(world: int, dp: int, tp: int, pp: int, device_type: str = "cpu") -> Any:
    """The run's device mesh with dims ("pp", "dp", "tp"), tensor-parallel ranks innermost.

    Row-major over (pp, dp, tp), as Megatron orders ranks: a rank's coordinates are
    :func:`mesh_coords`, so tensor groups are neighbours (inside a node) and pipeline stages
    are furthest apart.
    """
    from torch.distributed.device_mesh import init_device_mesh

    if dp * tp * pp != world:
        raise ValueError(f"dp*tp*pp = {dp}*{tp}*{pp} is not the world size {world}")
    return init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=("pp", "dp", "tp"))


def mesh_coords(rank: int, dp: int, tp: int) -> tuple[int, int, int]:
    """(pp, dp, tp) coordinates of ``rank`` in :func:`build_mesh`'s layout."""
    return rank // (dp * tp), (rank // tp) % dp, rank % tp


class Single:
    """The single-process counterpart of :class:`scaling.trainer.parallel.Parallel`.

    The same hooks (optimizer, no_sync, clipping, scaler), so the loop has no strategy branches.
    """

    strategy = "single"
    is_fsdp = False

    def __init__(self, model: nn.Module) -> None:
        self.module = model
        self.model = model

    def build_optimizer(self, param_groups: Iterable[dict[str, Any]], optimizer_class: type = torch.optim.AdamW, **defaults: Any) -> torch.optim.Optimizer:
        return optimizer_class(param_groups, **defaults)

    @contextlib.contextmanager
    def no_sync(self, enabled: bool = True) -> Iterator[None]:
        yield

    def clip_grad_norm(self, max_norm: float) -> torch.Tensor:
        params = [p for p in self.module.parameters() if p.grad is not None]
        if max_norm > 0:
            return torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        return torch.nn.utils.get_total_norm([p.grad for p in params], 2.0, False, True)

    def grad_scaler(self, enabled: bool, device_type: str) -> Any:
        return torch.amp.GradScaler(device_type, enabled=enabled)
