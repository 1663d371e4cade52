"""The notebook API's numeric arguments, fuzzed: 0, negative, NaN, infinities, strings, booleans,
huge values. Each is one ArgumentError (a ValueError) naming the argument as the API spells it,
never a traceback from deep inside and never a NaN returned; a good value returns finite numbers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest

import scaling
from scaling.errors import ArgumentError
from scaling.fitting.hyperparams import hparams_synthetic as HS

LAW = dict(E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.28)
HOSTILE: list[Any] = [0, 0.0, -1, -1e9, math.nan, np.nan, math.inf, -math.inf, "1e6", "", True, False, None,
                      [1e6], 1e300, np.float64(np.nan), complex(1, 1)]


@pytest.fixture(scope="module")
def csvs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A loss CSV with one downstream task (accuracy a sigmoid of bits per byte), and a CSV of
    hyperparameter groups."""
    folder = tmp_path_factory.mktemp("api")
    rng = np.random.default_rng(0)
    rows = []
    for C in (1e17, 1e18, 1e19):
        for N in np.geomspace(2e7, 6e8, 5) * (C / 1e18) ** 0.5:
            D = C / (6 * N)
            loss = LAW["E"] + LAW["A"] / N ** LAW["alpha"] + LAW["B"] / D ** LAW["beta"]
            bpb = 0.6 + 40.0 / N ** 0.3 + 300.0 / D ** 0.32
            acc = 0.6 / (1.0 + math.exp(6.0 * (bpb - 1.1))) + 0.25
            rows.append(dict(N=N, D=D, loss=loss * math.exp(rng.normal(0, 0.003)), bpb_sim=bpb,
                             acc_sim=acc + rng.normal(0, 0.005)))
    pd.DataFrame(rows).to_csv(folder / "loss.csv", index=False)
    runs = HS.sweep(HS.HparamTruth(), np.random.default_rng(11), sizes=(5e7, 1e8, 2e8),
                    tokens_per_param=(10, 20, 40), n_lr=5, n_batch=3)
    runs.drop(columns="C").to_csv(folder / "hparams.csv", index=False)
    return {"loss": folder / "loss.csv", "hparams": folder / "hparams.csv"}


@pytest.fixture(scope="module")
def fitted(csvs: dict[str, Path]) -> dict[str, Any]:
    """The cheapest fits of each kind (Kaplan's law; the tasks' coarse grid): their arguments are the subject."""
    from scaling.fitting.core.measurements import from_csv
    from scaling.fitting.tasks.task_laws import fit_tasks_csv

    hp = scaling.hparams(csv=str(csvs["hparams"]), bootstrap=0)
    assert hp is not None
    loss = str(csvs["loss"])
    task_fits = fit_tasks_csv(loss, from_csv(loss), n_bootstrap=0, grid="coarse")
    return {"fit": scaling.fit(csv=loss, law="kaplan", bootstrap=0),
            "tasks": task_fits, "hparams": hp}


def _calls(csvs: dict[str, Path], fitted: dict[str, Any]) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """(the argument's name, a call passing it the value) for every numeric argument of the API."""
    loss, law = str(csvs["loss"]), fitted["fit"].laws["kaplan"]
    tasks, hp = fitted["tasks"], fitted["hparams"]
    return {
        "optimal compute": ("compute", lambda v: law.optimal(v)),
        "recommend compute": ("compute", lambda v: scaling.recommend(v, csv=loss, bootstrap=2)),
        "recommend bootstrap": ("bootstrap", lambda v: scaling.recommend(1e19, csv=loss, bootstrap=v)),
        "recommend seed": ("seed", lambda v: scaling.recommend(1e19, csv=loss, bootstrap=2, seed=v)),
        "fit bootstrap": ("bootstrap", lambda v: scaling.fit(csv=loss, bootstrap=v)),
        "fit seed": ("seed", lambda v: scaling.fit(csv=loss, seed=v)),
        "hparams bootstrap": ("bootstrap", lambda v: scaling.hparams(csv=str(csvs["hparams"]), bootstrap=v)),
        "tasks seed": ("seed", lambda v: scaling.tasks(csv=loss, seed=v)),
        "predict N": ("N", lambda v: tasks.predict(v, 1e9)),
        "predict D": ("D", lambda v: tasks.predict(1e8, v)),
        "to_frame N": ("N", lambda v: tasks.to_frame(v, 1e9)),
        "hparams recommend N": ("N", lambda v: hp.recommend(v, 2e9)),
        "hparams recommend D": ("D", lambda v: hp.recommend(1e8, v)),
        "hparams recommend C": ("C", lambda v: hp.recommend(1e8, 2e9, v)),
    }


def _numbers(result: Any) -> list[float]:
    """Every float a result holds (estimates' values and bounds, frames' numeric cells)."""
    if isinstance(result, pd.DataFrame):  # lo and hi are NaN where there is no interval (no bootstrap here)
        return [float(v) for v in result[["accuracy", "task_loss"]].to_numpy().ravel()]
    if isinstance(result, dict):
        return [x for v in result.values() for x in _numbers(v)]
    if isinstance(result, list):
        return [x for v in result for x in _numbers(v)]
    if isinstance(result, scaling.Estimate):
        return [v for v in (result.value, result.lo, result.hi) if v is not None]
    if isinstance(result, scaling.TaskPrediction):
        return _numbers(result.accuracy) + _numbers(result.task_loss)
    return []


def test_every_hostile_number_is_one_error_naming_the_argument(csvs: dict[str, Path], fitted: dict[str, Any]) -> None:
    for label, (name, call) in _calls(csvs, fitted).items():
        for value in HOSTILE:
            if name in ("bootstrap", "seed") and value in (0, 0.0) and not isinstance(value, bool):
                continue  # zero replicates (no intervals) and seed 0 are allowed; 0.0 is not a whole number
            if name in ("bootstrap", "seed") and value is None:
                continue  # None: the stored analysis' settings, else the defaults (every entry point's default)
            if name not in ("bootstrap", "seed") and value is None and label in ("recommend compute",
                                                                                  "hparams recommend C"):
                continue  # None: the default budget
            with pytest.raises(ArgumentError) as info:
                call(value)
            text = str(info.value)
            assert "\n" not in text and f"{name} " in text and "--" not in text, (label, value, text)
            assert isinstance(info.value, ValueError)


def test_good_numbers_return_finite_values(csvs: dict[str, Path], fitted: dict[str, Any]) -> None:
    calls = _calls(csvs, fitted)
    for label, value in (("predict N", 1e8), ("predict N", np.float32(3e8)), ("predict D", 10**10),
                         ("to_frame N", 1e9), ("optimal compute", 1e20), ("hparams recommend N", 1e8),
                         ("hparams recommend C", 1.2e18)):
        numbers = _numbers(calls[label][1](value))
        assert numbers and all(math.isfinite(x) for x in numbers), (label, value, numbers)
    accuracies = [p.accuracy.value for p in fitted["tasks"].predict(1e8, 2e9)]
    assert accuracies and all(0.0 <= a <= 1.0 for a in accuracies)
