"""One reader of a measurements table: the loss fits (`measurements.from_frame`) and the task columns
(`task_data.from_frame`) read N, D, C and the loss through the same steps (`measurements.read_rows`), so the
task columns refuse what the loss fit refuses, in its words, and see the same numbers; and one
rounding (`fitting.points`) decides that two rows are the same point, for averaging seeds and for
hyperparameter groups alike."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from scaling.errors import FitError
from scaling.fitting.core.measurements import FitData, from_frame
from scaling.fitting.hyperparams.hparams import assign_groups
from scaling.fitting.core.points import DIGITS, point_keys
from scaling.fitting.tasks.task_data import from_frame as tasks_from_frame


def ladder(**columns: object) -> pd.DataFrame:
    """Nine runs (three sizes, three token counts) with a loss and one task's accuracy."""
    N, D = (a.ravel() for a in np.meshgrid([1e7, 4e7, 1.6e8], [2e8, 8e8, 3.2e9]))
    loss = 1.8 + 400 / N ** 0.34 + 410 / D ** 0.28
    df = pd.DataFrame({"N": N, "D": D, "loss": loss, "acc_sim": 1.0 / (1.0 + np.exp(3.0 * (loss - 3.0)))})
    for name, value in columns.items():
        df[name] = value
    return df


def _set(df: pd.DataFrame, col: str, row: int, value: object) -> pd.DataFrame:
    df = df.astype({col: object}) if isinstance(value, str) else df.copy()
    df.loc[row, col] = value
    return df


# (table, the options both readers read it with, what the refusal says)
REFUSED = [
    (_set(ladder(), "N", 3, -1.0), {}, "non-positive or non-finite N (first: data row 4"),
    (_set(ladder(), "D", 5, math.inf), {}, "non-positive or non-finite D (first: data row 6"),
    (_set(ladder(), "loss", 2, "low"), {}, "column 'loss', data row 3: cannot read 'low'"),
    (_set(ladder(), "N", 0, 1e120), {}, "N outside 1e-100 to 1e+100 (first: data row 1"),
    (_set(ladder(lr=1e-3, batch=512), "lr", 1, 500.0), {}, "impossible lr (first: data row 2"),
    (_set(ladder(lr=1e-3, batch=512, beta2=0.95), "beta2", 4, 1.5), {}, "impossible beta2 (first: data row 5"),
    (ladder().rename(columns={"loss": "ppl"}).assign(ppl=0.5), {}, "perplexity below 1 in column 'ppl'"),
    (ladder(), {"flops_convention": "given"}, "FLOPs can only be derived from tokens under the 6N convention"),
    (ladder(params=1e8), {}, "columns 'N', 'params' all give N"),
    (ladder().drop(columns="loss"), {}, "no loss column"),
]


@pytest.mark.parametrize("table, options, message", REFUSED)
def test_the_task_columns_refuse_what_the_loss_fit_refuses_in_its_words(table: pd.DataFrame, options: dict,
                                                                         message: str) -> None:
    label = {"row_label": lambda i: f"data row {i + 1}"}
    with pytest.raises(FitError) as loss_fit:
        from_frame(table, source="m.csv", **options, **label)
    as_read = FitData(pd.DataFrame(), flops_convention=options.get("flops_convention", "6N"))
    with pytest.raises(FitError) as task_read:
        tasks_from_frame(table, as_read, source="m.csv")
    assert message in str(loss_fit.value)
    assert str(task_read.value) == str(loss_fit.value)


@pytest.mark.parametrize("table, options", [
    (ladder(), {}),
    (ladder().assign(loss_bits=lambda d: d["loss"] / math.log(2)).drop(columns="loss"), {}),  # bits by name
    (ladder().assign(loss=lambda d: d["loss"] / math.log(2)), {"loss_units": "bits"}),  # bits by option
    (ladder().assign(C=lambda d: 7.0 * d["N"] * d["D"]), {"flops_convention": "given"}),  # C as given
    (ladder().assign(C=lambda d: 6.0 * d["N"] * d["D"]).drop(columns="D"), {}),  # D derived under 6N
    (_set(ladder(), "loss", 4, -3.0), {"drop_invalid": True}),  # a dropped row is no task evaluation
])
def test_both_readers_see_the_same_n_d_c_and_loss(table: pd.DataFrame, options: dict) -> None:
    data = from_frame(table, source="m.csv", **options)
    evals = tasks_from_frame(table, data, source="m.csv").evals
    cols = ["N", "D", "C", "loss"]
    got = evals[cols].sort_values(["N", "D"]).reset_index(drop=True)
    want = data.points[cols].sort_values(["N", "D"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, want, rtol=1e-12)


def test_one_rounding_decides_the_same_point_for_seeds_and_for_hyperparameter_groups() -> None:
    tiny = 10.0 ** -(DIGITS + 2)  # far below the digits compared: the same point
    near = 10.0 ** -(DIGITS - 3)  # at the 4th digit: another point, though both print as N=1e+08 at 3 digits
    runs = pd.DataFrame({"N": [1e8, 1e8 * (1 + tiny), 1e8, 1e8 * (1 + near), 1e8 * (1 + near), 1e8 * (1 + near)],
                         "D": [2e9] * 6, "loss": [3.1, 3.0, 3.2, 3.05, 2.95, 3.15],
                         "lr": [1e-3, 2e-3, 4e-3, 1e-3, 2e-3, 4e-3], "batch": [512] * 6})
    same = point_keys(runs, ["N", "D"]).apply(tuple, axis=1)
    groups = assign_groups(runs)
    assert same.nunique() == groups.nunique() == 2
    assert (groups.groupby(same).nunique() == 1).all()  # each point is one group, each group one point
    seeds = runs.drop(columns=["lr", "batch"])
    data = from_frame(seeds)
    assert len(data.points) == 2 and data.points["n_seeds"].tolist() == [3, 3]
