"""Small plans and database checks shared by the orchestrator's tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scaling import vocab as names


def write_plan(path: Path, name: str, runs_dir: Path, grid: list[dict[str, Any]], **extra: Any) -> Path:
    """A tiny CPU plan: context 32, batches of 512 tokens, a checkpoint every few steps."""
    plan: dict[str, Any] = {
        "name": name,
        "runs_dir": str(runs_dir),
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 32},
        "train": {
            "precision": "fp32",
            "batch_tokens": 512,
            "eval_interval": 1000,
            "eval_tokens": 2048,
            "checkpoint_interval": 4,
            "optimizer": {"lr": 3e-3},
        },
        "resources": {"num_cpus": 2},
        "retries": 1,
        "evals": {"next_line": False},  # tasks are not these tests' subject (tests/trainer/test_evals.py)
        "grid": grid,
    }
    plan.update(extra)
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


def shape(n_layer: int, d_model: int) -> dict[str, int]:
    return {"n_layer": n_layer, "d_model": d_model, "n_head": d_model // 16}


def assert_consistent(url: str, sweep: str) -> Any:
    """Every run completed; each step's train loss logged exactly once, steps 1..n without gaps."""
    from scaling.db import connect

    res = connect(url)
    runs = res.runs(sweep=sweep)
    assert set(runs["status"]) == {"completed"}, runs[["run_key", "status", "error"]]
    m = res.metrics(run_keys=list(runs["run_key"]), names=[names.TRAIN_LOSS], sweep=sweep)
    for key, group in m.groupby("run_key"):
        steps = sorted(group["step"])
        assert len(steps) == len(set(steps)), f"duplicate metric rows for {key}"
        assert steps == list(range(steps[0], steps[0] + len(steps))), f"gaps in {key}'s steps"
    return runs
