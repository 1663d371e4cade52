"""Causal attention kernels both model families share: flash-attn's where it runs, else SDPA.

flash-attn's kernel runs when it is installed, the tensors are on an Ampere or newer GPU in
bf16/fp16 and heads are at most 256 wide (what flash-attn 2 supports), else PyTorch's
``scaled_dot_product_attention`` (:func:`attention_kernel` decides; ``SCALING_ATTENTION=sdpa``
forces SDPA, to compare the two). Grouped-query attention (fewer key/value heads than query
heads) goes to flash-attn as it is and to SDPA with ``enable_gqa``.
"""

from __future__ import annotations

import functools
import math
import os

import torch
import torch.nn.functional as F

try:  # optional: only on CUDA machines where it was installed (the `gpu` extra)
    from flash_attn import flash_attn_func as _flash_attn_func
except ImportError:  # pragma: no cover - depends on the machine
    _flash_attn_func = None


def masked_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Plain causal attention on (B, h, T, hs) tensors: the reference the fast kernels must match."""
    t = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v


#: The widest head flash-attn 2's kernels take.
FLASH_MAX_HEAD_DIM = 256
#: Set to ``sdpa`` to use PyTorch's attention even where flash-attn would run.
ATTENTION_ENV = "SCALING_ATTENTION"


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def attention_kernel(head_dim: int, device: torch.device, dtype: torch.dtype, *,
                     capability: tuple[int, int] | None = None, flash_installed: bool | None = None) -> str:
    """``flash_attn`` or ``sdpa``: which kernel attention on ``device`` in ``dtype`` runs.

    flash-attn 2 needs a GPU of compute capability 8.0 or more (Ampere), half precision and
    heads of at most :data:`FLASH_MAX_HEAD_DIM`. ``capability`` and ``flash_installed``
    default to this machine's."""
    if flash_installed is None:
        flash_installed = _flash_attn_func is not None
    if (not flash_installed or device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16)
            or head_dim > FLASH_MAX_HEAD_DIM or os.environ.get(ATTENTION_ENV) == "sdpa"):
        return "sdpa"
    if capability is None:
        capability = _capability(device.index if device.index is not None else torch.cuda.current_device())
    return "flash_attn" if capability >= (8, 0) else "sdpa"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention on (B, h, T, hs) queries and (B, h_kv, T, hs) keys and values (h_kv
    divides h; each group of h / h_kv query heads shares one key/value head) with the fastest
    kernel available."""
    if q.is_cuda and attention_kernel(q.size(-1), q.device, q.dtype) == "flash_attn":
        # flash-attn wants (B, T, h, hs), and takes fewer key/value heads as they are.
        out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
        return out.transpose(1, 2)
    if k.size(1) != q.size(1):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)
