"""Multi-worker models are built on the meta device, sharded, then materialized and initialized:
the weights every rank ends up with are exactly those of the single-process build."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from _workers import build_model, meta_build_worker, placed_spec, spawn, tiny_spec
from scaling.trainer.spec import RunSpec


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


# -- pipeline stages: each rank builds its stages on meta and materializes only those ---------------
PIPE_MODEL = {"n_layer": 4, "d_model": 32, "n_head": 2, "vocab_size": 256, "context": 16}


def pipe_spec(workers: int, schedule: str = "1f1b", strategy: str = "auto", **execution: Any) -> RunSpec:
    return placed_spec({
        "model": PIPE_MODEL, "tokens": 16 * 8 * 10, "batch_tokens": 16 * 8, "precision": "fp32",
        "execution": {"workers": workers, "pp": 2, "pp_schedule": schedule, "strategy": strategy,
                      "micro_batch_size": 2, **execution},
    })


def pipeline_build_worker(rank: int, world: int, specs: list[RunSpec]) -> list[dict[str, torch.Tensor]]:
    """Each spec's pipeline stages as this rank builds them, gathered whole (name -> full tensor)."""
    from scaling.trainer.parallel.pipeline import build_pipeline
    from scaling.trainer.runtime import Runtime

    out = []
    for s in specs:
        pipe = build_pipeline(s, Runtime.current("cpu"))
        held: dict[str, torch.Tensor] = {}
        for stage in pipe.stage_modules:
            if stage.last:
                assert stage.lm_head.weight is stage.wte.weight  # still tied
            for name, p in stage.named_parameters():
                assert p.device.type == "cpu"
                held[name] = (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        out.append(held)
    return out


#: One world of four: pp2 x dp2 under FSDP2 (sharded on meta) and DDP (interleaved stages), and
#: pp2 x tp2 (one data-parallel rank).
PIPE_CASES = [pipe_spec(4, strategy="zero3"), pipe_spec(4, "interleaved_1f1b", strategy="ddp"), pipe_spec(4, tp=2)]


def test_pipeline_stages_have_the_single_process_weights(tmp_path) -> None:
    """Every stage's weights, the tied embedding on the first and the last stage included, are
    the single-process build's."""
    cases, world = PIPE_CASES, 4
    reference = dict(build_model(cases[0]).named_parameters())
    outs = spawn(pipeline_build_worker, world, str(tmp_path), cases)
    for i, s in enumerate(cases):
        seen: set[str] = set()
        for rank in range(world):
            held = outs[rank][i]
            assert len(held) < len(reference)  # a rank holds its stages only
            for name, full in held.items():
                assert torch.equal(full, reference[name].detach()), (s.execution, rank, name)
            seen |= held.keys()
        assert seen == reference.keys()
