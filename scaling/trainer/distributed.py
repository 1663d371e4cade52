"""The thin Ray Train adapter: what each worker of a multi-worker run executes.

``train_func(config)`` is the run's ``train_loop_per_worker``: it reports to Ray Train on every
rank, counts restarts as ``retry`` events and attempts, and returns the result. Only this module
and the orchestrator's ``multiworker`` import Ray Train. Details: docs/reference/modules.md.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

from scaling import vocab as names
from scaling.trainer.checkpoints import checkpoint

#: The pointer file inside each checkpoint reported to Ray Train.
POINTER_FILE = "scaling_checkpoint.json"
#: Per-run record of the worker group's starts, ``{launch_id: starts}`` (rank 0 writes it).
STARTS_FILE = "ray_train_starts.json"
#: Errors the controller saw (one JSON line each), for the retry event's detail.
FAILURES_FILE = "ray_train_failures.jsonl"
#: The metric key of the final report that carries the trainer's result.
RESULT_KEY = "scaling_result"


def _count_start(run_dir: Path, launch_id: str) -> tuple[int, int]:
    """(starts of this launch, starts of the run over all launches), this one included."""
    path = run_dir / STARTS_FILE
    starts: dict[str, int] = json.loads(path.read_text()) if path.is_file() else {}
    starts[launch_id] = starts.get(launch_id, 0) + 1
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(starts))
    os.replace(tmp, path)
    return starts[launch_id], sum(starts.values())


def _last_failure(run_dir: Path) -> Optional[str]:
    path = run_dir / FAILURES_FILE
    if not path.is_file():
        return None
    lines = [ln for ln in path.read_text().splitlines() if ln.strip()]
    return json.loads(lines[-1]).get("error") if lines else None


def _pointer_step(ray_checkpoint: Any) -> Optional[int]:
    """The trainer step named by a pointer checkpoint reported earlier (None if there is none)."""
    if ray_checkpoint is None:
        return None
    with ray_checkpoint.as_directory() as d:
        path = Path(d) / POINTER_FILE
        return int(json.loads(path.read_text())["step"]) if path.is_file() else None


def _latest_step(run_dir: Path) -> int:
    latest = checkpoint.latest(run_dir)
    return int(latest.name[len(checkpoint.PREFIX) :]) if latest is not None else 0


def train_func(config: dict[str, Any]) -> None:
    """Train one run on this worker (every worker of the group runs it).

    ``config``: ``spec`` (the RunSpec as JSON), ``store_url``, ``run_dir`` (shared by all
    workers), ``attempt`` (the database's), ``sweep``, ``launch_id`` (one per
    ``run_multiworker`` call) and ``max_failures``.
    """
    import ray.train
    import ray.train.torch
    import torch.distributed as dist

    from scaling.errors import TrainingError
    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    spec = RunSpec.model_validate_json(config["spec"])
    run_dir = Path(config["run_dir"])
    rank = ray.train.get_context().get_world_rank()
    device = ray.train.torch.get_device()  # the GPU Ray Train assigned this worker (CPU without one)
    if device.type == "cuda":
        from scaling.trainer.runtime import DEVICE_ENV

        os.environ[DEVICE_ENV] = str(device.index)

    # Rank 0 counts this group start; every rank learns the count (same attempt everywhere).
    info: dict[str, Any] = {}
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        in_launch, overall = _count_start(run_dir, config["launch_id"])
        info = {"in_launch": in_launch, "overall": overall}
    box = [info]
    dist.broadcast_object_list(box, src=0)
    info = box[0]
    attempt = max(int(config["attempt"]), info["overall"])

    resume_step = _latest_step(run_dir)
    pointer = _pointer_step(ray.train.get_checkpoint())
    if pointer is not None and pointer > resume_step:
        raise TrainingError(
            f"Ray Train reported checkpoint step {pointer} but {run_dir} holds only step {resume_step}: "
            "the run directory must be shared storage visible to every worker"
        )
    if rank == 0 and info["in_launch"] > 1 and config.get("store_url"):
        from scaling.db import Store

        with Store(config["store_url"]) as store:
            store.log_event(
                spec.key,
                resume_step,
                names.RETRY,
                {
                    "message": f"Ray Train restarted the worker group ({info['in_launch'] - 1} of "
                    f"max_failures={config['max_failures']}); resuming from step {resume_step}",
                    "error": _last_failure(run_dir),
                    "ray_checkpoint_step": pointer,
                    "attempt": attempt,
                },
                sweep=config.get("sweep"),
            )

    def report(step: int, metrics: dict[str, Any], checkpoint_dir: Optional[str]) -> None:
        if checkpoint_dir is None or rank != 0:
            ray.train.report(metrics)
            return
        with tempfile.TemporaryDirectory() as d:
            Path(d, POINTER_FILE).write_text(json.dumps({"step": step, "path": checkpoint_dir}))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))

    result = train(spec, config.get("store_url"), run_dir, attempt=attempt, report=report, sweep=config.get("sweep"))
    final = dataclasses.asdict(result)
    final["ray_restarts"] = info["in_launch"] - 1
    # Ray Train's Result carries the metrics of the latest *checkpointed* report, so the result
    # travels with a pointer to the final checkpoint.
    latest = checkpoint.latest(run_dir)
    report(result.steps, {"step": result.steps, RESULT_KEY: json.dumps(final, default=str)}, str(latest) if latest else None)


def failure_recorder(run_dir: str | Path) -> Any:
    """A Ray Train callback (it runs in the controller) that appends each worker error to
    ``FAILURES_FILE``, so the next group's ``retry`` event can say what failed."""
    from ray.train import UserCallback

    class RecordFailures(UserCallback):
        def __init__(self, path: str) -> None:
            self.path = path

        def after_exception(self, run_context: Any, worker_exceptions: dict[int, Exception]) -> None:
            error = "; ".join(f"rank {r}: {' '.join(str(e).split())[:300]}" for r, e in sorted(worker_exceptions.items()))
            with open(self.path, "a") as fh:
                fh.write(json.dumps({"error": error}) + "\n")

    return RecordFailures(str(Path(run_dir) / FAILURES_FILE))
