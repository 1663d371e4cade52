"""Chinchilla approach 1: the envelope of training curves (Hoffmann et al. 2022, Sec. 3.1).

Every run's loss curve is interpolated (log loss against log FLOPs) at log-spaced FLOP values.
At each value the run with the lowest loss is compute-optimal there. Hoffmann et al. take that
run's size as N_opt; with a handful of sizes that is a staircase, so by default (``refine``) a
parabola in log N through the best run and its two neighbouring sizes places the minimum between
sizes. A FLOP value whose best run is the smallest or largest size reaching it is flagged and
left out (the optimum may lie beyond the sizes sampled there). Power laws over the rest give a, b.

Uncertainty: runs are resampled with replacement (a run is one curve, the unit that carries its
own noise) and the envelope and laws are recomputed.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from scaling.errors import FitError
from scaling.fitting.data import FitData
from scaling.fitting.frontier import FrontierLaw, parabola, vertex


class ChinchillaEnvelope(FrontierLaw):
    """Chinchilla approach 1.

    Parameters
    ----------
    n_flops : how many log-spaced FLOP values the envelope is evaluated at.
    refine : locate N_opt between sizes with a parabola through the best run and its neighbours.

    Attributes
    ----------
    envelope_ : per FLOP value: flops, N_opt, loss_opt, run (best run's key), status.
    params_ : as :class:`~scaling.fitting.frontier.FrontierLaw`.
    """

    method = "envelope"

    def __init__(self, n_flops: int = 40, refine: bool = True):
        self.n_flops = n_flops
        self.refine = refine

    def get_settings(self) -> dict[str, Any]:
        return {"n_flops": self.n_flops, "refine": self.refine}

    def _grid(self, data: FitData) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """(flops grid F, run sizes N (R,), loss matrix M (R, F) with NaN where a run is absent, keys)."""
        cur = data.curves
        if cur is None or len(cur) == 0:
            raise FitError("approach 1 (envelope) needs loss curves (run_key, tokens, flops, loss); the input has none")
        runs = [(key, g.sort_values("flops")) for key, g in cur.groupby("run_key", sort=True)]
        runs = [(k, g) for k, g in runs if len(g) >= 2]
        if len(runs) < 3:
            raise FitError(f"approach 1 (envelope) needs curves of at least three runs with two or more points; got {len(runs)}")
        if len({float(g['N'].iloc[0]) for _, g in runs}) < 3:
            raise FitError("approach 1 (envelope) needs curves of at least three model sizes")
        lo = min(float(g["flops"].iloc[0]) for _, g in runs)
        hi = max(float(g["flops"].iloc[-1]) for _, g in runs)
        F = np.exp(np.linspace(math.log(lo), math.log(hi), self.n_flops))
        M = np.full((len(runs), len(F)), np.nan)
        for r, (_, g) in enumerate(runs):
            lf, ll = np.log(g["flops"].to_numpy(float)), np.log(g["loss"].to_numpy(float))
            inside = (np.log(F) >= lf[0] - 1e-12) & (np.log(F) <= lf[-1] + 1e-12)
            M[r, inside] = np.exp(np.interp(np.log(F[inside]), lf, ll))
        N = np.array([float(g["N"].iloc[0]) for _, g in runs])
        return F, N, M, [str(k) for k, _ in runs]

    def _envelope(self, F: np.ndarray, N: np.ndarray, M: np.ndarray) -> list[dict[str, Any]]:
        out = []
        for j, flops in enumerate(F):
            col = M[:, j]
            avail = np.flatnonzero(np.isfinite(col))
            rec: dict[str, Any] = {"flops": float(flops), "N_opt": None, "loss_opt": None, "run": None, "curv": None}
            sizes = np.unique(N[avail])
            if sizes.size < 3:
                rec["status"] = f"fewer than three sizes reach this budget ({sizes.size})"
                out.append(rec)
                continue
            # Best loss per size (duplicated runs of a size from the bootstrap collapse here).
            best_per = np.array([np.nanmin(col[avail][N[avail] == s]) for s in sizes])
            i = int(np.argmin(best_per))
            rec["run"] = int(avail[np.flatnonzero((N[avail] == sizes[i]))[np.argmin(col[avail][N[avail] == sizes[i]])]])
            if i == 0 or i == sizes.size - 1:
                rec["status"] = "best run is the " + ("smallest" if i == 0 else "largest") + " size here (edge)"
                out.append(rec)
                continue
            rec["N_opt"], rec["loss_opt"] = float(sizes[i]), float(best_per[i])
            if self.refine:
                x = np.log(sizes[i - 1 : i + 2])
                coef = parabola(x, best_per[i - 1 : i + 2])
                if coef[0] > 0:
                    vx, vy = vertex(coef)
                    rec["N_opt"], rec["loss_opt"], rec["curv"] = math.exp(vx), vy, float(coef[0])
            rec["status"] = "used"
            out.append(rec)
        return out

    def _params_from(self, env: list[dict[str, Any]], strict: bool) -> dict[str, float] | None:
        used = [e for e in env if e["status"] == "used"]
        if len(used) < 2 or len({e["N_opt"] for e in used}) < 2:
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
        env = self._envelope(F, N, M)
        params = self._params_from(env, strict=True)
        assert params is not None
        self.params_ = params
        for e in env:
            e["run"] = keys[e["run"]] if e["run"] is not None else None
        self.envelope_ = env
        n_left = sum(e["status"] != "used" for e in env)
        if n_left:
            self.notes_.append(f"left out {n_left} of {len(env)} FLOP values (edge or too few sizes)")

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        F, N, M, _ = self._grid(data)
        out = np.full((n, len(self.param_names)), np.nan)
        R = len(N)
        for k in range(n):
            idx = np.unique(rng.integers(0, R, R))  # duplicates add nothing to an envelope
            p = self._params_from(self._envelope(F, N[idx], M[idx]), strict=False)
            if p is not None:
                out[k] = [p[name] for name in self.param_names]
        return out

    def _plot_extra(self) -> dict[str, Any]:
        return {"envelope": getattr(self, "envelope_", [])}

    def _restore_plot(self, plot: dict[str, Any]) -> None:
        super()._restore_plot(plot)
        self.envelope_ = plot.get("envelope", [])
