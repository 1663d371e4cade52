"""The two published laws of a loss curve in its learning-rate schedule, evaluated in O(steps).

- The multi-power law (Luo et al. 2025, ICLR): L(t) = L0 + A (S1(t) + S_W)^-alpha - LD(t), with
  LD(t) = B sum_{k=1..t} (eta_{k-1} - eta_k) G(eta_k^-gamma S_k(t)), G(x) = 1 - (C x + 1)^-beta and
  S_k(t) = sum_{tau=k..t} eta_tau. Steps are counted after warmup (eta_0 is the rate warmup ends
  at); S_W is the warmup's area, so S1(t) + S_W is every step's rate summed up to t.
- The annealing law (Tissue et al. 2024): L(t) = L0 + A S1(t)^-alpha - C S2(t), S2 the annealing
  area with momentum: m_k = lam m_{k-1} + (eta_{k-1} - eta_k), S2(t) = sum_{k<=t} m_k (lam 0.999).

A run is its learning rate at every step 0 .. T (``eta[k]``: the rate step k updates with) and
the steps where its loss is wanted. :class:`Areas` turns them once into what the laws need, so a
fit evaluates a curve of 72,000 steps in a matrix of (points x blocks): the steps whose rate
changes are grouped into blocks (cut at every wanted step, at most :data:`BLOCK_STEPS` steps and
1/:data:`BLOCK_SHARE` of the run's total change each; a large single drop is a block of its own),
each block standing at its change-weighted mean rate and area. Far from t, G barely changes
across a block; the block just before t spans at most 256 steps, where the loss it can move is
about 1e-4 for schedules of 1e4 steps and more (the tests compare against the exact sum).
Free of our other modules: the simulated trainer draws curves from it and the fits fit it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

import numpy as np
from scipy.signal import lfilter

__all__ = ["ANNEALING", "ANNEALING_PARAMS", "Areas", "BLOCK_SHARE", "BLOCK_STEPS", "FORMS", "MAX_PAIRS", "MOMENTUM",
           "MULTI_POWER", "MULTI_POWER_PARAMS", "annealing", "areas", "curve_loss", "multi_power",
           "multi_power_exact", "warmup_end"]

MULTI_POWER = "multi-power"
ANNEALING = "annealing"
#: The two forms, by name, in the order they are tried.
FORMS = (MULTI_POWER, ANNEALING)
MULTI_POWER_PARAMS = ("L0", "A", "alpha", "B", "C", "beta", "gamma")
ANNEALING_PARAMS = ("L0", "A", "alpha", "C")
#: Tissue et al.'s momentum of the annealing area.
MOMENTUM = 0.999
#: Most steps in one block of the loss-drop sum.
BLOCK_STEPS = 256
#: The most (point, block) pairs one evaluation holds (a few hundred MB).
MAX_PAIRS = 20_000_000
#: A block holds at most this share of the run's total change of rate (one larger step: its own block).
BLOCK_SHARE = 1 / 64


def warmup_end(lr: np.ndarray) -> int:
    """The first step after warmup: where the rate stops rising from step 0 (1 without warmup)."""
    lr = np.asarray(lr, dtype=float)
    if lr.size < 2:
        return lr.size
    rising = np.diff(lr) > 1e-12 * float(np.max(np.abs(lr)))
    return int(rising.size if rising.all() else np.argmin(rising)) + 1


@dataclass(frozen=True)
class Areas:
    """What both laws need of one run at its wanted steps, computed once per run."""

    steps: np.ndarray        # the wanted steps t (sorted, unique)
    forward: np.ndarray      # S1(t) + S_W: every step's rate summed up to t
    lr: np.ndarray           # eta_t
    warmup: int              # the first step after warmup
    block_gap: np.ndarray    # each block's change of rate (eta_{k-1} - eta_k summed)
    block_log_lr: np.ndarray  # ln of each block's change-weighted mean rate eta_k
    # The (point, block) pairs with the block at or before the point, packed: S_k(t) at the block's
    # weighted position, the point's row and the block's column.
    span: np.ndarray
    row: np.ndarray
    col: np.ndarray
    anneal: np.ndarray       # Tissue et al.'s S2(t) with momentum MOMENTUM

    @cached_property
    def pair_gap(self) -> np.ndarray:
        """Each packed pair's block change of rate."""
        return self.block_gap[self.col]

    @cached_property
    def pair_log_lr(self) -> np.ndarray:
        """Each packed pair's block ln eta_k."""
        return self.block_log_lr[self.col]

    def drop_sum(self, per_pair: np.ndarray) -> np.ndarray:
        """Each point's sum of ``per_pair`` (one value per packed pair) times its block's change of rate."""
        return np.bincount(self.row, weights=per_pair * self.pair_gap, minlength=self.steps.size)

    @property
    def total_drop(self) -> np.ndarray:
        """eta_{warmup-1} - eta_t: the loss drop per B when G is 1 everywhere (a start for fits)."""
        return self.drop_sum(np.ones(self.span.size))


def areas(lr: Sequence[float] | np.ndarray, steps: Sequence[int] | np.ndarray, *, momentum: float = MOMENTUM,
          block_steps: int = BLOCK_STEPS, block_share: float = BLOCK_SHARE) -> Areas:
    """The :class:`Areas` of a run whose rate at step k is ``lr[k]``, wanted at ``steps`` (each < len(lr))."""
    eta = np.asarray(lr, dtype=float)
    t = np.unique(np.asarray(steps, dtype=np.int64))
    if t.size and (t[0] < 0 or t[-1] >= eta.size):
        raise ValueError("a wanted step lies outside the schedule")
    cum = np.cumsum(eta)
    w = warmup_end(eta)
    gap = np.zeros_like(eta)
    gap[w:] = eta[w - 1:-1] - eta[w:] if w >= 1 else 0.0
    # Tissue et al.'s momentum form of the annealing area (after warmup, as the loss drop).
    anneal = np.cumsum(lfilter([1.0], [1.0, -momentum], gap))[t] if t.size else np.zeros(0)
    last = int(t[-1]) if t.size else -1
    k = np.flatnonzero(gap[: last + 1])
    if k.size == 0:
        empty = np.zeros(0, np.int64)
        return Areas(t, cum[t], eta[t], w, np.zeros(0), np.zeros(0), np.zeros(0), empty, empty, anneal)
    mag = np.abs(gap[k])
    cap = max(float(mag.sum()) * block_share, 1e-300)
    seg = np.searchsorted(t, k, side="left")  # the first wanted step at or after k
    width = (k - w) // max(1, block_steps)
    excl = np.floor((np.cumsum(mag) - mag) / cap)
    incl = np.floor(np.cumsum(mag) / cap)
    new = np.ones(k.size, bool)
    new[1:] = (np.diff(seg) != 0) | (np.diff(width) != 0) | (np.diff(excl) != 0) | (np.diff(incl) != 0)
    starts = np.flatnonzero(new)
    weight = np.add.reduceat(mag, starts)
    block_gap = np.add.reduceat(gap[k], starts)
    mean_lr = np.add.reduceat(mag * eta[k], starts) / weight
    before = np.add.reduceat(mag * cum[k - 1], starts) / weight  # P_{k-1}: S_k(t) = P_t - P_{k-1}
    block_seg = seg[starts]
    # Blocks are in step order, so the blocks at or before point j are the first n_j of them.
    n_j = np.searchsorted(block_seg, np.arange(t.size), side="right")
    if int(n_j.sum()) > MAX_PAIRS:
        raise ValueError(f"{t.size:,} wanted steps of a schedule of {eta.size:,} steps are too many to sum at once: "
                         "evaluate fewer and interpolate")
    row = np.repeat(np.arange(t.size), n_j)
    col = np.arange(int(n_j.sum())) - np.repeat(np.cumsum(n_j) - n_j, n_j)
    span = cum[t][row] - before[col]
    return Areas(t, cum[t], eta[t], w, block_gap, np.log(mean_lr), span, row, col, anneal)


def multi_power(theta: Sequence[float] | np.ndarray, a: Areas) -> np.ndarray:
    """Luo et al.'s multi-power law at the wanted steps; ``theta`` = (L0, A, alpha, B, C, beta, gamma)."""
    L0, A, alpha, B, C, beta, gamma = (float(v) for v in theta)
    drop = 0.0
    if a.span.size:
        x = np.exp(-gamma * a.block_log_lr)[a.col] * a.span
        drop = a.drop_sum(-np.expm1(-beta * np.log1p(C * x)))
    return L0 + A * a.forward ** -alpha - B * drop


def annealing(theta: Sequence[float] | np.ndarray, a: Areas) -> np.ndarray:
    """Tissue et al.'s annealing law at the wanted steps; ``theta`` = (L0, A, alpha, C)."""
    L0, A, alpha, C = (float(v) for v in theta)
    return L0 + A * a.forward ** -alpha - C * a.anneal


def curve_loss(form: str, theta: Sequence[float] | np.ndarray, a: Areas) -> np.ndarray:
    """The law ``form`` (:data:`MULTI_POWER` or :data:`ANNEALING`) at the wanted steps."""
    if form == MULTI_POWER:
        return multi_power(theta, a)
    if form == ANNEALING:
        return annealing(theta, a)
    raise ValueError(f"unknown curve law {form!r}: one of {', '.join(FORMS)}")


def multi_power_exact(theta: Sequence[float] | np.ndarray, lr: Sequence[float] | np.ndarray,
                      steps: Sequence[int] | np.ndarray) -> np.ndarray:
    """The multi-power law summed step by step (O(points x steps)): the reference the blocks are checked on."""
    L0, A, alpha, B, C, beta, gamma = (float(v) for v in theta)
    eta = np.asarray(lr, dtype=float)
    cum = np.cumsum(eta)
    w = warmup_end(eta)
    out = []
    for t in np.asarray(steps, dtype=np.int64):
        k = np.arange(w, t + 1)
        s = cum[t] - cum[k - 1]
        g = eta[k - 1] - eta[k]
        drop = float(np.sum(g * (1.0 - (1.0 + C * eta[k] ** -gamma * s) ** -beta)))
        out.append(L0 + A * cum[t] ** -alpha - B * drop)
    return np.asarray(out)
