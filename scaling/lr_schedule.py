"""The learning rate at step t: the one function the trainer steps by and the fits rebuild curves with.

Torch-free and free of our other modules, so the trainer (:mod:`scaling.trainer.optim`) and the
curve laws (:mod:`scaling.fitting.curves`) compute a run's learning rate the same way. A schedule
is anything with the fields of :class:`scaling.trainer.spec.ScheduleSpec` (``kind``,
``warmup_fraction``, ``warmup_steps``, ``min_lr_ratio``, ``decay_fraction``, ``decay_shape``, ``drop_at``,
``drop_lr_ratio``). :func:`lr_at` gives one step's rate; :func:`lr_steps` every step's at once, equal to it.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any, Optional, Protocol

import numpy as np

__all__ = ["SCHEDULE_DEFAULTS", "decay_start", "drop_step", "lr_at", "lr_steps", "schedule_of", "warmup_steps"]

#: A schedule's fields when not given (``ScheduleSpec``'s defaults: a stored spec may omit them).
SCHEDULE_DEFAULTS: dict[str, Any] = {"kind": "cosine", "warmup_fraction": 0.05, "warmup_steps": None,
                                     "min_lr_ratio": 0.1, "decay_fraction": 0.2, "decay_shape": "linear",
                                     "drop_at": None, "drop_lr_ratio": None}


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
    @property
    def drop_at(self) -> Optional[float]: ...
    @property
    def drop_lr_ratio(self) -> Optional[float]: ...


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


def drop_step(total_steps: int, schedule: Schedule) -> int:
    """The first step of a ``two_stage`` schedule's second stage: ``drop_at`` of the steps, not before warmup ends."""
    if schedule.drop_at is None:
        raise ValueError("a two_stage schedule needs drop_at")
    return max(warmup_steps(total_steps, schedule), int(round(schedule.drop_at * total_steps)))


def lr_at(step: int, total_steps: int, peak: float, schedule: Schedule) -> float:
    """Learning rate of optimizer step ``step`` (0-based) out of ``total_steps``.

    - linear warmup over ``warmup_steps`` steps or ``warmup_fraction`` of the steps, from peak/warmup to peak;
    - ``cosine``: half a cosine from the peak to ``min_lr_ratio * peak`` at the last step
      (Hoffmann et al. 2022 decay to 10% over the run's length);
    - ``wsd`` (warmup-stable-decay, Hu et al. 2024): the peak until the final ``decay_fraction`` of
      steps, then to the floor ``min_lr_ratio * peak``, reached at the last step, by ``decay_shape``:
      ``linear``; ``1-sqrt``, 1 - sqrt(progress) of the way (Hägele et al. 2024 find it slightly
      better); or ``exponential``, geometric from the peak to the floor, peak * (floor/peak)^progress
      (a constant factor per step; Luo et al. 2025's WSD runs), where progress runs from 1/(decay steps)
      at the decay's first step to 1 at the last;
    - ``two_stage``: the peak until step ``round(drop_at * total_steps)``, then ``drop_lr_ratio * peak``
      to the end (a step drop; Luo et al. 2025 fit their law on such runs);
    - ``constant``: the peak after warmup.
    """
    return float(_rates(np.array([step], dtype=np.int64), total_steps, peak, schedule)[0])


def lr_steps(total_steps: int, peak: float, schedule: Schedule) -> np.ndarray:
    """The learning rate of every step 0 .. ``total_steps`` - 1, as :func:`lr_at` gives each."""
    return _rates(np.arange(max(total_steps, 0), dtype=np.int64), total_steps, peak, schedule)


def _rates(t: np.ndarray, total_steps: int, peak: float, schedule: Schedule) -> np.ndarray:
    """The rates of steps ``t``: the one statement of every schedule, for one step and for all at once."""
    if total_steps < 1:
        raise ValueError("total_steps must be positive")
    floor = peak * schedule.min_lr_ratio
    warm = warmup_steps(total_steps, schedule)
    out = np.full(t.shape, float(peak))
    if schedule.kind == "cosine":
        span = max(1, total_steps - 1 - warm)
        progress = np.minimum(1.0, (t - warm) / span)
        out = floor + (peak - floor) * 0.5 * (1.0 + np.cos(math.pi * progress))
    elif schedule.kind == "wsd":
        start = decay_start(total_steps, schedule)
        progress = np.clip((t - start + 1) / max(1, total_steps - start), 0.0, 1.0)
        if schedule.decay_shape == "exponential":
            decayed = peak * schedule.min_lr_ratio ** progress
        else:
            shaped = np.sqrt(progress) if schedule.decay_shape == "1-sqrt" else progress
            decayed = peak + (floor - peak) * shaped
        out = np.where(t < start, float(peak), decayed)
    elif schedule.kind == "two_stage":
        out = np.where(t < drop_step(total_steps, schedule), float(peak), peak * float(schedule.drop_lr_ratio))
    elif schedule.kind != "constant":
        raise ValueError(f"unknown schedule kind {schedule.kind!r}")
    return np.where(t < warm, peak * (t + 1) / max(warm, 1), out)
