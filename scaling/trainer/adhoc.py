"""One spec trained alone (``scaling train``), recorded in the database like any other run.

The spec is resolved (`scaling.trainer.resolve`: its key carries the corpus fingerprint and the
precision it trains in), then the run goes through the sweep scheduler's own lifecycle
(:class:`~scaling.db.lifecycle.Lifecycle`) in a sweep (``adhoc`` by default): registered,
claimed as ``host:pid``, trained, and completed, failed (re-raised) or interrupted (Ctrl-C). A
run already completed there is not retrained; one whose ``scaling train`` was killed is taken
over at once by the next one on that host.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

from scaling.errors import UserError
from scaling.trainer.result import TrainResult
from scaling.trainer.checkpoints.rundir import checked_folder
from scaling.trainer.spec import RunSpec

ADHOC_SWEEP = "adhoc"
DEFAULT_RUNS_DIR = "./scaling_runs"  # the orchestrator's default too


class AlreadyCompleted(Exception):
    """The run is completed in that sweep (not an error: the CLI says so and exits 0)."""


def check_memory(spec: RunSpec) -> float:
    """The estimated memory of ``spec`` trained alone here, in GiB; refused (ResourceError, one line)
    before anything is built when it exceeds this machine's device (the GPU's memory, or the host's
    RAM on CPU; the spec's ``device_memory_gib`` if set)."""
    from scaling.accounting import check_fits
    from scaling.batching import micro_batch_size
    from scaling.memory import estimate_memory
    from scaling.trainer.probe import device_memory_bytes
    from scaling.trainer.runtime import Runtime

    ex = spec.execution
    device = Runtime.current(ex.device).device
    micro = micro_batch_size(spec.sequences_per_batch, 1, ex.micro_batch_size)
    est = estimate_memory(spec.shape, micro, spec.precision, "single", 1, ex.activation_checkpointing,
                          device=device.type)
    where = "execution.device_memory_gib" if ex.device_memory_gib is not None else (
        "this GPU's memory" if device.type == "cuda" else "this machine's RAM")
    check_fits(est, device_memory_bytes(spec, device), what=f"model {spec.shape.n_layer}x{spec.shape.d_model}",
               limit_name=where, advice="use a smaller model, micro_batch_size or activation_checkpointing")
    return est.total_gib


def train_adhoc(
    spec: RunSpec,  # a RunRequest (a spec file's view) or an already resolved RunSpec
    db_url: Optional[str] = None,
    run_dir: Optional[str | Path] = None,
    *,
    sweep: str = ADHOC_SWEEP,
) -> TrainResult:
    """Register, claim, train and finish ``spec`` in ``sweep`` of the database at ``db_url``.

    ``run_dir`` defaults to ``./scaling_runs/<sweep>/<key>``; ``db_url`` to the usual resolution
    (``$SCALING_DB``, then ./scaling.db).
    """
    from scaling.db import Store
    from scaling.db.lifecycle import Lifecycle
    from scaling.trainer import train
    from scaling.errors import DatabaseError
    from scaling.trainer.resolve import local_host, resolve
    from scaling.trainer.checkpoints.rundir import owner_problem
    from scaling.trainer.evaluation.eval_tasks import check_tasks

    resolved = resolve(spec, local_host(spec))  # precision, data and layout before the key: it carries them
    spec, precision = resolved.spec, resolved.precision
    check_tasks(spec.evals, spec.data, spec.model.context)  # task files, before anything is written
    if precision.warning:
        print(f"warning: {precision.warning}", file=sys.stderr)
    key = spec.key
    folder = Path(run_dir) if run_dir is not None else Path(DEFAULT_RUNS_DIR) / sweep / key
    with checked_folder(folder):  # before the database: an unusable folder registers nothing,
        store = Store(db_url)      # and an unreachable database leaves no folder
        problem = owner_problem(folder, store.url)  # nor a folder another database's run left
        if problem:
            store.close()
            raise DatabaseError(problem)
    runs = Lifecycle(store, sweep)
    try:
        runs.register([spec.record()], params_convention=spec.params_convention,
                      flops_convention=spec.flops_convention)
        claim = runs.claim(key)
        if claim.completed:
            raise AlreadyCompleted(f"run {key} in sweep {sweep!r} is already completed (final eval loss {claim.final_loss})")
        if claim.attempt is None:
            raise UserError(f"run {key} in sweep {sweep!r} is {claim.status} on host {claim.holder} with a live "
                            "heartbeat; wait for it or use another --sweep")
        try:
            result = train(spec, store.url, folder, attempt=claim.attempt, sweep=sweep)
        except KeyboardInterrupt:
            runs.interrupt(key, "interrupted (Ctrl-C)", attempt=claim.attempt)
            raise
        except Exception as exc:
            runs.fail(key, f"{type(exc).__name__}: {exc}", attempt=claim.attempt)
            raise
        runs.complete(key, final_train_loss=result.final_train_loss, final_eval_loss=result.final_eval_loss)
        return result
    finally:
        runs.close()
        store.close()
