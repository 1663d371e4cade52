"""Mixed precision: autocast for the forward pass, FP32 master weights, loss scaling for fp16.

``bf16``: autocast to bfloat16, parameters and optimizer state stay FP32 (bf16 has FP32's
exponent range, so no loss scaling). ``fp16``: autocast to float16 with dynamic loss scaling
(Micikevicius et al. 2018): the scaler multiplies the loss, unscales the gradients before
clipping, skips the step and halves the scale on inf/nan, and doubles it after a clean interval.
``fp32``: no autocast.

``auto`` picks what the training machine runs fast (:func:`resolve`): on CUDA bf16 where the
GPU has it natively, else fp16; on a CPU bf16 only where the cached matmul probe of
:mod:`scaling.trainer.mfu` measures it at least as fast as fp32 (most CPUs without
AVX512-BF16/AMX run bf16 matmuls tens of times slower), else fp32. Entry points that record
runs resolve it before a key is computed, so a run's key carries the precision it trains in.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ContextManager, Optional

import torch

from scaling.trainer.mfu import cpu_peak_flops
from scaling.trainer.spec import precision_problem

if TYPE_CHECKING:
    from scaling.trainer.spec import RunSpec

DTYPES: dict[str, torch.dtype] = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
HALF = ("bf16", "fp16")


def autocast(precision: str, device: torch.device) -> ContextManager[object]:
    """The forward pass's autocast context (a no-op for fp32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[precision])


def uses_loss_scaling(precision: str) -> bool:
    return precision == "fp16"


@dataclass(frozen=True)
class Resolution:
    """What a requested precision trains in on a device, why, and a warning where it is slow."""

    requested: str
    precision: str  # bf16 | fp16 | fp32
    reason: str
    rates: dict[str, float] = field(default_factory=dict)  # probed CPU matmul FLOP/s by precision
    warning: Optional[str] = None


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


def _gflops(rate: float) -> str:
    return f"{rate / 1e9:.3g} GFLOP/s"


def resolve(requested: str, device: str) -> Resolution:
    """The precision a run requesting ``requested`` trains in on ``device`` (cpu | cuda | auto).

    ``device="cuda"`` on a machine without CUDA (a driver planning a GPU sweep) assumes a
    current GPU (Ampere or newer, native bf16). On a CPU the rates compared are one core's: the
    gap comes from the instruction set, a one-thread probe is not thrown off by other processes
    sharing the cores (threads waiting on a descheduled sibling are), and the choice, which
    enters the run's key, must not depend on ``execution.threads``. An explicit bf16 or fp16 on
    a CPU where it is slower than fp32 is kept, with a one-line warning giving both rates.
    """
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if requested != "auto":
            return Resolution(requested, requested, "as requested")
        if not torch.cuda.is_available():
            return Resolution(requested, "bf16", "auto: no GPU on this machine to ask, bf16 assumed (Ampere or newer)")
        gpu = torch.cuda.get_device_name()
        if cuda_has_native_bf16():
            return Resolution(requested, "bf16", f"auto: {gpu} has native bf16")
        return Resolution(requested, "fp16", f"auto: {gpu} has no native bf16, fp16 with loss scaling")
    if requested == "fp32":
        return Resolution(requested, "fp32", "as requested")
    half = "bf16" if requested == "auto" else requested
    rates = {half: cpu_rate(half, 1), "fp32": cpu_rate("fp32", 1)}
    measured = f"{half} matmuls {_gflops(rates[half])} against {_gflops(rates['fp32'])} in fp32 per core"
    fast = rates[half] >= rates["fp32"]
    if requested == "auto":
        return Resolution(requested, "bf16" if fast else "fp32", f"auto: on this CPU {measured}", rates)
    slow = f"precision {requested} is slow on this CPU: {measured}; precision auto or fp32 trains faster"
    warning = None if fast else slow
    return Resolution(requested, requested, "as requested", rates, warning)


def resolve_spec(spec: "RunSpec") -> tuple["RunSpec", Resolution]:
    """``spec`` with its precision resolved for this machine (its key changes when it was auto)."""
    res = resolve(spec.precision, spec.execution.device)
    ex = spec.execution
    problem = precision_problem(res.precision, ex.tp, ex.dp)
    if problem:
        from scaling.errors import SpecError

        raise SpecError(f"precision: {problem}" if spec.precision == res.precision else
                        f"precision: auto chose fp16 ({res.reason}), but {problem}")
    if res.precision != spec.precision:
        spec = spec.model_copy(update={"precision": res.precision})
    return spec, res


def resolve_on_ranks(precision: str, device: torch.device, distributed: bool) -> str:
    """``auto`` resolved inside a (possibly distributed) training process: rank 0 decides for all.

    Reached only when a spec still saying ``auto`` is handed straight to ``train()``; the entry
    points that record runs resolve earlier. Every rank must autocast alike, so rank 0's probe
    decides.
    """
    if precision != "auto":
        return precision
    if not distributed:
        return resolve(precision, device.type).precision
    import torch.distributed as dist

    box: list[Any] = [resolve(precision, device.type).precision if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return str(box[0])
