"""Curves drawn from a known curve law: the schedules of Luo et al.'s experiments, and noisy losses on them.

Used by the tests and the coverage benchmark: a fit to such curves must recover the law, and its
intervals must cover the truth. The schedules: a linear warmup of 2,160 steps to 3e-4, then
constant or cosine (to 3e-5) for 24,000 and 72,000 steps, warmup-stable-decay from step 20,000 to
24,000 with exponential or linear decay (to 3e-5), and two-stage schedules that drop at step 8,000
to 3e-5, 9e-5 or 1.8e-4 and end at 16,000.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from scaling.curve_forms import MULTI_POWER
from scaling.fitting.curves.data import Curve
from scaling.fitting.curves.fit import law_at
from scaling.fitting.curves.laws import form as law_form

__all__ = ["FIT_ON", "PUBLISHED_MULTI_POWER", "draw_curves", "published_schedules"]

#: Luo et al.'s fitted multi-power law of their 25M model (L0, A, alpha, B, C, beta, gamma).
PUBLISHED_MULTI_POWER = (3.0405, 0.5247, 0.5079, 363.79, 2.0656, 0.5828, 0.6414)
#: The three curves a fit uses in Luo et al.'s test: a cosine, a constant and a two-stage schedule.
FIT_ON = ("cosine_24000", "constant_24000", "two_stage_9e-5")
WARMUP, PEAK, FLOOR = 2160, 3e-4, 3e-5


def _warm(total: int) -> np.ndarray:
    return np.concatenate([np.linspace(0.0, PEAK, WARMUP), np.full(total - WARMUP, PEAK)])


def published_schedules() -> dict[str, np.ndarray]:
    """The nine schedules by name: each step's learning rate."""
    out = {}
    for total in (24_000, 72_000):
        out[f"constant_{total}"] = _warm(total)
        lr = _warm(total)
        k = np.arange(WARMUP, total)
        lr[WARMUP:] = FLOOR + 0.5 * (PEAK - FLOOR) * (1 + np.cos(np.pi * (k - WARMUP) / (total - WARMUP)))
        out[f"cosine_{total}"] = lr
    total, start = 24_000, 20_000
    k = np.arange(start, total)
    u = (k - start) / (total - start)
    lr = _warm(total)
    lr[start:] = PEAK ** (1 - u) * FLOOR ** u
    out["wsd_exponential"] = lr
    lr = _warm(total)
    lr[start:] = PEAK * (1 - u) + FLOOR * u
    out["wsd_linear"] = lr
    for low, name in ((3e-5, "3e-5"), (9e-5, "9e-5"), (1.8e-4, "1.8e-4")):
        lr = _warm(16_000)
        lr[8_000:] = low
        out[f"two_stage_{name}"] = lr
    return out


def draw_curves(theta: Sequence[float], *, form: str = MULTI_POWER, names: Optional[Sequence[str]] = None,
                noise: float = 0.003, every: int = 50, seed: int = 0, truth: bool = False) -> list[Curve]:
    """Curves of the law ``form`` at ``theta`` on the published schedules (``names``; default all), the loss
    measured every ``every`` steps after warmup with Gaussian noise of SD ``noise`` (``truth``: none)."""
    rng = np.random.default_rng(seed)
    schedules = published_schedules()
    out = []
    for name in names or list(schedules):
        lr = schedules[name]
        steps = np.arange(WARMUP, lr.size, every, dtype=np.int64)
        steps = np.unique(np.append(steps, lr.size - 1))
        loss = law_at(law_form(form), np.asarray(theta, float), lr, steps)[0]
        if not truth:
            loss = loss + noise * rng.standard_normal(loss.size)
        out.append(Curve(name, lr, steps, loss=loss))
    return out
