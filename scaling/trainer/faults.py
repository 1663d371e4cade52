"""Faults injected on purpose (``spec.faults``) so the recovery paths are tested for real.

- ``poison_steps``: the batch at that *data cursor* (equal to the step in a run that never
  skipped a batch) gets random targets and 1000x logits, a loss spike like a corrupt shard.
  Keyed on the cursor so that, once rolled back and skipped, the bad batch never returns.
- ``overflow_steps``: after that step's backward one gradient is set to inf, as an fp16
  overflow would (the loss scaler must skip the step and halve its scale).
- ``raise_at_step`` / ``kill_at_step``: raise :class:`InjectedFault`, or SIGKILL the process
  (rank 1 when distributed), when that step starts, on the first ``*_attempts`` attempts only.
"""

from __future__ import annotations

import os
import signal

import torch

from scaling.trainer.runtime import Runtime
from scaling.trainer.spec import FaultSpec

POISON_LOGIT_SCALE = 1000.0


class InjectedFault(RuntimeError):
    """The error ``faults.raise_at_step`` raises (a stand-in for a crash; not a user error)."""


def at_step_start(faults: FaultSpec, step: int, attempt: int, rt: Runtime) -> None:
    """Raise or kill if a fault is due at ``step`` on this attempt."""
    if faults.kill_at_step == step and attempt <= faults.kill_attempts:
        victim = 1 if rt.world_size > 1 else 0
        if rt.rank == victim:
            os.kill(os.getpid(), signal.SIGKILL)
    if faults.raise_at_step == step and attempt <= faults.raise_attempts:
        raise InjectedFault(f"injected fault at step {step} (attempt {attempt})")


def poison(targets: torch.Tensor, vocab_size: int, seed: int, cursor: int) -> tuple[torch.Tensor, float]:
    """Random targets (a pure function of seed and cursor) and the logit scale for a poisoned batch."""
    gen = torch.Generator().manual_seed(seed * 1_000_003 + cursor)
    bad = torch.randint(0, vocab_size, targets.shape, generator=gen).to(targets.device)
    return bad, POISON_LOGIT_SCALE


def overflow(model: torch.nn.Module) -> None:
    """Make one gradient infinite, as an fp16 overflow does."""
    for p in model.parameters():
        if p.grad is not None:
            p.grad.fill_(float("inf"))
            return
