"""What only a GPU can show: flash-attn against SDPA, a step's host synchronizations, the GPU's
generator state in checkpoints, fp16's device-side skip. Skipped without CUDA; run by
``scripts/gpu-check.sh`` on a GPU machine."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

TINY = {
    "model": {"n_layer": 2, "d_model": 128, "n_head": 2, "context": 128},
    "tokens": 128 * 8 * 16, "batch_tokens": 128 * 8, "eval_tokens": 128 * 16, "optimizer": {"lr": 1e-3},
    "execution": {"device": "cuda", "log_interval": 8, "eval_interval": 8, "checkpoint_interval": 8},
}


def _spec(**over):
    from scaling.trainer.spec import RunSpec

    return RunSpec.from_dict({**TINY, **over})


def test_flash_attention_matches_sdpa() -> None:
    from scaling.trainer.families import model

    if model.attention_kernel(64, torch.device("cuda"), torch.bfloat16) != "flash_attn":
        pytest.skip("flash-attn is not installed or this GPU is older than Ampere")
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 4, 256, 64, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(3))
    flash = model.causal_attention(q, k, v)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(flash, sdpa, atol=2e-2, rtol=2e-2)


def test_a_quiet_step_synchronizes_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The one read of a quiet step is the previous step's loss (lagged); no synchronize, no norm read."""
    monkeypatch.setenv("SCALING_PEAK_FLOPS", "1e14")
    from scaling.trainer.loop import Trainer

    trainer = Trainer(_spec(precision="bf16"), None, tmp_path)
    trainer.start()
    trainer.step_once()
    counts = []
    for _ in range(5):  # steps 2..6: neither logged, evaluated nor checkpointed
        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                trainer.step_once()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts.append(sum("synchroniz" in str(w.message) for w in seen))
    assert all(n <= 1 for n in counts), counts


def test_checkpoints_keep_this_gpus_generator_and_restore_an_older_many_gpu_entry() -> None:
    from scaling.trainer.checkpoints import checkpoint
    from scaling.trainer.runtime import Runtime

    rt = Runtime.current("cuda")
    state = checkpoint.rng_state(rt.device)
    assert isinstance(state["cuda"], torch.Tensor)  # this device's alone
    older = {"cpu": torch.get_rng_state(), "cuda": [torch.cuda.get_rng_state(rt.device)] * 8}  # saved on 8 GPUs
    assert checkpoint.restore_rng(older, rt) is None
    assert checkpoint.restore_rng({"ranks": [{k: v.cpu() for k, v in state.items()}]}, rt) is None


def test_fp16_overflow_is_skipped_on_the_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCALING_PEAK_FLOPS", "1e14")
    from scaling.trainer.loop import Trainer

    result = Trainer(_spec(precision="fp16", faults={"overflow_steps": [5]}), None, tmp_path).fit()
    assert result.status == "completed" and result.overflow_skips == 1


def test_a_gpu_run_draws_its_weights_on_the_gpu() -> None:
    """The single process and the meta-device build (what sharded ranks replay) draw the seed's
    weights on the GPU alike; none passes through the CPU's generator, which is left as it was."""
    from scaling.trainer.loop import build_parallel_model
    from scaling.trainer.families.model import build_model
    from scaling.trainer.runtime import Runtime

    spec = _spec(precision="bf16")
    cpu_state = torch.random.get_rng_state()
    cuda_state = torch.cuda.get_rng_state()
    single = build_model(spec.shape, spec.seed, "cuda")
    par = build_parallel_model(spec, Runtime.current("cuda"), initialize=False)
    par.init_weights()
    assert torch.equal(torch.random.get_rng_state(), cpu_state) and torch.equal(torch.cuda.get_rng_state(), cuda_state)
    on_cpu = build_model(spec.shape, spec.seed)
    for name, p in single.named_parameters():
        assert p.device.type == "cuda", name
        assert torch.equal(p, par.model.get_parameter(name)), name
    assert not torch.equal(single.wte.weight.cpu(), on_cpu.wte.weight)  # the GPU's own numbers
    assert single.lm_head.weight is single.wte.weight
