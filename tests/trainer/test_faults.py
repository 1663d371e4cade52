"""The fault hook: absent when nothing is injected, and each fault strikes where and when it says."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from scaling.trainer import faults
from scaling.trainer.loop import Trainer
from scaling.trainer.runtime import Runtime
from scaling.trainer.sections import FaultSpec

CPU = Runtime(device=torch.device("cpu"))


def test_no_configured_fault_means_no_hook(make_spec, tmp_path: Path) -> None:
    assert faults.injector(FaultSpec(), 1, CPU, vocab_size=256, seed=0) is None
    assert Trainer(make_spec(), None, tmp_path / "a").faults is None  # the loop's checks are a None test
    assert Trainer(make_spec(faults={"poison_steps": [3]}), None, tmp_path / "b").faults is not None


def test_raise_strikes_only_on_its_step_and_attempts() -> None:
    spec = FaultSpec(raise_at_step=5, raise_attempts=2)
    for attempt in (1, 2):
        hook = faults.injector(spec, attempt, CPU, vocab_size=256, seed=0)
        hook.at_step_start(4)
        with pytest.raises(faults.InjectedFault, match="step 5"):
            hook.at_step_start(5)
    faults.injector(spec, 3, CPU, vocab_size=256, seed=0).at_step_start(5)  # a later attempt runs clean


def test_poison_is_a_pure_function_of_seed_and_cursor() -> None:
    hook = faults.injector(FaultSpec(poison_steps=(7,)), 1, CPU, vocab_size=50, seed=3)
    assert hook.poisons(7) and not hook.poisons(6)
    y = torch.zeros(4, 16, dtype=torch.long)
    a, scale = hook.poison(y, 7)
    b, _ = hook.poison(y, 7)
    assert torch.equal(a, b) and a.shape == y.shape and int(a.max()) < 50 and scale == faults.POISON_LOGIT_SCALE
    assert not torch.equal(a, hook.poison(y, 8)[0])


def test_overflow_makes_one_gradient_infinite_on_its_step_only() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    model(torch.ones(2, 3)).sum().backward()
    hook = faults.injector(FaultSpec(overflow_steps=(2,)), 1, CPU, vocab_size=256, seed=0)
    hook.after_backward(1, model)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    hook.after_backward(2, model)
    assert sum(not torch.isfinite(p.grad).all() for p in model.parameters()) == 1
