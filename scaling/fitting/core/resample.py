"""Bootstrap resampling for many points: the bag of little bootstraps (Kleiner et al. 2014).

A plain bootstrap of m points refits m resampled points per replicate; with a million rows that
is a million-point refit hundreds of times. The bag of little bootstraps fits instead a few
disjoint random subsets of b = m^BLB_GAMMA points, and draws each replicate as multinomial
counts of m draws over one subset's b points: a weighted refit of b points that varies as an
m-point resample does. Every replicate is recentred from its subset's fit onto the full-data fit,
so the intervals are centred on the estimate. Each law supplies its own subset fit and weighted
refit; this module only chooses the subsets and does the bookkeeping.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

#: Above this many points a law's bootstrap is a bag of little bootstraps.
BLB_THRESHOLD = 20_000
#: Each subset holds m^BLB_GAMMA of the m points.
BLB_GAMMA = 0.7
#: Number of disjoint subsets; the replicates are shared out evenly among them.
BLB_SUBSETS = 4

#: fit_subset(idx) -> the fit of the points ``idx`` (a parameter vector), or None when it fails.
SubsetFit = Callable[[np.ndarray], "np.ndarray | None"]
#: refit(idx, k, draws, rng, start) -> (k, p) refits of ``idx`` weighted by multinomial(draws) counts,
#: started at ``start``; NaN rows where a refit failed.
WeightedRefit = Callable[[np.ndarray, int, int, np.random.Generator, np.ndarray], np.ndarray]


def subset_size(m: int) -> int:
    """Points per little-bootstrap subset for ``m`` points."""
    return int(math.ceil(m**BLB_GAMMA))


def little_bootstraps(m: int, n: int, theta: np.ndarray, rng: np.random.Generator, fit_subset: SubsetFit,
                      refit: WeightedRefit) -> np.ndarray:
    """``n`` replicate parameter vectors (n, len(theta)) of a fit ``theta`` of ``m`` points.

    Subsets whose own fit fails leave their replicates NaN (counted as failed refits).
    """
    theta = np.asarray(theta, float)
    b = subset_size(m)
    perm = rng.permutation(m)
    out = np.full((n, len(theta)), np.nan)
    for s, rows in enumerate(np.array_split(np.arange(n), BLB_SUBSETS)):
        if rows.size == 0:
            continue
        idx = np.sort(perm[s * b : (s + 1) * b])
        centre = fit_subset(idx)
        if centre is None or not np.all(np.isfinite(centre)):
            continue
        reps = refit(idx, rows.size, m, rng, np.asarray(centre, float))
        out[rows] = reps - centre + theta
    return out


def note(m: int) -> str:
    """What a law's notes say when its intervals come from little bootstraps."""
    return (f"bootstrap: bag of little bootstraps (Kleiner et al. 2014) for {m:,} points: {BLB_SUBSETS} subsets "
            f"of {subset_size(m):,} points, each replicate {m:,} draws from one, recentred on the full-data fit")


#: Prefix of :func:`note` (a rerun of the bootstrap replaces the note).
NOTE_PREFIX = "bootstrap: bag of little"


def multinomial_counts(draws: int, b: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """(k, b) float counts of ``draws`` draws with replacement from ``b`` points, one row per replicate."""
    return rng.multinomial(draws, np.full(b, 1.0 / b), size=k).astype(float)
