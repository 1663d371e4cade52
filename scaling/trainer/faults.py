"""Faults injected on purpose (``spec.faults``) so the recovery paths are tested for real.

- ``poison_steps``: the batch at that *data cursor* (equal to the step in a run that never
  skipped a batch) gets random targets and 1000x logits, a loss spike like a corrupt shard.
  Keyed on the cursor so that, once rolled back and skipped, the bad batch never returns.
- ``overflow_steps``: after that step's backward one gradient is set to inf, as an fp16
  overflow would (the loss scaler must skip the step and halve its scale).
- ``raise_at_step`` / ``kill_at_step``: raise :class:`InjectedFault`, or SIGKILL the process
  (rank 1 when distributed), when that step starts, on the first ``*_attempts`` attempts only.

The loop reaches all of them through one hook, :func:`injector`: it returns None when the spec
configures no fault, so a normal run pays nothing per step.
"""

from __future__ import annotations

import os
import signal
from typing import Optional

import torch

from scaling.trainer.runtime import Runtime
from scaling.trainer.sections import FaultSpec

POISON_LOGIT_SCALE = 1000.0


class InjectedFault(RuntimeError):
    """The error ``faults.raise_at_step`` raises (a stand-in for a crash; not a user error)."""


class Injector:
    """The faults of one attempt of one run, at the three points of a step where they strike."""

    def __init__(self, faults: FaultSpec, attempt: int, rt: Runtime, vocab_size: int, seed: int) -> None:
        self.faults = faults
        self.attempt = attempt
        self.rt = rt
        self.vocab_size = vocab_size
        self.seed = seed

    def at_step_start(self, step: int) -> None:
        """Raise or kill if a fault is due at ``step`` on this attempt."""
        f, attempt = self.faults, self.attempt
        if f.kill_at_step == step and attempt <= f.kill_attempts:
            victim = 1 if self.rt.world_size > 1 else 0
            if self.rt.rank == victim:
                os.kill(os.getpid(), signal.SIGKILL)
        if f.raise_at_step == step and attempt <= f.raise_attempts:
            raise InjectedFault(f"injected fault at step {step} (attempt {attempt})")

    def poisons(self, cursor: int) -> bool:
        return cursor in self.faults.poison_steps

    def poison(self, targets: torch.Tensor, cursor: int) -> tuple[torch.Tensor, float]:
        """Random targets (a pure function of seed and cursor) and the logit scale for a poisoned batch."""
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + cursor)
        bad = torch.randint(0, self.vocab_size, targets.shape, generator=gen).to(targets.device)
        return bad, POISON_LOGIT_SCALE

    def after_backward(self, step: int, model: torch.nn.Module) -> None:
        """Make one gradient infinite at an ``overflow_steps`` step, as an fp16 overflow does."""
        if step not in self.faults.overflow_steps:
            return
        for p in model.parameters():
            if p.grad is not None:
                p.grad.fill_(float("inf"))
                return


def injector(faults: FaultSpec, attempt: int, rt: Runtime, *, vocab_size: int, seed: int) -> Optional[Injector]:
    """The injector for ``faults``, or None when no fault is configured."""
    if faults == FaultSpec():
        return None
    return Injector(faults, attempt, rt, vocab_size, seed)
