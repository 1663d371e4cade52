"""Muennighoff et al.'s data-constrained law: R*_D and R*_N estimated with honest intervals.

The data are drawn from a known law with repeated data and excess parameters (the paper's
R*_D = 15.4 and R*_N = 5.3, U_N from the law's own compute-optimal N): the fitted R*s must
cover the truth with their 95% profile-likelihood intervals. On data where no run has excess
parameters (every N below the compute-optimal N of its unique tokens), N' = N whatever R*_N is:
R*_N must be reported as not determined, never with an interval.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_run import run_cli
from scaling.fitting import effective_tokens, from_frame
from scaling.fitting.loss import synthetic as S
from scaling.fitting.loss.effective import R_STAR_N, effective_params, fit_effective, n_opt

TRUTH_THETA = np.array([math.log(S.TRUTH["A"]), math.log(S.TRUTH["B"]), math.log(S.TRUTH["E"]),
                        S.TRUTH["alpha"], S.TRUTH["beta"]])


def constrained_rows(N: list[float], D: list[float], U: list[float], r_d: float = 15.4, r_n: float = R_STAR_N,
                     noise: float = 0.005, seed: int = 0) -> pd.DataFrame:
    """Every (N, D, U) combination; loss from the truth on D' and N' (U_N = min(N, N_opt(min(U, D))))."""
    rng = np.random.default_rng(seed)
    n, d, u = (a.ravel() for a in np.meshgrid(N, D, U))
    Dp = effective_tokens(d, u, r_d)
    Np = effective_params(n, n_opt(TRUTH_THETA, np.minimum(u, d)), r_n)
    loss = S.chinchilla_loss(Np, Dp) * np.exp(rng.normal(0, noise, n.size))
    return pd.DataFrame({"N": n, "D": d, "U": u, "loss": loss})


def identifiable() -> pd.DataFrame:
    """Models from 20M to 1.5B on 1B-16B unique tokens repeated up to 64 times: many excess parameters."""
    return constrained_rows([2e7, 5e7, 1.5e8, 5e8, 1.5e9], [1e9, 4e9, 1.6e10, 6.4e10], [1e9, 4e9, 1.6e10])


def test_n_prime_is_n_without_excess_parameters_and_saturates_with_them() -> None:
    U_N = np.array([1e8, 1e8, 1e8])
    N = np.array([5e7, 1e8, 1e12])
    Np = effective_params(N, U_N, R_STAR_N)
    assert Np[0] == 5e7 and Np[1] == 1e8
    assert 1e8 < Np[2] <= 1e8 * (1 + R_STAR_N)  # excess parameters are worth at most U_N R*_N
    assert Np[2] > 0.99 * 1e8 * (1 + R_STAR_N)  # ... which 10,000 times U_N all but reach


def test_r_star_d_and_r_star_n_are_recovered_within_their_intervals() -> None:
    data = from_frame(identifiable())
    out = fit_effective(data, fit_d=True, fit_n=True)
    fits = out.r_star_fits
    for name, truth in (("R*_D", 15.4), ("R*_N", R_STAR_N)):
        f = fits[name]
        assert f["status"] == "fitted", f
        assert f["lo"] <= f["value"] <= f["hi"], f
        assert f["lo"] <= truth <= f["hi"], (name, f)
        assert f["hi"] / f["lo"] < 3, f  # these data do determine it
    assert out.r_star_n == fits["R*_N"]["value"]
    assert (out.points["N"] <= out.points["N_raw"]).all() and (out.points["N"] < out.points["N_raw"]).any()
    assert any("R*_N = " in n and "95% profile-likelihood interval [" in n for n in out.notes)
    assert out.conventions()["r_star_fits"]["R*_D"]["status"] == "fitted"


def test_r_star_n_without_excess_parameters_is_flagged_not_given_an_interval() -> None:
    """Every N is below N_opt of its unique tokens: R*_N has no effect on any point."""
    df = constrained_rows([1e7, 4e7, 1.5e8, 6e8], [2e10, 6e10, 1.8e11, 5.4e11], [2e10, 6e10])
    data = from_frame(df)
    out = fit_effective(data, fit_n=True)
    f = out.r_star_fits["R*_N"]
    assert f["status"] == "not determined", f
    assert math.isnan(f["lo"]) and math.isnan(f["hi"])
    note = next(n for n in out.notes if "R*_N" in n)
    assert "not determined" in note and "with no interval" in note


def test_a_fixed_r_star_n_gives_n_prime_and_claims_no_interval() -> None:
    out = fit_effective(from_frame(identifiable()), r_star_n=R_STAR_N)
    assert out.r_star_fits == {} and out.r_star_n == R_STAR_N
    assert (out.points["N"] < out.points["N_raw"]).any()
    assert any(re.search(r"N is Muennighoff et al.'s effective parameters N' .*R\*_N = 5.3 \(fixed\)", n)
               for n in out.notes), out.notes


def test_cli_fits_both_r_stars_with_intervals_and_refuses_nonsense(tmp_path: Path) -> None:
    p = tmp_path / "dc.csv"
    identifiable().to_csv(p, index=False)
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach3", "--bootstrap", "0", "--format", "json",
                             "--r-star", "fit", "--r-star-n", "fit")
    assert code == 0, err
    doc = json.loads(out)
    conv = doc["conventions"]
    assert set(conv["r_star_fits"]) == {"R*_D", "R*_N"}
    assert conv["r_star_N"] == conv["r_star_fits"]["R*_N"]["value"]
    assert any("R*_N = " in n and "95% profile-likelihood interval [" in n for n in doc["notes"])
    code, _, err = run_cli("fit", "--csv", str(p), "--r-star-n", "-1")
    assert code == 2 and "--r-star-n must be a positive number or 'fit'" in err and "Traceback" not in err
    S.grid_points(seed=0).to_csv(tmp_path / "plain.csv", index=False)
    code, _, err = run_cli("fit", "--csv", str(tmp_path / "plain.csv"), "--r-star-n", "fit", "--law", "approach3")
    assert code == 2 and "needs unique tokens" in err


# A sweep in the results database: U from each run's spec, R*_D and R*_N as for a CSV.

def store_constrained_sweep(url: str, df: pd.DataFrame, sweep: str = "dc", *, with_u: bool = True) -> None:
    """The rows of ``df`` as completed runs of ``sweep``, written through the real Store; each run's
    spec names its corpus's unique tokens (``data.unique_tokens``) as a trained run's spec does."""
    from scaling.db import Store

    records = []
    for i, row in df.iterrows():
        spec = {"params_convention": "non_embedding", "flops_convention": "6N"}
        if with_u:
            spec["data"] = {"unique_tokens": float(row.U), "fingerprint": f"corpus-{row.U:.3g}"}
        records.append({"key": f"{sweep}-{i:03d}", "N": float(row.N), "N_total": float(row.N) * 1.1, "n_layer": 2,
                        "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 64, "D": float(row.D),
                        "C": 6.0 * float(row.N) * float(row.D), "seed": 0, "spec": spec})
    with Store(url) as store:
        store.register(sweep, records)
        for rec, (_, row) in zip(records, df.iterrows()):
            assert store.claim(rec["key"], "test-host") == 1
            store.finish(rec["key"], "completed", final_eval_loss=float(row.loss), final_train_loss=float(row.loss))


def test_a_sweep_fits_both_r_stars_from_its_runs_unique_tokens_as_a_csv_does(sqlite_url: str) -> None:
    from scaling.db import connect
    from scaling.fitting import fit_sweep

    df = identifiable()
    store_constrained_sweep(sqlite_url, df)
    summary = fit_sweep(sqlite_url, "dc", law="approach3", n_bootstrap=0, effective_data=True,
                        fit_r_star=True, fit_r_star_n=True)
    assert summary.n_points == len(df)  # runs that differ only in U are not averaged
    conv = summary.conventions
    assert conv.unique_tokens_column == "data.unique_tokens" and conv.effective_data is True
    fits = conv.r_star_fits
    for name, truth in (("R*_D", 15.4), ("R*_N", R_STAR_N)):
        f = fits[name]
        assert f["status"] == "fitted", f
        assert f["lo"] <= f["value"] <= f["hi"], f
        assert f["lo"] <= truth <= f["hi"], (name, f)
        assert f["hi"] / f["lo"] < 3, f
    assert conv.r_star_D == fits["R*_D"]["value"] and conv.r_star_N == fits["R*_N"]["value"]
    assert any("R*_N = " in n and "95% profile-likelihood interval [" in n for n in summary.notes)

    # the same semantics as the CSV path: the same rows give the same R*s and the same law
    csv = fit_effective(from_frame(df), fit_d=True, fit_n=True)
    for name in ("R*_D", "R*_N"):
        assert fits[name]["value"] == pytest.approx(csv.r_star_fits[name]["value"], rel=1e-6)
    law = summary.laws["approach3"]
    assert law.conventions_.r_star_fits == fits  # stored with the fit
    with connect(sqlite_url) as res:
        stored = res.fits("dc")
    assert len(stored) == 1 and stored["result"].iloc[0]["conventions"]["r_star_fits"]["R*_N"]["status"] == "fitted"
    assert stored["result"].iloc[0]["laws"]["approach3"]["conventions"]["r_star_fits"] == fits  # the analysis, whole
    again = fit_sweep(sqlite_url, "dc", law="approach3", n_bootstrap=0, effective_data=True,
                      fit_r_star=True, fit_r_star_n=True)
    assert again.reused and again.conventions.r_star_fits == fits
    fixed = fit_sweep(sqlite_url, "dc", law="approach3", n_bootstrap=0, effective_data=True)
    assert not fixed.reused and not fixed.conventions.r_star_fits  # other R*s: other data, a new fit


def test_a_sweep_reports_an_undetermined_r_star_n_without_an_interval(sqlite_url: str) -> None:
    from scaling.fitting import fit_sweep

    store_constrained_sweep(sqlite_url, constrained_rows([1e7, 4e7, 1.5e8, 6e8], [2e10, 6e10, 1.8e11, 5.4e11],
                                                         [2e10]))
    summary = fit_sweep(sqlite_url, "dc", law="approach3", n_bootstrap=0, effective_data=True, fit_r_star_n=True)
    assert summary.conventions.unique_tokens == 2e10  # one corpus: one U for the sweep
    f = summary.conventions.r_star_fits["R*_N"]
    assert f["status"] == "not determined" and math.isnan(f["lo"]) and math.isnan(f["hi"]), f
    text = summary.table()
    assert "R*_N is not determined" in text and "with no interval" in text
    assert "R*_N = " not in text.replace("R*_N = 5.3", "")  # no fitted value with an interval


def test_cli_fits_r_stars_on_a_sweep_and_refuses_what_cannot_apply(sqlite_url: str) -> None:
    store_constrained_sweep(sqlite_url, identifiable())
    code, out, err = run_cli("fit", "--db", sqlite_url, "--effective-data", "--r-star", "fit", "--r-star-n", "fit",
                             "--law", "approach3", "--bootstrap", "0", "--format", "json")
    assert code == 0, err
    conv = json.loads(out)["conventions"]
    assert {k: v["status"] for k, v in conv["r_star_fits"].items()} == {"R*_D": "fitted", "R*_N": "fitted"}
    code, out, err = run_cli("fit", "--db", sqlite_url, "--effective-data", "--r-star", "12", "--r-star-n", "5.3",
                             "--law", "approach3", "--bootstrap", "0")
    assert code == 0, err
    assert "R*_D = 12" in out and "R*_N = 5.3 (fixed)" in out and "profile-likelihood interval" not in out
    for args, message in (
        (("--r-star", "fit"), "need --effective-data"),
        (("--effective-data", "--r-star-n", "-1"), "--r-star-n must be a positive number or 'fit'"),
        (("--effective-data", "--unique-tokens", "1e9"), "--unique-tokens only apply to --csv"),
    ):
        code, _, err = run_cli("fit", "--db", sqlite_url, "--law", "approach3", "--bootstrap", "0", *args)
        assert code == 2 and message in err and "Traceback" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, err


def test_a_sweep_without_unique_tokens_in_some_runs_is_refused(sqlite_url: str) -> None:
    df = identifiable()
    store_constrained_sweep(sqlite_url, df.iloc[:30], "dc")
    store_constrained_sweep(sqlite_url, df.iloc[30:], "dc", with_u=False)
    code, _, err = run_cli("fit", "--db", sqlite_url, "--sweep", "dc", "--effective-data", "--r-star", "fit",
                           "--law", "approach3", "--bootstrap", "0")
    assert code == 2 and "30 of 60 completed runs have none" in err and "Traceback" not in err, err
