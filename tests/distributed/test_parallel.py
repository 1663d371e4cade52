"""Each strategy's gradients on two real gloo processes equal the single-process gradients."""

from __future__ import annotations

import pytest
import torch

from _workers import grads_worker, reference_grads, spawn, tiny_spec


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3", "zero3+offload"])
def test_gradients_match_single_process(strategy: str, tmp_path) -> None:
    torch.set_num_threads(1)
    name, _, offload = strategy.partition("+")
    spec = tiny_spec(name, cpu_offload=bool(offload))
    ref = reference_grads(spec)
    results = spawn(grads_worker, 2, str(tmp_path), spec)
    for rank, grads in enumerate(results):
        assert grads.keys() == ref.keys(), rank
        for name, g in grads.items():
            # Averaged, not summed: a sum would be off by a factor of 2 (FSDP2 on gloo < torch 2.9).
            torch.testing.assert_close(g, ref[name], rtol=1e-5, atol=1e-7, msg=f"rank {rank} {name}")
