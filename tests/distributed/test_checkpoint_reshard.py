"""A sharded checkpoint written by two workers resumes on one, and the reverse (DCP resharding).

Each run is cut by an injected fault at step 6 (after the checkpoint of step 4), resumed at
the other world size, and must then follow the uninterrupted single-process trajectory.
ZeRO-1 (optimizer state partitioned by parameter, model replicated) and ZeRO-3 (everything
sharded by FSDP2) are the two layouts DCP must merge and split.
"""

from __future__ import annotations

import pytest

from _workers import run_spec, spawn, train_until_fault, train_worker, trajectory, until_fault_each
from scaling.trainer import checkpoint

FP32_RTOL = 1e-5  # see test_trajectory.py
STRATEGIES = ("zero1", "zero3")


def _spec(strategy: str, workers: int) -> str:
    return run_spec(strategy, "fp32", workers=workers, faults={"raise_at_step": 6, "raise_attempts": 1},
                    execution={"checkpoint_interval": 4}).to_json()


def _run_all(workers: int, run_dirs: dict[str, str], tmp, attempt: int) -> dict[str, dict]:
    """Train every strategy's run at ``workers`` workers (``single`` on one), until the fault."""
    if workers == 1:
        return {s: train_until_fault(0, 1, _spec("single", 1), d, attempt) for s, d in run_dirs.items()}
    runs = [(_spec(s, workers), d) for s, d in run_dirs.items()]
    outs = spawn(until_fault_each, workers, str(tmp), runs, attempt)[0]
    return dict(zip(run_dirs, outs))


@pytest.mark.slow
@pytest.mark.parametrize("before,after", [(2, 1), (1, 2)])
def test_checkpoint_resumes_at_another_world_size(before: int, after: int, tmp_path) -> None:
    run_dirs = {s: str(tmp_path / s) for s in STRATEGIES}
    first = _run_all(before, run_dirs, tmp_path, attempt=1)
    for s in STRATEGIES:
        assert first[s]["fault"] is not None, s  # cut at step 6
        ckpt = checkpoint.latest(run_dirs[s])
        assert ckpt is not None and ckpt.name == "step_00000004", s
        assert len(list(ckpt.glob("*.distcp"))) == before, s  # each writing rank wrote its own file

    resumed = _run_all(after, run_dirs, tmp_path, attempt=2)
    ref = dict(trajectory(train_worker(0, 1, _spec("single", 1), str(tmp_path / "ref"), attempt=2)))
    for s in STRATEGIES:
        out = resumed[s]
        assert out["fault"] is None and out["result"]["resumed_from"] == 4, s
        assert out["result"]["steps"] == 10, s
        got = trajectory(out)
        assert [step for step, _ in got] == list(range(5, 11)), s
        assert [v for _, v in got] == pytest.approx([ref[step] for step, _ in got], rel=FP32_RTOL, abs=0), s
