"""The laws of sparsity from the command line: a CSV read (bad rows named in one line), fit and recommend."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from cli_run import run_cli
from scaling.errors import FitError
from scaling.fitting.moe import moe_data
from scaling.fitting.moe import moe_synthetic as S


@pytest.fixture(scope="module")
def sparsity_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("moe") / "moe.csv"
    S.sparsity_sweep(seed=5, experts=(1, 8, 64)).to_csv(path, index=False)
    return path


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "moe.csv"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, message", [
    ("N,D,n_experts,top_k,loss\n1e8,1e9,8,1,3.1\n2e8,1e9,8,x,3.0\n", "column 'top_k', data row 2: cannot read 'x'"),
    ("N,D,n_experts,top_k,loss\n1e8,1e9,8,1,3.1\n2e8,1e9,4,8,3.0\n", "data row 2: top_k 8 is more than n_experts 4"),
    ("N,D,n_experts,top_k,loss\n1e8,1e9,8,1,3.1\n2e8,1e9,8.5,1,3.0\n", "data row 2: n_experts must be a whole number"),
    ("N,N_total,D,loss\n1e8,8e8,1e9,3.1\n2e8,1e8,1e9,3.0\n", "data row 2: N_total 1e+08 is below the active"),
    ("N,D,n_experts,loss\n1e8,1e9,8,3.1\n", "gives n_experts but no column gives top_k"),
    ("N,D,loss\n1e8,1e9,3.1\n", "no column says how the runs are mixtures of experts"),
    ("N,N_active,D,granularity,loss\n1e8,1e8,1e9,2,3.1\n", "all give N"),
    ("N,D,granularity,loss\n1e8,1e9,-2,3.1\n", "data row 1: granularity must be a positive finite number"),
])
def test_a_bad_csv_is_refused_in_one_line_naming_the_row(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(FitError, match=message.replace("(", r"\(").replace("+", r"\+")):
        moe_data.from_csv(_write(tmp_path, text))
    code, out, err = run_cli("fit", "--csv", str(tmp_path / "moe.csv"), "--law", "moe")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


def test_a_hostile_csv_is_bounded(tmp_path: Path) -> None:
    header = ",".join(f"c{i}" for i in range(400))
    code, _, err = run_cli("fit", "--csv", str(_write(tmp_path, header + "\n")), "--law", "moe")
    assert code == 2 and "columns, more than" in err


def test_runs_differing_in_lr_and_batch_are_reduced_to_their_best(tmp_path: Path) -> None:
    rows = ["N,N_total,D,lr,batch_tokens,loss"]
    for n in (1e8, 2e8):
        for lr, loss in ((1e-3, 3.2), (3e-3, 3.0), (1e-2, 3.4)):
            rows.append(f"{n},{8 * n},1e9,{lr},65536,{loss - (0.1 if n > 1e8 else 0)}")
    data = moe_data.from_csv(_write(tmp_path, "\n".join(rows) + "\n"))
    assert len(data.points) == 2 and list(data.points["loss"]) == [3.0, 2.9]
    assert data.points["S"].tolist() == pytest.approx([0.875, 0.875])
    assert "6 runs reduced to 2 points" in data.notes[0]


def test_fit_and_recommend_from_the_command_line(sparsity_csv: Path) -> None:
    code, out, err = run_cli("fit", "--csv", str(sparsity_csv), "--law", "moe-sparsity", "--bootstrap", "30")
    assert code == 0, err
    assert "N = active parameters" in out and "delta" in out and "95% interval" in out
    code, out, err = run_cli("fit", "--csv", str(sparsity_csv), "--law", "moe-sparsity", "--bootstrap", "30",
                             "--format", "json")
    assert code == 0, err
    law = json.loads(out)["laws"]["sparsity"]
    assert law["class"] == "SparsityLaw" and law["reliable"] and law["conventions"]["N"] == "active parameters"
    code, out, err = run_cli("recommend", "--csv", str(sparsity_csv), "--law", "moe-sparsity", "--compute", "1e20",
                             "--bootstrap", "30", "--format", "json")
    assert code == 0, err
    rec = json.loads(out)["recommendations"][0]
    assert rec["choice"]["value"] == pytest.approx(1 - 1 / 64)
    assert rec["N_active"]["lo"] <= rec["N_active"]["value"] <= rec["N_active"]["hi"]
    assert rec["dense"]["loss"]["value"] > rec["loss"]["value"]
    code, out, err = run_cli("recommend", "--csv", str(sparsity_csv), "--law", "moe-sparsity", "--compute", "1e20",
                             "--bootstrap", "30")
    assert code == 0 and "N_active* = " in out and "compared with S = 0 (the dense model)" in out


def test_options_of_the_dense_laws_are_refused_with_moe(sparsity_csv: Path) -> None:
    code, _, err = run_cli("fit", "--csv", str(sparsity_csv), "--law", "moe", "--flops", "given")
    assert code == 2 and "--flops do not apply to the laws of sparsity" in err
    code, _, err = run_cli("recommend", "--csv", str(sparsity_csv), "--law", "kaplan")
    assert code == 2 and "--law must be all or a law of sparsity" in err


def test_a_budget_far_outside_the_sweep_is_refused(sparsity_csv: Path) -> None:
    code, out, err = run_cli("recommend", "--csv", str(sparsity_csv), "--law", "moe-sparsity", "--compute", "1e40",
                             "--bootstrap", "10")
    assert code == 2 and out == "" and "outside the measured budgets" in err


def test_a_sweeps_moe_runs_are_read_from_their_specs(sqlite_url: str) -> None:
    """Runs stored with their spec's model section (n_experts, top_k) through the real Store."""
    from scaling.db import Store

    table = S.sparsity_sweep(seed=6, experts=(1, 8, 32), sizes=(3e7, 1e8, 3e8), tokens=(1e9, 4e9, 1.6e10))
    records = []
    for i, row in table.iterrows():
        # a spec leaves a field out at its family's default (8 experts, top-2 for moe)
        model = ({"family": "llama"} if row.n_experts == 1 else {"family": "moe", "top_k": 1} if row.n_experts == 8
                 else {"family": "moe", "n_experts": int(row.n_experts), "top_k": int(row.top_k)})
        model = {**SIZES, **model}
        records.append({"key": f"moe-{i:03d}", "N": float(row.N), "N_total": float(row.N) * row.n_experts,
                        "n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 64,
                        "D": float(row.D), "C": 6.0 * row.N * row.D, "seed": 0, "spec": {"model": model}})
    with Store(sqlite_url) as store:
        store.register("moe", records)
        for rec, (_, row) in zip(records, table.iterrows()):
            assert store.claim(rec["key"], "test-host") == 1
            store.finish(rec["key"], "completed", final_eval_loss=float(row.loss), final_train_loss=float(row.loss))
    data, sweep = moe_data.from_db(sqlite_url, "moe")
    assert sweep == "moe" and len(data.points) == len(table)
    assert sorted(set(data.points["S"].round(6))) == [0.0, 0.875, round(1 - 1 / 32, 6)]
    code, out, err = run_cli("fit", "--db", sqlite_url, "--sweep", "moe", "--law", "moe", "--bootstrap", "20")
    assert code == 0, err
    assert "moe-sparsity" in out and "granularity law: not fitted" in out
    code, out, err = run_cli("recommend", "--db", sqlite_url, "--sweep", "moe", "--law", "moe-sparsity",
                             "--bootstrap", "20")
    assert code == 0, err
    assert "N_active* = " in out and "compared with S = 0 (the dense model)" in out


def test_a_dense_sweep_has_no_laws_of_sparsity(sqlite_url: str, make_sweep) -> None:
    make_sweep(sqlite_url, curves=False)
    code, _, err = run_cli("fit", "--db", sqlite_url, "--law", "moe", "--bootstrap", "0")
    assert code == 2 and "no mixture-of-experts runs" in err


def test_simulated_tables_read_back_as_a_csv(tmp_path: Path) -> None:
    path = tmp_path / "g.csv"
    S.granularity_sweep(seed=0).to_csv(path, index=False)
    data = moe_data.from_csv(path)
    assert data.has_granularity and sorted(set(data.points["G"])) == [1, 2, 4, 8, 16]
    assert pd.isna(data.points["S"]).all()


#: A run spec's model sizes (what every stored spec states).
SIZES = {"n_layer": 2, "d_model": 64, "n_head": 4, "vocab_size": 256, "context": 64}


@pytest.mark.parametrize("model, expected", [
    ({"family": "llama"}, {"n_experts": 1, "top_k": 1, "granularity": 1.0}),
    ({"family": "moe"}, {"n_experts": 8, "top_k": 2, "granularity": 1.0}),
    ({"family": "moe", "n_experts": 64, "top_k": 8, "ffn": 1024, "expert_ffn": 128},
     {"n_experts": 64, "top_k": 8, "granularity": 8.0}),
    # the dense width the family resolves from d_model (llama_ffn(64) = 256) when the spec leaves it out
    ({"family": "moe", "expert_ffn": 64}, {"n_experts": 8, "top_k": 2, "granularity": 4.0}),
])
def test_a_run_specs_experts(model: dict, expected: dict) -> None:
    assert moe_data.experts_of({"model": {**SIZES, **model}}) == expected


def test_the_defaults_of_a_specs_experts_are_the_registrys() -> None:
    """A spec that leaves the experts out gets what scaling.families resolves, not a copy of it."""
    from scaling.accounting import Shape

    shape = Shape(2, 64, 4, family="moe")
    got = moe_data.experts_of({"model": {**SIZES, "family": "moe"}})
    assert (got["n_experts"], got["top_k"]) == (shape.n_experts, shape.top_k)


@pytest.mark.parametrize("model, problem", [
    ({"family": "moe"}, "no whole n_layer, d_model, n_head"),
    ({**SIZES, "family": "moe", "top_k": 9}, "top_k must be between 1 and n_experts"),
])
def test_a_stored_spec_that_makes_no_shape_is_named(sqlite_url: str, model: dict, problem: str) -> None:
    from scaling.db import Store

    record = {"key": "bad-run", "N": 1e6, "N_total": 4e6, "D": 1e8, "C": 6e14, "seed": 0, "spec": {"model": model},
              **SIZES}
    with Store(sqlite_url) as store:
        store.register("moe", [record])
        assert store.claim("bad-run", "test-host") == 1
        store.finish("bad-run", "completed", final_eval_loss=3.0, final_train_loss=3.0)
    with pytest.raises(FitError, match=f"run bad-run: .*{problem}"):
        moe_data.from_db(sqlite_url, "moe")
