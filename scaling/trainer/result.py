"""What one call of :func:`scaling.trainer.train` achieved (a module of its own: the loop, the
simulated trainer and ``scaling train`` return it, and the package's ``train`` imports them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class TrainResult:
    """What one call of :func:`train` achieved.

    ``final_train_loss`` is the mean over the last few steps (one step's loss is noisy);
    ``final_eval_loss`` the held-out loss at the last step (the fits use it).
    """

    key: str
    status: str  # a run status of scaling.vocab: COMPLETED, or INTERRUPTED if stopped before the end
    steps: int
    tokens: int
    flops: float
    final_train_loss: Optional[float]
    final_eval_loss: Optional[float]
    rollbacks: int = 0
    overflow_skips: int = 0
    epochs: float = 0.0
    resumed_from: Optional[int] = None  # the step a checkpoint resumed from, if any
    run_dir: str = ""
    data: dict[str, Any] = field(default_factory=dict)
