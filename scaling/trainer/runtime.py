"""Where this process trains: device, rank, world size (from ``torch.distributed`` when initialized).

The loop is written once for one process and for many: it asks the :class:`Runtime` whether it
is the main rank (the only one that writes to the database) and how to share a batch, and goes
through :func:`scaling.trainer.parallel.data_parallel.parallelize` only when the world has several processes.

Ranks form a ``pp x dp x tp`` grid (:func:`build_mesh`): tensor-parallel ranks are adjacent
(inside one node, where Ray places consecutive ranks), data-parallel groups stride over them,
pipeline stages are outermost (Megatron's order, and the one :class:`scaling.communication.Cluster`
assumes). Ranks of one tensor group see the same data; the batch is shared over ``dp``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, TypeVar

import torch
import torch.distributed as dist
from torch import nn

from scaling.errors import ResourceError, SpecError

T = TypeVar("T")

#: This process's GPU index, set by a launcher that assigns devices itself (Ray Train); without
#: it a rank takes ``LOCAL_RANK`` modulo the visible GPUs.
DEVICE_ENV = "SCALING_CUDA_DEVICE"

#: The mesh's dimension names, outermost first.
MESH_DIMS: tuple[str, ...] = ("pp", "dp", "tp")


def data_parallel_size(world: int, tp: int = 1, pp: int = 1) -> int:
    """``dp = world / (tp * pp)``; raises :class:`SpecError` when that is not a whole number."""
    if world % (tp * pp):
        raise SpecError(f"execution.workers: {world} workers are not a multiple of tp*pp = {tp}*{pp}")
    return world // (tp * pp)


def build_mesh(device_type: str, world: int, tp: int = 1, pp: int = 1) -> Any:
    """The ``("pp", "dp", "tp")`` device mesh over the initialized world (collective: every rank calls it).

    Every dimension is present, size 1 included, so ``mesh["dp"]`` / ``mesh["tp"]`` always exist.
    """
    from torch.distributed.device_mesh import init_device_mesh

    dp = data_parallel_size(world, tp, pp)
    return init_device_mesh(device_type, (pp, dp, tp), mesh_dim_names=MESH_DIMS)


@dataclass(frozen=True)
class Runtime:
    """This process's place in the run: its rank in the world and in the ``pp x dp x tp`` grid."""

    device: torch.device
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    backend: str | None = None
    tp: int = 1
    pp: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    @property
    def dp(self) -> int:
        """Data-parallel ranks: the number of shares each batch is split into."""
        return self.world_size // (self.tp * self.pp)

    @property
    def dp_rank(self) -> int:
        """This rank's data-parallel index (its share of each batch), as :func:`build_mesh` lays ranks out."""
        return mesh_coords(self.rank, self.dp, self.tp)[1]

    @property
    def tp_rank(self) -> int:
        return mesh_coords(self.rank, self.dp, self.tp)[2]

    @property
    def pp_rank(self) -> int:
        return mesh_coords(self.rank, self.dp, self.tp)[0]

    def mesh(self) -> Any:
        """A new ``("pp", "dp", "tp")`` mesh over this world (collective)."""
        return build_mesh(self.device.type, self.world_size, self.tp, self.pp)

    @classmethod
    def current(cls, device: str = "auto", tp: int = 1, pp: int = 1) -> "Runtime":
        """The runtime of this process: ``torch.distributed``'s rank and world if initialized.

        ``device``: ``auto`` takes this rank's GPU when CUDA is available, else the CPU.
        ``tp`` / ``pp``: the run's tensor and pipeline degrees (they must divide the world; one
        process ignores them).
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
            index = cuda_index(local, torch.cuda.device_count())
            torch.cuda.set_device(index)
            dev = torch.device("cuda", index)
        else:
            dev = torch.device("cpu")
        if world == 1:
            tp = pp = 1  # one process holds the whole model (the run's result is the same)
        data_parallel_size(world, tp, pp)  # refuses a world that tp*pp does not divide
        return cls(device=dev, rank=rank, world_size=world, local_rank=local, backend=backend, tp=tp, pp=pp)

    # -- collectives that are no-ops on one process -----------------------------------------
    def sum(self, value: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
        """The sum of ``value`` over ranks (of ``group``; default: all), every rank gets it."""
        if not self.distributed:
            return value
        out = value.detach().clone()
        dist.all_reduce(out, op=dist.ReduceOp.SUM, group=group)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()

    def broadcast_object(self, obj: T) -> T:
        """Rank 0's ``obj`` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def main_decides(self, decide: Callable[[], T]) -> T:
        """``decide()`` run on rank 0 only, its value on every rank. An error on rank 0 is raised on every
        rank too (as a RuntimeError naming it), so no rank is left waiting in the broadcast."""
        value, error = None, None
        if self.is_main:
            try:
                value = decide()
            except Exception as exc:  # noqa: BLE001 - carried to every rank, then raised
                if not self.distributed:
                    raise
                error = f"{type(exc).__name__}: {exc}"
        value, error = self.broadcast_object((value, error))
        if error is not None:
            raise RuntimeError(f"rank 0 failed deciding for every rank: {error}")
        return value

    def gather_object(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order, on every rank (collective)."""
        if not self.distributed:
            return [obj]
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out


def cuda_index(local_rank: int, visible: int) -> int:
    """The GPU this process trains on: the launcher's (:data:`DEVICE_ENV`), else its local rank's."""
    given = os.environ.get(DEVICE_ENV)
    if given is not None:
        index = int(given)
        if not 0 <= index < visible:
            raise ResourceError(f"{DEVICE_ENV}={given} names no GPU of the {visible} this process sees")
        return index
    return local_rank % visible


def mesh_coords(rank: int, dp: int, tp: int) -> tuple[int, int, int]:
    """(pp, dp, tp) coordinates of ``rank`` in :func:`build_mesh`'s layout (row-major, tp innermost)."""
    return rank // (dp * tp), (rank // tp) % dp, rank % tp


class Single:
    """The single-process counterpart of :class:`scaling.trainer.parallel.data_parallel.Parallel`.

    The same hooks (optimizer, no_sync, clipping, scaler), so the loop has no strategy branches.
    """

    strategy = "single"
    is_fsdp = False
    group = None  # no data-parallel group to sum losses over
    loss_group = None
    init_weights = None  # see scaling.trainer.loop.build_parallel_model

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
