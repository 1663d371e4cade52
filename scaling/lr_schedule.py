"""The learning rate at step t: the one function the trainer steps by and the fits rebuild curves with.

Torch-free and free of our other modules, so the trainer (:mod:`scaling.trainer.optim`) and the
curve laws (:mod:`scaling.fitting.curves`) compute a run's learning rate the same way. A schedule
is anything with the fields of :class:`scaling.trainer.spec.ScheduleSpec` (``kind``,
``warmup_fraction``, ``warmup_steps``, ``min_lr_ratio``, ``decay_fraction``, ``decay_shape``).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Optional, Protocol

import numpy as np

__all__ = ["SCHEDULE_DEFAULTS", "decay_start", "lr_at", "lr_steps", "schedule_of", "warmup_steps"]

#: A schedule's fields when not given (``ScheduleSpec``'s defaults: a stored spec may omit them).
SCHEDULE_DEFAULTS: dict[str, Any] = {"kind": "cosine", "warmup_fraction": 0.05, "warmup_steps": None,
                                     "min_lr_ratio": 0.1, "decay_fraction": 0.2, "decay_shape": "linear"}


class Schedule(Protocol):
    """What a learning-rate schedule states (``ScheduleSpec``, or :func:`schedule_of`'s namespace)."""

    @property
    def kind(self) -> str: ...
    @property
    def warmup_fraction(self) -> float: ...
    @property
    def warmup_steps(self) -> Optional[int]: ...
    @property
    def min_lr_ratio(self) -> float: ...
    @property
    def decay_fraction(self) -> float: ...
    @property
    def decay_shape(self) -> str: ...


def schedule_of(fields: dict[str, Any] | None) -> SimpleNamespace:
    """A schedule from its stored fields (a spec's ``schedule`` section), the defaults filling the rest."""
    return SimpleNamespace(**(SCHEDULE_DEFAULTS | {k: v for k, v in (fields or {}).items() if k in SCHEDULE_DEFAULTS}))


def warmup_steps(total_steps: int, schedule: Schedule) -> int:
    """``warmup_steps`` when the schedule names it (at most the run's steps), else ``warmup_fraction`` of them."""
    if schedule.warmup_steps is not None:
        return min(schedule.warmup_steps, total_steps)
    return int(round(schedule.warmup_fraction * total_steps))


def decay_start(total_steps: int, schedule: Schedule) -> int:
    """The first step of a ``wsd`` schedule's decay (where a cooldown branch leaves its trunk)."""
    decay = max(1, int(round(schedule.decay_fraction * total_steps)))
    return max(warmup_steps(total_steps, schedule), total_steps - decay)


def lr_at(step: int, total_steps: int, peak: float, schedule: Schedule) -> float:
    """Learning rate of optimizer step ``step`` (0-based) out of ``total_steps``.

    - linear warmup over ``warmup_steps`` steps or ``warmup_fraction`` of the steps, from peak/warmup to peak;
    - ``cosine``: half a cosine from the peak to ``min_lr_ratio * peak`` at the last step
      (Hoffmann et al. 2022 decay to 10% over the run's length);
    - ``wsd`` (warmup-stable-decay, Hu et al. 2024): the peak until the final
      ``decay_fraction`` of steps, then to the floor, linearly or as 1 - sqrt(progress)
      (``decay_shape``; Hägele et al. 2024 find 1-sqrt slightly better);
    - ``constant``: the peak after warmup.
    """
    if total_steps < 1:
        raise ValueError("total_steps must be positive")
    floor = peak * schedule.min_lr_ratio
    warm = warmup_steps(total_steps, schedule)
    if step < warm:
        return peak * (step + 1) / warm
    if schedule.kind == "constant":
        return peak
    if schedule.kind == "cosine":
        span = max(1, total_steps - 1 - warm)
        progress = min(1.0, (step - warm) / span)
        return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    # wsd
    start = decay_start(total_steps, schedule)
    if step < start:
        return peak
    progress = min(1.0, (step - start + 1) / max(1, total_steps - start))
    if schedule.decay_shape == "1-sqrt":
        progress = math.sqrt(progress)
    return peak + (floor - peak) * progress


def lr_steps(total_steps: int, peak: float, schedule: Schedule) -> np.ndarray:
    """The learning rate of every step 0 .. ``total_steps`` - 1, by :func:`lr_at`."""
    return np.fromiter((lr_at(s, total_steps, peak, schedule) for s in range(total_steps)), float, total_steps)
