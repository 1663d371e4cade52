"""Train one run: model, data, loop. ``train(spec, store_url, run_dir)`` is the entry point.

Importing this package is light (no torch): ``spec`` (RunSpec) is used by torch-free parts
(the orchestrator's planning, ``scaling plan``), and ``train`` imports the loop lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from scaling.trainer.result import TrainResult

if TYPE_CHECKING:
    from scaling.trainer.spec import RunSpec


def train(
    spec: "RunSpec | dict[str, Any]",
    store_url: Optional[str],
    run_dir: str | Path,
    *,
    attempt: Optional[int] = None,
    report: Optional[Callable[[int, dict[str, Any], Optional[str]], None]] = None,
    sweep: Optional[str] = None,
) -> TrainResult:
    """Train ``spec`` into ``run_dir``, writing metrics and events to ``store_url`` (rank 0).

    It resumes from the latest checkpoint in ``run_dir`` if there is one. It does not claim or
    finish the run in the database (the caller does: the orchestrator, or ``scaling train``).

    Parameters
    ----------
    spec: the run (a RunSpec, or its dict form).
    store_url: database URL, or None to train without recording (benchmarks).
    run_dir: where checkpoints go; the same folder on every attempt.
    attempt: the database's attempt number (1 on the first), for attempt-aware injected faults.
    report: called as ``report(step, metrics, checkpoint_dir)`` at every evaluation and
        checkpoint, on every rank (the Ray Train adapter calls ``ray.train.report`` there).
    sweep: the sweep the run was claimed in, when its key is registered in several.

    Raises
    ------
    TrainingError: the run kept spiking past ``spike.max_rollbacks``.
    SpecError: ``spec`` is a request with decisions left (resolve it: ``scaling.trainer.resolve``),
        or the data does not match it (fingerprint, vocabulary, size).
    DatabaseError: ``run_dir`` holds checkpoints recorded into another database.
    """
    from scaling.trainer.spec import RunSpec

    if not isinstance(spec, RunSpec):
        spec = RunSpec.from_dict(spec)
    from scaling.trainer.resolve import unresolved_problem

    problem = unresolved_problem(spec)
    if problem:
        from scaling.errors import SpecError

        raise SpecError(problem)
    if spec.simulate is not None:  # losses from a known law: no torch, no model
        from scaling.trainer.simulate import simulate

        return simulate(spec, store_url, run_dir, attempt=attempt, sweep=sweep)
    if store_url is not None:  # a folder resumed into another database would leave its runs without curves
        from scaling.errors import DatabaseError
        from scaling.trainer.checkpoints.rundir import owner_problem, record_owner

        problem = owner_problem(run_dir, store_url)
        if problem:
            raise DatabaseError(problem)
        record_owner(run_dir, store_url)
    from scaling.trainer.loop import Trainer

    return Trainer(spec, store_url, run_dir, attempt=attempt, report=report, sweep=sweep).fit()


__all__ = ["TrainResult", "train"]
