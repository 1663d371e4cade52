"""What a Ray worker executes for one run (or for a pack of simulated runs). Kept apart from the
scheduler so workers import little.

Single-worker runs call `scaling.trainer.train` directly inside a Ray task: no Ray Train
worker group, no controller, so a small run pays only for the task (CPU workers are reused;
a GPU run gets a fresh process, see :class:`SingleRunTask`).
Multi-worker runs go through Ray Train (`orchestrator/multiworker.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Optional

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.trainer.result import TrainResult


@dataclass(frozen=True)
class RunOutcome:
    """What a task reports for one of its runs: the final losses of an attempt that ended, or the
    line of the error that stopped it; and when the task's own work started and ended (wall clock),
    so the driver can tell its scheduling overhead. A task that raises reports nothing: Ray's error
    stands for every run of the task."""

    key: str
    final_train_loss: Optional[float] = None
    final_eval_loss: Optional[float] = None
    error: Optional[str] = None
    task_started: Optional[float] = None
    task_ended: Optional[float] = None

    @classmethod
    def of(cls, result: TrainResult | dict[str, Any], started: float) -> "RunOutcome":
        """The outcome of a trainer's result (a ``TrainResult``, or Ray Train's dict of its fields)."""
        get = result.get if isinstance(result, dict) else lambda name: getattr(result, name)
        return cls(key=get("key"), final_train_loss=get("final_train_loss"), final_eval_loss=get("final_eval_loss"),
                   task_started=started, task_ended=time.time())


def train_single(spec_json: str, store_url: str, run_dir: str, attempt: int, sweep: str, cwd: str = "") -> RunOutcome:
    """Train one single-worker run in this process; returns its outcome.

    ``cwd`` is the driver's working directory: a plan's relative data path means the same file
    here (on a cluster the path must exist on every node).
    """
    import os

    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    started = time.time()
    spec = RunSpec.model_validate_json(spec_json)
    problem = spec.execution.ray_gpu_problem()
    if problem:
        from scaling.errors import SpecError

        raise SpecError(problem)
    return RunOutcome.of(train(spec, store_url, run_dir, attempt=attempt, sweep=sweep), started)


def simulate_batch(spec_jsons: list[str], attempts: list[int], store_url: str, sweep: str) -> list[RunOutcome]:
    """Simulate several runs in one task and one transaction; per run, its outcome: its result, or
    the line of the error that stopped it (see :func:`scaling.trainer.simulate.simulate_many`)."""
    from scaling.trainer.simulate import simulate_many
    from scaling.trainer.spec import RunSpec

    started = time.time()
    runs = [(RunSpec.model_validate_json(s), a) for s, a in zip(spec_jsons, attempts)]
    out = simulate_many(runs, store_url, sweep=sweep)
    return [RunOutcome(key=spec.key, error=o, task_started=started, task_ended=time.time()) if isinstance(o, str)
            else RunOutcome.of(o, started) for (spec, _), o in zip(runs, out)]


class SingleRunTask:
    """:func:`train_single` (or ``fn``) as a Ray task whose ``.options(num_gpus=...)`` picks the
    remote function: a task holding a GPU runs in a fresh worker process (``max_calls=1``).

    Ray sets ``max_calls=1`` only when ``num_gpus`` is given at decoration, not through
    ``.options``: a reused worker would keep its CUDA context and cached memory on a GPU Ray
    believes free, and the previous task's ``CUDA_VISIBLE_DEVICES``.
    """

    def __init__(self, fn: Optional[Callable[..., TrainResult]] = None) -> None:
        import ray

        fn = fn or train_single
        self._cpu = ray.remote(max_retries=0)(fn)
        self._gpu = ray.remote(max_retries=0, max_calls=1)(fn)

    def options(self, *, num_gpus: float = 0, **options: Any) -> Any:
        return (self._gpu if num_gpus else self._cpu).options(num_gpus=num_gpus, **options)


def train_multi(
    spec_json: str, store_url: str, run_dir: str, attempt: int, max_failures: int, sweep: str, cwd: str = "",
    rank_nodes: Optional[list[str]] = None,
) -> RunOutcome:
    """Run a multi-worker run through Ray Train (blocks until the TorchTrainer finishes).

    ``rank_nodes``: the node of each rank of a tensor- or pipeline-parallel run (see
    ``orchestrator/placement.py``); None lets Ray Train place the workers."""
    import os

    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)
    from scaling.orchestrator.multiworker import run_multiworker
    from scaling.trainer.spec import RunSpec

    started = time.time()
    spec = RunSpec.model_validate_json(spec_json)
    return RunOutcome.of(run_multiworker(spec, store_url, run_dir, max_failures=max_failures, attempt=attempt,
                                         sweep=sweep, rank_nodes=rank_nodes), started)

