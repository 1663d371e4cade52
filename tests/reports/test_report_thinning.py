"""A report of a very large sweep stays bounded: it draws and lists a spread of the runs and says so."""

from __future__ import annotations

import numpy as np
import pandas as pd

from scaling import vocab as names
from scaling.reports.report_data import ReportData
from scaling.reports.downsample import MAX_RUNS_DRAWN, thin_events, thin_runs, thin_table
from scaling.reports.html import render


def _runs(sizes: int, seeds: int, status: str = "completed") -> pd.DataFrame:
    n = np.repeat(np.logspace(6, 8, sizes), seeds)
    return pd.DataFrame({"run_key": [f"r{i:05d}" for i in range(len(n))], "N": n, "D": 1e9, "C": 6e9 * n,
                         "status": status, "final_loss": 3.0 - 0.1 * np.log10(n)})


def test_thin_runs_takes_every_configuration_before_a_second_seed() -> None:
    runs = _runs(10, 100)
    picked = thin_runs(runs, 35)
    assert len(picked) == 35
    counts = picked["N"].value_counts()
    assert len(counts) == 10 and counts.max() - counts.min() <= 1  # every size, evenly
    assert thin_runs(runs, 2000) is runs  # nothing to thin
    many = thin_runs(_runs(500, 1), 50)  # more sizes than the cap: evenly spaced, both ends kept
    assert len(many) == 50 and many["N"].min() == 1e6 and many["N"].max() == 1e8


def test_thin_table_lists_unfinished_runs_first() -> None:
    runs = pd.concat([_runs(5, 300), _runs(1, 3, status="failed").assign(run_key=["f0", "f1", "f2"])],
                     ignore_index=True)
    listed = thin_table(runs, 100)
    assert len(listed) == 100 and set(listed["run_key"]) >= {"f0", "f1", "f2"}


def test_thin_events_keeps_problems_first() -> None:
    ev = pd.DataFrame({"run_key": [f"r{i}" for i in range(5000)], "kind": ["simulated"] * 5000})
    ev.loc[[10, 4000], "kind"] = names.LOSS_SPIKE
    kept = thin_events(ev, {names.LOSS_SPIKE}, 100)
    assert len(kept) == 100 and (kept["kind"] == names.LOSS_SPIKE).sum() == 2


def test_report_of_many_runs_says_what_it_drew() -> None:
    runs = _runs(4, MAX_RUNS_DRAWN // 4 + 25)  # 100 runs more than the curves figure draws
    steps = np.arange(1, 6)
    curves = pd.DataFrame({
        "run_key": np.repeat(runs["run_key"].to_numpy(), len(steps)),
        "step": np.tile(steps, len(runs)),
        "tokens": np.tile(steps * 1e8, len(runs)),
        "flops": np.repeat(runs["N"].to_numpy(), len(steps)) * 6 * np.tile(steps * 1e8, len(runs)),
        "name": names.TRAIN_LOSS,
        "value": np.tile(4.0 - 0.2 * steps, len(runs)),
    })
    html = render(ReportData(sweep="big", runs=runs, curves=curves))
    assert f"Drawn: the curves of {MAX_RUNS_DRAWN:,} of the {len(runs):,} runs" in html
