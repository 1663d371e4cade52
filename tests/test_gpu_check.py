"""The prepared GPU check runs end to end on the CPU (its dry run): every check prints one line
and none fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.ray  # its sweep starts a Ray of its own, in a subprocess
def test_the_gpu_check_passes_its_own_dry_run() -> None:
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                          timeout=900)
    lines = proc.stdout.strip().splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    names = [line.split(":", 1)[0].split(" ", 1)[1].strip() for line in lines]
    assert names == ["bf16 flash_attn", "bf16 sdpa", "fp16 loss scaling", "resume from a checkpoint",
                     "two-run sweep through Ray", "GPU-only tests"], lines
    assert all(line.split()[0] in ("PASS", "SKIP") for line in lines), lines
    assert "tokens/s" in lines[1] and "MFU" in lines[1]
