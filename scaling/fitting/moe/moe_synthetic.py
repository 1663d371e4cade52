"""Simulated MoE sweeps drawn from a known law with noise: for recovery and interval-coverage checks.

A sweep is a grid of active sizes x tokens x (granularities or expert counts), as a real MoE
study runs it; losses get multiplicative log-normal noise. The truths are invented, of the
magnitudes dense Chinchilla fits give (they are not any paper's fitted values).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from scaling.fitting.moe.moe_data import MoEData, from_frame

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
