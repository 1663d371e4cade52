"""Simulated hyperparameter sweeps with a known truth, for tests and ``benchmarks/bench_hparams.py``.

L = E + A/N^alpha + B/D^beta + k_lr (ln lr - ln lr*(N, D))^2 + k_b (ln B - ln B*(D))^2,
lr* = c N^a D^b, B* = d D^e (Step Law's forms, Li et al. 2025), with multiplicative noise,
on a grid like Step Law's: learning rates a factor sqrt(2) apart, batches a factor 2 apart,
centred near each point's optimum (the grid is placed from a rough guess, not the truth).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaling.accounting import FLOPS_PER_PARAM_TOKEN


@dataclass(frozen=True)
class HparamTruth:
    """A simulated law: the loss, its hyperparameter penalty and the optimal lr and batch."""

    E: float = 1.8
    A: float = 400.0
    B: float = 2000.0
    alpha: float = 0.34
    beta: float = 0.37
    k_lr: float = 0.02
    k_b: float = 0.01
    c: float = 1.8
    a: float = -0.7
    b: float = 0.3
    d: float = 0.58
    e: float = 0.57

    def lr_star(self, N: np.ndarray | float, D: np.ndarray | float) -> np.ndarray:
        return self.c * np.power(N, self.a) * np.power(D, self.b)

    def batch_star(self, D: np.ndarray | float) -> np.ndarray:
        return self.d * np.power(D, self.e)

    def loss(self, N: np.ndarray, D: np.ndarray, lr: np.ndarray, batch: np.ndarray) -> np.ndarray:
        base = self.E + self.A / np.power(N, self.alpha) + self.B / np.power(D, self.beta)
        return (base + self.k_lr * (np.log(lr) - np.log(self.lr_star(N, D))) ** 2
                + self.k_b * (np.log(batch) - np.log(self.batch_star(D))) ** 2)

    def optimal_ND(self, C: float) -> tuple[float, float]:
        """Compute-optimal (N, D) of the loss part at C = 6ND (Hoffmann et al. 2022, eq. 4)."""
        G = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        N = G * (C / 6) ** (self.beta / (self.alpha + self.beta))
        return float(N), float(C / (FLOPS_PER_PARAM_TOKEN * N))


def random_truth(rng: np.random.Generator) -> HparamTruth:
    """A law drawn around Step Law's published exponents and Chinchilla's loss; the curvatures k_lr and k_b
    span those of quadratics fitted to Step Law's released MoE groups (0.014-0.052 and 0.015-0.030)."""
    return HparamTruth(
        E=rng.uniform(1.6, 2.0), A=rng.uniform(300, 600), B=rng.uniform(1000, 3000),
        alpha=rng.uniform(0.3, 0.4), beta=rng.uniform(0.3, 0.4),
        k_lr=rng.uniform(0.015, 0.05), k_b=rng.uniform(0.015, 0.03),
        c=rng.uniform(0.5, 3.0), a=rng.uniform(-0.8, -0.4), b=rng.uniform(0.1, 0.4),
        d=rng.uniform(0.3, 1.0), e=rng.uniform(0.4, 0.65),
    )


def sweep(truth: HparamTruth, rng: np.random.Generator, *, sizes: tuple[float, ...] = (5e7, 1e8, 2e8, 4e8),
          tokens_per_param: tuple[float, ...] = (5.0, 10.0, 20.0, 40.0), n_lr: int = 7, n_batch: int = 5,
          lr_step: float = 2 ** 0.5, batch_step: float = 2.0, noise: float = 0.002,
          offset: float = 0.5) -> pd.DataFrame:
    """One run per (N, D, lr, batch): columns N, D, C, loss, lr, batch.

    Each point's grid is centred on the truth times a random factor up to exp(+-``offset``) in
    lr and batch (a practitioner's guess), so the optimum falls between grid values.
    """
    rows = []
    for N in sizes:
        for r in tokens_per_param:
            D = N * r
            lr0 = float(truth.lr_star(N, D)) * float(np.exp(rng.uniform(-offset, offset) * np.log(lr_step)))
            b0 = float(truth.batch_star(D)) * float(np.exp(rng.uniform(-offset, offset) * np.log(batch_step)))
            lrs = lr0 * lr_step ** (np.arange(n_lr) - (n_lr - 1) / 2)
            bs = b0 * batch_step ** (np.arange(n_batch) - (n_batch - 1) / 2)
            L, Bt = np.meshgrid(lrs, bs, indexing="ij")
            L, Bt = L.ravel(), Bt.ravel()
            loss = truth.loss(np.full(L.size, N), np.full(L.size, D), L, Bt) * np.exp(rng.normal(0, noise, L.size))
            rows.append(pd.DataFrame({"N": N, "D": D, "C": FLOPS_PER_PARAM_TOKEN * N * D, "loss": loss, "lr": L, "batch": Bt}))
    return pd.concat(rows, ignore_index=True)


def store_sweep(url: str, runs: pd.DataFrame, sweep: str = "hparams", *, plan: dict | None = None) -> list[str]:
    """Write ``runs`` (from :func:`sweep`) as a completed sweep through the real ``scaling.db.Store``.

    Each run's spec holds its lr (``optimizer.lr``), ``batch_tokens`` and beta2, as the trainer's
    specs do, and a ``group`` column, when present, becomes its ``tags.hparam_group`` (as a plan's
    ``hparams:`` labels its runs); without one the fits group the runs by (N, D).
    """
    from scaling.db import Store

    records = []
    for i, row in enumerate(runs.itertuples(index=False)):
        records.append({"key": f"{sweep}-{i:04d}", "N": float(row.N), "N_total": float(row.N) * 1.1, "n_layer": 2,
                        "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 64, "D": float(row.D),
                        "C": float(row.C), "seed": 0,
                        "spec": {"params_convention": "non_embedding", "flops_convention": "6N",
                                 "optimizer": {"lr": float(row.lr), "beta2": 0.95},
                                 "batch_tokens": int(round(float(row.batch))),
                                 **({"tags": {"hparam_group": str(row.group)}} if "group" in runs else {})}})
    with Store(url) as store:
        store.register(sweep, records, plan=plan)
        for rec, row in zip(records, runs.itertuples(index=False)):
            store.claim(rec["key"], "test-host")
            store.finish(rec["key"], "completed", final_eval_loss=float(row.loss), final_train_loss=float(row.loss))
    return [r["key"] for r in records]
