"""The estimator contract, serialisation, input handling and degenerate inputs."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaling.errors import FitError, NotFoundError
from scaling.fitting import (ChinchillaEnvelope, ChinchillaIsoFLOP, ChinchillaParametric, KaplanLaw, NotFittedError,
                             backtest, effective_tokens, fit_data, from_csv, from_dict, from_frame)
from scaling.fitting.loss import synthetic as S
from scaling.fitting.core.measurements import prepare


def _fitted() -> dict[str, object]:
    grid = from_frame(S.grid_points(n_N=6, n_D=6, seed=2))
    return {
        "kaplan": KaplanLaw().fit(from_frame(S.grid_points(seed=2, law="kaplan"))).bootstrap(20, 0),
        "approach1": ChinchillaEnvelope().fit(S.curves(seed=2)).bootstrap(20, 0),
        "approach2": ChinchillaIsoFLOP().fit(from_frame(S.isoflop_points(seed=2))).bootstrap(20, 0),
        "approach3": ChinchillaParametric(grid="coarse").fit(grid).bootstrap(20, 0),
    }


@pytest.fixture(scope="module")
def fitted() -> dict[str, object]:
    return _fitted()


@pytest.mark.parametrize("cls", [KaplanLaw, ChinchillaEnvelope, ChinchillaIsoFLOP, ChinchillaParametric])
def test_predict_and_optimal_before_fit_raise(cls: type) -> None:
    law = cls()
    with pytest.raises(NotFittedError):
        law.predict(1e9, 2e10)
    with pytest.raises(NotFittedError):
        law.optimal(1e21)
    with pytest.raises(NotFittedError):
        law.bootstrap(10)


def test_init_only_stores_settings() -> None:
    law = ChinchillaParametric(delta=1e-2, grid="coarse")
    assert law.get_settings() == {"delta": 1e-2, "grid": "coarse", "n_polish": 5}
    assert not [k for k in vars(law) if k.endswith("_")]


@pytest.mark.parametrize("kind", ["kaplan", "approach1", "approach2", "approach3"])
def test_round_trip_through_json(fitted: dict, kind: str) -> None:
    law = fitted[kind]
    d = json.loads(json.dumps(law.to_dict(), allow_nan=False))  # standard JSON: no NaN
    assert {"class", "law", "method", "params", "intervals", "conventions", "bootstrap", "plot"} <= set(d)
    again = from_dict(d)
    assert type(again) is type(law)
    N, D = np.array([1e8, 3e9]), np.array([2e10, 5e11])
    np.testing.assert_allclose(again.predict(N, D), law.predict(N, D), rtol=1e-12)
    np.testing.assert_allclose(again.optimal(1e22), law.optimal(1e22), rtol=1e-12)
    a, b = again.optimal_interval(1e22), law.optimal_interval(1e22)
    assert a["N"].lo == pytest.approx(b["N"].lo, rel=1e-9)
    assert again.intervals().keys() == law.intervals().keys()


def test_stored_form_carries_what_plots_need(fitted: dict) -> None:
    iso = fitted["approach2"].to_dict()["plot"]["budgets"]
    assert iso and {"C", "N", "loss", "coef", "N_opt", "status", "window"} <= set(iso[0])
    env = fitted["approach1"].to_dict()["plot"]["envelope"]
    assert any(e["status"] == "used" for e in env) and any(e["status"] != "used" for e in env)


def test_from_dict_rejects_unknown_class() -> None:
    with pytest.raises(FitError, match="unknown law class"):
        from_dict({"class": "Nope"})


def test_csv_aliases_and_derived_tokens(tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    pd.DataFrame({"Model Size": [1e8, 2e8], "Training FLOP": [6e18, 1.2e19], "loss": [3.0, 2.9]}).to_csv(p, index=False)
    data = from_csv(p)
    np.testing.assert_allclose(data.points["D"], [1e10, 1e10])
    p2 = tmp_path / "t.csv"
    pd.DataFrame({"params": [1e8], "tokens": [2e9], "loss": [3.1]}).to_csv(p2, index=False)
    assert from_csv(p2).points["C"].iloc[0] == pytest.approx(6 * 1e8 * 2e9)


def test_seeds_are_averaged_and_their_spread_kept() -> None:
    df = pd.DataFrame({"N": [1e8, 1e8, 1e8, 2e8], "D": [1e9] * 4, "C": [6e17, 6e17, 6e17, 1.2e18],
                       "loss": [3.0, 3.2, 3.1, 2.9], "seed": [0, 1, 2, 0]})
    pts = from_frame(df).points.sort_values("N")
    assert list(pts["n_seeds"]) == [3, 1]
    assert pts["loss"].iloc[0] == pytest.approx(3.1)
    assert pts["loss_std"].iloc[0] == pytest.approx(0.1)


def test_effective_tokens_follow_muennighoff() -> None:
    U = 1e9
    assert effective_tokens(5e8, U) == pytest.approx(5e8)  # one pass or less: unchanged
    R = 3.0  # four epochs
    expected = U + U * 15.4 * (1 - math.exp(-R / 15.4))
    assert effective_tokens(4e9, U) == pytest.approx(expected)
    assert effective_tokens(1e15, U) < U * 16.5  # saturates at U (1 + R*)


# -- degenerate inputs ---------------------------------------------------------------------------
def _pts(n: int, one_size: bool = False) -> pd.DataFrame:
    """n points with distinct N and D (the diagonal of an n x n grid), or of one size."""
    df = S.grid_points(n_N=n, n_D=n, seed=0).iloc[:: n + 1].reset_index(drop=True)
    if one_size:
        df["N"] = 1e8
        df["D"] = np.geomspace(1e9, 1e11, n)
        df["C"] = 6 * df["N"] * df["D"]
    return df


@pytest.mark.parametrize(
    ("frame", "cls", "match"),
    [
        (lambda: _pts(4), ChinchillaParametric, "more points than its 5 parameters"),
        (lambda: _pts(12, one_size=True), ChinchillaParametric, "two model sizes"),
        (lambda: _pts(12, one_size=True), KaplanLaw, "two model sizes"),
        (lambda: _pts(3), KaplanLaw, "more points than its 4 parameters"),
    ],
)
def test_degenerate_inputs_name_what_is_missing(frame, cls, match: str) -> None:
    with pytest.raises(FitError, match=match):
        cls().fit(from_frame(frame()))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_losses_are_refused_with_the_row(bad: float) -> None:
    df = _pts(10)
    df.loc[3, "loss"] = bad
    with pytest.raises(FitError, match=r"non-positive or non-finite loss \(first: row 3"):
        from_frame(df)


def test_budget_with_fewer_than_three_sizes() -> None:
    df = S.isoflop_points(budgets=[1e19, 1e20], seed=0)
    df = df[(df["C"] < 5e19) | (df.index % 9 < 2)]  # the second budget keeps two sizes
    with pytest.raises(FitError, match=r"C=1e\+20: too few sizes \(2 < 3\)"):
        ChinchillaIsoFLOP().fit(from_frame(df))


def test_edge_budgets_are_flagged_and_left_out() -> None:
    df = S.isoflop_points(seed=0)
    big = df["C"] == df["C"].max()
    df = df[~big | (df["N"] > S.chinchilla_optimal_N(df["C"].max()))]  # its minimum now at the smallest size
    law = ChinchillaIsoFLOP().fit(from_frame(df))
    status = {round(math.log10(b["C"]), 1): b["status"] for b in law.budgets_}
    assert "edge" in status[21.0]
    assert sum(s == "used" for s in status.values()) == len(status) - 1
    assert any("left out 1 of 7 budgets" in n for n in law.notes_)


def test_envelope_needs_curves() -> None:
    with pytest.raises(FitError, match="needs loss curves"):
        ChinchillaEnvelope().fit(from_frame(_pts(10)))


def test_missing_columns_and_files(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    pd.DataFrame({"N": [1.0], "loss": [2.0]}).to_csv(p, index=False)
    with pytest.raises(FitError, match="need tokens or FLOPs"):
        from_csv(p)
    with pytest.raises(NotFoundError):
        from_csv(tmp_path / "missing.csv")
    # through the CLI, the same error is one line on stderr and exit 2 (a user error, not a crash)
    scaling = str(Path(sys.executable).with_name("scaling"))
    res = subprocess.run([scaling, "fit", "--csv", str(p)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and "need tokens or FLOPs" in res.stderr


def test_fit_data_skips_what_the_data_cannot_support() -> None:
    summary = fit_data(from_frame(S.isoflop_points(seed=3)), n_bootstrap=10,
                       settings={"approach3": {"grid": "coarse"}})
    assert set(summary.laws) == {"kaplan", "approach2", "approach3"}
    assert "needs loss curves" in summary.skipped["approach1"]
    text = summary.table()
    assert "Chinchilla approach 2 (IsoFLOP)" in text and "95% interval" in text
    d = json.loads(json.dumps(summary.to_dict()))
    assert "replicates" not in d["laws"]["approach3"]["bootstrap"]


def test_backtest_scores_held_out_largest_budget() -> None:
    data = from_frame(S.isoflop_points(seed=4))
    law = ChinchillaParametric(grid="coarse").fit(data)
    bt, rates = backtest(law, data)
    assert law.to_dict()["plot"].get("backtest") is None and rates is not None  # nothing stored by the function
    assert law.keep_backtest(bt, rates).backtest_ == bt and law.extrapolation_ == rates  # the law keeps it itself
    held = bt["held_out"]
    assert len(held) == 9 and min(r["C"] for r in held) == pytest.approx(1e21)
    assert bt["mean_abs_rel_error"] < 0.01
    assert abs(bt["N_opt"]["rel_error"]) < 0.2
    assert law.to_dict()["plot"]["backtest"]["n_train"] == 54


def test_prepare_keeps_curves_clean() -> None:
    cur = pd.DataFrame({"run_key": ["a", "a"], "N": [1e8, 1e8], "tokens": [1e9, 0.0], "flops": [6e17, 0.0],
                        "loss": [3.0, float("nan")]})
    data = prepare(pd.DataFrame({"N": [1e8], "D": [1e9], "C": [6e17], "loss": [3.0]}), curves=cur)
    assert len(data.curves) == 1


@pytest.mark.parametrize("kind", ["kaplan", "approach3"])
def test_optimal_minimises_predicted_loss_at_fixed_compute(fitted: dict, kind: str) -> None:
    law = fitted[kind]
    C = 1e21
    N_star, D_star, L_star = law.optimal(C)
    assert law.k_ * N_star * D_star == pytest.approx(C)
    N = N_star * np.exp(np.linspace(-1, 1, 2001))
    L = law.predict(N, C / (law.k_ * N))
    assert N[np.argmin(L)] == pytest.approx(N_star, rel=2e-3)
    assert L.min() == pytest.approx(L_star, rel=1e-6)


def test_other_flop_conventions_scale_the_frontier() -> None:
    df = S.grid_points(n_N=6, n_D=6, seed=5)
    df["C"] = 7.0 * df["N"] * df["D"]  # e.g. attention FLOPs counted: C/(ND) is no longer 6
    data = from_frame(df, flops_convention="6N_attention")
    assert data.flops_per_param_token == pytest.approx(7.0)
    law = ChinchillaParametric(grid="coarse").fit(data)
    N, D, _ = law.optimal(7e21)
    assert 7.0 * N * D == pytest.approx(7e21)
    assert law.to_dict()["conventions"]["flops_per_param_token"] == pytest.approx(7.0)
