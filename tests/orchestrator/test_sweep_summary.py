"""What `scaling sweep` prints at its end: the recommendation first, each law left out in one line, where
the full tables are; no fit tables. The example plan's grid, simulated (training is not the subject)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from cli_run import run_main
from scaling.fmt import size

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]  # joins the session's Ray
REPO = Path(__file__).resolve().parents[2]
#: A law whose optima sit inside the example grid's budgets (as the byte-level models' do).
LAW = {"E": 1.5, "A": 40.0, "B": 200.0, "alpha": 0.35, "beta": 0.35}
#: The built-in task as the trainer scores it, simulated: its own loss law, accuracy a sigmoid of it.
TASK = {"name": "next_line", "E": 1.2, "A": 40.0, "B": 200.0, "alpha": 0.35, "beta": 0.35, "slope": 3.0,
        "midpoint": 2.5, "items": 1000}


def test_sweep_ends_with_the_answer(tmp_path: Path) -> None:
    from scaling.fitting import fit_sweep, recommend
    from scaling.fitting.sweep_fit import SHORT

    plan = yaml.safe_load((REPO / "examples" / "plan.yaml").read_text())
    plan.update(runs_dir=str(tmp_path / "runs"), simulate={"law": LAW, "noise": 0.01, "seed": 0, "tasks": [TASK]},
                resources={"workers": 1, "cpus_per_worker": 1, "num_cpus": 2})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    url = f"sqlite:///{tmp_path / 'sweep.db'}"
    res = run_main("sweep", str(path), "--db", url)
    assert res.code == 0, res.out[-3000:] + res.err[-3000:]
    lines = res.out.splitlines()
    end = lines[next(i for i, line in enumerate(lines) if line.startswith("sweep example: 12 trained")) + 1:]

    rec = recommend(fit_sweep(url, "example"))
    assert rec.chosen is not None and rec.chosen not in rec.unreliable and rec.unreliable  # as the example: a law flagged
    best = rec.per_law[rec.chosen]
    assert end[0].startswith("recommended next run at C = ") and SHORT[rec.chosen] in end[0]
    assert end[1].startswith(f"  N* = {size(best['N'].value)} [{size(best['N'].lo)}, {size(best['N'].hi)}]")
    left = [line for line in end if line.startswith("left out: ")]
    assert [line.split(": ")[1] for line in left] == [SHORT[k] for k in rec.unreliable]
    assert all(": unreliable: " in line and "[" not in line.split(": unreliable: ")[0] for line in left)
    first_left = end.index(left[0])
    assert all(line.startswith("  ") for line in end[1:first_left])  # a few lines, then the left-out ones
    assert first_left <= 8
    # one schedule line: the example trains one schedule, so it has no curve law and says so
    assert [line for line in end[1:first_left] if line.startswith("  schedule: ")] == [
        "  schedule: no advice: no curve law: no model size was trained under two schedules of one recipe (peak rate, "
        "batch), and a single schedule cannot separate the annealing term"]
    # the built-in task every run is scored on: its accuracy predicted at the recommended run
    assert any(line.startswith("  next_line accuracy ") and "by the sigmoid chain" in line for line in end[1:first_left])
    # the example sweeps no hyperparameters: the run line says where its lr and batch come from, and why
    run = next(line for line in end[1:first_left] if line.startswith("  as a run: "))
    assert "(shape from the plan's rules)" in run and "(both from the plan's rules: the sweep has no hyperparameter groups" in run
    tail = end[first_left + len(left):]
    assert tail[0].startswith("every law's parameters, intervals and notes: scaling fit --db ")
    assert tail[1].startswith("every law at this budget, and the runs worth adding: scaling recommend --db ")
    assert tail[2].startswith("report: ") and Path(tail[2].removeprefix("report: ")).is_file()
    assert len(tail) == 3
    assert not any("┃" in line or "│" in line for line in end)  # no fit table
