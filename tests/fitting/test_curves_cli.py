"""`scaling fit --law curve` and `scaling.curves`: a CSV of curves in, predictions of other schedules out,
bad rows refused with one line naming the row."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from cli_run import run_cli
from scaling.errors import FitError
from scaling.fitting.curves.data import curves_from_csv, schedules_from_csv
from scaling.fitting.curves.synthetic import FIT_ON, PUBLISHED_MULTI_POWER, draw_curves


def _curves_csv(path: Path) -> Path:
    rows = [(c.run, int(s), float(c.lr[s]), float(y))
            for c in draw_curves(PUBLISHED_MULTI_POWER, names=list(FIT_ON), every=400, seed=2)
            for s, y in zip(c.steps, c.loss)]
    pd.DataFrame(rows, columns=["run", "step", "lr", "loss"]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def curves_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _curves_csv(tmp_path_factory.mktemp("curves") / "curves.csv")


def _write(tmp_path: Path, text: str, name: str = "c.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_the_csv_rates_are_interpolated_and_warm_up_from_zero(tmp_path: Path) -> None:
    p = _write(tmp_path, "run,step,lr,loss\na,10,1e-3,\na,20,1e-3,3.5\na,30,5e-4,3.4\n")
    (c,) = curves_from_csv(p)
    assert c.lr.size == 31 and c.lr[0] == 0 and c.lr[5] == pytest.approx(5e-4) and c.lr[25] == pytest.approx(7.5e-4)
    assert list(c.steps) == [20, 30] and list(c.loss) == [3.5, 3.4]


@pytest.mark.parametrize("text, message", [
    ("run,step,lr,loss\na,10,1e-3,3.5\na,10,1e-3,3.4\n", "data row 2: run 'a' gives step 10 twice"),
    ("run,step,lr,loss\na,10,1e-3,3.5\na,20,0,3.4\n", "data row 2: run 'a' has lr 0 at step 20, after its warmup"),
    ("run,step,lr,loss\na,20,1e-3,3.5\na,10,1e-3,3.4\n", "data row 2: run 'a' goes back from step 20 to 10"),
    ("run,step,lr,loss\na,10,1e-3,3.5\nb,10,1e-3,\nb,20,1e-3,\n", "data row 2: run 'b' has no loss"),
    ("run,step,lr,loss\na,10,abc,3.5\n", "data row 1: lr is 'abc', not a number"),
    ("run,step,loss\na,10,3.5\n", "no column 'lr'"),
])
def test_bad_rows_are_refused_naming_the_row(tmp_path: Path, text: str, message: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(FitError, match=message):
        curves_from_csv(p)
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "curve", "--bootstrap", "0")
    assert code == 2 and message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_schedule_file_marks_the_steps_to_predict(tmp_path: Path) -> None:
    p = _write(tmp_path, "run,step,lr,predict\nw,100,1e-3,0\nw,200,1e-3,1\nw,300,1e-4,1\n")
    (s,) = schedules_from_csv(p)
    assert list(s.steps) == [200, 300] and s.lr.size == 301
    bad = _write(tmp_path, "run,step,lr,predict\nw,100,1e-3,2\n", "bad.csv")
    with pytest.raises(FitError, match="data row 1: predict must be 0 or 1"):
        schedules_from_csv(bad)


def test_fit_prints_both_forms_and_predicts_a_schedule_as_json(tmp_path: Path, curves_csv: Path) -> None:
    code, out, err = run_cli("fit", "--csv", str(curves_csv), "--law", "curve", "--bootstrap", "0")
    assert code == 0, err
    assert "multi-power law" in out and "annealing law" in out and "held-out error" in out and "(chosen" in out
    steps = np.arange(2160, 24000, 500)
    sched = pd.DataFrame({"run": "wsd", "step": np.r_[steps, 23999], "lr": np.r_[np.full(steps.size, 3e-4), 3e-5],
                          "predict": np.r_[np.zeros(steps.size, int), 1]})
    sched_path = tmp_path / "schedules.csv"
    sched.to_csv(sched_path, index=False)
    code, out, err = run_cli("fit", "--csv", str(curves_csv), "--law", "curve", "--bootstrap", "8",
                             "--predict", str(sched_path), "--format", "json")
    assert code == 0, err
    rows = json.loads(out)
    assert [set(r) for r in rows] == [{"run", "step", "loss", "lo", "hi"}] and rows[0]["step"] == 23999
    r = rows[0]
    assert 3.0 < r["loss"] < 3.3 and r["lo"] <= r["loss"] <= r["hi"]


def test_predict_needs_the_curve_law(tmp_path: Path, curves_csv: Path) -> None:
    code, _, err = run_cli("fit", "--csv", str(curves_csv), "--predict", str(curves_csv))
    assert code == 2 and "--predict applies to --law curve" in err


def test_the_notebook_api_fits_and_predicts(curves_csv: Path) -> None:
    import scaling

    law = scaling.curves(csv=str(curves_csv), bootstrap=0)
    table = law.predict(pd.DataFrame({"run": ["c"] * 2, "step": [2160, 71999], "lr": [3e-4, 3e-5]}))
    assert list(table["step"]) == [2160, 71999] and table["loss"].iloc[1] < table["loss"].iloc[0]
    assert table[["lo", "hi"]].isna().all().all()  # no bootstrap, no interval


def test_curves_of_several_sizes_get_a_law_each(tmp_path: Path) -> None:
    frames = []
    for N, shift in ((2.5e7, 0.0), (1e8, -0.3)):
        theta = np.array(PUBLISHED_MULTI_POWER) + np.array([shift, 0, 0, 0, 0, 0, 0])
        for c in draw_curves(theta, names=list(FIT_ON), every=800, seed=4):
            frames.append(pd.DataFrame({"run": f"{c.run}_{N:g}", "step": c.steps, "lr": c.lr[c.steps], "loss": c.loss,
                                        "N": N}))
    p = tmp_path / "sizes.csv"
    pd.concat(frames).to_csv(p, index=False)
    sched = tmp_path / "s.csv"
    sched.write_text("run,step,lr,N\nbig,2160,3e-4,1e8\nbig,23999,3e-5,1e8\nsmall,2160,3e-4,2.5e7\nsmall,23999,3e-5,2.5e7\n")
    code, out, err = run_cli("fit", "--csv", str(p), "--law", "curve", "--bootstrap", "0", "--predict", str(sched),
                             "--format", "json")
    assert code == 0, err
    rows = {(r["run"], r["step"]): r for r in json.loads(out)}
    assert rows[("big", 23999)]["N"] == 1e8 and rows[("small", 23999)]["loss"] - rows[("big", 23999)]["loss"] > 0.2
    unsized = tmp_path / "u.csv"
    unsized.write_text("run,step,lr\nx,2160,3e-4\nx,23999,3e-5\n")
    code, _, err = run_cli("fit", "--csv", str(p), "--law", "curve", "--bootstrap", "0", "--predict", str(unsized))
    assert code == 2 and "needs an N column" in err
