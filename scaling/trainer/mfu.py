"""Model FLOPs utilization: achieved model FLOPs per second over the device's peak.

The model FLOPs per token come from :mod:`scaling.accounting` (``Shape.model_flops_per_token``:
PaLM's count, Chowdhery et al. 2022, App. B, as nanoGPT's ``estimate_mfu`` makes it: 6 per matmul
parameter, the output layer included and no embedding lookup, plus 12 L H Q T for attention). Peaks: ``$SCALING_PEAK_FLOPS`` when set (FLOP/s per
device); a table of dense tensor-core peaks for known GPUs; for the CPU a peak measured once by
a matmul probe at the run's thread count and dtype, cached in
``$SCALING_CACHE_DIR`` (default ``~/.cache/scaling``)/``peak_flops.json``.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from pathlib import Path

import torch

from scaling.trainer.cache import cache_dir

#: Dense (no sparsity) tensor-core peak FLOP/s per GPU, from the vendor data sheets, keyed by the
#: words of the name ``torch.cuda.get_device_name`` reports (e.g. "NVIDIA H100 80GB HBM3" for an
#: SXM H100). Matched in order, most specific first (:func:`gpu_peaks`): "H100 NVL" before
#: "H100", and whole words only, so "H200" is no "H20". fp32 is the non-tensor-core rate; a part
#: whose sheet gives none has no fp32 entry (its MFU is then not reported).
GPU_PEAK_FLOPS: dict[str, dict[str, float]] = {
    "B200": {"bf16": 2250e12, "fp16": 2250e12},
    "GH200": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "H200 NVL": {"bf16": 835e12, "fp16": 835e12, "fp32": 60e12},
    "H200": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},
    "H100 NVL": {"bf16": 835e12, "fp16": 835e12, "fp32": 60e12},
    "H100 PCIe": {"bf16": 756e12, "fp16": 756e12, "fp32": 51e12},
    "H100": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},  # SXM
    "H800 PCIe": {"bf16": 756e12, "fp16": 756e12, "fp32": 51e12},
    "H800": {"bf16": 989e12, "fp16": 989e12, "fp32": 67e12},  # SXM
    "H20": {"bf16": 148e12, "fp16": 148e12, "fp32": 44e12},
    "L40S": {"bf16": 362e12, "fp16": 362e12, "fp32": 91.6e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
    "A800": {"bf16": 312e12, "fp16": 312e12, "fp32": 19.5e12},
}


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s\-_]+", name.upper()) if w]


def gpu_peaks(name: str) -> dict[str, float] | None:
    """The :data:`GPU_PEAK_FLOPS` entry of the GPU called ``name`` (None: not in the table)."""
    words = set(_words(name))
    for key, peaks in GPU_PEAK_FLOPS.items():
        if set(_words(key)) <= words:
            return peaks
    return None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def probe_cpu_flops(
    dtype: torch.dtype, threads: int, seconds: float = 0.3, sizes: tuple[int, ...] = (256, 512, 1024)
) -> float:
    """Best matmul FLOP/s over ``sizes`` at ``threads`` threads: the CPU's practical peak.

    Timed in process CPU time (summed over threads, hence the factor ``threads``), so a probe
    taken while other processes share the cores still measures what the cores can do. A dtype
    without native support (bf16 on a CPU without AVX512-BF16/AMX runs ~50x slower than fp32)
    stops before the next size's single matmul would overrun its share of ``seconds``, so the
    probe stays well under a second either way.
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    best = 0.0
    budget = seconds / len(sizes)
    try:
        for i, n in enumerate(sizes):
            a = torch.randn(n, n).to(dtype)
            b = torch.randn(n, n).to(dtype)
            torch.mm(a, b)  # warm up
            iters, wall, cpu = 0, time.perf_counter(), time.process_time()
            while time.perf_counter() - wall < budget or iters < 2:
                torch.mm(a, b)
                iters += 1
            per_mm = (time.perf_counter() - wall) / iters
            used = max(time.process_time() - cpu, 1e-9)
            best = max(best, 2.0 * n**3 * iters * threads / used)
            nxt = sizes[i + 1] if i + 1 < len(sizes) else None
            if nxt is not None and per_mm * (nxt / n) ** 3 > budget:
                break
    finally:
        torch.set_num_threads(previous)
    return best


def cpu_peak_flops(precision: str, threads: int) -> float:
    """The probed CPU peak for the dtype the matmuls run in, measured once and cached.

    ``scaling.trainer.precision`` compares the bf16 and fp32 entries to resolve ``auto``.
    """
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    key = f"{_cpu_name()}|{dtype}|threads={threads}|torch={torch.__version__}"
    path = cache_dir() / "peak_flops.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    if key not in table:
        table[key] = probe_cpu_flops(dtype, threads)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(json.dumps(table, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # an unwritable cache costs a probe next time, nothing else
    return float(table[key])


def peak_flops(device: torch.device, precision: str, threads: int = 1) -> float | None:
    """Peak FLOP/s of one device for ``precision``; None for an unknown GPU."""
    env = os.environ.get("SCALING_PEAK_FLOPS")
    if env:
        return float(env)
    if device.type == "cuda":
        peaks = gpu_peaks(torch.cuda.get_device_name(device))
        return None if peaks is None else peaks.get(precision)
    return cpu_peak_flops(precision, threads)


def mfu(tokens_per_s: float, model_flops_per_token: float, peak: float | None, devices: int = 1) -> float | None:
    """Achieved / peak, with ``tokens_per_s`` summed over ``devices`` devices."""
    if not peak:
        return None
    return tokens_per_s * model_flops_per_token / (peak * devices)
