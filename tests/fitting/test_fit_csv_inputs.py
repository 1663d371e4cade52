"""`scaling fit --csv` on inputs that used to be accepted silently and wrongly.

Each test builds a CSV shaped like the case found on published data (Muennighoff et al.'s
data-constrained runs with a U column, data in total parameters or with C = 8ND, perplexity
in the loss column, sizes written as 10M or 1,000,000, a NaN loss, a semicolon file) and runs
the real command line in-process through its entry point.
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
from scaling.errors import FitError
from scaling.fitting import effective_tokens, from_csv, from_frame
from scaling.fitting.loss import synthetic as S




def _write(tmp_path: Path, df: pd.DataFrame, name: str = "m.csv", **kw) -> Path:
    p = tmp_path / name
    df.to_csv(p, index=False, **kw)
    return p


# -- 11.6: unique tokens per row -----------------------------------------------------------------
def muennighoff_rows(r_star: float = 15.4, noise: float = 0.0, seed: int = 0) -> pd.DataFrame:
    """Runs at 3 sizes x 4 token counts x 3 unique-token budgets; loss from the law on D'(U)."""
    rng = np.random.default_rng(seed)
    N, D, U = (a.ravel() for a in np.meshgrid([1e8, 4e8, 1.6e9], [2e9, 8e9, 3.2e10, 1.28e11], [1e9, 4e9, 1.6e10]))
    Dp = effective_tokens(D, U, r_star)
    loss = S.chinchilla_loss(N, Dp) * np.exp(rng.normal(0, noise, N.size))
    return pd.DataFrame({"params": N, "tokens": D, "U": U, "loss": loss})


def test_rows_differing_only_in_U_are_not_averaged_and_each_gets_its_own_D_prime(tmp_path: Path) -> None:
    df = muennighoff_rows()
    data = from_csv(_write(tmp_path, df))
    pts = data.points
    assert len(pts) == len(df) == 36
    assert (pts["n_seeds"] == 1).all()
    assert not any(n.startswith("averaged") for n in data.notes)
    assert any("24 point(s) share N and D with another but differ in C, U: kept apart" in n for n in data.notes)
    np.testing.assert_allclose(pts["D"], effective_tokens(pts["D_raw"], pts["U"]))
    assert pts["U"].nunique() == 3
    note = next(n for n in data.notes if "effective data" in n)
    assert "column 'U'" in note and "3 distinct values" in note
    assert data.conventions()["unique_tokens_column"] == "U"


def test_seeds_still_average_but_rows_with_another_dataset_do_not(tmp_path: Path) -> None:
    df = pd.DataFrame({"N": [1e8] * 4, "D": [1e9] * 4, "loss": [3.0, 3.2, 2.5, 2.7], "seed": [0, 1, 0, 1],
                       "dataset": ["c4", "c4", "pile", "pile"]})
    pts = from_csv(_write(tmp_path, df)).points
    assert sorted(pts["loss"].round(6)) == [2.6, 3.1]
    assert list(pts["n_seeds"]) == [2, 2]


def test_a_single_valued_U_column_is_used_and_said_so(tmp_path: Path) -> None:
    df = muennighoff_rows()
    df = df[df["U"] == 1e9]
    code, out, err = run_cli("fit", "--csv", str(_write(tmp_path, df)), "--law", "approach3", "--bootstrap", "0")
    assert code == 0, err
    assert "effective data D' from each row's unique tokens (column 'U', 1 distinct value" in out


def test_r_star_can_be_fitted(tmp_path: Path) -> None:
    """Data made with R*_D = 4: fixing 15.4 fits them worse than the profiled estimate."""
    p = _write(tmp_path, muennighoff_rows(r_star=4.0))
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach3", "--bootstrap", "0", "--r-star", "fit")
    assert code == 0, err
    m = re.search(r"R\*_D = ([0-9.]+) fitted, 95% profile-likelihood interval \[([0-9.]+), ([0-9.]+)\]",
                  " ".join(out.split()))
    assert m is not None, out
    value, lo, hi = (float(g) for g in m.groups())
    assert 3.0 < value < 5.5 and lo <= value <= hi


def test_r_star_fit_needs_repeated_data(tmp_path: Path) -> None:
    df = S.grid_points(seed=0)
    code, _, err = run_cli("fit", "--csv", str(_write(tmp_path, df)), "--r-star", "fit", "--law", "approach3")
    assert code == 2 and "needs unique tokens" in err and "Traceback" not in err
    code, _, err = run_cli("fit", "--csv", str(tmp_path / "m.csv"), "--r-star", "-3")
    assert code == 2 and "--r-star must be a positive number" in err


# -- 11.7: conventions -----------------------------------------------------------------------------
def test_params_total_is_said_in_the_header(tmp_path: Path) -> None:
    p = _write(tmp_path, S.isoflop_points(seed=0))
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0", "--params", "total")
    assert code == 0, err
    assert "N in total parameters" in " ".join(" ".join(out.splitlines()[:3]).split())  # a long path wraps the header
    code, _, err = run_cli("fit", "--csv", str(p), "--params", "embedding")
    assert code == 2 and "unknown parameter convention 'embedding'" in err


def test_a_C_column_of_8ND_is_warned_about_and_can_be_taken_as_given(tmp_path: Path) -> None:
    df = S.isoflop_points(seed=0)
    df["C"] = 8.0 * df["N"] * df["D"]
    p = _write(tmp_path, df)
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0")
    assert code == 0, err
    assert "warning: column 'C' is not 6ND: C/(6ND) is 1.33" in err
    assert "--flops given" in err
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0", "--flops", "given")
    assert code == 0, err
    assert "not 6ND" not in err
    assert "C = 8 N D" in " ".join(out.split())


def test_6ND_data_get_no_flops_warning(tmp_path: Path) -> None:
    data = from_csv(_write(tmp_path, S.isoflop_points(seed=0)))
    assert data.warnings == []


# -- 11.8: loss units --------------------------------------------------------------------------------
def test_perplexity_in_the_loss_column_is_warned_about_and_converted_on_request(tmp_path: Path) -> None:
    df = S.grid_points(seed=0)
    df["loss"] = np.exp(df["loss"])  # perplexity, up to e^4.8 ~ 120
    p = _write(tmp_path, df)
    data = from_csv(p)
    assert any("look" not in w and "--loss-units perplexity" in w for w in data.warnings)
    conv = from_csv(p, loss_units="perplexity")
    assert conv.warnings == []
    np.testing.assert_allclose(np.sort(conv.points["loss"]), np.sort(S.grid_points(seed=0)["loss"]), rtol=1e-12)
    code, _, err = run_cli("fit", "--csv", str(p), "--law", "kaplan", "--bootstrap", "0")
    assert code == 0 and "warning: loss reaches" in err


def test_a_ppl_or_bits_column_is_recognised(tmp_path: Path) -> None:
    df = S.grid_points(seed=0).rename(columns={"loss": "ppl"})
    df["ppl"] = np.exp(df["ppl"])
    data = from_csv(_write(tmp_path, df, "ppl.csv"))
    assert data.points["loss"].max() < 10 and any("perplexity" in n for n in data.notes)
    bits = S.grid_points(seed=0)
    bits["bpb"] = bits.pop("loss") / math.log(2)
    data = from_csv(_write(tmp_path, bits, "bits.csv"))
    np.testing.assert_allclose(np.sort(data.points["loss"]), np.sort(S.grid_points(seed=0)["loss"]), rtol=1e-12)


# -- 11.9: parsing -----------------------------------------------------------------------------------
def test_sizes_with_suffixes_and_thousands_separators_are_read(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text('N,D,loss\n10M,1e9,3.5\n"1,000,000",2_000_000_000,3.6\n1.5B,10B,2.9\n 2 k ,1T,4.0\n')
    pts = from_csv(p).points.sort_values("N")
    assert list(pts["N"]) == [2e3, 1e6, 1e7, 1.5e9]
    assert list(pts["D"]) == [1e12, 2e9, 1e9, 1e10]


def test_an_unreadable_cell_is_shown_with_its_row_and_column(tmp_path: Path) -> None:
    p = tmp_path / "s.csv"
    p.write_text("N,D,loss\n10M,1e9,3.5\n12 millions,2e9,3.6\n")
    code, _, err = run_cli("fit", "--csv", str(p))
    assert code == 2 and "Traceback" not in err
    assert err.strip().count("\n") == 0
    assert "column 'N', data row 2: cannot read '12 millions' as a number" in err and "10M" in err
    assert "np.float64" not in err


def test_a_semicolon_file_is_read_and_a_missing_column_lists_what_was_found(tmp_path: Path) -> None:
    df = S.isoflop_points(seed=1)
    p = _write(tmp_path, df, sep=";", decimal=",")
    data = from_csv(p)
    assert len(data.points) == len(df)
    np.testing.assert_allclose(np.sort(data.points["loss"]), np.sort(df["loss"]))
    assert any("';'-separated" in n for n in data.notes)
    q = tmp_path / "cols.csv"
    q.write_text("size;tokens;loss\n1;2;3\n")
    with pytest.raises(FitError, match=r"no parameter-count column .*columns found: 'size', 'tokens', 'loss'"):
        from_csv(q)


def test_one_nan_loss_aborts_unless_drop_invalid(tmp_path: Path) -> None:
    df = S.isoflop_points(seed=2)
    df.loc[5, "loss"] = np.nan
    df.loc[9, "N"] = -1.0
    p = _write(tmp_path, df)
    code, _, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0")
    assert code == 2 and "non-positive or non-finite N (first: data row 10" in err and "--drop-invalid" in err
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0", "--drop-invalid")
    assert code == 0, err
    assert f"dropped 2 of {len(df)} rows" in err and "data row 6" in err
    assert f"{len(df) - 2} points" in out.splitlines()[0]


@pytest.mark.parametrize("command", ["fit", "recommend"])
def test_losses_that_do_not_vary_are_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    df = S.isoflop_points(seed=2)
    df["loss"] = 3.0 + 1e-9 * np.arange(len(df))  # equal to the precision any run reports
    code, out, err = run_cli(command, "--csv", str(_write(tmp_path, df)), "--bootstrap", "0" if command == "fit" else "2")
    assert code == 2 and "the losses do not vary" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_drop_invalid_with_nothing_left_says_so(tmp_path: Path) -> None:
    p = tmp_path / "x.csv"
    p.write_text("N,D,loss\nx,1,2\n1,y,2\n")
    code, _, err = run_cli("fit", "--csv", str(p), "--drop-invalid")
    assert code == 2 and "no valid rows left" in err


# -- 11.10: unique tokens without effect -------------------------------------------------------------
def test_unique_tokens_above_every_D_say_they_had_no_effect(tmp_path: Path) -> None:
    p = _write(tmp_path, S.isoflop_points(seed=0))
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "approach2", "--bootstrap", "0",
                             "--unique-tokens", "1e15")
    assert code == 0, err
    assert "had no effect" in out and "is Muennighoff" not in out
    data = from_csv(p, unique_tokens=1e15)
    assert data.conventions()["effective_data"] is False
    np.testing.assert_allclose(data.points["D"], data.points["D_raw"])


def test_unique_tokens_twice_is_refused(tmp_path: Path) -> None:
    p = _write(tmp_path, muennighoff_rows())
    code, _, err = run_cli("fit", "--csv", str(p), "--unique-tokens", "1e9")
    assert code == 2 and "either as column 'U' or as --unique-tokens" in err


def test_csv_only_options_are_refused_for_a_sweep(sqlite_url: str) -> None:
    code, _, err = run_cli("fit", "--db", sqlite_url, "--drop-invalid")
    assert code == 2 and "--drop-invalid only apply to --csv" in err
    code, _, err = run_cli("recommend", "--db", sqlite_url, "--loss-units", "bits")
    assert code == 2 and "--loss-units only apply to --csv" in err


@pytest.mark.parametrize("inference", [False, True])
def test_recommend_reads_a_csv_in_the_conventions_fit_takes(inference: bool, tmp_path: Path) -> None:
    """The same points in bits with a broken row give recommend the same answer as the clean nats file."""
    df = S.grid_points(seed=0)
    nats = _write(tmp_path, df, "nats.csv")
    bits = df.assign(loss=df["loss"] / math.log(2))
    bits.loc[len(bits)] = {**bits.iloc[0].to_dict(), "loss": float("nan")}
    bits_path = _write(tmp_path, bits, "bits.csv")
    extra = ["--inference-tokens", "1e12"] if inference else []
    common = ["recommend", "--compute", "1e21", "--bootstrap", "20", "--format", "json", *extra]
    code, ref, err = run_cli(*common, "--csv", str(nats))
    assert code == 0, err
    code, _, err = run_cli(*common, "--csv", str(bits_path))
    assert code == 2 and "--drop-invalid" in err  # the NaN row is refused, as fit refuses it
    code, out, err = run_cli(*common, "--csv", str(bits_path), "--loss-units", "bits", "--drop-invalid")
    assert code == 0, err
    assert "dropped 1 of" in err
    a, b = json.loads(ref), json.loads(out)
    if inference:
        assert b["target_loss"] == pytest.approx(a["target_loss"], rel=1e-6)
        assert b["optimum"]["N"]["value"] == pytest.approx(a["optimum"]["N"]["value"], rel=1e-6)
    else:
        for law in a["per_law"]:
            assert b["per_law"][law]["N"]["value"] == pytest.approx(a["per_law"][law]["N"]["value"], rel=1e-6)


def test_from_frame_keeps_its_row_numbering() -> None:
    df = S.grid_points(seed=0)
    df.loc[3, "loss"] = np.nan
    with pytest.raises(FitError, match=r"non-positive or non-finite loss \(first: row 3, loss=nan"):
        from_frame(df)
    assert json.dumps(from_frame(S.grid_points(seed=0)).conventions())


@pytest.mark.parametrize("case, expected", [
    ("ragged first row", "data row 1 has more fields than the header's 3"),
    ("thousands of columns", "the header has 2,003 columns, more than the 256 a CSV may have"),
    ("a folder", "not a regular file"),
])
def test_csvs_of_the_wrong_shape_are_named_as_such(case: str, expected: str, tmp_path: Path) -> None:
    p = tmp_path / "m.csv"
    if case == "ragged first row":
        p.write_text("N,D,loss\n1e6,2e7,3.0,extra,cols\n2e6,4e7,2.8\n")
    elif case == "thousands of columns":  # every unknown column is a grouping key: refused before pandas
        p.write_text(",".join(["N", "D", "loss"] + [f"c{i}" for i in range(2000)]) + "\n"
                     + ",".join(["1e6", "1e9", "3"] + ["0"] * 2000) + "\n")
    else:
        p = tmp_path
    code, out, err = run_cli("fit", "--csv", str(p), "--bootstrap", "20")
    assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("args, says", [
    (("fit", "--seed", "-1"), "'--seed'"),
    (("fit", "--bootstrap", "10001"), "'--bootstrap'"),
    (("recommend", "--bootstrap", "0"), "'--bootstrap'"),  # the choice between laws needs intervals
    (("fit", "--bootstrap", "1"), "--bootstrap 1 gives no interval"),
])
def test_bootstrap_and_seed_out_of_range_are_usage_errors(args: tuple[str, ...], says: str, tmp_path: Path) -> None:
    p = _write(tmp_path, S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 3), n_sizes=5, seed=0))
    code, out, err = run_cli(*args, "--csv", str(p))
    assert code == 2 and says in err and "Traceback" not in err, err


@pytest.mark.parametrize("header, says", [
    ("N,D,loss,loss", "names column(s) 'loss' more than once"),
    ("N,params,D,loss", "columns 'N', 'params' all give N"),
    ("N,D,loss,eval_loss", "columns 'loss', 'eval_loss' all give loss"),
])
def test_columns_naming_one_quantity_twice_are_refused(header: str, says: str, tmp_path: Path) -> None:
    """pandas would rename a repeated column (loss.1) and the alias order pick one silently."""
    rows = S.isoflop_points(budgets=np.geomspace(1e18, 1e20, 3), n_sizes=5, seed=0)
    p = tmp_path / "m.csv"
    p.write_text(header + "\n" + "".join(f"{r.N},{r.D},{r.loss},{r.loss * 1.01}\n" for r in rows.itertuples()))
    code, out, err = run_cli("fit", "--csv", str(p), "--bootstrap", "0")
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
