"""Data drawn from a known law with noise: for tests of recovery and interval coverage, and demos.

The truth is a Chinchilla law L = E + A/N^alpha + B/D^beta (or Kaplan's joint law); losses get
multiplicative log-normal noise. Designs mirror real sweeps: IsoFLOP slices around the true
optimum (approach 2), full training curves per size (approach 1), a grid of (N, D) (approach 3).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scaling.fitting.data import SIX, FitData, prepare

#: Close to Epoch AI's estimates on Chinchilla's data (Besiroglu et al. 2024).
TRUTH = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
#: A Kaplan et al. (2020, Table 2)-like joint law.
KAPLAN_TRUTH = {"log_Nc": math.log(8.8e13), "log_Dc": math.log(5.4e13), "alpha_N": 0.076, "alpha_D": 0.095}


def chinchilla_loss(N: np.ndarray, D: np.ndarray, t: dict[str, float] = TRUTH) -> np.ndarray:
    return t["E"] + t["A"] / np.asarray(N, float) ** t["alpha"] + t["B"] / np.asarray(D, float) ** t["beta"]


def chinchilla_optimal_N(C: float | np.ndarray, t: dict[str, float] = TRUTH, k: float = SIX) -> np.ndarray:
    """N* of the truth at C = k N D (Hoffmann et al. eq. 4)."""
    al, be = t["alpha"], t["beta"]
    G = (al * t["A"] / (be * t["B"])) ** (1 / (al + be))
    return G * (np.asarray(C, float) / k) ** (be / (al + be))


def kaplan_loss(N: np.ndarray, D: np.ndarray, t: dict[str, float] = KAPLAN_TRUTH) -> np.ndarray:
    q = t["alpha_N"] / t["alpha_D"]
    return np.exp(t["alpha_D"] * np.logaddexp(q * (t["log_Nc"] - np.log(N)), t["log_Dc"] - np.log(D)))


def _noisy(loss: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    return loss * np.exp(rng.normal(0.0, noise, size=np.shape(loss)))


def isoflop_points(
    budgets: np.ndarray | None = None,
    n_sizes: int = 9,
    span: float = 2.0,
    noise: float = 0.002,
    seed: int = 0,
    t: dict[str, float] = TRUTH,
) -> pd.DataFrame:
    """IsoFLOP slices: at each budget, ``n_sizes`` sizes log-spaced +-``span`` (natural log) around N*."""
    rng = np.random.default_rng(seed)
    budgets = np.geomspace(1e18, 1e21, 7) if budgets is None else np.asarray(budgets, float)
    rows = []
    for C in budgets:
        Ns = chinchilla_optimal_N(C, t) * np.exp(np.linspace(-span, span, n_sizes))
        Ds = C / (SIX * Ns)
        for N, D, L in zip(Ns, Ds, _noisy(chinchilla_loss(Ns, Ds, t), noise, rng)):
            rows.append((N, D, C, L))
    return pd.DataFrame(rows, columns=["N", "D", "C", "loss"])


def grid_points(n_N: int = 8, n_D: int = 8, noise: float = 0.005, seed: int = 0, t: dict[str, float] | None = None,
                law: str = "chinchilla") -> pd.DataFrame:
    """A full grid of sizes (1e7..1e10) and token counts (1e9..1e12) under ``law`` (chinchilla or kaplan)."""
    rng = np.random.default_rng(seed)
    t = t if t is not None else (TRUTH if law == "chinchilla" else KAPLAN_TRUTH)
    N, D = np.meshgrid(np.geomspace(1e7, 1e10, n_N), np.geomspace(1e9, 1e12, n_D))
    N, D = N.ravel(), D.ravel()
    clean = chinchilla_loss(N, D, t) if law == "chinchilla" else kaplan_loss(N, D, t)
    return pd.DataFrame({"N": N, "D": D, "C": SIX * N * D, "loss": _noisy(clean, noise, rng)})


def curves(
    sizes: np.ndarray | None = None,
    tokens_per_param: float = 400.0,
    n_points: int = 60,
    run_noise: float = 0.002,
    point_noise: float = 0.001,
    seed: int = 0,
    t: dict[str, float] = TRUTH,
) -> FitData:
    """Training curves (loss after each amount of tokens) of one run per size, plus final points.

    Each run has a seed-like offset (``run_noise``) shared along its curve and a small per-point noise.
    """
    rng = np.random.default_rng(seed)
    sizes = np.geomspace(1e7, 3e9, 16) if sizes is None else np.asarray(sizes, float)
    rows, finals = [], []
    for r, N in enumerate(sizes):
        D_max = tokens_per_param * N
        toks = np.geomspace(D_max / 300.0, D_max, n_points)
        offset = rng.normal(0.0, run_noise)
        loss = chinchilla_loss(N, toks, t) * np.exp(offset + rng.normal(0.0, point_noise, n_points))
        for tok, L in zip(toks, loss):
            rows.append((f"run{r:03d}", N, tok, SIX * N * tok, L))
        finals.append((N, D_max, SIX * N * D_max, loss[-1]))
    cur = pd.DataFrame(rows, columns=["run_key", "N", "tokens", "flops", "loss"])
    pts = pd.DataFrame(finals, columns=["N", "D", "C", "loss"])
    return prepare(pts, source="synthetic curves", curves=cur)
