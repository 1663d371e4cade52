"""A batched L-BFGS in numpy: many small, independent minimisations advanced in lock-step.

Why: approach 3 (Hoffmann et al. 2022; Besiroglu et al. 2024) starts L-BFGS from a grid of
4,500 points, and the bootstrap refits the same 5-parameter problem hundreds of times. Each
problem is tiny, so a Python loop over ``scipy.optimize.minimize`` spends its time in the
interpreter; here one objective call evaluates every start at once (arrays of starts x points)
and the L-BFGS bookkeeping (two-loop recursion, Armijo backtracking) is vectorised over starts.
Starts that have converged leave the active set, so late iterations cost little.

The algorithm per start is textbook L-BFGS (Nocedal & Wright 2006, Alg. 7.4/7.5) with a
backtracking Armijo line search; curvature pairs with s.y <= 0 are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Memory one batched objective call may use (bytes), and what it holds per (start, point):
#: about eight float64 arrays of shape (starts, points) live at once in the objective.
MEMORY_BUDGET = 512 * 2**20
BYTES_PER_ELEMENT = 64


def max_batch(n_points: int, budget: int = MEMORY_BUDGET, per_element: int = BYTES_PER_ELEMENT) -> int:
    """How many starts one objective call may evaluate on ``n_points`` points within ``budget`` bytes."""
    return max(1, int(budget // (per_element * max(int(n_points), 1))))


#: f_and_grad(X, idx) -> (f, g): X is (k, d) parameters of the starts ``idx`` (indices into the
#: full batch, so the objective can pick per-start data such as bootstrap weights).
BatchObjective = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


@dataclass
class BatchResult:
    """Final parameters, objective values, iteration counts and convergence flags per start."""

    x: np.ndarray  # (S, d)
    fun: np.ndarray  # (S,)
    nit: np.ndarray  # (S,)
    converged: np.ndarray  # (S,) bool
    n_evals: int  # batched objective calls


def _descent(g: np.ndarray, direction: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The direction and its slope along the gradient; steepest descent where it is not a descent direction."""
    slope = np.einsum("kd,kd->k", g, direction)
    bad = ~(slope < 0) | ~np.isfinite(slope)
    if bad.any():
        direction[bad] = -g[bad] / np.maximum(np.linalg.norm(g[bad], axis=1, keepdims=True), 1e-300)
        slope[bad] = np.einsum("kd,kd->k", g[bad], direction[bad])
    return direction, slope


def _line_search(f_and_grad: BatchObjective, x: np.ndarray, ids: np.ndarray, f: np.ndarray, g: np.ndarray,
                 direction: np.ndarray, slope: np.ndarray, c1: float,
                 max_backtracks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """Backtracking Armijo line search, vectorised (only unresolved starts are re-evaluated): (step, f and
    gradient at the accepted points, which starts found no decrease, objective evaluations)."""
    k = ids.size
    step = np.ones(k)
    f_new = np.full(k, np.nan)
    g_new = np.zeros_like(g)
    todo = np.arange(k)
    n_evals = 0
    for _ in range(max_backtracks):
        if todo.size == 0:
            break
        if todo.size == k:  # no gather needed
            trial, tid = x + step[:, None] * direction, ids
        else:
            trial, tid = x[todo] + step[todo, None] * direction[todo], ids[todo]
        ft, gt = f_and_grad(trial, tid)
        n_evals += 1
        ok = np.isfinite(ft) & (ft <= f[todo] + c1 * step[todo] * slope[todo])
        done = todo[ok]
        f_new[done], g_new[done] = ft[ok], gt[ok]
        todo = todo[~ok]
        step[todo] *= 0.5
    failed = np.zeros(k, dtype=bool)
    failed[todo] = True
    return step, f_new, g_new, failed, n_evals


def _finished(f_prev: np.ndarray, f: np.ndarray, g: np.ndarray, moved: np.ndarray, failed: np.ndarray, ftol: float,
              gtol: float) -> np.ndarray:
    """Which starts stop: a relative decrease below ``ftol``, a gradient below ``gtol``, or no decrease at all."""
    small_f = (f_prev - f) <= ftol * np.maximum(np.maximum(np.abs(f_prev), np.abs(f)), 1e-300)
    small_g = np.max(np.abs(g), axis=1) <= gtol
    return (moved & (small_f | small_g)) | failed


def _remember(slot: int, moved: np.ndarray, s: np.ndarray, y: np.ndarray, sy: np.ndarray, s_hist: np.ndarray,
              y_hist: np.ndarray, rho: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """Store this step's curvature pair in history ``slot`` (in place); returns the new initial scaling."""
    good = moved & (sy > 1e-300)
    s_hist[slot] = np.where(good[:, None], s, 0.0)
    y_hist[slot] = np.where(good[:, None], y, 0.0)
    rho[slot] = np.where(good, 1.0 / np.where(good, sy, 1.0), 0.0)
    yy = np.einsum("kd,kd->k", y, y)
    scaled = good & (yy > 1e-300)  # y·y can underflow where s·y does not
    return np.where(scaled, sy / np.where(scaled, yy, 1.0), gamma)


def batch_lbfgs(
    f_and_grad: BatchObjective,
    x0: np.ndarray,
    *,
    memory: int = 10,
    max_iter: int = 500,
    ftol: float = 2.2e-9,
    gtol: float = 1e-8,
    c1: float = 1e-4,
    max_backtracks: int = 30,
    prune_factor: float | None = None,
    prune_after: int = 100,
    batch: int | None = None,
    best_known: float = np.inf,
) -> BatchResult:
    """Minimise S independent d-dimensional problems from the starts ``x0`` (S, d).

    Stops a start when its relative decrease falls below ``ftol`` (scipy L-BFGS-B's default
    ``factr=1e7`` times machine epsilon), its largest gradient component below ``gtol``, or its
    line search fails to decrease the objective.

    ``prune_factor``: from iteration ``prune_after`` on (every 25 iterations), starts whose
    objective is still more than this factor above the best found by any start are stopped
    (left unconverged). In a multi-start grid they sit on plateaus where a term contributes
    nothing and so has no gradient, crawl for hundreds of iterations and never come near the best.

    ``batch``: at most this many starts are advanced together (see :func:`max_batch`); more are
    run chunk after chunk, so memory stays bounded whatever the number of starts and points.
    Pruning then compares with the best of the chunks before (``best_known``).
    """
    if batch is not None and len(x0) > batch:
        return _chunked(f_and_grad, np.asarray(x0, float), batch, best_known, memory=memory, max_iter=max_iter,
                        ftol=ftol, gtol=gtol, c1=c1, max_backtracks=max_backtracks, prune_factor=prune_factor,
                        prune_after=prune_after)
    x_out = np.array(x0, dtype=float, copy=True)
    S, d = x_out.shape
    m = memory
    f_out, g_out = f_and_grad(x_out, np.arange(S))
    f_out, n_evals, nit, converged = np.array(f_out, dtype=float), 1, np.zeros(S, dtype=int), np.zeros(S, dtype=bool)
    # The active starts only, compacted as they finish; history slot it % m is the newest for all of them.
    ids = np.flatnonzero(np.isfinite(f_out))
    x, f, g = x_out[ids], f_out[ids], g_out[ids]
    s_hist, y_hist, rho = np.zeros((m, ids.size, d)), np.zeros((m, ids.size, d)), np.zeros((m, ids.size))
    gamma = np.zeros(ids.size)  # 0 = no curvature pair yet
    for it in range(max_iter):
        if ids.size == 0:
            break
        order = [(it - 1 - j) % m for j in range(min(it, m))]  # newest first
        direction, slope = _descent(g, _two_loop(g, s_hist, y_hist, rho, gamma, order))
        step, f_new, g_new, failed, evals = _line_search(f_and_grad, x, ids, f, g, direction, slope, c1, max_backtracks)
        n_evals += evals
        moved = ~failed

        s = step[:, None] * direction
        s[failed] = 0.0
        y = np.where(moved[:, None], g_new - g, 0.0)
        sy = np.einsum("kd,kd->k", s, y)
        f_prev = f.copy()
        x = x + s
        f = np.where(moved, f_new, f)
        g = np.where(moved[:, None], g_new, g)
        nit[ids[moved]] += 1

        gamma = _remember(it % m, moved, s, y, sy, s_hist, y_hist, rho, gamma)

        finished = _finished(f_prev, f, g, moved, failed, ftol, gtol)
        converged[ids[finished]] = True
        if prune_factor is not None and it >= prune_after and it % 25 == 0:
            best = min(float(np.min(f)), float(np.min(f_out[converged], initial=np.inf)), best_known)
            finished |= f > prune_factor * max(best, 1e-300)
        if finished.any():
            x_out[ids[finished]], f_out[ids[finished]], g_out[ids[finished]] = x[finished], f[finished], g[finished]
            keep = ~finished
            ids, x, f, g, gamma = ids[keep], x[keep], f[keep], g[keep], gamma[keep]
            s_hist, y_hist, rho = s_hist[:, keep], y_hist[:, keep], rho[:, keep]
    x_out[ids], f_out[ids] = x, f  # starts still running at max_iter
    return BatchResult(x=x_out, fun=f_out, nit=nit, converged=converged, n_evals=n_evals)


def _chunked(f_and_grad: BatchObjective, x0: np.ndarray, batch: int, best_known: float, **kw: object) -> BatchResult:
    parts: list[BatchResult] = []
    best = best_known
    for lo in range(0, len(x0), batch):
        def shifted(X: np.ndarray, idx: np.ndarray, lo: int = lo) -> tuple[np.ndarray, np.ndarray]:
            return f_and_grad(X, idx + lo)  # indices into the full batch, as the objective expects

        r = batch_lbfgs(shifted, x0[lo : lo + batch], best_known=best, **kw)  # type: ignore[arg-type]
        finite = r.fun[np.isfinite(r.fun)]
        if finite.size:
            best = min(best, float(finite.min()))
        parts.append(r)
    return BatchResult(
        x=np.concatenate([r.x for r in parts]),
        fun=np.concatenate([r.fun for r in parts]),
        nit=np.concatenate([r.nit for r in parts]),
        converged=np.concatenate([r.converged for r in parts]),
        n_evals=sum(r.n_evals for r in parts),
    )


def _two_loop(
    g: np.ndarray, s_hist: np.ndarray, y_hist: np.ndarray, rho: np.ndarray, gamma: np.ndarray, order: list[int]
) -> np.ndarray:
    """-H g by the L-BFGS two-loop recursion for every start at once; ``order`` lists history slots newest first."""
    q = g.copy()
    alpha = {}
    for i in order:
        alpha[i] = rho[i] * np.einsum("kd,kd->k", s_hist[i], q)
        q -= alpha[i][:, None] * y_hist[i]
    # Initial Hessian: gamma * I (Nocedal & Wright eq. 7.20); before any curvature pair, a unit
    # step along the normalised gradient.
    no_pair = gamma <= 0
    scale = np.where(no_pair, 1.0 / np.maximum(np.linalg.norm(g, axis=1), 1e-300), gamma)
    r = scale[:, None] * q
    for i in reversed(order):
        beta = rho[i] * np.einsum("kd,kd->k", y_hist[i], r)
        r += (alpha[i] - beta)[:, None] * s_hist[i]
    return -r
