"""The example plans as the tests run them: `make demo`'s plan (examples/plan.yaml) with its training
simulated (training is not the subject where these are used), and the simulated hyperparameter example
(examples/sim-hparams.yaml) as it is, each trained in this process into a SQLite database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: A law whose optima sit inside the example grid's budgets (as the byte-level models' do).
LAW = {"E": 1.5, "A": 40.0, "B": 200.0, "alpha": 0.35, "beta": 0.35}
#: The built-in task every run of the example is scored on, simulated: its own loss law, and an accuracy
#: that climbs from near chance to near 1 over the grid and the next budget (its sigmoid is identified).
NEXT_LINE = {"name": "next_line", "E": 1.2, "A": 40.0, "B": 200.0, "alpha": 0.35, "beta": 0.35, "slope": 3.0,
             "midpoint": 4.5, "items": 1000}


def example_plan(name: str, runs_dir: Path) -> dict[str, Any]:
    """``examples/<name>.yaml`` with its runs under ``runs_dir``; the demo's plan (``plan``) simulated."""
    plan = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    plan["runs_dir"] = str(runs_dir)
    if "simulate" not in plan:
        plan["simulate"] = {"law": LAW, "noise": 0.01, "seed": 0, "tasks": [NEXT_LINE]}
    return plan


def train_example(name: str, folder: Path) -> tuple[str, str]:
    """(database URL, sweep name) of :func:`example_plan` trained in this process under ``folder``."""
    from in_process_sweep import train_plan

    plan = example_plan(name, folder / "runs")
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    url = f"sqlite:///{folder / (name + '.db')}"
    train_plan(path, url, folder)
    return url, plan["name"]
