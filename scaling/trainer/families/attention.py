"""Causal attention kernels both model families share: flash-attn's where it runs, else SDPA.

flash-attn's kernel runs when it is installed, the tensors are on a GPU it lists (Ampere, Ada,
Hopper: :data:`FLASH_CAPABILITIES`) in bf16/fp16 and heads are at most 256 wide (what flash-attn 2 supports; heads wider than 192 only
on sm80 or sm90, the GPUs its backward kernels for them are built for), and, under
``torch.compile``, flash-attn is 2.7 or newer (older releases are no custom op, and the compiled
graph breaks at every layer); else PyTorch's ``scaled_dot_product_attention``
(:func:`attention_choice` decides and says why; ``SCALING_ATTENTION=sdpa`` forces SDPA, to
compare the two). Grouped-query attention (fewer key/value heads than query
heads) goes to flash-attn as it is and to SDPA with ``enable_gqa``.
"""

from __future__ import annotations

import functools
import math
import os
import re

import torch
import torch.nn.functional as F

try:  # optional: only on CUDA machines where it was installed (the `gpu` extra)
    from flash_attn import __version__ as _flash_attn_version
    from flash_attn import flash_attn_func as _flash_attn_func
except ImportError:  # pragma: no cover - depends on the machine
    _flash_attn_func = None
    _flash_attn_version = None


def masked_softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                             scale: float | None = None) -> torch.Tensor:
    """Plain causal attention on (B, h, T, hs) tensors: the reference the fast kernels must match.
    ``scale`` multiplies the logits (default 1/sqrt(hs))."""
    t = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)) if scale is None else scale)
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(v.dtype) @ v


#: The widest head flash-attn 2's kernels take.
FLASH_MAX_HEAD_DIM = 256
#: Heads wider than this need flash-attn's sm80/sm90 backward kernels. Its README: "Head dim > 192
#: backward requires A100/A800 or H100/H800"; it adds that head dim 256 works on consumer GPUs
#: without dropout from 2.5.5, which this gate leaves to SDPA (one rule for every release).
FLASH_WIDE_HEAD_DIM = 192
#: The GPUs (compute capability) flash-attn 2 runs on: its README's "Ampere, Ada, or Hopper GPUs"
#: (sm80 A100, sm86 RTX 30xx/A40, sm87 Orin, sm89 RTX 40xx/L4/L40, sm90 H100/H200). Newer ones
#: (Blackwell, sm100 and sm120) are not in its list: their wheels and kernels are not flash-attn 2's
#: verified targets, so they get SDPA (whose cuDNN and flash backends PyTorch builds for them).
FLASH_CAPABILITIES = ((8, 0), (8, 6), (8, 7), (8, 9), (9, 0))
#: The GPUs (compute capability) flash-attn 2 builds its backward for heads wider than 192 for.
FLASH_WIDE_HEAD_CAPABILITIES = ((8, 0), (9, 0))
#: The first flash-attn release registered as a torch custom op (traced whole by ``torch.compile``).
FLASH_COMPILE_VERSION = (2, 7)
#: Set to ``sdpa`` to use PyTorch's attention even where flash-attn would run.
ATTENTION_ENV = "SCALING_ATTENTION"


@functools.lru_cache(maxsize=None)
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def version_tuple(version: str) -> tuple[int, ...]:
    """``"2.6.3.post1"`` -> ``(2, 6, 3)``: the leading numeric parts of a release string."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
        if digits.group() != part:
            break
    return tuple(parts)


def attention_choice(head_dim: int, device: torch.device, dtype: torch.dtype, *, compiled: bool = False,
                     capability: tuple[int, int] | None = None,
                     flash_version: str | None | bool = True) -> tuple[str, str]:
    """(``flash_attn`` or ``sdpa``, why): which kernel attention on ``device`` in ``dtype`` runs.

    ``compiled``: the forward runs under ``torch.compile``. ``capability`` defaults to this
    machine's GPU; ``flash_version`` to the installed flash-attn's release (``None``: not
    installed)."""
    if flash_version is True:
        flash_version = _flash_attn_version if _flash_attn_func is not None else None
    if os.environ.get(ATTENTION_ENV) == "sdpa":
        return "sdpa", f"{ATTENTION_ENV}=sdpa forces it"
    if flash_version is None:
        return "sdpa", "flash-attn is not installed"
    if device.type != "cuda":
        return "sdpa", f"flash-attn runs on CUDA only, not {device.type}"
    if dtype not in (torch.bfloat16, torch.float16):
        return "sdpa", f"flash-attn takes bf16/fp16, not {str(dtype).removeprefix('torch.')}"
    if head_dim > FLASH_MAX_HEAD_DIM:
        return "sdpa", f"head dim {head_dim} is wider than flash-attn's {FLASH_MAX_HEAD_DIM}"
    if capability is None:
        capability = _capability(device.index if device.index is not None else torch.cuda.current_device())
    sm = f"sm{capability[0]}{capability[1]}"
    if tuple(capability) not in FLASH_CAPABILITIES:
        listed = ", ".join(f"sm{a}{b}" for a, b in FLASH_CAPABILITIES)
        return "sdpa", f"flash-attn 2 is verified on {listed} (Ampere, Ada, Hopper), this GPU is {sm}"
    if head_dim > FLASH_WIDE_HEAD_DIM and tuple(capability) not in FLASH_WIDE_HEAD_CAPABILITIES:
        return "sdpa", (f"head dim {head_dim} > {FLASH_WIDE_HEAD_DIM}: flash-attn's backward for it is built "
                        f"for sm80/sm90 only, this GPU is {sm}")
    if compiled and version_tuple(flash_version) < FLASH_COMPILE_VERSION:
        return "sdpa", (f"flash-attn {flash_version} is older than 2.7 and breaks the compiled graph "
                        "at every layer (compile is on)")
    return "flash_attn", f"flash-attn {flash_version} on {sm}, head dim {head_dim}, {str(dtype).removeprefix('torch.')}"


def attention_kernel(head_dim: int, device: torch.device, dtype: torch.dtype, *, compiled: bool = False,
                     capability: tuple[int, int] | None = None, flash_installed: bool | None = None,
                     flash_version: str | None = None) -> str:
    """``flash_attn`` or ``sdpa`` (:func:`attention_choice` without the why). ``flash_installed``
    False says flash-attn is absent; ``flash_version`` gives the installed release (default:
    this machine's, or a current one where ``flash_installed`` alone is given)."""
    version: str | None | bool = True
    if flash_installed is False:
        version = None
    elif flash_version is not None:
        version = flash_version
    elif flash_installed:
        version = _flash_attn_version or "2.7"
    return attention_choice(head_dim, device, dtype, compiled=compiled, capability=capability, flash_version=version)[0]


def planned_attention(head_dim: int, device: str, precision: str, compiled: bool) -> str:
    """``KERNEL (why)``: the kernel a run on ``device`` (cpu | cuda) in ``precision`` gets on
    this machine (`scaling plan` prints it), or why this machine cannot tell."""
    if device == "cuda" and not torch.cuda.is_available():
        return "not known here, this machine has no GPU to ask (flash_attn where the workers' GPUs take it, else sdpa)"
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    kernel, why = attention_choice(head_dim, torch.device(device), dtype, compiled=compiled)
    return f"{kernel} ({why})"


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None) -> torch.Tensor:
    """Causal attention on (B, h, T, hs) queries and (B, h_kv, T, hs) keys and values (h_kv
    divides h; each group of h / h_kv query heads shares one key/value head) with the fastest
    kernel available. ``scale`` multiplies the logits (default 1/sqrt(hs); μP's is 1/hs)."""
    compiled = torch.compiler.is_compiling()
    if q.is_cuda and attention_kernel(q.size(-1), q.device, q.dtype, compiled=compiled) == "flash_attn":
        # flash-attn wants (B, T, h, hs), and takes fewer key/value heads as they are.
        out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True,
                               softmax_scale=scale)
        return out.transpose(1, 2)
    if k.size(1) != q.size(1):
        if not expands_groups(q):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True, scale=scale)
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def expands_groups(q: torch.Tensor) -> bool:
    """Whether grouped-query attention repeats each key/value head over its group before SDPA:
    on CUDA in FP32, where SDPA's flash kernel does not run (16-bit only) and its memory-efficient
    one, which does, takes no ``enable_gqa``, so grouped heads would fall back to the math kernel
    and keep an s x s softmax per head. Repeated heads cost 2 (h - h_kv) head widths more per
    token (``scaling.memory.layer_activation_bytes`` counts them); the CPU's fused kernel and the
    16-bit CUDA kernels take the groups as they are."""
    return q.is_cuda and q.dtype == torch.float32
