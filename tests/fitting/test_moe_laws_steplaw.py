"""Step Law's released MoE sweep (tests/data/steplaw/moe_best_per_point.csv): what a real sweep identifies.

Its four shapes share about 2.15B parameters in all and differ in how many are active, so sparsity
moves with active size: the sweep shows loss against active size along that path and against tokens,
not the effect of sparsity at a fixed active size.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from scaling.errors import FitError
from scaling.fitting.moe import moe_data
from scaling.fitting.moe.moe_fit import fit_moe
from scaling.fitting.moe.moe_laws import SparsityLaw

CSV = Path(__file__).resolve().parents[1] / "data" / "steplaw" / "moe_best_per_point.csv"


@pytest.fixture(scope="module")
def law() -> SparsityLaw:
    return SparsityLaw(grid="small").fit(moe_data.from_csv(CSV)).bootstrap(100, seed=0)


def test_the_sweeps_sparsity_is_its_active_share(law: SparsityLaw) -> None:
    pts = law.data_.points
    assert len(pts) == 16 and pts["N"].nunique() == 4 and pts["D"].nunique() == 4
    assert sorted(pts["S"].round(3).unique()) == [0.424, 0.726, 0.892, 0.913]


def test_sparsity_is_not_identified_and_nothing_is_recommended(law: SparsityLaw) -> None:
    ivs = law.reported_intervals()
    assert {n for n, iv in ivs.items() if iv.kind == "not identified"} == {"a", "alpha", "delta"}
    assert "lockstep with the active size" in law.doubts()[-1]
    with pytest.raises(FitError, match="no recommendation from the moe-sparsity law"):
        fit_moe(moe_data.from_csv(CSV), "moe-sparsity", n_bootstrap=20, grid="small").recommend(1e21)


def test_what_the_sweep_does_identify(law: SparsityLaw) -> None:
    ivs = law.intervals()  # the bootstrap's own summaries (b's spans about two decades, at the flag's edge)
    # the token exponent, the irreducible loss and the active-size exponent along the sweep's path
    for name in ("beta", "c", "alpha_path"):
        assert ivs[name].kind == "percentile", (name, ivs[name])
        assert 0 < ivs[name].lo < ivs[name].value < ivs[name].hi
    assert 0.1 < ivs["beta"].value < 0.5
    assert ivs["c"].hi < 2.178  # below the lowest measured loss
    # the path law reproduces the measured points to within a percent
    pts = law.data_.points
    pred = law.predict(pts["N"], pts["D"], pts["S"])
    assert abs(pred / pts["loss"] - 1).max() < 0.01
