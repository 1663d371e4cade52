"""A multi-worker run through Ray Train survives a real SIGKILL of one worker.

Gloo workers (``TorchTrainer``, Ray Train v2) as one tensor-parallel pair under ZeRO-3.
``faults.kill_at_step`` SIGKILLs rank 1's process when step 5 starts (first attempt only); Ray
Train sees the worker die, restarts the
group (``FailureConfig``), the new group resumes from the step-4 checkpoint, and the run
completes. The database must then hold every step's metrics exactly once, a ``retry`` event,
and a loss trajectory equal to an uninterrupted single-process run's.
"""

from __future__ import annotations

import os
import tempfile

import pytest

from scaling.db import Store, connect
from scaling import vocab as names

from _workers import run_spec, train_worker, trajectory

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture
def local_ray(no_shared_ray):
    ray = pytest.importorskip("ray")
    os.environ["RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"] = "0.1"  # before ray.init, or reports block ~2 s
    os.environ.setdefault("SCALING_PEAK_FLOPS", "1e11")  # workers inherit it: no matmul probe
    ray.init(address="local", num_cpus=2, object_store_memory=150 * 2**20, include_dashboard=False,
             log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


#: (workers, execution) per layout: rank 1, the one killed, is rank 0's tensor peer: the half of every
#: block's weights it held is lost with it, and Ray Train's restart must bring the whole group back from
#: the checkpoint. The restart path is the same for every layout; which layouts' checkpoints reshard is
#: the checkpoint tests' subject (test_checkpoint_reshard.py, and tp2 x dp2 in test_tensor_parallel.py),
#: which keeps a four-process restart out of the suite's time.
LAYOUTS = {"tp2": (2, {"tp": 2, "cpus_per_worker": 1})}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_killed_worker_restores_from_checkpoint_and_completes(layout, local_ray, sqlite_url, tmp_path) -> None:
    from scaling.orchestrator.multiworker import run_multiworker

    workers, execution = LAYOUTS[layout]
    spec = run_spec(
        "zero3", "fp32", workers=workers, faults={"kill_at_step": 5, "kill_attempts": 1},
        execution={"checkpoint_interval": 2, "eval_interval": 100, **execution},
    )
    with Store(sqlite_url) as store:
        store.register("s", [spec.record()])
        attempt = store.claim(spec.key, "test", sweep="s")
    assert attempt == 1
    run_dir = tmp_path / "runs" / "s" / spec.key

    out = run_multiworker(spec, sqlite_url, run_dir, max_failures=2, attempt=attempt)

    assert out["status"] == "completed" and out["steps"] == 10
    assert out["ray_restarts"] == 1 and out["resumed_from"] == 4
    results = connect(sqlite_url)
    losses = results.metrics(run_keys=[spec.key], names=[names.TRAIN_LOSS])
    assert sorted(losses["step"].tolist()) == list(range(1, 11))  # each step once, none missing
    events = results.events(run_keys=[spec.key])
    assert events["kind"].tolist().count(names.RETRY) == 1
    retry = events[events["kind"] == names.RETRY].iloc[0]
    assert retry["step"] == 4
    assert "rank 1" in retry["detail"]["error"]  # what the controller saw die, recorded for the event
    assert names.RESUME in events["kind"].tolist()
    assert (run_dir / "checkpoint_manager_snapshot.json").exists() or any(run_dir.glob("checkpoint_*"))

    # The restored run computes what an uninterrupted run computes (fp32: reduction order only).
    with tempfile.TemporaryDirectory() as ref_dir:
        ref = dict(trajectory(train_worker(0, 1, run_spec("single", "fp32", workers=1, faults=spec.faults.model_dump(),
                                                          execution={"checkpoint_interval": 2, "eval_interval": 1}).to_json(), ref_dir, attempt=2)))
    got = dict(zip(losses["step"], losses["value"]))
    assert [got[s] for s in range(1, 11)] == pytest.approx([ref[s] for s in range(1, 11)], rel=1e-5, abs=0)
