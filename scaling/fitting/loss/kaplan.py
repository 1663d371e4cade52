"""Kaplan et al. (2020) power laws: L(N), L(D), L(C_min) and the joint L(N, D).

- L(N) = (N_c/N)^alpha_N on, for each size, the run with the most data (eq. 1.1);
- L(D) = (D_c/D)^alpha_D on, for each token count, the run with the most parameters (eq. 1.2);
- L(C) = (C_c/C)^alpha_C on the compute-efficient frontier: points no cheaper point beats (eq. 1.3),
  taken over every point of every loss curve when curves exist (as Kaplan et al. do), else over
  the runs' final points;
- L(N, D) = [(N_c/N)^(alpha_N/alpha_D) + D_c/D]^alpha_D (eq. 1.5), least squares on log L.

The single-variable laws are straight lines in log-log space. At fixed C = k N D the joint law's
minimum is at N* proportional to C^(alpha_D/(alpha_N + alpha_D)) (set dL/dN = 0); Kaplan et al.'s
own frontier argument gives N* proportional to C^(alpha_C/alpha_N) (Sec. 6.1). Both are reported.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from scaling.errors import FitError
from scaling.fmt import bounds
from scaling.fitting.core.base import Law, Params, check_spread, coverage_reasons, fit_line
from scaling.fitting.core.measurements import FitData, group_budgets
from scaling.fitting.core.doubts import DoubtKind
from scaling.fitting.core.resample import BLB_THRESHOLD, little_bootstraps, multinomial_counts
from scaling.fitting.core.resample import NOTE_PREFIX as BLB_NOTE, note as blb_note

#: Above this many points the joint law's starts run on a seeded random subset of this size (they
#: only have to find the optimum's basin); the best of them is then refined on every point.
START_POINTS = 20_000
#: Each single-variable law's parameters (intercept as log X_c, exponent), and the joint law's.
LINE_NAMES = {"N": ("log_Nc1", "alpha_N1"), "D": ("log_Dc1", "alpha_D1"), "C": ("log_Cc", "alpha_C")}
JOINT_NAMES = ("log_Nc", "log_Dc", "alpha_N", "alpha_D")


def frontier_mask(C: np.ndarray, loss: np.ndarray) -> np.ndarray:
    """Points on the compute-efficient frontier: lower loss than every point with less compute."""
    order = np.argsort(C, kind="stable")
    ordered = np.asarray(loss, float)[order]
    best_before = np.minimum.accumulate(np.concatenate([[np.inf], ordered[:-1]]))
    keep = np.zeros(len(C), dtype=bool)
    keep[order] = ordered < best_before
    return keep


def _first_max_per(key: np.ndarray, other: np.ndarray) -> np.ndarray:
    """For each distinct ``key``, the first index with the largest ``other`` (sorted indices)."""
    order = np.lexsort((np.arange(len(key)), -np.asarray(other, float), key))
    k = np.asarray(key)[order]
    first = np.ones(len(k), dtype=bool)
    first[1:] = k[1:] != k[:-1]
    return np.sort(order[first])


class KaplanLaw(Law):
    """Kaplan et al. (2020) laws, fitted in log space.

    Attributes
    ----------
    params_ : log_Nc, log_Dc, alpha_N, alpha_D (joint law); log_Nc1, alpha_N1 (L(N));
        log_Dc1, alpha_D1 (L(D)); log_Cc, alpha_C (L(C_min)). Log parameters are natural logs.
    """

    law = "kaplan"
    method = "kaplan"
    param_names = ("log_Nc", "log_Dc", "alpha_N", "alpha_D", "log_Nc1", "alpha_N1", "log_Dc1", "alpha_D1", "log_Cc", "alpha_C")
    derived_names = ("Nc", "Dc", "a", "a_frontier")
    log_names = ("Nc", "Dc")
    scale_names = ("Nc", "Dc")
    exponent_names = ("alpha_N", "alpha_D")
    #: Bounds of the joint law's least squares (log_Nc, log_Dc, alpha_N, alpha_D).
    JOINT_BOUNDS = ([-50.0, -50.0, 1e-4, 1e-4], [400.0, 400.0, 5.0, 5.0])
    #: Fitted: the points of each single-variable law, the loss curves' frontier (None: the final
    #: points'), and the notes on the single-variable laws (rewritten by each bootstrap).
    subsets_: dict[str, np.ndarray] | None = None
    frontier_: tuple[np.ndarray, np.ndarray] | None = None
    single_law_notes_: list[str] = []  # noqa: RUF012 - rebound, never changed in place

    def get_settings(self) -> dict[str, Any]:
        return {}

    def _fit(self, data: FitData) -> None:
        self._validate(data)
        self.frontier_ = None
        if data.curves is not None and len(data.curves) >= 2:
            Cf, Lf = data.curves["flops"].to_numpy(float), data.curves["loss"].to_numpy(float)
            keep = frontier_mask(Cf, Lf)
            self.frontier_ = (Cf[keep], Lf[keep])
        self.params_ = self._fit_arrays(data.points["N"].to_numpy(), data.points["D"].to_numpy(),
                                        data.points["C"].to_numpy(), data.points["loss"].to_numpy(), strict=True,
                                        frontier=self.frontier_)
        self._note_bounds()
        pts = data.points
        self.subsets_ = self._subsets(pts["N"].to_numpy(), pts["D"].to_numpy(), pts["C"].to_numpy(), pts["loss"].to_numpy())
        self._check_points(len(pts), len(JOINT_NAMES), "the joint law L(N, D)")
        self._check_coverage(pts["C"].to_numpy(float))
        self.single_law_notes_: list[str] = []
        self._note_single_laws()

    def _check_coverage(self, C: np.ndarray) -> None:
        """Note as unreliable a joint law whose N* rests on too narrow a range of compute.

        On one IsoFLOP budget N and D move together (D = C / 6N), so alpha_N and alpha_D cannot be
        told apart; a few budgets spanning a small factor cannot place N* at another budget.
        """
        reasons = coverage_reasons(len(np.unique(group_budgets(C))), C, "on one budget N and D vary together")
        if reasons:
            self.add_unreliable(DoubtKind.COVERAGE, f"the data cannot pin the joint law L(N, D) down ({'; '.join(reasons)}); "
                               "do not trust N* or the frontier it implies")

    def _note_single_laws(self) -> None:
        """Note a single-variable law whose exponent says loss does not fall along its variable.

        Such a law is not the one N* comes from (the joint law is), so it is noted, not judged.
        Kaplan's frontier exponent a_frontier = alpha_C / alpha_N1 lies between 0 and 1 when N*
        grows slower than C; elsewhere the single-variable laws disagree with each other.
        """
        for law, name in (("N", "alpha_N1"), ("D", "alpha_D1"), ("C_min", "alpha_C")):
            v = self.params_[name]
            if not math.isfinite(v):
                self._single_law_note(f"not determined: L({law}): {name} could not be fitted to these runs")
            elif v <= 0:
                self._single_law_note(f"not determined: L({law}): {name} = {v:.3g} is not positive: loss does not fall "
                                   f"with {law.split('_')[0]} in these runs")
        a_frontier = float(self._derived(self.params_)["a_frontier"])
        if math.isfinite(a_frontier) and not 0.0 < a_frontier < 1.0:
            self._single_law_note(f"not determined: a_frontier = alpha_C / alpha_N1 = {a_frontier:.3g} is not between 0 "
                               "and 1: L(C_min) and L(N) disagree (N* comes from the joint law)")

    def _single_law_note(self, note: str) -> None:
        """A note on a single-variable law (rewritten by each bootstrap; never a doubt)."""
        self.single_law_notes_ = [*self.single_law_notes_, note]
        self.notes_.append(note)

    def _validate(self, data: FitData) -> None:
        pts = data.points
        check_spread(pts, "the Kaplan laws need")
        if len(pts) <= 4:
            raise FitError(f"the Kaplan joint law needs more points than its 4 parameters; got {len(pts)}")

    def bootstrap(self, n: int = 200, seed: int = 0) -> "KaplanLaw":
        """As :meth:`Law.bootstrap`, and a note for each single-variable law whose exponent the data leave open."""
        super().bootstrap(n, seed)
        old = {id(m) for m in self.single_law_notes_}
        self.notes_ = [m for m in self.notes_ if id(m) not in old]
        self.single_law_notes_ = []
        self._note_single_laws()
        ivs = self.intervals()
        for law, name in (("N", "alpha_N1"), ("D", "alpha_D1"), ("C_min", "alpha_C")):
            lo, hi = ivs[name].lo, ivs[name].hi
            if self.params_[name] > 0 and lo is not None and hi is not None and lo <= 0.0 <= hi:
                self._single_law_note(f"not determined: L({law}): the 95% interval of {name}, {bounds(lo, hi)}, "
                                   "includes 0 (N* comes from the joint law, judged on its own parameters)")
        iv = ivs["a_frontier"]
        a_frontier = iv.value
        if 0.0 < a_frontier < 1.0 and iv.interval is not None and (iv.lo <= 0.0 or iv.hi >= 1.0):
            self._single_law_note(f"not determined: the 95% interval of a_frontier, {bounds(iv.lo, iv.hi)}, "
                               "reaches beyond 0-1 (N* comes from the joint law)")
        return self

    def _note_bounds(self) -> None:
        """A joint-law parameter at a bound of its least squares is pinned, and the law unreliable."""
        names = ("log_Nc", "log_Dc", "alpha_N", "alpha_D")
        for name, lo, hi in zip(names, *self.JOINT_BOUNDS):
            v = self.params_[name]
            tol = 1e-6 * max(1.0, abs(lo), abs(hi))
            if v <= lo + tol or v >= hi - tol:
                bound = f"{'lower' if v <= lo + tol else 'upper'} bound {lo if v <= lo + tol else hi:g}"
                self.pinned_[name] = bound
                self.add_unreliable(DoubtKind.PINNED, f"{name} is pinned at its {bound}: the data do not determine the "
                                   "joint law L(N, D)")

    @staticmethod
    def _subsets(N: np.ndarray, D: np.ndarray, C: np.ndarray, L: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "N": _first_max_per(N, D),
            "D": _first_max_per(D, N),
            "C": np.flatnonzero(frontier_mask(C, L)),
        }

    def _fit_arrays(self, N: np.ndarray, D: np.ndarray, C: np.ndarray, L: np.ndarray, strict: bool,
                    start: dict[str, float] | None = None,
                    frontier: tuple[np.ndarray, np.ndarray] | None = None) -> dict[str, float]:
        sub = self._subsets(N, D, C, L)
        Cf, Lf = frontier if frontier is not None else (C[sub["C"]], L[sub["C"]])
        out = self._single_laws({"N": (N[sub["N"]], L[sub["N"]]), "D": (D[sub["D"]], L[sub["D"]]), "C": (Cf, Lf)},
                                strict)
        if start is None and len(N) > START_POINTS:
            idx = np.sort(np.random.default_rng(0).choice(len(N), START_POINTS, replace=False))
            start = self._fit_joint(N[idx], D[idx], L[idx], out, None)
            self.notes_.append(f"joint law's starts run on a random {START_POINTS:,} of the {len(N):,} points; "
                               "its best optimum refined on all of them")
        out.update(self._fit_joint(N, D, L, out, start))
        return out

    @staticmethod
    def _single_laws(pairs: dict[str, tuple[np.ndarray, np.ndarray]], strict: bool) -> dict[str, float]:
        """L(N), L(D), L(C) as lines in log-log space: log L = alpha (log X_c - log X)."""
        out: dict[str, float] = {}
        for key, (X, Y) in pairs.items():
            try:
                slope, icpt = fit_line(np.log(X), np.log(Y))
            except FitError:
                if strict and key != "C":
                    raise FitError(f"Kaplan L({key}): needs at least two distinct {key} values") from None
                slope, icpt = np.nan, np.nan
            alpha = -slope
            out[LINE_NAMES[key][0]] = icpt / alpha if alpha != 0 else np.nan
            out[LINE_NAMES[key][1]] = alpha
        return out

    @staticmethod
    def _fit_joint(N: np.ndarray, D: np.ndarray, L: np.ndarray, single: dict[str, float],
                   start: dict[str, float] | None, weights: np.ndarray | None = None) -> dict[str, float]:
        """Least squares on log L; ``weights`` (bootstrap counts) weight each point's squared residual."""
        if weights is not None:
            keep = weights > 0
            N, D, L, weights = N[keep], D[keep], L[keep], weights[keep]
        logN, logD, logL = np.log(N), np.log(D), np.log(L)
        sw = np.sqrt(weights) if weights is not None else None

        def resid(th: np.ndarray) -> np.ndarray:
            lNc, lDc, aN, aD = th
            # log L = aD * log( exp((aN/aD)(lNc - logN)) + exp(lDc - logD) ), as log-sum-exp
            r = aD * np.logaddexp((aN / aD) * (lNc - logN), lDc - logD) - logL
            return r if sw is None else r * sw

        def jac(th: np.ndarray) -> np.ndarray:
            lNc, lDc, aN, aD = th
            q, xN = aN / aD, lNc - logN
            u, v = q * xN, lDc - logD
            w = 0.5 * (1.0 + np.tanh(0.5 * (u - v)))  # softmax weight of u, overflow-free sigmoid
            J = np.stack([aN * w, aD * (1.0 - w), w * xN, np.logaddexp(u, v) - w * q * xN], axis=1)
            return J if sw is None else J * sw[:, None]

        starts = []
        if start is not None:
            starts.append([start["log_Nc"], start["log_Dc"], start["alpha_N"], start["alpha_D"]])
        else:
            def good(v: float, lo: float, hi: float) -> float:
                return v if np.isfinite(v) and lo < v < hi else None  # type: ignore[return-value]
            aN = good(single.get("alpha_N1", np.nan), 0.01, 3) or 0.076
            aD = good(single.get("alpha_D1", np.nan), 0.01, 3) or 0.095
            lNc = good(single.get("log_Nc1", np.nan), 0, 200) or np.log(8.8e13)
            lDc = good(single.get("log_Dc1", np.nan), 0, 200) or np.log(5.4e13)
            for sN, sD in ((1.0, 1.0), (2.0, 2.0), (0.5, 0.5), (1.0, 3.0), (3.0, 1.0)):
                starts.append([lNc, lDc, aN * sN, aD * sD])
            # Kaplan et al.'s published values (Table 2) as one more start.
            starts.append([np.log(8.8e13), np.log(5.4e13), 0.076, 0.095])
        best = None
        for x0 in starts:
            try:
                r = least_squares(resid, np.asarray(x0, float), jac=jac, bounds=KaplanLaw.JOINT_BOUNDS,
                                  method="trf", x_scale="jac", max_nfev=2000)
            except ValueError:
                continue
            if np.isfinite(r.cost) and (best is None or r.cost < best.cost):
                best = r
        if best is None:
            raise FitError("the Kaplan joint law failed to converge from every start")
        lNc, lDc, aN, aD = (float(v) for v in best.x)
        return {"log_Nc": lNc, "log_Dc": lDc, "alpha_N": aN, "alpha_D": aD}

    def _bootstrap(self, data: FitData, n: int, rng: np.random.Generator) -> np.ndarray:
        """Each law refitted on a resample of the very points its full-data fit used.

        The subsets (largest-D run per size, largest-N run per token count, the compute frontier)
        are chosen once, on the full data, and each is resampled with replacement; choosing them
        again inside a resample would pick other, worse points whenever a chosen one is left out,
        and bias every replicate away from the full-data fit. The joint law resamples all points
        and refits from the full-data optimum.
        """
        pts = data.points
        N, D, C, L = (pts[c].to_numpy() for c in ("N", "D", "C", "loss"))
        sub = self._subsets(N, D, C, L)
        front = self.frontier_ if self.frontier_ is not None else (C[sub["C"]], L[sub["C"]])
        m = len(pts)
        self.notes_ = [t for t in self.notes_ if not t.startswith(BLB_NOTE)]
        if m > BLB_THRESHOLD:
            lines = {"N": (N[sub["N"]], L[sub["N"]]), "D": (D[sub["D"]], L[sub["D"]]), "C": front}
            return self._little_bootstraps(N, D, L, lines, n, rng)
        out = np.full((n, len(self.param_names)), np.nan)
        for r in range(n):
            idx = rng.integers(0, m, m)
            if len(np.unique(N[idx])) < 2 or len(np.unique(D[idx])) < 2:
                continue
            jN = sub["N"][rng.integers(0, len(sub["N"]), len(sub["N"]))]
            jD = sub["D"][rng.integers(0, len(sub["D"]), len(sub["D"]))]
            jC = rng.integers(0, len(front[0]), len(front[0]))
            try:
                p = self._single_laws({"N": (N[jN], L[jN]), "D": (D[jD], L[jD]), "C": (front[0][jC], front[1][jC])},
                                      strict=False)
                p.update(self._fit_joint(N[idx], D[idx], L[idx], p, start=self.params_))
            except FitError:
                continue
            out[r] = [p[k] for k in self.param_names]
        return out

    def _little_bootstraps(self, N: np.ndarray, D: np.ndarray, L: np.ndarray,
                           lines: dict[str, tuple[np.ndarray, np.ndarray]], n: int,
                           rng: np.random.Generator) -> np.ndarray:
        """The bootstrap of many points: each law resampled on its own points as in :meth:`_bootstrap`,
        the joint law (and a single-variable law on more than BLB_THRESHOLD points) by a bag of
        little bootstraps (:mod:`scaling.fitting.core.resample`) with weighted refits from the full fit."""
        names = list(self.param_names)
        out = np.full((n, len(names)), np.nan)
        for key, (X, Y) in lines.items():
            cols = [names.index(c) for c in LINE_NAMES[key]]
            out[:, cols] = _line_replicates(np.log(X), np.log(Y), [self.params_[c] for c in LINE_NAMES[key]], n, rng)
        start = {c: self.params_[c] for c in JOINT_NAMES}

        def fit_subset(idx: np.ndarray) -> np.ndarray | None:
            if len(np.unique(N[idx])) < 2 or len(np.unique(D[idx])) < 2:
                return None
            try:
                p = self._fit_joint(N[idx], D[idx], L[idx], {}, start)
            except FitError:
                return None
            return np.array([p[c] for c in JOINT_NAMES])

        def refit(idx: np.ndarray, k: int, draws: int, g: np.random.Generator, centre: np.ndarray) -> np.ndarray:
            counts = multinomial_counts(draws, len(idx), k, g)
            res = np.full((k, len(JOINT_NAMES)), np.nan)
            for r in range(k):
                try:
                    p = self._fit_joint(N[idx], D[idx], L[idx], {}, dict(zip(JOINT_NAMES, centre)), counts[r])
                except FitError:
                    continue
                res[r] = [p[c] for c in JOINT_NAMES]
            return res

        theta = np.array([start[c] for c in JOINT_NAMES])
        out[:, [names.index(c) for c in JOINT_NAMES]] = little_bootstraps(len(N), n, theta, rng, fit_subset, refit)
        self.notes_.append(blb_note(len(N)))
        return out

    # -- the law ----------------------------------------------------------------------------
    def _predict(self, p: Params, N: np.ndarray, D: np.ndarray) -> np.ndarray:
        aN, aD = p["alpha_N"], p["alpha_D"]
        return np.exp(aD * np.logaddexp((aN / aD) * (p["log_Nc"] - np.log(N)), p["log_Dc"] - np.log(D)))

    def _derived(self, p: Params) -> dict[str, Any]:
        aN, aD = np.asarray(p["alpha_N"]), np.asarray(p["alpha_D"])
        with np.errstate(all="ignore"):
            return {
                "Nc": np.exp(p["log_Nc"]),
                "Dc": np.exp(p["log_Dc"]),
                "a": aD / (aN + aD),
                "a_frontier": np.asarray(p["alpha_C"]) / np.asarray(p["alpha_N1"]),
            }

    def _optimal(self, p: Params, C: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Minimise the joint law at C = k N D: N*^(q+1) = q Nc^q C / (k Dc), q = alpha_N/alpha_D."""
        q = np.asarray(p["alpha_N"]) / np.asarray(p["alpha_D"])
        with np.errstate(all="ignore"):
            logN = (np.log(q) + q * p["log_Nc"] + np.log(C) - np.log(self.k_) - p["log_Dc"]) / (q + 1)
            N = np.exp(logN)
            D = np.asarray(C) / (self.k_ * N)
            return N, D, self._predict(p, N, D)

    def _plot_extra(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.data_ is not None and self.subsets_ is not None:
            pts = self.data_.points
            for key, idx in self.subsets_.items():
                out[f"L_{key}_points"] = {c: pts[c].to_numpy()[idx].tolist() for c in ("N", "D", "C", "loss")}
            if self.frontier_ is not None:  # the frontier of the loss curves replaces that of final points
                out["L_C_points"] = {"C": self.frontier_[0].tolist(), "loss": self.frontier_[1].tolist()}
        return out


def _weighted_lines(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(k, 2) of (log X_c, alpha) for the line log L = alpha (log X_c - log X) weighted by each row of ``w`` (k, s).

    NaN where a row leaves fewer than two distinct x (no slope).
    """
    xm, ym = x.mean(), y.mean()
    xc, yc = x - xm, y - ym
    W = w.sum(axis=1)
    with np.errstate(all="ignore"):
        mx, my = (w @ xc) / W, (w @ yc) / W
        sxx = w @ (xc * xc) - W * mx * mx
        sxy = w @ (xc * yc) - W * mx * my
        ok = sxx > 1e-12 * np.maximum(w @ (xc * xc), 1e-300)
        slope = np.where(ok, sxy / np.where(ok, sxx, 1.0), np.nan)
        icpt = (my + ym) - slope * (mx + xm)
        alpha = -slope
        return np.stack([np.where(alpha != 0, icpt / alpha, np.nan), alpha], axis=1)


def _line_replicates(x: np.ndarray, y: np.ndarray, theta: list[float], n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, 2) bootstrap replicates of a single-variable law on the points (x, y) = (log X, log L).

    All replicates at once as multinomial-count weighted lines; on more than BLB_THRESHOLD points,
    little bootstraps (each replicate s draws over one subset).
    """
    s = len(x)
    if s < 2 or not np.all(np.isfinite(theta)):
        return np.full((n, 2), np.nan)

    def refit(idx: np.ndarray, k: int, draws: int, g: np.random.Generator, centre: np.ndarray) -> np.ndarray:
        return _weighted_lines(x[idx], y[idx], multinomial_counts(draws, len(idx), k, g))

    if s > BLB_THRESHOLD:
        return little_bootstraps(s, n, np.asarray(theta, float), rng,
                                 lambda idx: _weighted_lines(x[idx], y[idx], np.ones((1, len(idx))))[0], refit)
    out = np.full((n, 2), np.nan)
    chunk = max(1, (32 * 2**20) // (8 * s))  # counts held at once: about 32 MiB
    for lo in range(0, n, chunk):
        k = min(chunk, n - lo)
        out[lo : lo + k] = refit(np.arange(s), k, s, rng, np.asarray(theta, float))
    return out
