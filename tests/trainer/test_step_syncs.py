"""A training step reads nothing back from the device unless it is logged or checked.

Each read of a tensor's value on the host (``item``, ``float``, ``tolist``, ``bool``) waits for
the device to finish everything queued; on a GPU that stalls the host. On the CPU there is no
stall to observe, so the test counts the reads the trainer's own code makes, per step.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from scaling.trainer import loop

READS = ("item", "__float__", "tolist", "__bool__", "__int__")


def _count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Patch the host reads of torch.Tensor to log those called from the project's code."""
    calls: list[str] = []
    for name in READS:
        original = getattr(torch.Tensor, name)

        def wrapper(self: torch.Tensor, *a: Any, _original: Any = original, _name: str = name) -> Any:
            caller = sys._getframe(1).f_code.co_filename
            if "/scaling/" in caller:
                calls.append(f"{_name} in {Path(caller).name}:{sys._getframe(1).f_lineno}")
            return _original(self, *a)

        monkeypatch.setattr(torch.Tensor, name, wrapper)
    return calls


@pytest.mark.parametrize("fused, per_step", [(True, 1), (False, 2)])
def test_a_quiet_step_reads_only_the_previous_steps_loss(make_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          fused: bool, per_step: int) -> None:
    """With the fused optimizer (one GPU process: it skips non-finite steps on the device) a step
    that neither logs, evaluates nor checkpoints reads once: the previous step's loss and norm,
    after its own forward and backward are queued. Without it the norm is read once more to
    decide the skip. Before, every step read its own loss, then its norm, then synchronized."""
    # The fused kernel runs on the CPU too: the GPU path's choice is made here.
    monkeypatch.setattr(loop, "fused_optimizer", lambda *_: fused)
    spec = make_spec(execution={"log_interval": 8, "eval_interval": 8, "checkpoint_interval": 8})
    trainer = loop.Trainer(spec, None, tmp_path)
    trainer.start()
    calls = _count_reads(monkeypatch)
    per = []
    for _ in range(7):  # steps 1..7 are quiet; step 8 logs, evaluates and checkpoints
        before = len(calls)
        trainer.step_once()
        per.append(len(calls) - before)
    assert per == [per_step - 1] + [per_step] * 6, calls  # the first step has no previous one to read
    before = len(calls)
    trainer.step_once()
    assert len(calls) - before > per_step  # step 8 settles, logs, evaluates and saves
    assert trainer.step == 8 and len(trainer.window) == 8


@pytest.mark.parametrize("extra", [{"model": {"family": "llama", "z_loss": 1e-4}}, {"precision": "fp16"}],
                         ids=["z-loss", "fp16"])
def test_a_quiet_step_with_a_z_loss_or_loss_scaling_reads_once(make_spec, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, extra: dict) -> None:
    """The z-loss travels with the loss and the norm, and under fp16 the loop skips on the device
    from the norm of the unscaled gradients: neither reads anything more per quiet step."""
    spec = make_spec(execution={"log_interval": 8, "eval_interval": 8, "checkpoint_interval": 8}, **extra)
    trainer = loop.Trainer(spec, None, tmp_path)
    assert trainer.optimizer.defaults.get("fused")
    trainer.start()
    calls = _count_reads(monkeypatch)
    per = []
    for _ in range(7):
        before = len(calls)
        trainer.step_once()
        per.append(len(calls) - before)
    assert per == [0] + [1] * 6, calls
    trainer.step_once()
    assert trainer.step == 8 and len(trainer.window) == 8


def test_fused_and_plain_steps_skip_and_train_alike(make_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The device-side skip of a step with non-finite gradients skips it as reading the norm
    does, and changes no accepted step: both paths reach the same losses."""
    results = {}
    for fused in (True, False):
        monkeypatch.setattr(loop, "fused_optimizer", lambda *_, f=fused: f)
        spec = make_spec(tokens=32 * 8 * 8, precision="fp32", faults={"overflow_steps": [5]})
        results[fused] = loop.Trainer(spec, None, tmp_path / str(fused)).fit()
    assert results[True].overflow_skips == results[False].overflow_skips == 1
    assert results[True].final_train_loss == pytest.approx(results[False].final_train_loss, rel=1e-4)


def test_a_logged_step_is_read_and_recorded_one_step_later(make_spec, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``log_interval: 1`` every step logs, yet none reads its own loss: step k's loss and norm
    are read (from the host copy made when its norm was known) and recorded during step k + 1,
    after that step's forward and backward are queued; evaluated and checkpointed steps settle at
    once. Before, a logged step read its own values as soon as it was taken."""
    monkeypatch.setattr(loop, "fused_optimizer", lambda *_: True)
    spec = make_spec(execution={"log_interval": 1, "eval_interval": 8, "checkpoint_interval": 8})
    trainer = loop.Trainer(spec, None, tmp_path)
    trainer.start()
    calls = _count_reads(monkeypatch)
    for step in range(1, 8):
        before = len(calls)
        trainer.step_once()
        assert trainer.pending is not None and trainer.pending.index == step - 1  # its own values still pending
        assert len(trainer.window) == step - 1 and len(calls) - before == (step > 1)  # the steps before it settled
    trainer.step_once()  # step 8 evaluates and checkpoints: it settles at once
    assert trainer.pending is None and len(trainer.window) == 8
