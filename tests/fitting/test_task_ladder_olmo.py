"""The OLMo model ladder (Bhagia et al. 2024): the authors' recipe for both steps, on their released runs.

Data: tests/data/olmo_ladder/ladder_8tasks.csv (see tests/data/README.md), 16 ladder runs with every
checkpoint and the two held-back targets (7B-4T, 13B-5T).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

DATA = Path(__file__).resolve().parents[1] / "data" / "olmo_ladder" / "ladder_8tasks.csv"
TASKS = ("mmlu", "hellaswag", "arc_challenge", "arc_easy", "piqa", "csqa", "socialiqa", "openbookqa")
#: The targets' (N, D) as the authors predict them (their README's predict.py commands).
TARGETS = {"7B-4T": (6887575552.0, 3945065873408.0), "13B-5T": (13202396160.0, 5000088518656.0)}
#: The chance levels the authors give each task (their task_minimum; 0.25 where not listed).
CHANCE = {"piqa": 0.5, "socialiqa": 1 / 3, "csqa": 0.2}
#: The authors' chained predictions for 13B-5T (their repository's figures/chained_main.csv).
AUTHORS_13B = {"mmlu": 0.5126800, "hellaswag": 0.8530360, "arc_challenge": 0.5267099, "arc_easy": 0.7724156,
               "piqa": 0.8208042, "csqa": 0.7760888, "socialiqa": 0.5994822, "openbookqa": 0.4486478}


def ladder() -> pd.DataFrame:
    return pd.read_csv(DATA)


def evaluations(task: str, df: pd.DataFrame | None = None) -> tuple[pd.DataFrame, float]:
    """The training runs' evaluations of ``task`` as :func:`fit_task` reads them, and the task's chance."""
    df = ladder() if df is None else df
    train = df[df["target"] == 0].sort_values(["run", "tokens"])
    D = train.groupby("run")["tokens"].transform("max").astype(float)
    rows = pd.DataFrame({"run_key": train["run"], "N": train["N"].astype(float), "D": train["tokens"].astype(float),
                         "C": 6.0 * train["N"].astype(float) * train["tokens"].astype(float),
                         "tokens": train["tokens"].astype(float), "final": train["tokens"].astype(float) == D,
                         "task": task, "acc": train[f"acc_{task}"], "acc_norm": np.nan,
                         "bpb": train[f"bpb_{task}"], "loss": train["loss"]})
    return rows.reset_index(drop=True), CHANCE.get(task, 0.25)


def target_values(target: str, task: str, df: pd.DataFrame | None = None) -> tuple[float, float]:
    """A target's measured task loss and accuracy as the authors read them: the mean of its last five
    evaluations (of its one, for 7B-4T)."""
    df = ladder() if df is None else df
    rows = df[df["run"] == target].sort_values("tokens").tail(5)
    return float(rows[f"bpb_{task}"].mean()), float(rows[f"acc_{task}"].mean())
