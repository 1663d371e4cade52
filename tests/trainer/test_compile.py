"""``execution.compile`` on the CPU: both families compiled by inductor train as eager does.

Compiling takes most of a minute per family on a CPU; the run is kept to three steps of the
smallest model. Inductor's CPU backend needs a C++ compiler: without one the test says so and skips.
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
@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_compiled_model_trains_as_eager(family: str, make_spec, tmp_path: Path) -> None:
    problem = _inductor_problem()
    if problem:
        pytest.skip(problem)
    model = {"family": family, "n_kv_head": 1, "qk_norm": True} if family == "llama" else {}
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
