"""``execution.compile`` on the CPU: a model compiled by inductor trains as eager does.

Compiling takes most of a minute per family on a CPU, so one family is compiled: llama with GQA and
qk_norm, whose blocks run the project's own autograd functions (RoPE, and RMSNorm's written-out
backward); gpt2's blocks are torch's own modules (LayerNorm, GELU, SDPA), which inductor's own tests
compile. The run is kept to three steps of the smallest model. Inductor's CPU backend needs a C++
compiler: without one the test says so and skips.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from scaling.trainer import loop


def _inductor_problem() -> str | None:
    """Why inductor cannot compile for the CPU here (None: it can)."""
    try:
        import torch._inductor  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the build
        return f"torch without inductor ({exc})"
    if not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return "no C++ compiler on PATH (inductor's CPU backend builds its kernels with one)"
    return None


@pytest.mark.slow
def test_a_compiled_model_trains_as_eager(make_spec, tmp_path: Path) -> None:
    problem = _inductor_problem()
    if problem:
        pytest.skip(problem)
    model = {"family": "llama", "n_kv_head": 1, "qk_norm": True}
    losses = {}
    for compiled in (False, True):
        spec = make_spec(model=model, tokens=32 * 8 * 3, precision="fp32",
                         execution={"compile": compiled, "log_interval": 1, "eval_interval": 3,
                                    "checkpoint_interval": 3})
        trainer = loop.Trainer(spec, None, tmp_path / str(compiled))
        result = trainer.fit()
        losses[compiled] = (result.final_train_loss, result.final_eval_loss)
        assert compiled == hasattr(trainer.par.module, "_orig_mod")  # it ran the compiled module
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)
