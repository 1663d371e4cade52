"""Fixtures of the fitting tests: the reference data copied into tests/data (see its README)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture(scope="session")
def epoch_points() -> pd.DataFrame:
    """Epoch AI's 245 Chinchilla points minus the 5 highest-loss rows, as Epoch fit them (240)."""
    df = pd.read_csv(DATA / "chinchilla_epoch" / "svg_extracted_data.csv")
    return df.sort_values("loss").iloc[:-5].reset_index(drop=True)


def store_synthetic_sweep(url: str, sweep: str = "synth", *, seed: int = 0, budgets=(1e17, 3e17, 1e18, 3e18),
                          plan: dict | None = None, curves: bool = True) -> list[str]:
    """A completed IsoFLOP sweep drawn from the synthetic Chinchilla law, written through the real Store.

    Each run gets a loss curve (eval loss every tenth of its tokens) and its final eval loss.
    """
    import numpy as np

    from scaling.db import Store
    from scaling.fitting.loss import synthetic as S
    from scaling import vocab as names

    pts = S.isoflop_points(budgets=np.asarray(budgets), n_sizes=7, span=1.5, seed=seed)
    rng = np.random.default_rng(seed + 1)
    records = []
    for i, row in pts.iterrows():
        key = f"{sweep}-{seed}-{i:03d}"
        records.append({"key": key, "N": float(row.N), "N_total": float(row.N) * 1.1, "n_layer": 2, "d_model": 64,
                        "n_head": 4, "vocab_size": 256, "context": 64, "D": float(row.D), "C": float(row.C),
                        "seed": 0, "spec": {"params_convention": "non_embedding", "flops_convention": "6N"}})
    with Store(url) as store:
        store.register(sweep, records, plan=plan)
        for rec, (_, row) in zip(records, pts.iterrows()):
            assert store.claim(rec["key"], "test-host") == 1
            if curves:
                toks = np.linspace(row.D / 10, row.D, 10)
                loss = S.chinchilla_loss(row.N, toks) * np.exp(rng.normal(0, 0.002, toks.size))
                loss[-1] = row.loss
                store.log_metrics(rec["key"], [(k + 1, float(t), 6.0 * row.N * t, names.EVAL_LOSS, float(v))
                                               for k, (t, v) in enumerate(zip(toks, loss))])
            store.finish(rec["key"], "completed", final_eval_loss=float(row.loss), final_train_loss=float(row.loss))
    return [r["key"] for r in records]


@pytest.fixture
def make_sweep():
    """:func:`store_synthetic_sweep`, as a fixture (test modules here are not a package)."""
    return store_synthetic_sweep
