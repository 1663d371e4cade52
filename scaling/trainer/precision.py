"""Mixed precision: autocast for the forward pass, FP32 master weights, loss scaling for fp16.

``bf16``: autocast to bfloat16, parameters and optimizer state stay FP32 (bf16 has FP32's
exponent range, so no loss scaling). ``fp16``: autocast to float16 with dynamic loss scaling
(Micikevicius et al. 2018): the scaler multiplies the loss, unscales the gradients before
clipping, skips the step and halves the scale on inf/nan, and doubles it after a clean interval.
``fp32``: no autocast.
"""

from __future__ import annotations

import contextlib
from typing import ContextManager

import torch

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def autocast(precision: str, device: torch.device) -> ContextManager[object]:
    """The forward pass's autocast context (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def uses_loss_scaling(precision: str) -> bool:
    return precision == "fp16"
