"""A sharded checkpoint written by two workers resumes on one, and the reverse (DCP resharding).

The run is cut by an injected fault at step 6 (after the checkpoint of step 4), resumed at
the other world size, and must then follow the uninterrupted single-process trajectory.
"""

from __future__ import annotations

import pytest

from _workers import run_spec, spawn, train_until_fault, train_worker, trajectory
from scaling.trainer import checkpoint

FP32_RTOL = 1e-5  # see test_trajectory.py


def _spec(strategy: str, workers: int):
    return run_spec(strategy, "fp32", workers=workers, faults={"raise_at_step": 6, "raise_attempts": 1},
                    execution={"checkpoint_interval": 4})


def _run(strategy: str, workers: int, run_dir, tmp, attempt: int) -> dict:
    spec = _spec(strategy, workers).to_json()
    if workers == 1:
        return train_until_fault(0, 1, spec, str(run_dir), attempt)
    return spawn(train_until_fault, workers, str(tmp), spec, str(run_dir), attempt)[0]


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["zero1", "zero3"])
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_checkpoint_resumes_at_another_world_size(strategy: str, before: int, after: int, tmp_path) -> None:
    run_dir = tmp_path / "run"
    first = _run(strategy if before > 1 else "single", before, run_dir, tmp_path, attempt=1)
    assert first["fault"] is not None  # cut at step 6
    ckpt = checkpoint.latest(run_dir)
    assert ckpt is not None and ckpt.name == "step_00000004"
    assert len(list(ckpt.glob("*.distcp"))) == before  # each writing rank wrote its own shard file

    resumed = _run(strategy if after > 1 else "single", after, run_dir, tmp_path, attempt=2)
    assert resumed["fault"] is None and resumed["result"]["resumed_from"] == 4
    assert resumed["result"]["steps"] == 10

    reference = train_worker(0, 1, _spec("single", 1).to_json(), str(tmp_path / "ref"), attempt=2)
    ref = dict(trajectory(reference))
    got = trajectory(resumed)
    assert [s for s, _ in got] == list(range(5, 11))
    assert [v for _, v in got] == pytest.approx([ref[s] for s, _ in got], rel=FP32_RTOL, abs=0)
