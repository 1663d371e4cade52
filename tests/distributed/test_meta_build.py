"""Multi-worker models are built on the meta device, sharded, then materialized and initialized:
the weights every rank ends up with are exactly those of the single-process build."""

from __future__ import annotations

import pytest
import torch

from _workers import build_model, meta_build_worker, spawn, tiny_spec


@pytest.mark.parametrize("strategy, execution", [
    ("ddp", {}),
    ("zero1", {}),
    ("zero2", {}),
    ("zero3", {}),
    ("zero3", {"cpu_offload": True}),
    ("zero3", {"tp": 2}),  # one data-parallel rank: tensor parallelism only
])
def test_the_sharded_build_has_the_single_process_weights(strategy: str, execution: dict, tmp_path) -> None:
    spec = tiny_spec(strategy, **execution)
    reference = dict(build_model(spec).named_parameters())
    for rank_view in spawn(meta_build_worker, 2, str(tmp_path), spec.model_dump_json()):
        assert rank_view.keys() == reference.keys()
        for name, full in rank_view.items():
            assert torch.equal(full, reference[name].detach()), name
