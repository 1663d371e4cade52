"""MFU: the CPU peak is probed once and cached; the environment overrides it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scaling.trainer import mfu


def test_cpu_peak_is_probed_once_and_cached(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("SCALING_PEAK_FLOPS", raising=False)
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path))
    calls: list[int] = []
    real = mfu.probe_cpu_flops

    def counting(dtype: torch.dtype, threads: int, seconds: float = 0.3) -> float:
        calls.append(threads)
        return real(dtype, threads, seconds=0.03)

    monkeypatch.setattr(mfu, "probe_cpu_flops", counting)
    first = mfu.peak_flops(torch.device("cpu"), "fp32", threads=1)
    second = mfu.peak_flops(torch.device("cpu"), "fp32", threads=1)
    assert first == second > 1e8 and calls == [1]
    assert len(json.loads((tmp_path / "peak_flops.json").read_text())) == 1
    monkeypatch.setenv("SCALING_PEAK_FLOPS", "2e12")
    assert mfu.peak_flops(torch.device("cpu"), "bf16") == 2e12


def test_mfu_ratio() -> None:
    assert mfu.mfu(1000.0, 6e6, 1e10) == pytest.approx(0.6)
    assert mfu.mfu(1000.0, 6e6, 1e10, devices=2) == pytest.approx(0.3)
    assert mfu.mfu(1000.0, 6e6, None) is None
    assert mfu.GPU_PEAK_FLOPS["H200"]["bf16"] == 989e12


def test_the_probe_never_starts_a_size_whose_matmul_would_overrun_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # A dtype without native support (bf16 on most CPUs) would otherwise take seconds at n=1024.
    sizes: list[int] = []
    real_mm = torch.mm

    def recording(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        sizes.append(a.shape[0])
        return real_mm(a, b)

    monkeypatch.setattr(torch, "mm", recording)
    assert mfu.probe_cpu_flops(torch.float32, 1, seconds=1e-4, sizes=(64, 4096)) > 0
    assert set(sizes) == {64}


@pytest.mark.parametrize("name, bf16", [
    ("NVIDIA H100 80GB HBM3", 989e12),  # SXM
    ("NVIDIA H100 NVL", 835e12),
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H200", 989e12),
    ("NVIDIA H200 NVL", 835e12),
    ("NVIDIA GH200 480GB", 989e12),
    ("NVIDIA H800", 989e12),
    ("NVIDIA H800 PCIe", 756e12),
    ("NVIDIA H20", 148e12),  # no H200, though "H20" is inside "H200"
    ("NVIDIA L40S", 362e12),
    ("NVIDIA B200", 2250e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA A100 80GB PCIe", 312e12),
])
def test_each_gpu_name_finds_its_own_dense_peak(name: str, bf16: float) -> None:
    peaks = mfu.gpu_peaks(name)
    assert peaks is not None and peaks["bf16"] == bf16


def test_an_unknown_gpu_has_no_peak() -> None:
    assert mfu.gpu_peaks("NVIDIA GeForce RTX 4090") is None
    assert mfu.gpu_peaks("NVIDIA L40") is None  # the L40 is not the L40S
