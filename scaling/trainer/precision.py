"""Mixed precision: autocast for the forward pass, FP32 master weights, loss scaling for fp16.

``bf16``: autocast to bfloat16, parameters and optimizer state stay FP32 (bf16 has FP32's
exponent range, so no loss scaling). ``fp16``: autocast to float16 with dynamic loss scaling
(Micikevicius et al. 2018): the scaler multiplies the loss, unscales the gradients before
clipping, skips the step and halves the scale on inf/nan, and doubles it after a clean interval.
``fp32``: no autocast.

``auto`` is decided by :func:`scaling.trainer.resolve.decide_precision` from this module's
probes: on CUDA bf16 where the GPU has it natively (:func:`cuda_has_native_bf16`), else fp16; on
a CPU bf16 only where the cached matmul probe (:func:`cpu_rate`) measures it at least as fast
as fp32 (most CPUs without AVX512-BF16/AMX run bf16 matmuls tens of times slower), else fp32.
It is decided before a key is computed, so a run's key carries the precision it trains in.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

from scaling.trainer.mfu import cpu_peak_flops

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HALF = ("bf16", "fp16")


def autocast(precision: str, device: torch.device) -> ContextManager[object]:
    """The forward pass's autocast context (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def uses_loss_scaling(precision: str) -> bool:
    return precision == "fp16"


def cpu_rate(precision: str, threads: int) -> float:
    """Matmul FLOP/s of this CPU in ``precision`` at ``threads`` threads (probed once, cached)."""
    if precision not in DTYPES:
        raise ValueError(f"no matmul rate for precision {precision!r} (resolve auto first)")
    return cpu_peak_flops(precision, threads)


def cuda_has_native_bf16() -> bool:
    """Whether this machine's GPU runs bf16 natively (compute capability 8.0+, not emulated)."""
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # torch without the keyword: no emulation to exclude
        return bool(torch.cuda.is_bf16_supported())
