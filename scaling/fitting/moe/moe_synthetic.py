"""Simulated MoE sweeps drawn from a known law with noise: for recovery and interval-coverage checks.

A sweep is a grid of active sizes x tokens x (granularities or expert counts), as a real MoE
study runs it; losses get multiplicative log-normal noise. The truths are invented, of the
magnitudes dense Chinchilla fits give (they are not any paper's fitted values).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import pandas as pd

from scaling.fitting.moe.moe_data import MoEData, from_frame
from scaling.fmt import Interval

#: A granularity law: K(G) = g / G^gamma + a on the active-parameter term.
GRANULARITY_TRUTH = {"c": 1.8, "a": 250.0, "b": 2000.0, "g": 300.0, "alpha": 0.34, "beta": 0.36, "gamma": 0.6}
#: A sparsity law: K(S) = a (1 - S)^delta; 8 experts, top-1 (S = 0.875) lowers the term by 8^-0.3 = 0.54.
SPARSITY_TRUTH = {"c": 1.8, "a": 480.0, "b": 2100.0, "delta": 0.3, "alpha": 0.35, "beta": 0.37}


def granularity_loss(N: Any, D: Any, G: Any, t: dict[str, float] = GRANULARITY_TRUTH) -> np.ndarray:
    N, D, G = (np.asarray(v, float) for v in (N, D, G))
    return t["c"] + (t["g"] / G ** t["gamma"] + t["a"]) / N ** t["alpha"] + t["b"] / D ** t["beta"]


def sparsity_loss(N: Any, D: Any, S: Any, t: dict[str, float] = SPARSITY_TRUTH) -> np.ndarray:
    N, D, S = (np.asarray(v, float) for v in (N, D, S))
    return t["c"] + t["a"] * (1.0 - S) ** t["delta"] / N ** t["alpha"] + t["b"] / D ** t["beta"]


def _grid(sizes: np.ndarray, tokens: np.ndarray, levels: np.ndarray) -> tuple[np.ndarray, ...]:
    mesh = np.meshgrid(sizes, tokens, levels, indexing="ij")
    return tuple(m.ravel() for m in mesh)


def granularity_sweep(seed: int = 0, noise: float = 0.005, sizes: Any = None, tokens: Any = None,
                      granularities: Any = (1, 2, 4, 8, 16), t: dict[str, float] = GRANULARITY_TRUTH) -> pd.DataFrame:
    """A table (N, D, granularity, loss) of every size x tokens x granularity, noisy by ``noise`` in log loss."""
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(3e7, 1e9, 4) if sizes is None else np.asarray(sizes, float)
    tokens = np.geomspace(1e9, 3e10, 4) if tokens is None else np.asarray(tokens, float)
    N, D, G = _grid(sizes, tokens, np.asarray(granularities, float))
    loss = granularity_loss(N, D, G, t) * np.exp(rng.normal(0.0, noise, N.shape))
    return pd.DataFrame({"N": N, "D": D, "granularity": G, "loss": loss})


def sparsity_sweep(seed: int = 0, noise: float = 0.005, sizes: Any = None, tokens: Any = None,
                   experts: Any = (1, 4, 16, 64), top_k: int = 1, t: dict[str, float] = SPARSITY_TRUTH) -> pd.DataFrame:
    """A table (N, D, n_experts, top_k, loss): S = 1 - top_k / n_experts (one expert: the dense model)."""
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(3e7, 1e9, 4) if sizes is None else np.asarray(sizes, float)
    tokens = np.geomspace(1e9, 3e10, 4) if tokens is None else np.asarray(tokens, float)
    N, D, E = _grid(sizes, tokens, np.asarray(experts, float))
    k = np.minimum(float(top_k), E)
    loss = sparsity_loss(N, D, 1.0 - k / E, t) * np.exp(rng.normal(0.0, noise, N.shape))
    return pd.DataFrame({"N": N, "D": D, "n_experts": E, "top_k": k, "loss": loss})


def as_data(table: pd.DataFrame) -> MoEData:
    """A simulated table read as any CSV is."""
    return from_frame(table, source="simulated")


def draw_truth(form: str, rng: np.random.Generator) -> dict[str, float]:
    """A random truth near the defaults: exponents 0.25-0.45, coefficients within a factor ~3."""
    base = dict(GRANULARITY_TRUTH if form == "granularity" else SPARSITY_TRUTH)
    t = {"c": rng.uniform(1.5, 2.2), "alpha": rng.uniform(0.25, 0.45), "beta": rng.uniform(0.25, 0.45)}
    for name in ("a", "b", "g"):
        if name in base:
            t[name] = base[name] * float(np.exp(rng.uniform(-1.0, 1.0)))
    if form == "granularity":
        t["gamma"] = rng.uniform(0.3, 1.0)
    else:
        t["delta"] = rng.uniform(0.1, 0.5)
    return t


def coverage_study(form: str, draws: int, *, n_bootstrap: int = 100, seed: int = 0, noise: float = 0.005,
                   budget_factor: float = 10.0, progress: Callable[[dict[str, Any]], None] | None = None
                   ) -> dict[str, Any]:
    """How often the 95% intervals of a law fitted to simulated sweeps hold the truth.

    Each draw: a random truth (:func:`draw_truth`), a sweep of 4 sizes x 4 token counts x the
    form's levels with ``noise`` in log loss, the law fitted (small grid) and bootstrapped. Counted
    over the draws the law calls reliable: each parameter's interval, and at ``budget_factor`` x
    the largest budget the recommendation's N_active*, D* and the loss saved against the dense (or
    G = 1) optimum, each holding the truth's own value at the recommended cut of the experts, and
    the cut itself (G* or S*) holding the truth's best cut within the measured range. Also per
    quantity: (covered, intervals) and the median width (hi / lo for a positive quantity).
    ``progress`` is called with the result so far after each draw.
    """
    from scaling.fitting.moe.moe_laws import FORMS
    from scaling.fitting.moe.moe_recommend import recommend_moe

    cls = FORMS[form]
    rng = np.random.default_rng(seed)
    hits: dict[str, list[bool]] = {}
    widths: dict[str, list[float]] = {}
    flagged = 0
    for i in range(draws):
        t = draw_truth(form, rng)
        table = (granularity_sweep(seed=seed * 100_003 + i, noise=noise, t=t) if form == "granularity"
                 else sparsity_sweep(seed=seed * 100_003 + i, noise=noise, t=t))
        law = cls(grid="small").fit(as_data(table)).bootstrap(n_bootstrap, seed=i)
        if not law.reliable():
            flagged += 1
            continue
        for name, iv in law.reported_intervals().items():
            if name in t:
                _count(hits, widths, name, iv, t[name], positive=name in law.log_names)
        C = np.asarray(budget_factor * law.c_range_[1])
        rec = recommend_moe(law, float(C))
        x = np.asarray(rec.choice.value)
        N_true, D_true, L_true = (float(v) for v in law.optimal_at(t, C, x))
        _, _, L_dense = (float(v) for v in law.optimal_at(t, C, np.asarray(law.dense)))
        xs = law.x_grid()
        x_true = float(xs[int(np.nanargmin(law.optimal_at(t, C, xs)[2]))])
        _count(hits, widths, "N_active*", rec.N, N_true, positive=True)
        _count(hits, widths, "D*", rec.D, D_true, positive=True)
        _count(hits, widths, law.variable + "*", rec.choice, x_true, positive=law.variable == "G")
        _count(hits, widths, "loss saved", rec.gain, L_dense - L_true, positive=False)
        if progress is not None:
            progress(_tally(form, i + 1, flagged, hits, widths))
    return _tally(form, draws, flagged, hits, widths)


def holds(iv: Interval, truth: float) -> bool:
    """Whether a summary's 95% interval holds ``truth``; one with no spread (every replicate the same, so
    the value alone is printed) holds it only when the value is the truth."""
    if iv.kind == "no spread":
        return bool(abs(iv.value - truth) <= 1e-9 * max(abs(truth), 1e-300))
    return iv.covers(truth)


def _count(hits: dict[str, list[bool]], widths: dict[str, list[float]], name: str, iv: Interval, truth: float,
           *, positive: bool) -> None:
    """Tally one interval: whether it holds the truth, and its width (hi / lo for a positive quantity)."""
    hits.setdefault(name, []).append(holds(iv, truth))
    lo, hi = (math.nan if v is None else v for v in (iv.lo, iv.hi))
    with np.errstate(all="ignore"):
        width = np.float64(hi) / lo if positive else np.float64(hi) - lo
    widths.setdefault(name, []).append(float(width))


def _tally(form: str, draws: int, flagged: int, hits: dict[str, list[bool]],
           widths: dict[str, list[float]]) -> dict[str, Any]:
    coverage = {k: float(np.mean(v)) for k, v in hits.items()}
    return {"form": form, "draws": draws, "kept": draws - flagged, "flagged": flagged, "coverage": coverage,
            "counts": {k: (int(np.sum(v)), len(v)) for k, v in hits.items()},
            "median_width": {k: float(np.nanmedian(v)) if np.isfinite(v).any() else math.nan for k, v in widths.items()},
            "lowest": min(coverage.values()) if coverage else math.nan}
