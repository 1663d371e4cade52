"""examples/explore.ipynb runs as its docs say: `jupyter nbconvert --execute`, no SCALING_DB, from examples/.

A simulated sweep (three budgets of five sizes, trained in this process by the real simulated
trainer) is written where `make demo` writes its database, ``scaling_runs/example.db`` at the top
of a project folder, and the notebook is copied into that folder's ``examples/``. nbconvert then
executes it in a fresh kernel whose working folder is ``examples/`` (as JupyterLab's would be):
the notebook must find the database above it, show its figures, and write its report under
``scaling_runs/``, leaving nothing beside itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from in_process_sweep import train_plan

REPO = Path(__file__).resolve().parents[1]
PLAN = {
    "name": "sim-notebook",
    "simulate": {"law": {"E": 1.5, "A": 40.0, "B": 60.0, "alpha": 0.3, "beta": 0.3}, "noise": 0.002, "seed": 0},
    "model": {"vocab_size": 256, "context": 64},
    "train": {"batch_tokens": 256},
    "grid": [{"compute": [3e11, 1e12, 3e12], "models": [{"n_layer": 2, "d_model": d, "n_head": 2}
                                                       for d in (16, 24, 32, 48, 64)]}],
}


def test_the_notebook_executes_from_examples_and_writes_under_scaling_runs(tmp_path: Path) -> None:
    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.is_file():
        pytest.skip("jupyter (nbconvert) is not installed: pip install -e '.[dev]'")
    project = tmp_path / "project"
    runs = project / "scaling_runs"
    runs.mkdir(parents=True)
    (project / "pyproject.toml").write_text("")
    (project / "plan.yaml").write_text(yaml.safe_dump({**PLAN, "runs_dir": str(runs)}, sort_keys=False))
    train_plan(project / "plan.yaml", f"sqlite:///{runs / 'example.db'}", runs)
    examples = project / "examples"
    examples.mkdir()
    shutil.copy(REPO / "examples" / "explore.ipynb", examples / "explore.ipynb")
    env = {k: v for k, v in os.environ.items() if k != "SCALING_DB"}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]))
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--output-dir",
                           str(tmp_path / "executed"), "--ExecutePreprocessor.timeout=600",
                           "--ExecutePreprocessor.kernel_name=python3", str(examples / "explore.ipynb")],
                          capture_output=True, text=True, env=env, timeout=900, cwd=examples)
    assert done.returncode == 0, done.stderr[-3000:]
    nb = json.loads((tmp_path / "executed" / "explore.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    assert sum("application/vnd.plotly.v1+json" in o.get("data", {}) for o in outputs) >= 4
    printed = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream")
    assert "recommended by " in printed
    assert (runs / "explore-report.html").stat().st_size > 1_000_000
    assert sorted(p.name for p in examples.iterdir()) == ["explore.ipynb"]  # nothing written beside it
