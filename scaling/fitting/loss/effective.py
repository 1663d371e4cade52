"""Muennighoff et al.'s (2023) data-constrained law: R*_D and R*_N fixed or estimated, with honest intervals.

Approach 3 on effective data D' and effective parameters N'; an estimated R* gets a 95%
profile-likelihood interval, or is reported bounded or not determined where the profile runs
into the search range's end. The law and the estimator: docs/fitting.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy.optimize import brentq, least_squares, minimize_scalar
from scipy.stats import chi2

from scaling.errors import FitError
from scaling.fmt import bounds
from scaling.fitting.core.measurements import FitData, effective_tokens

#: Muennighoff et al.'s fitted R*_N (R*_D is :data:`scaling.fitting.core.measurements.R_STAR_DATA`, 15.4).
R_STAR_N = 5.3
#: The R* searched (0.5: repeats are almost worthless; 500: almost as good as new).
R_STAR_RANGE = (0.5, 500.0)
#: Deviance threshold of a 95% profile-likelihood interval (one parameter).
DEVIANCE_95 = float(chi2.ppf(0.95, 1))
#: Grid points per R* over the search range (log-spaced) before refining.
GRID = 13


def n_opt(theta: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Compute-optimal N for D = ``tokens`` under approach 3's law theta = (ln A, ln B, ln E, alpha, beta)."""
    a, b, _, al, be = theta
    log_g = (math.log(al) + a - math.log(be) - b) / (al + be)
    return np.exp(log_g + (be / al) * (np.log(tokens) + log_g))


def effective_params(N: np.ndarray, U_N: np.ndarray, r_star_n: float) -> np.ndarray:
    """N' = U_N + U_N R*_N (1 - exp(-R_N / R*_N)), R_N = N / U_N - 1 (N itself where N <= U_N)."""
    N = np.asarray(N, float)
    U_N = np.minimum(np.asarray(U_N, float), N)
    R = N / U_N - 1.0
    return U_N + U_N * r_star_n * (1.0 - np.exp(-R / r_star_n))


@dataclass
class RStar:
    """One R*: its value and what may be claimed about it."""

    name: str
    value: float
    #: fixed (given), fitted (with a 95% profile interval), bounded (one side only), not determined, pinned
    status: str
    lo: float = math.nan
    hi: float = math.nan

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "status": self.status, "lo": self.lo, "hi": self.hi}

    def text(self) -> str:
        lo, hi = R_STAR_RANGE
        if self.status == "fixed":
            return f"{self.name} = {self.value:.4g} (fixed)"
        if self.status == "fitted":
            return (f"{self.name} = {self.value:.3g} fitted, 95% profile-likelihood interval "
                    f"{bounds(self.lo, self.hi)}")
        if self.status == "pinned":
            end = "lower" if self.value < math.sqrt(lo * hi) else "upper"
            return (f"{self.name} is pinned at the {end} end of its "
                    f"search range {bounds(lo, hi, 6)} (best {self.value:.3g}): the data do not determine it; "
                    "fitted at that value, with no interval")
        if self.status == "bounded":
            side = f"at least {self.lo:.3g}" if math.isfinite(self.lo) else f"at most {self.hi:.3g}"
            return (f"{self.name} is not determined: the data only show it is {side} (its 95% profile-likelihood "
                    f"interval runs to the end of the search range {bounds(lo, hi, 6)}); fitted at its best value "
                    f"{self.value:.3g}, with no interval")
        return (f"{self.name} is not determined: its profile likelihood is flat across the search range "
                f"{bounds(lo, hi, 6)} (every value fits within the 95% threshold); fitted at {self.value:.3g}, "
                "with no interval")


class DataConstrainedProfile:
    """Least squares of the data-constrained law on log loss, as a function of (R*_D, R*_N)."""

    def __init__(self, N: np.ndarray, D_raw: np.ndarray, U: np.ndarray, loss: np.ndarray, theta0: np.ndarray):
        self.N, self.D_raw, self.U = N, D_raw, U
        self.U_D = np.minimum(U, D_raw)  # the unique tokens a run actually saw
        self.logL = np.log(loss)
        self.theta0 = np.asarray(theta0, float)
        self.cache: dict[tuple[float, float | None], tuple[float, np.ndarray]] = {}

    @property
    def n(self) -> int:
        return len(self.N)

    def fit(self, r_d: float, r_n: float | None) -> tuple[float, np.ndarray]:
        """(RSS of log loss, theta) of the law at these R*s, started at the fit with the R*s as given."""
        key = (round(math.log(r_d), 9), None if r_n is None else round(math.log(r_n), 9))
        if key in self.cache:
            return self.cache[key]
        Dp = np.log(effective_tokens(self.D_raw, self.U, r_d))

        logU_D = np.log(self.U_D)

        def parts(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
            """Residuals, softmax weights of the three terms, ln N' and d ln N' / d ln U_N (0 without excess)."""
            a, b, e = x[:3]
            al, be = np.exp(np.clip(x[3:], -20.0, 5.0))
            lNp, g = np.log(self.N), np.zeros_like(Dp)
            if r_n is not None:
                log_un = (x[3] + a - x[4] - b) / al + (be / al) * logU_D  # ln N_opt(U_D)
                U_N = np.exp(np.minimum(log_un, lNp))
                excess = log_un < lNp
                q = np.exp(-(self.N / U_N - 1.0) / r_n)
                Np = U_N * (1.0 + r_n * (1.0 - q))
                lNp = np.log(Np)
                g = np.where(excess, (U_N / Np) * (1.0 + r_n * (1.0 - q) - q * self.N / U_N), 0.0)
            t = np.stack([a - al * lNp, b - be * Dp, np.full_like(Dp, e)])
            top = t.max(axis=0)
            w = np.exp(t - top)
            tot = w.sum(axis=0)
            return top + np.log(tot) - self.logL, w / tot, lNp, g

        def resid(x: np.ndarray) -> np.ndarray:  # x: theta with ln alpha and ln beta, so lm runs unbounded
            with np.errstate(all="ignore"):
                r = parts(x)[0]
            return np.where(np.isfinite(r), r, 1e3)

        def jac(x: np.ndarray) -> np.ndarray:
            a, b = x[:2]
            al, be = np.exp(np.clip(x[3:], -20.0, 5.0))
            with np.errstate(all="ignore"):
                _, w, lNp, g = parts(x)
                # d ln U_N / d(a, b, e, ln alpha, ln beta) where U_N = N_opt(U_D)
                dun = np.stack([np.full_like(g, 1 / al), np.full_like(g, -1 / al), np.zeros_like(g),
                                np.full_like(g, (1 - (x[3] + a - x[4] - b)) / al) - (be / al) * logU_D,
                                np.full_like(g, -1 / al) + (be / al) * logU_D], axis=1)
                J = -(al * w[0] * g)[:, None] * dun
                J[:, 0] += w[0]
                J[:, 1] += w[1]
                J[:, 2] += w[2]
                J[:, 3] += -al * lNp * w[0]
                J[:, 4] += -be * Dp * w[1]
            return np.where(np.isfinite(J), J, 0.0)

        x0 = np.concatenate([self.theta0[:3], np.log(np.maximum(self.theta0[3:], 1e-6))])
        try:
            res = least_squares(resid, x0, jac=jac, method="lm", x_scale="jac", max_nfev=2000)
            out = (float(np.sum(res.fun ** 2)), np.concatenate([res.x[:3], np.exp(np.clip(res.x[3:], -20.0, 5.0))]))
        except (ValueError, np.linalg.LinAlgError):
            out = (math.inf, self.theta0)
        self.cache[key] = out
        return out

    def rss(self, r_d: float, r_n: float | None) -> float:
        return self.fit(r_d, r_n)[0]


def _log_min(f: Any, around: float) -> float:
    """min of f over R* within a factor e^2 of ``around`` (inside :data:`R_STAR_RANGE`), searched in log R*.

    Used to re-optimise one R* while profiling the other: its optimum moves little from ``around``.
    """
    lo, hi = R_STAR_RANGE
    a, b = max(math.log(lo), math.log(around) - 2.0), min(math.log(hi), math.log(around) + 2.0)
    res = minimize_scalar(lambda t: f(math.exp(t)), bounds=(a, b), method="bounded", options={"xatol": 0.1})
    return float(min(res.fun, f(around)))


def _log_search(f: Any) -> tuple[float, float]:
    """(argmin, min) of f over log-spaced R* in :data:`R_STAR_RANGE`: a grid, then a bounded refinement."""
    lo, hi = R_STAR_RANGE
    grid = np.geomspace(lo, hi, GRID)
    vals = np.array([f(r) for r in grid])
    i = int(np.argmin(vals))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, GRID - 1)])
    res = minimize_scalar(lambda t: f(math.exp(t)), bounds=(a, b), method="bounded", options={"xatol": 0.01})
    if res.fun <= vals[i]:
        return math.exp(float(res.x)), float(res.fun)
    return float(grid[i]), float(vals[i])


def _interval(deviance: Any, best: float) -> tuple[float, float]:
    """Ends of {r : deviance(r) <= DEVIANCE_95} around ``best``; NaN for an end that reaches the range's end."""
    lo, hi = R_STAR_RANGE
    ends = []
    for edge in (lo, hi):
        pts = np.geomspace(best, edge, 6)[1:]
        inside, found = best, math.nan
        for r in pts:
            if deviance(r) > DEVIANCE_95:
                found = brentq(lambda t: deviance(math.exp(t)) - DEVIANCE_95, math.log(inside), math.log(r), xtol=0.01)
                found = math.exp(found)
                break
            inside = r
        ends.append(found)
    return ends[0], ends[1]


def _classify(name: str, best: float, lo: float, hi: float) -> RStar:
    rlo, rhi = R_STAR_RANGE
    if math.isnan(lo) and math.isnan(hi):
        return RStar(name, best, "not determined")
    if best <= rlo * 1.05 or best >= rhi / 1.05:
        return RStar(name, best, "pinned")
    if math.isnan(lo) or math.isnan(hi):
        return RStar(name, best, "bounded", lo, hi)
    return RStar(name, best, "fitted", lo, hi)


def estimate(prof: DataConstrainedProfile, fit_d: bool, r_d: float, fit_n: bool,
             r_n: float | None) -> tuple[RStar, RStar | None, np.ndarray]:
    """Estimate the R*s asked for (the others stay at their given values); returns both and the law's theta."""
    if fit_d and fit_n:
        for _ in range(3):  # coordinate descent; the profile is smooth and nearly separable
            r_d, _ = _log_search(lambda r: prof.rss(r, r_n))
            r_n, _ = _log_search(lambda r: prof.rss(r_d, r))
    elif fit_d:
        r_d, _ = _log_search(lambda r: prof.rss(r, r_n))
    elif fit_n:
        r_n, _ = _log_search(lambda r: prof.rss(r_d, r))
    rss_min, theta = prof.fit(r_d, r_n)
    if not math.isfinite(rss_min):
        raise FitError("the data-constrained law could not be fitted (no finite least-squares optimum)")

    def dev(rss: float) -> float:
        return prof.n * math.log(max(rss, rss_min, 1e-300) / max(rss_min, 1e-300))

    star_d = RStar("R*_D", r_d, "fixed")
    if fit_d:
        def dev_d(r: float) -> float:
            return dev(_log_min(lambda q: prof.rss(r, q), float(r_n)) if fit_n else prof.rss(r, r_n))
        star_d = _classify("R*_D", r_d, *_interval(dev_d, r_d))
    star_n = None if r_n is None else RStar("R*_N", r_n, "fixed")
    if fit_n:
        def dev_n(r: float) -> float:
            return dev(_log_min(lambda q: prof.rss(q, r), r_d) if fit_d else prof.rss(r_d, r))
        star_n = _classify("R*_N", float(r_n), *_interval(dev_n, float(r_n)))
    return star_d, star_n, theta


def fit_effective(data: FitData, *, fit_d: bool = False, r_star_n: float | None = None,
                  fit_n: bool = False) -> FitData:
    """``data`` on Muennighoff et al.'s effective data (and parameters), with R*_D and R*_N fixed or fitted.

    ``fit_d``/``fit_n``: estimate R*_D/R*_N (profile likelihood); ``r_star_n``: R*_N when fixed
    (None: excess parameters are not modelled, N' = N, unless ``fit_n``). The returned points
    have D = D' and, with R*_N, N = N' (the raw N kept as N_raw), and a note per R*.
    """
    from scaling.fitting.loss.parametric import ChinchillaParametric

    pts = data.points
    if "D_raw" not in pts:
        raise FitError("fitting on effective data with R*_D or R*_N needs unique tokens U "
                       "(a U column or --unique-tokens)")
    D_raw = pts["D_raw"].to_numpy(float)
    U = pts["U"].to_numpy(float) if "U" in pts else np.full(len(pts), float(data.unique_tokens or 0))
    repeats = int((D_raw > U).sum())
    if fit_d and repeats < 2:
        raise FitError(f"fitting R*_D needs points that repeat data (D > U); {repeats} do")
    if fit_n and r_star_n is None:
        r_star_n = R_STAR_N
    base = ChinchillaParametric(grid="small", n_polish=2).fit(replace(data, notes=[], warnings=[]))
    prof = DataConstrainedProfile(pts["N"].to_numpy(float), D_raw, U, pts["loss"].to_numpy(float), base.theta_)
    star_d, star_n, theta = estimate(prof, fit_d, float(data.r_star), fit_n, r_star_n)
    new = pts.copy()
    new["D"] = effective_tokens(D_raw, U, star_d.value)
    notes = [n.replace(f"R*_D = {data.r_star:.4g}", f"R*_D = {star_d.value:.4g}, fitted") if fit_d else n
             for n in data.notes]
    if fit_d:
        notes.append(star_d.text() + f" ({repeats} points repeat data)")
    if star_n is not None:
        U_N = np.minimum(n_opt(theta, np.minimum(U, D_raw)), new["N"].to_numpy(float))
        new["N_raw"] = new["N"]
        new["N"] = effective_params(new["N_raw"].to_numpy(float), U_N, star_n.value)
        excess = int((new["N_raw"] > U_N * (1 + 1e-9)).sum())
        notes.append(f"N is Muennighoff et al.'s effective parameters N' (U_N = min(N, N_opt(U_D)) from the "
                     f"fitted law; {excess} of {len(new)} points have excess parameters); " + star_n.text())
    if fit_d or fit_n:
        notes.append("the law's other parameters are fitted at these R* values: their intervals take them as known")
    return replace(data, points=new, r_star=star_d.value, r_star_n=None if star_n is None else star_n.value,
                   r_star_fits={s.name: s.to_dict() for s in (star_d, star_n) if s is not None and s.status != "fixed"},
                   notes=notes)
