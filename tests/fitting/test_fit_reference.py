"""Published results reproduced: Epoch AI's Chinchilla replication and Porian et al.'s IsoFLOP exponents."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaling.fitting import ChinchillaIsoFLOP, ChinchillaParametric, from_frame

DATA = Path(__file__).resolve().parents[1] / "data"

#: Besiroglu et al. (2024), Table 1: estimate and bootstrap standard error.
EPOCH = {"E": (1.82, 0.03), "A": (482.0, 125.0), "B": (2085.0, 1293.0), "alpha": (0.348, 0.015), "beta": (0.366, 0.021)}


@pytest.fixture(scope="module")
def epoch_fit(epoch_points: pd.DataFrame) -> ChinchillaParametric:
    data = from_frame(epoch_points)
    assert len(data.points) == 240
    return ChinchillaParametric().fit(data).bootstrap(400, seed=0)  # the full 4,500-start grid


def test_epoch_estimates_within_their_standard_errors(epoch_fit: ChinchillaParametric) -> None:
    for name, (value, se) in EPOCH.items():
        assert abs(epoch_fit.params_[name] - value) <= se, (name, epoch_fit.params_[name], value, se)


def test_epoch_bootstrap_standard_errors_are_of_the_published_size(epoch_fit: ChinchillaParametric) -> None:
    iv = epoch_fit.intervals()
    for name, (_, se) in EPOCH.items():
        assert 0.5 * se <= iv[name].se <= 2.0 * se, (name, iv[name].se, se)


def test_epoch_compute_optimal_allocation(epoch_fit: ChinchillaParametric) -> None:
    iv = epoch_fit.intervals()
    assert abs(iv["a"].value - 0.513) < 0.01
    # Chinchilla's own budget (5.76e23 FLOPs): about 20 tokens per parameter.
    N, D, L = epoch_fit.optimal(5.76e23)
    assert 15 <= D / N <= 25
    assert 1.9 < L < 2.1
    assert np.isclose(6 * N * D, 5.76e23, rtol=1e-9)


def test_the_grid_optimum_is_the_best_start(epoch_fit: ChinchillaParametric) -> None:
    """Polishing never leaves the optimum worse than the best of the 4,500 batched starts."""
    assert epoch_fit.n_starts_ == 4500
    assert epoch_fit.objective_ <= np.nanmin(epoch_fit.grid_result_.fun) * (1 + 1e-9)


PORIAN = sorted((DATA / "porian2024" / "isoflop_points").glob("*.csv"))


@pytest.mark.parametrize("path", PORIAN, ids=[p.stem for p in PORIAN])
def test_porian_isoflop_exponent(path: Path) -> None:
    pairs = pd.read_csv(DATA / "porian2024" / "optimal_pairs" / path.name).dropna()
    reference = np.polyfit(np.log(pairs["compute_flops"]), np.log(pairs["n_star_params"]), 1)[0]
    law = ChinchillaIsoFLOP().fit(from_frame(pd.read_csv(path)))
    # Configurations 1 and 2 keep Kaplan et al.'s setup (exponent ~0.7-0.87): 0.04; the rest 0.03.
    tol = 0.04 if path.stem.split("_")[1] in ("1", "2") else 0.03
    assert abs(law.params_["a"] - reference) <= tol, (law.params_["a"], reference)
    assert law.params_["b"] == pytest.approx(1 - law.params_["a"])
