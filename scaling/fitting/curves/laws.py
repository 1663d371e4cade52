"""The two curve laws as fittable forms: parameter names, bounds, derivatives and starting points.

The values come from :mod:`scaling.curve_forms` (the one place the formulas live); here is what a
fit needs besides: d loss / d parameter in closed form (a 72,000-step curve fits in seconds only
with it), the bounds every fit respects, and starts found the way Luo et al. do: a power law in
the summed rate fitted first, the loss-drop terms started from a small grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import least_squares

from scaling.curve_forms import (ANNEALING, ANNEALING_PARAMS, MULTI_POWER, MULTI_POWER_PARAMS, Areas, annealing,
                                 multi_power)

__all__ = ["FORM_NAMES", "Form", "HUBER_DELTA", "form", "huber_residuals", "pinned_at"]

#: The Huber loss's threshold on log residuals (Luo et al.'s 1e-3: a tenth of a percent of the loss).
HUBER_DELTA = 1e-3
#: Each form's name as printed.
FORM_NAMES = {MULTI_POWER: "multi-power law (Luo et al. 2025)", ANNEALING: "annealing law (Tissue et al. 2024)"}
#: (C, beta, gamma) the multi-power law's loss drop is started from (the published fits lie near (2, 0.6, 0.6)).
DROP_STARTS = ((2.0, 0.6, 0.6), (1.0, 0.5, 0.5), (0.5, 0.3, 0.3), (5.0, 0.9, 0.7), (1.0, 1.0, 0.3))


@dataclass(frozen=True)
class Form:
    """One curve law: its parameters, their bounds, its value and its derivatives at a run's steps."""

    name: str
    params: tuple[str, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    value: Callable[[np.ndarray, Areas], np.ndarray]
    jacobian: Callable[[np.ndarray, Areas], np.ndarray]

    @property
    def title(self) -> str:
        return FORM_NAMES[self.name]

    def bounds(self, max_loss: float) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of a fit to losses up to ``max_loss`` (L0 at most the largest loss)."""
        lo, hi = np.array(self.lower), np.array(self.upper)
        hi[0] = max_loss
        return lo, hi


def _multi_power_jacobian(theta: np.ndarray, a: Areas) -> np.ndarray:
    L0, A, alpha, B, C, beta, gamma = (float(v) for v in theta)
    J = np.empty((a.steps.size, 7))
    power = a.forward ** -alpha
    J[:, 0] = 1.0
    J[:, 1] = power
    J[:, 2] = -A * power * np.log(a.forward)
    if a.span.size:
        log_lr = a.pair_log_lr
        x = np.exp(-gamma * a.block_log_lr)[a.col] * a.span
        lu = np.log1p(C * x)
        p = np.exp(-beta * lu)  # (1 + C x)^-beta
        q = beta * p / (1.0 + C * x)
        J[:, 3] = -a.drop_sum(1.0 - p)
        J[:, 4] = -B * a.drop_sum(q * x)
        J[:, 5] = -B * a.drop_sum(p * lu)
        J[:, 6] = -B * a.drop_sum(-q * C * x * log_lr)
    else:
        J[:, 3:] = 0.0
    return J


def _annealing_jacobian(theta: np.ndarray, a: Areas) -> np.ndarray:
    L0, A, alpha, C = (float(v) for v in theta)
    power = a.forward ** -alpha
    return np.column_stack([np.ones(a.steps.size), power, -A * power * np.log(a.forward), -a.anneal])


_FORMS = {
    MULTI_POWER: Form(MULTI_POWER, MULTI_POWER_PARAMS,
                      (0.0, 1e-6, 1e-3, 1e-3, 1e-6, 1e-3, 0.0), (np.inf, 1e3, 3.0, 1e8, 1e6, 5.0, 2.0),
                      multi_power, _multi_power_jacobian),
    ANNEALING: Form(ANNEALING, ANNEALING_PARAMS, (0.0, 1e-6, 1e-3, 0.0), (np.inf, 1e3, 3.0, 1e8),
                    annealing, _annealing_jacobian),
}


def form(name: str) -> Form:
    """The form called ``name``."""
    return _FORMS[name]


def huber_residuals(r: np.ndarray, delta: float = HUBER_DELTA) -> tuple[np.ndarray, np.ndarray]:
    """Residuals whose squares sum to twice the Huber loss of ``r``, and their derivative in ``r``.

    Least squares on them minimises the Huber loss, with a weight per residual available by
    scaling (a weight w times Huber(r) is Huber at delta sqrt(w) of r sqrt(w)).
    """
    a = np.abs(r)
    big = a > delta
    out = r.copy()
    d = np.ones_like(r)
    if big.any():
        root = np.sqrt(2.0 * delta * a[big] - delta * delta)
        out[big] = np.sign(r[big]) * root
        d[big] = delta / root
    return out, d


def pinned_at(theta: Sequence[float], lo: Sequence[float], hi: Sequence[float], names: Sequence[str]) -> dict[str, str]:
    """The parameters at a bound of the fit, each with the bound (as text)."""
    out = {}
    for v, l, h, n in zip(theta, lo, hi, names):
        for bound, side in ((l, "lower"), (h, "upper")):
            if np.isfinite(bound) and abs(v - bound) <= 1e-3 * max(abs(bound), 1e-2):
                out[n] = f"{side} bound {bound:g}"
    return out


def power_starts(forward: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """(L0, A, alpha) from a line in log-log of loss - min + 0.01 against the summed rate (Luo et al.)."""
    floor = float(np.min(loss))
    y = np.log(np.maximum(loss - floor + 0.01, 1e-6))
    x = np.log(forward)
    slope, intercept = np.polyfit(x, y, 1) if np.ptp(x) > 0 else (-0.5, float(np.mean(y)))
    return floor, float(np.exp(intercept)), float(np.clip(-slope, 0.05, 2.0))


def first_stage(forward: np.ndarray, drop: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """(L0, A, alpha, B) of L0 + A forward^-alpha - B drop (every loss drop complete), fitted on logs."""
    L0, A, alpha = power_starts(forward, loss)
    best, best_cost = None, np.inf
    has_drop = bool(np.any(drop > 0))
    n = 4 if has_drop else 3  # without any change of rate, B stays 0
    lo = np.array([0.0, 1e-6, 1e-3, 0.0])[:n]
    hi = np.array([float(np.max(loss)), 1e3, 3.0, 1e8])[:n]
    for shift in (-0.2, -0.05, 0.1):
        for B in ((100.0, 1000.0) if has_drop else (0.0,)):
            start = np.clip(np.array([max(L0 + shift, 1e-3), max(A, 1e-3), alpha, B])[:n], lo, np.nextafter(hi, -np.inf))

            def res(th: np.ndarray) -> np.ndarray:
                pred = th[0] + th[1] * forward ** -th[2] - (th[3] * drop if n == 4 else 0.0)
                return np.log(loss) - np.log(np.maximum(pred, 1e-9))

            try:
                r = least_squares(res, start, bounds=(lo, hi), x_scale="jac", max_nfev=100, ftol=1e-8, xtol=1e-8)
            except ValueError:
                continue
            if r.cost < best_cost:
                best, best_cost = np.append(r.x, 0.0)[:4], r.cost
    return best if best is not None else np.array([L0, A, alpha, 0.0])
