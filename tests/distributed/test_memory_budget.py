"""The memory budget ``auto`` plans against: free GPU memory less a margin, the same on every rank."""

from __future__ import annotations

from _workers import memory_budget_worker, spawn

from scaling.accounting import GIB
from scaling.trainer.probe import GPU_MEMORY_MARGIN_BYTES, gpu_budget


def test_every_rank_plans_against_the_fullest_device(tmp_path) -> None:
    """Ranks whose devices have different free memory must still choose one strategy."""
    assert spawn(memory_budget_worker, 2, str(tmp_path)) == [1000.0, 1000.0]


def test_the_budget_is_free_memory_less_the_margin() -> None:
    assert gpu_budget(80 * GIB) == 80 * GIB - GPU_MEMORY_MARGIN_BYTES
    assert gpu_budget(GIB) == 0.0  # another process holds nearly everything
