"""Estimating Muennighoff et al.'s R*_D (how fast repeated tokens lose value) instead of fixing it.

Muennighoff et al. (2023) fit R*_D = 15.4 on their runs; another corpus or model family need
not share it. Here R*_D is estimated by profiling: for each R*_D on a log grid the effective
data D'(R*_D) is recomputed and approach 3 (the parametric law) refitted; the R*_D with the
lowest Huber objective is refined by a bounded scalar search in log R*_D. The law's other
parameters are then fitted at that R*_D, so their intervals treat it as known.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
from scipy.optimize import minimize_scalar

from scaling.errors import FitError
from scaling.fitting.data import FitData, effective_tokens

#: The R*_D searched (Muennighoff et al. report 15.4; 0.5 means repeats are almost worthless).
R_STAR_RANGE = (0.5, 500.0)


def _objective(data: FitData, D_raw: np.ndarray, U: np.ndarray | float, r_star: float) -> float:
    from scaling.fitting.parametric import ChinchillaParametric

    pts = data.points.copy()
    pts["D"] = effective_tokens(D_raw, U, r_star)
    law = ChinchillaParametric(grid="small", n_polish=2).fit(replace(data, points=pts, notes=[], warnings=[]))
    return float(law.objective_)


def fit_r_star(data: FitData) -> tuple[float, str]:
    """The R*_D minimising approach 3's objective, and a note saying how it was found."""
    pts = data.points
    if "D_raw" not in pts:
        raise FitError("fitting R*_D needs unique tokens U (a U column or --unique-tokens)")
    D_raw = pts["D_raw"].to_numpy(float)
    U = pts["U"].to_numpy(float) if "U" in pts else float(data.unique_tokens or 0)
    repeats = int((D_raw > U).sum())
    if repeats < 2:
        raise FitError(f"fitting R*_D needs points that repeat data (D > U); {repeats} do")
    lo, hi = R_STAR_RANGE
    grid = np.geomspace(lo, hi, 13)
    prof = np.array([_objective(data, D_raw, U, r) for r in grid])
    i = int(np.argmin(prof))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    res = minimize_scalar(lambda t: _objective(data, D_raw, U, math.exp(t)), bounds=(a, b), method="bounded",
                          options={"xatol": 0.02})
    best = math.exp(float(res.x)) if res.fun <= prof[i] else float(grid[i])
    edge = best <= grid[1] * 1.0001 or best >= grid[-2] * 0.9999
    note = (f"R*_D = {best:.3g} fitted (approach 3's objective profiled over R*_D in [{lo:g}, {hi:g}], "
            f"{repeats} points repeat data); other parameters' intervals take it as known")
    if edge:
        note = (f"R*_D is pinned at the {'lower' if best < 15.4 else 'upper'} end of its search range "
                f"([{lo:g}, {hi:g}], best {best:.3g}): the data do not determine how repeated data decay; "
                "D' uses that value, with no interval")
    return best, note


def fit_r_star_data(data: FitData, source: object = None) -> FitData:
    """``data`` with D recomputed at the fitted R*_D, and a note saying so."""
    r_star, note = fit_r_star(data)
    pts = data.points.copy()
    U = pts["U"].to_numpy(float) if "U" in pts else float(data.unique_tokens or 0)
    pts["D"] = effective_tokens(pts["D_raw"].to_numpy(float), U, r_star)
    notes = [n.replace(f"R*_D = {data.r_star:.4g}", f"R*_D = {r_star:.4g}, fitted") for n in data.notes]
    return replace(data, points=pts, r_star=r_star, notes=notes + [note])
