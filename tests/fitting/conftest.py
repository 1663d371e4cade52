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
