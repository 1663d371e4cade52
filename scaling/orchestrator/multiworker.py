"""One multi-worker run as a Ray Train ``TorchTrainer`` (Ray Train v2, the default in Ray 2.60).

The scheduler calls :func:`run_multiworker` (inside a zero-CPU Ray task) after it has set the
run's CPUs/GPUs aside in its ledger: Ray Train v2 waits and retries when a worker group cannot
be placed, so the resources must be free before the trainer starts.

Resuming is by name: ``RunConfig(name=<run key>, storage_path=...)`` is the same on every
attempt, so Ray Train finds the run's earlier checkpoints (and its checkpoint manager's
snapshot) whether the worker group was restarted by ``FailureConfig`` or the orchestrator
itself was restarted. The trainer's own checkpoints live in the run directory either way.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Optional

from scaling.errors import ResourceError, SpecError
from scaling.trainer.resolve import OFFLINE, device_kind
from scaling.trainer.spec import RunSpec

#: Ray Train's health check polls every 2 s by default, so each ``report`` would block about
#: 2 s on this kind of machine; it must be set before Ray (and its controller) starts.
HEALTH_CHECK_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
#: Worker-group starts a run pinned to nodes (tp/pp) may fail before it gives up: each waits
#: Ray Train's start timeout (60 s by default) for nodes that may be gone.
PINNED_START_FAILURES = 2


def ray_storage(run_dir: Path, key: str) -> tuple[str, str]:
    """(storage_path, name) for ``RunConfig``: Ray Train's folder is the run directory itself
    when it is named by the key (``<runs_dir>/<sweep>/<key>``), else ``<run_dir>/ray/<key>``."""
    if run_dir.name == key:
        return str(run_dir.parent), key
    return str(run_dir / "ray"), key


def scaling_config(spec: RunSpec, rank_nodes: Optional[list[str]] = None) -> Any:
    """Workers and per-worker CPUs/GPUs from ``spec.execution``; with ``rank_nodes`` (one node id
    per rank, `orchestrator.placement`) worker *i* is pinned to ``rank_nodes[i]``, so the ranks of a
    tensor-parallel group share a node and Ray Train's rank order is the device mesh's."""
    from ray.train import ScalingConfig

    from scaling.orchestrator.placement import label_selectors

    e = spec.execution
    if e.workers < 2:
        raise SpecError(f"execution.workers: run {spec.key} has {e.workers} worker; multi-worker runs need 2 or more")
    problem = e.ray_gpu_problem()
    if problem:
        raise SpecError(problem)
    use_gpu = e.gpus_per_worker > 0  # exactly 1 per worker (the spec refuses other counts)
    resources: dict[str, float] = {"CPU": e.cpus_per_worker}
    if use_gpu:
        resources["GPU"] = e.gpus_per_worker
    if rank_nodes is None:
        return ScalingConfig(num_workers=e.workers, use_gpu=use_gpu, resources_per_worker=resources)
    if len(rank_nodes) != e.workers:
        raise ValueError(f"{len(rank_nodes)} rank nodes for {e.workers} workers")
    return ScalingConfig(num_workers=e.workers, use_gpu=use_gpu, resources_per_worker=resources,
                         label_selector=label_selectors(rank_nodes))


def run_multiworker(
    spec: RunSpec,
    store_url: Optional[str],
    run_dir: str | Path,
    *,
    max_failures: int,
    attempt: int,
    sweep: Optional[str] = None,
    rank_nodes: Optional[list[str]] = None,
) -> dict[str, Any]:
    """Train ``spec`` on ``spec.execution.workers`` Ray Train workers; block until it ends.

    Parameters
    ----------
    max_failures: worker-group restarts Ray Train may make (each resumes from the last
        checkpoint and writes a ``retry`` event).
    attempt: the database's attempt number (from ``Store.claim``).
    sweep: the sweep the run was claimed in, when its key is registered in several.
    rank_nodes: the node of each rank (a tensor- or pipeline-parallel run, from the scheduler's
        per-node reservation). Ray Train's restarts keep them; when a pinned node is gone the
        worker group cannot start, and after :data:`PINNED_START_FAILURES` such tries the run
        fails here, so that the scheduler's next attempt reserves nodes afresh.

    Returns the trainer's result as a dict (``TrainResult`` fields, plus ``ray_restarts`` and
    ``ray_path``, the folder Ray Train keeps for the run).

    Raises
    ------
    ray.train.TrainingFailedError: the run still failed after ``max_failures`` restarts.
    """
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    from scaling.trainer.distributed import RESULT_KEY, failure_recorder, train_func
    from scaling.trainer.parallel.data_parallel import default_backend

    os.environ.setdefault(HEALTH_CHECK_ENV, "0.1")  # effective for a Ray started after this
    if not ray.is_initialized():
        raise ResourceError("run_multiworker needs a running Ray (ray.init) with the run's resources set aside")
    run_dir = Path(run_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    scaling = scaling_config(spec, rank_nodes)
    storage_path, name = ray_storage(run_dir, spec.key)
    trainer = TorchTrainer(
        train_func,
        train_loop_config={
            "spec": spec.model_dump_json(),
            "store_url": store_url,
            "run_dir": str(run_dir),
            "attempt": attempt,
            "sweep": sweep,
            "launch_id": uuid.uuid4().hex,
            "max_failures": max_failures,
        },
        torch_config=TorchConfig(backend=default_backend(device_kind(spec.execution, OFFLINE),
                                                         spec.execution.cpu_offload)),
        scaling_config=scaling,
        run_config=RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=FailureConfig(
                max_failures=max_failures,
                # Ray retries a worker group that cannot start without limit by default.
                **({"controller_failure_limit": PINNED_START_FAILURES} if rank_nodes is not None else {}),
            ),
            # Ray keeps pointers only (see trainer.distributed); the trainer prunes its own.
            checkpoint_config=CheckpointConfig(num_to_keep=spec.execution.keep_checkpoints),
            callbacks=[failure_recorder(run_dir)],
        ),
    )
    result = trainer.fit()
    out = json.loads(result.metrics[RESULT_KEY])
    out["ray_path"] = result.path
    return out
