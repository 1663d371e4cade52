"""Chinchilla approach 1: the envelope of training curves (Hoffmann et al. 2022, Sec. 3.1).

The lowest smoothed loss across runs at log-spaced FLOP values gives N_opt(C); the bootstrap
resamples runs, then the envelope points clustered by the run that decides them, so a few
deciding runs cannot give a falsely tight interval. Details and reasons: docs/fitting.md.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from scaling.errors import FitError
from scaling.fitting.core.measurements import FitData
from scaling.fitting.loss.frontier import FrontierLaw


class ChinchillaEnvelope(FrontierLaw):
    """Chinchilla approach 1.

    Parameters
    ----------
    n_flops : how many log-spaced FLOP values the envelope is evaluated at.
    refine : locate N_opt between sizes with a parabola through the best run and its neighbours.
    smooth : half-width, in ln FLOPs, of the running mean of each curve's log loss (0: none).

    Attributes
    ----------
    envelope_ : per FLOP value: flops, N_opt, loss_opt, run (best run's key), N_run (its size), status.
    params_ : as :class:`~scaling.fitting.loss.frontier.FrontierLaw`.
    """

    method = "envelope"
    #: Fitted: the envelope (see above) and the grid the bootstrap resamples, with the data it is of.
    envelope_: list[dict[str, Any]] = []  # noqa: RUF012 - rebound by fit/restore, never changed in place
    grid_of_: tuple[FitData, tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]] | None = None

    def __init__(self, n_flops: int = 40, refine: bool = True, smooth: float = 0.05):
        self.n_flops = n_flops
        self.refine = refine
        self.smooth = smooth

    def get_settings(self) -> dict[str, Any]:
        return {"n_flops": self.n_flops, "refine": self.refine, "smooth": self.smooth}

    def _grid(self, data: FitData) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """(flops grid F, run sizes N (R,), loss matrix M (R, F) with NaN where a run is absent, keys)."""
        cur = data.curves
        if cur is None or len(cur) == 0:
            raise FitError("approach 1 (envelope) needs loss curves (run_key, tokens, flops, loss); the input has none")
        # One sort by (run, flops) and slices of plain arrays: a sweep of many runs has as many curves.
        codes, keys = pd.factorize(cur["run_key"], sort=True)
        flops_all = cur["flops"].to_numpy(float)
        order = np.lexsort((flops_all, codes))
        order = order[codes[order] >= 0]  # rows without a run key belong to no curve
        codes, flops_all = codes[order], flops_all[order]
        loss_all, n_all = cur["loss"].to_numpy(float)[order], cur["N"].to_numpy(float)[order]
        starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
        ends = np.r_[starts[1:], len(codes)]
        long_enough = ends - starts >= 2
        starts, ends = starts[long_enough], ends[long_enough]
        if len(starts) < 3:
            raise FitError(f"approach 1 (envelope) needs curves of at least three runs with two or more points; got {len(starts)}")
        N = n_all[starts]
        if len(np.unique(N)) < 3:
            raise FitError("approach 1 (envelope) needs curves of at least three model sizes")
        lo, hi = float(flops_all[starts].min()), float(flops_all[ends - 1].max())
        F = np.exp(np.linspace(math.log(lo), math.log(hi), self.n_flops))
        logF = np.log(F)
        M = np.full((len(starts), len(F)), np.nan)
        for r, (a, b) in enumerate(zip(starts, ends)):
            lf, ll = np.log(flops_all[a:b]), np.log(loss_all[a:b])
            ll = _smooth(lf, ll, float(self.smooth))
            inside = (logF >= lf[0] - 1e-12) & (logF <= lf[-1] + 1e-12)
            M[r, inside] = np.exp(np.interp(logF[inside], lf, ll))
        return F, N, M, [str(keys[codes[a]]) for a in starts]

    def _envelope(self, F: np.ndarray, N: np.ndarray, M: np.ndarray) -> list[dict[str, Any]]:
        """The envelope at every FLOP value, vectorised over FLOP values (the bootstrap calls it often)."""
        sizes = np.unique(N)
        S = sizes.size
        # Best loss per size (several runs of a size: seeds, or bootstrap duplicates) and its run.
        B = np.full((S, len(F)), np.inf)
        best_run = np.full((S, len(F)), -1)
        cols = np.arange(len(F))
        size_of = np.searchsorted(sizes, N)
        for s in range(S):  # per size, not per run: the first run with the lowest loss, as a scan would keep
            rows_s = np.flatnonzero(size_of == s)
            sub = np.where(np.isfinite(M[rows_s]), M[rows_s], np.inf)
            first = np.argmin(sub, axis=0)
            low = sub[first, cols]
            found = np.isfinite(low)
            B[s, found] = low[found]
            best_run[s, found] = rows_s[first[found]]
        finite = np.isfinite(B)
        count = finite.sum(axis=0)
        i = np.argmin(B, axis=0)
        # Nearest available size below and above the best (sizes sampled at a FLOP value can have gaps).
        rows = np.arange(S)[:, None]
        prev_idx = np.maximum.accumulate(np.where(finite, rows, -1), axis=0)
        next_idx = np.minimum.accumulate(np.where(finite, rows, S)[::-1], axis=0)[::-1]
        lo = np.where(i > 0, prev_idx[np.maximum(i - 1, 0), cols], -1)
        hi = np.where(i < S - 1, next_idx[np.minimum(i + 1, S - 1), cols], S)
        edge = (lo < 0) | (hi >= S)
        n_opt = sizes[i].astype(float)
        l_opt = B[i, cols]
        curv = np.full(len(F), np.nan)
        if self.refine:
            ok = (count >= 3) & ~edge
            j = cols[ok]
            x = np.log(np.stack([sizes[lo[j]], sizes[i[j]], sizes[hi[j]]]))
            y = np.stack([B[lo[j], j], B[i[j], j], B[hi[j], j]])
            c2, c1, c0 = _parabola3(x, y)
            with np.errstate(divide="ignore", invalid="ignore"):
                dip = y[1] - (c0 - c1 ** 2 / (4 * c2))
            # Nearly equal neighbouring sizes make a needle-sharp parabola whose vertex dips far
            # below the measured losses: keep the staircase value there.
            good = (c2 > 0) & np.isfinite(dip) & (dip <= np.maximum(y[0], y[2]) - y[1])
            vx = -c1[good] / (2 * c2[good])
            jj = j[good]
            n_opt[jj] = np.exp(vx)
            l_opt[jj] = c0[good] - c1[good] ** 2 / (4 * c2[good])
            curv[jj] = c2[good]
        out = []
        for k, flops in enumerate(F):
            rec: dict[str, Any] = {"flops": float(flops), "N_opt": None, "loss_opt": None, "run": None, "N_run": None,
                                   "curv": None}
            if count[k] < 3:
                rec["status"] = f"fewer than three sizes reach this budget ({int(count[k])})"
            else:
                rec["run"] = int(best_run[i[k], k])
                rec["N_run"] = float(sizes[i[k]])
                if edge[k]:
                    rec["status"] = "best run is the " + ("smallest" if lo[k] < 0 else "largest") + " size here (edge)"
                else:
                    rec["status"] = "used"
                    rec["N_opt"], rec["loss_opt"] = float(n_opt[k]), float(l_opt[k])
                    rec["curv"] = None if not np.isfinite(curv[k]) else float(curv[k])
            out.append(rec)
        return out

    def _params_from(self, env: list[dict[str, Any]], strict: bool) -> dict[str, float] | None:
        used = [e for e in env if e["status"] == "used"]
        if len(used) < 2 or len({e["N_opt"] for e in used}) < 2 or len({e["flops"] for e in used}) < 2:
            if strict:
                flagged = sorted({e["status"] for e in env if e["status"] != "used"})
                self._need_budgets(len(used) if len(used) < 2 else 1, flagged, "approach 1 (envelope)")
            return None
        return self._frontier_params(
            np.array([e["flops"] for e in used]), np.array([e["N_opt"] for e in used]),
            np.array([e["loss_opt"] for e in used]),
            np.array([e["curv"] if e["curv"] is not None else np.nan for e in used]),
        )

    def _fit(self, data: FitData) -> None:
        F, N, M, keys = self._grid(data)
        self.grid_of_ = (data, (F, N, M, keys))  # the bootstrap of this fit resamples the same grid
        env = self._envelope(F, N, M)
        params = self._params_from(env, strict=True)
        assert params is not None
        self.params_ = params
        for e in env:
            e["run"] = keys[e["run"]] if e["run"] is not None else None
        self.envelope_ = env
        used = [e for e in env if e["status"] == "used"]
        self._check_exponent(np.array([e["flops"] for e in used]), np.array([e["N_run"] for e in used]),
                             "approach 1 (envelope)")
        n_left = len(env) - len(used)
        if n_left:
            self.notes_.append(f"left out {n_left} of {len(env)} FLOP values (edge or too few sizes)")
        metric = data.curves.get("metric") if data.curves is not None else None
        if metric is not None:
            per_run = data.curves.groupby("run_key")["metric"].first().value_counts()
            self.notes_.append("curves: " + ", ".join(f"{name} for {int(c)} run(s)" for name, c in per_run.items()))

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        cached = self.grid_of_
        F, N, M, _ = cached[1] if cached is not None and cached[0] is data else self._grid(data)
        out = np.full((n, len(self.param_names)), np.nan)
        R = len(N)
        for k in range(n):
            idx = np.unique(rng.integers(0, R, R))  # duplicates add nothing to an envelope
            used = [e for e in self._envelope(F, N[idx], M[idx]) if e["status"] == "used"]
            if len(used) < 2:
                continue
            # Clusters of FLOP values decided by one run, resampled whole.
            labels = np.array([e["run"] for e in used])
            groups = np.unique(labels)
            pick = rng.choice(groups, size=groups.size, replace=True)
            if np.unique(pick).size < 2:
                continue  # one deciding run: no slope between runs to measure
            rows = np.concatenate([np.flatnonzero(labels == g) for g in pick])
            p = self._params_from([used[i] for i in rows], strict=False)
            if p is not None:
                out[k] = [p[name] for name in self.param_names]
        return out

    def _plot_extra(self) -> dict[str, Any]:
        return {"envelope": self.envelope_}

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        super()._restore_plot(plot)
        self.envelope_ = plot.get("envelope", [])


def _parabola3(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Coefficients of the parabolas through three points each (columns of x, y of shape (3, k))."""
    x0, x1, x2 = x
    y0, y1, y2 = y
    d01, d02, d12 = x0 - x1, x0 - x2, x1 - x2
    c2 = (y0 / (d01 * d02)) - (y1 / (d01 * d12)) + (y2 / (d02 * d12))
    c1 = (y1 - y0) / (x1 - x0) - c2 * (x0 + x1)
    c0 = y0 - c2 * x0 * x0 - c1 * x0
    return c2, c1, c0


def _smooth(lf: np.ndarray, ll: np.ndarray, h: float) -> np.ndarray:
    """Local linear fit of ``ll`` on ``lf`` over |lf - lf_i| <= h, at every point (O(n) by cumulative sums).

    The window is narrowed to stay symmetric at the ends, so a run's first and final losses are
    kept as measured; a local line (not a mean) stays unbiased on a straight stretch however
    unevenly the points are spaced (steps are logged evenly in tokens, unevenly in log FLOPs).
    """
    if h <= 0 or lf.size < 3:
        return ll
    x = lf - lf.mean()
    w = np.minimum(h, np.minimum(lf - lf[0], lf[-1] - lf))
    lo = np.searchsorted(lf, lf - w - 1e-12, side="left")
    hi = np.searchsorted(lf, lf + w + 1e-12, side="right")

    def window_sum(v: np.ndarray) -> np.ndarray:
        cs = np.concatenate([[0.0], np.cumsum(v)])
        return cs[hi] - cs[lo]

    n = (hi - lo).astype(float)
    sx, sy, sxx, sxy = window_sum(x), window_sum(ll), window_sum(x * x), window_sum(x * ll)
    xm, ym = sx / n, sy / n
    vxx = sxx - n * xm * xm
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = np.where(vxx > 1e-12 * np.maximum(n, 1), (sxy - n * xm * ym) / vxx, 0.0)
    return ym + slope * (x - xm)
