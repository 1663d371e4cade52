"""The resolver: a RunRequest (may say auto) becomes a concrete RunSpec, every decision made once."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scaling.errors import ResourceError, SpecError
from scaling.trainer.resolve import OFFLINE, Host, NoLayoutError, resolve
from scaling.trainer.spec import RunRequest, RunSpec

FOUR_WAY: dict = {
    "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32},
    "tokens": 32 * 2 * 10,
    "batch_tokens": 32 * 2,  # two sequences: too few for four data-parallel workers
    "execution": {"workers": 4, "device": "cpu"},
}


def test_a_resolved_request_is_a_concrete_spec_that_resolves_to_itself(make_request) -> None:
    done = resolve(make_request(), Host(data=True))
    spec = done.spec
    assert type(spec) is RunSpec and spec.precision in ("bf16", "fp32") and spec.precision == done.precision.precision
    assert spec.data.fingerprint is not None and spec.data.unique_tokens
    assert spec.execution.strategy == "single" and done.choice is not None and done.memory_gib > 0
    again = resolve(spec, Host(data=True))
    assert again.spec == spec and again.spec.key == spec.key and again.precision.reason == "as requested"


def test_a_request_waits_for_its_layout_which_the_resolver_picks() -> None:
    """Four workers cannot share two sequences as data-parallel ranks: a RunSpec refuses that, a
    request under ``strategy: auto`` leaves it to the layout search (tensor or pipeline ranks)."""
    with pytest.raises(SpecError, match="cannot feed 4 workers"):
        RunSpec.from_dict({**FOUR_WAY, "precision": "fp32"})
    request = RunRequest.from_dict(FOUR_WAY)
    assert request.placement_pending() and request.precision == "auto"
    spec = resolve(request, OFFLINE).spec
    ex = spec.execution
    assert type(spec) is RunSpec and spec.precision == "fp32"  # not probed: the larger estimate on a CPU
    assert ex.dp * ex.tp * ex.pp == 4 and ex.dp <= 2 and ex.strategy != "auto"
    assert spec.key == request.model_copy(update={"precision": "fp32"}).key  # the layout is not in the key


def test_the_trainer_strategy_is_the_resolvers() -> None:
    """The layout is decided once, by the resolver: the trainer applies the strategy it places, and
    a RunSpec on several data-parallel ranks cannot leave it as ``auto``."""
    from scaling.trainer.parallel.data_parallel import applied_strategy

    fields = {"model": {"n_layer": 12, "d_model": 768, "n_head": 12, "context": 1024}, "precision": "bf16",
              "tokens": 1024 * 8 * 10, "batch_tokens": 1024 * 8}
    seen = set()
    for gib in (2.6, 2.0, 1.7, 1.55):  # ddp, zero1, zero2 and zero3 fit in turn (1.5 to 2.5 GiB)
        execution = {"workers": 4, "device_memory_gib": gib, "micro_batch_size": 1, "tp": 1, "pp": 1,
                     "pp_schedule": "1f1b", "device": "cpu"}
        planned = resolve(RunRequest.from_dict({**fields, "execution": execution}), OFFLINE).spec
        assert applied_strategy(planned, planned.execution.dp) == planned.execution.strategy
        seen.add(planned.execution.strategy)
        with pytest.raises(SpecError, match="auto is decided by the resolver"):
            RunSpec.from_dict({**fields, "execution": {**execution, "strategy": "auto"}})
    assert len(seen) > 1


def test_a_run_no_layout_fits_is_refused_in_one_line() -> None:
    request = RunRequest.from_dict({**FOUR_WAY, "execution": {"device": "cpu", "device_memory_gib": 0.0001}})
    with pytest.raises(NoLayoutError) as exc:
        resolve(request, OFFLINE)
    assert isinstance(exc.value, ResourceError) and "\n" not in str(exc.value)
    assert "model 2x32 needs an estimated" in str(exc.value) and "execution.device_memory_gib" in str(exc.value)


def test_sizing_a_stored_plan_never_imports_torch() -> None:
    code = (
        "import sys\n"
        "from scaling.orchestrator.expand import size_run\n"
        "plan = {'name': 's', 'model': {'context': 64}, 'train': {'batch_tokens': 1024},"
        " 'grid': [{'models': [1e4], 'tokens': [1e6]}]}\n"
        "out = size_run(plan, 4e4, 1e6, 2.4e11)\n"
        "assert out['strategy'] == 'single' and out['memory_gib'] > 0, out\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_device_rule_decides_precision_layout_memory_and_rate_together() -> None:
    """``device: cuda`` with no GPU reserved (a run trained in place by `scaling train`) is a CUDA run
    throughout: a GPU precision, a GPU machine, the GPU memory model, one GPU's rate and overheads;
    ``device: cpu`` is a CPU run throughout, GPUs reserved or not."""
    from scaling.trainer.resolve import GPU_STEP_SECONDS, GPU_THROUGHPUT_FLOPS, layout_request

    fields = {"model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32}, "tokens": 32 * 2 * 10,
              "batch_tokens": 32 * 2}
    on_gpu = resolve(RunRequest.from_dict({**fields, "execution": {"device": "cuda", "gpus_per_worker": 0}}),
                     OFFLINE)
    request = on_gpu.choice.request
    assert on_gpu.spec.precision == "bf16" and request.device == "cuda" and request.machine.intra == "nvlink"
    assert request.rate == GPU_THROUGHPUT_FLOPS["bf16"] and request.step_overhead_s == GPU_STEP_SECONDS
    on_cpu = layout_request(RunRequest.from_dict({**fields, "precision": "fp32",
                                                  "execution": {"device": "cpu", "gpus_per_worker": 1}}), OFFLINE)
    assert on_cpu.device == "cpu" and on_cpu.machine.intra == "loopback_gloo" and on_cpu.rate < request.rate
