"""Values read back from the database get the checks a CSV cell gets (scaling.quantities): an
accuracy of 1.5 or a final loss of -3 written into the database is one line naming the run in
`scaling fit`, `recommend` and `report`, and `scaling runs` leaves such a loss blank, saying which run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from cli_run import run_main
from scaling import vocab as names
from scaling.db import Store

LAW = dict(E=1.8, A=400.0, B=2000.0, alpha=0.34, beta=0.28)


def _sweep(url: str, *, accuracy: float = 0.5, final_loss: float | None = None, tasks: bool = True) -> list[str]:
    """A completed IsoFLOP sweep of 12 runs with one task (unless not ``tasks``); the last run's
    accuracy (and, when given, its final loss) replaced by the value under test, as a hand or a bug
    could write it."""
    records, rows = [], []
    for C in (1e17, 1e18, 1e19):
        for i, N in enumerate(np.geomspace(2e7, 6e8, 4) * (C / 1e18) ** 0.5):
            D = C / (6 * N)
            key = f"run-{C:.0e}-{i}"
            records.append({"key": key, "N": float(N), "N_total": float(N) * 1.1, "n_layer": 2, "d_model": 64,
                            "n_head": 4, "vocab_size": 256, "context": 64, "D": float(D), "C": float(C), "seed": 0,
                            "spec": {"params_convention": "non_embedding", "flops_convention": "6N"}})
            loss = LAW["E"] + LAW["A"] / N ** LAW["alpha"] + LAW["B"] / D ** LAW["beta"]
            rows.append((key, N, D, loss, 0.25 + 0.5 / loss))
    with Store(url) as store:
        store.register("stored", records)
        for n, (key, N, D, loss, acc) in enumerate(rows):
            last = n == len(rows) - 1
            store.claim(key, "test-host")
            metrics = [(1, float(D), 6.0 * N * D, names.EVAL_LOSS, float(loss))]
            if tasks:
                metrics += [(1, float(D), 6.0 * N * D, names.task_metric("sim", "acc"), accuracy if last else float(acc)),
                            (1, float(D), 6.0 * N * D, names.task_metric("sim", "bpb"), float(loss) / 2)]
            store.log_metrics(key, metrics)
            final = final_loss if last and final_loss is not None else float(loss)
            store.finish(key, "completed", final_eval_loss=final, final_train_loss=float(loss))
    return [r[0] for r in rows]


ACCURACY = "task/sim/acc = 1.5 in the database: an accuracy must lie in [0, 1]"
LOSS = "final loss -3.0 in the database: a loss must be positive and finite"


@pytest.mark.parametrize("command", ["fit", "recommend"])
def test_an_impossible_stored_loss_is_one_line_naming_the_run(command: str, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    keys = _sweep(url, final_loss=-3.0)
    out = run_main(command, "--db", url, "--bootstrap", "0" if command == "fit" else "2")
    assert out.code == 2 and out.err.count("\n") == 1 and "Traceback" not in out.err, out.out + out.err
    assert f"sweep 'stored': run {keys[-1]}: {LOSS}" in out.err, out.err


@pytest.mark.parametrize("accuracy", [1.5, -0.2, float("inf")])
def test_an_impossible_stored_accuracy_is_refused_as_a_csv_cell_is(accuracy: float, tmp_path: Path) -> None:
    from scaling.errors import FitError
    from scaling.fitting.tasks.task_data import from_db

    url = f"sqlite:///{tmp_path / 'r.db'}"
    keys = _sweep(url, accuracy=accuracy)
    with pytest.raises(FitError) as info:
        from_db(url, "stored")
    assert f"sweep 'stored': run {keys[-1]} at " in str(info.value) and f"task/sim/acc = {accuracy!r}" in str(info.value)


def test_an_impossible_stored_accuracy_leaves_the_tasks_unfitted_saying_which_run(tmp_path: Path) -> None:
    """The loss laws do not read task metrics: they are fitted; the tasks are not, in one note line,
    and the recommendation shows no accuracy."""
    url = f"sqlite:///{tmp_path / 'r.db'}"
    keys = _sweep(url, accuracy=1.5)
    out = run_main("fit", "--db", url, "--bootstrap", "0", "--law", "kaplan")
    assert out.code == 0, out.err
    notes = [line for line in out.out.splitlines() if "downstream tasks: not fitted" in line]
    assert len(notes) == 1 and f"run {keys[-1]} at " in notes[0] and "task/sim/acc = 1.5" in notes[0], out.out
    advice = run_main("recommend", "--db", url, "--bootstrap", "2")
    assert advice.code == 0 and "accuracy" not in advice.out, advice.out


@pytest.mark.parametrize("bad, words", [({"accuracy": 1.5}, ACCURACY), ({"final_loss": -3.0}, LOSS.replace(
    "final loss", "final_loss"))])
def test_a_report_draws_no_impossible_stored_value_and_says_which_run(bad: dict, words: str, tmp_path: Path) -> None:
    from scaling.reports.report_data import ReportData

    url = f"sqlite:///{tmp_path / 'r.db'}"
    keys = _sweep(url, **bad, tasks="accuracy" in bad)  # no task section to fit where the loss is the subject
    from scaling.reports import write_report

    # the report as `scaling report` writes it: the analysis reads the stored values through the one reading rule
    page = write_report(url, "stored", tmp_path / "report.html", fit="memory").read_text()
    assert f"run {keys[-1]}" in page and words in page
    data = ReportData.load(url, "stored", fit="stored")
    assert not (data.runs["final_loss"].astype(float) <= 0).any()


def test_scaling_runs_leaves_an_impossible_loss_blank_and_names_the_run(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    keys = _sweep(url, final_loss=-3.0)
    for fmt in ("table", "csv", "json"):
        out = run_main("runs", "--db", url, "--format", fmt)
        assert out.code == 0, out.err
        assert "-3.0" not in out.out, out.out
        assert out.err.count("\n") == 1 and f"run {keys[-1]}: final_loss -3.0 in the database" in out.err, out.err
