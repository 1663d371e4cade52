"""The prepared GPU check without a GPU: its dry run (the steps and the wheels that travel with the
checkout), ``scaling train`` where Ray and plotly cannot be imported (the lent machine's image has
neither), and the rehearsal of every step on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEP_NAMES = ["bf16 llama GQA qk_norm d32 x 2", "llama peak memory vs memory_per_rank", "fused AdamW",
              "zero3, 4 micro-batches, peak memory vs memory_per_rank", "two ranks on one device over gloo, tp2",
              "stop and resume vs uninterrupted", "compile on vs off", "fp16 loss scaling", "CUDA tests"]
VERDICTS = ["PASS", "SKIP", "PASS", "SKIP", "PASS", "PASS", "SKIP", "PASS", "SKIP"]
WHEELS = ["pydantic-2.0-py3-none-any.whl", "pydantic_core-2.0-cp312-cp312-manylinux2014_x86_64.whl",
          "annotated_types-0.7-py3-none-any.whl", "typing_inspection-0.4-py3-none-any.whl",
          "typing_extensions-4.12-py3-none-any.whl", "sqlalchemy-2.0-cp312-cp312-manylinux2014_x86_64.whl",
          "alembic-1.13-py3-none-any.whl", "mako-1.3-py3-none-any.whl", "markupsafe-3.0-cp312-cp312-manylinux2014_x86_64.whl"]


def _blocking(tmp_path: Path) -> dict[str, str]:
    """An environment whose Python cannot import ray or plotly (a finder first on sys.meta_path)."""
    site = tmp_path / "block"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class Blocker:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('ray', 'plotly'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r} (blocked)', name=name)\n"
        "sys.meta_path.insert(0, Blocker())\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]), "PYTHON": sys.executable}


def _dry_run(wheels: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "SCALING_GPU_WHEELS": str(wheels), "PYTHON": sys.executable}, timeout=60)


def test_the_dry_run_lists_the_steps_and_checks_the_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    proc = _dry_run(wheels)
    lines = proc.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:7]] == [f"step {i}" for i in range(1, 8)], lines
    keys = [line.split("[", 1)[1].split(",")[0] for line in lines[:7]]
    assert keys == ["llama", "accumulation", "tp2", "resume", "compile", "fp16", "cuda-tests"], lines  # by value
    budgets = [float(line.split(", ", 1)[1].split(" s]")[0]) for line in lines[:7]]
    assert lines[7] == f"PASS budgets: {sum(budgets):.0f} s in all, deadline 480 s" and sum(budgets) <= 480
    assert proc.returncode == 1 and lines[-1].startswith("FAIL wheels: wheels missing") and "gpu-wheels.sh" in lines[-1]
    for name in WHEELS:
        (wheels / name).write_bytes(b"x" * 1000)
    proc = _dry_run(wheels)
    assert proc.returncode == 0 and proc.stdout.strip().splitlines()[-1].startswith("PASS wheels: 9"), proc.stdout
    with open(wheels / WHEELS[0], "wb") as fh:  # sparse: 41 MiB on paper, nothing on disk
        fh.truncate(41 * 2**20)
    proc = _dry_run(wheels)
    assert proc.returncode == 1 and "over 40 MiB" in proc.stdout.strip().splitlines()[-1], proc.stdout


def test_scaling_train_runs_without_ray_or_plotly(tmp_path: Path) -> None:
    """The trainer and ``scaling train`` import neither (the GPU machine's image lacks both)."""
    spec = {"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32}, "precision": "fp32",
            "tokens": 32 * 8 * 3, "batch_tokens": 32 * 8, "eval_tokens": 32 * 4, "evals": {"next_line": False},
            "execution": {"device": "cpu", "threads": 1, "eval_interval": 3, "checkpoint_interval": 3}}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = _blocking(tmp_path)
    blocked = subprocess.run([sys.executable, "-c", "import ray"], env=env, capture_output=True, text=True)
    assert blocked.returncode != 0 and "(blocked)" in blocked.stderr  # the finder works
    proc = subprocess.run([sys.executable, "-c", "from scaling.cli import main; main()", "train",
                           str(tmp_path / "spec.json"), "--db", f"sqlite:///{tmp_path / 'runs.db'}",
                           "--run-dir", str(tmp_path / "run")], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "completed, 3 steps" in proc.stdout


@pytest.mark.slow
def test_the_gpu_check_rehearses_its_steps_on_the_cpu_without_ray_or_plotly(tmp_path: Path) -> None:
    summary = tmp_path / "summary.json"
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", "--cpu", "--summary", str(summary)], cwd=ROOT,
                          capture_output=True, text=True, env=_blocking(tmp_path), timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert first.startswith("image: torch ") and ", pandas " in first and ", typer " in first, first
    lines = [line for line in proc.stdout.strip().splitlines() if line.split(" ", 1)[0] in ("PASS", "SKIP", "FAIL")]
    assert [line.split(":", 1)[0].split(" ", 1)[1].strip() for line in lines] == STEP_NAMES, lines
    assert [line.split()[0] for line in lines] == VERDICTS, lines
    recorded = json.loads(summary.read_text())
    assert recorded["device"] == "cpu" and recorded["finished"] and [s["step"] for s in recorded["steps"]] == STEP_NAMES
    assert set(recorded["versions"]) == {"torch", "pandas", "typer"}


def test_a_step_over_its_budget_is_killed_and_the_summary_keeps_the_steps_before(tmp_path: Path) -> None:
    """The fp16 step given one second (it needs several: a process, torch, a run) is killed with
    the run it started; the summary, rewritten after each step, holds the step before it (compile,
    which the rehearsal skips) and the kill."""
    summary = tmp_path / "out" / "gpu-check.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHON": sys.executable, "OUT": str(tmp_path / "out")}
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", "--cpu", "--steps", "compile,fp16", "--budget", "fp16=1"],
                          cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    recorded = json.loads(summary.read_text())  # $OUT/gpu-check.json without --summary
    assert [(s["key"], s["verdict"]) for s in recorded["steps"]] == [("compile", "SKIP"), ("fp16", "FAIL")]
    assert recorded["steps"][1]["detail"] == "killed after 1 s, its time budget" and recorded["finished"]
    assert recorded["steps"][1]["seconds"] < 30  # not waiting for the run to end by itself
