"""The resolver's `auto` picks the fastest strategy the memory model says fits (the least sharding at a tight
budget); the trainer applies the strategy it is given; bad choices are user errors."""

from __future__ import annotations

import pytest

from scaling.accounting import GIB
from scaling.memory import estimate_memory
from scaling.errors import ResourceError, SpecError
from scaling.trainer.parallel.data_parallel import applied_strategy, default_backend, transformer_blocks
from scaling.trainer.resolve import OFFLINE, resolve
from scaling.trainer.spec import RunRequest, RunSpec


def _spec(memory_gib: float | None, strategy: str = "auto") -> RunSpec:
    return (RunRequest if strategy == "auto" else RunSpec).from_dict(
        {
            "model": {"n_layer": 12, "d_model": 768, "n_head": 12, "context": 1024},
            "precision": "bf16",  # the memory figures below are bf16's
            "tokens": 1024 * 8 * 10,
            "batch_tokens": 1024 * 8,
            "execution": {"workers": 4, "strategy": strategy, "device_memory_gib": memory_gib, "micro_batch_size": 1,
                          "tp": 1, "pp": 1},
        }
    )


@pytest.mark.parametrize("expected", ["ddp", "zero1", "zero2", "zero3"])
def test_auto_picks_the_least_sharding_that_fits_a_tight_budget(expected: str) -> None:
    spec = _spec(None)
    # A budget just above the estimate of the expected stage (and below the less sharded ones).
    need = estimate_memory(spec.shape, 1, spec.precision, expected, 4).total_bytes
    assert resolve(_spec(need * 1.001 / GIB), OFFLINE).spec.execution.strategy == expected


def test_auto_fails_clearly_when_nothing_fits() -> None:
    with pytest.raises(ResourceError, match="needs an estimated"):
        resolve(_spec(0.01), OFFLINE)


def test_a_run_spec_on_several_workers_names_its_strategy() -> None:
    """The layout is decided once, by the resolver: a RunSpec cannot leave it to the trainer."""
    with pytest.raises(SpecError, match="auto is decided by the resolver"):
        RunSpec.from_dict(_spec(80.0).model_dump())


def test_one_worker_is_single_and_single_needs_one_worker() -> None:
    assert applied_strategy(_spec(80.0, "zero3"), 1) == "single"
    assert applied_strategy(_spec(80.0, "zero3"), 4) == "zero3"
    with pytest.raises(SpecError, match="single"):
        applied_strategy(_spec(80.0, "single"), 4)


def test_backend_follows_the_device() -> None:
    assert default_backend("cpu") == "gloo"
    assert default_backend("cuda") == "nccl"


def test_each_transformer_block_is_one_fsdp_unit() -> None:
    from scaling.trainer.families.model import build_model

    model = build_model(_spec(1.0).shape, 0)
    assert transformer_blocks(model) == list(model.blocks)
