"""What this machine offers a run: the memory one worker may use, agreed over the ranks.

The resolver (`scaling.trainer.resolve`) and the trainer's strategy (`scaling.trainer.parallel.data_parallel`)
both ask it; it imports torch, so torch-free planning never does.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

from scaling.accounting import GIB


#: GPU memory kept back from the budget: NCCL's communicator buffers, the caching allocator's
#: fragmentation and the CUDA context of a process that has not created it yet.
GPU_MEMORY_MARGIN_BYTES = 2 * GIB


def gpu_budget(free: float, margin: float = GPU_MEMORY_MARGIN_BYTES) -> float:
    """What a run may plan to use on a GPU with ``free`` bytes free (another process's memory,
    and this one's context, are not free)."""
    return max(0.0, free - margin)


def device_memory_bytes(spec: Any, device: torch.device) -> float:
    """Memory one worker may use, for ``auto``: the spec's figure, the GPU's free memory less
    :data:`GPU_MEMORY_MARGIN_BYTES`, or RAM / local workers.

    In a distributed run every rank calls it (collective) and gets the smallest over ranks: the
    ranks must choose the same strategy, and the fullest device is the one that must fit."""
    if spec.execution.device_memory_gib is not None:
        return spec.execution.device_memory_gib * GIB
    if device.type == "cuda":
        budget = gpu_budget(float(torch.cuda.mem_get_info(device)[0]))
    else:
        local = int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size() if dist.is_initialized() else 1))
        budget = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / max(1, local)
    return smallest_over_ranks(budget, device)


def smallest_over_ranks(value: float, device: torch.device) -> float:
    """The minimum of ``value`` over all ranks, on every rank (``value`` itself on one process)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(box, op=dist.ReduceOp.MIN)
    return float(box.item())
