"""The words every part of scaling shares: run statuses, metric names and event kinds.

One place spells each of them. The database stores them, the trainer and orchestrator write
them, fitting and reports read them. This module imports nothing, so any part may import it.
"""

from __future__ import annotations

# -- run statuses -----------------------------------------------------------------------------
# A run is claimable when pending, failed or interrupted (or running with a dead claimant); a
# completed run is never claimed again.
PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
INTERRUPTED = "interrupted"  # stopped before its last step; also the event that records it

STATUSES: tuple[str, ...] = (PENDING, RUNNING, COMPLETED, FAILED, INTERRUPTED)
CLAIMABLE: tuple[str, ...] = (PENDING, FAILED, INTERRUPTED)
FINAL: tuple[str, ...] = (COMPLETED, FAILED, INTERRUPTED)  # how an attempt can end

# -- metrics (one row per run, step and name) -------------------------------------------------
TRAIN_LOSS = "train/loss"
EVAL_LOSS = "eval/loss"
LEARNING_RATE = "train/lr"
GRAD_NORM = "train/grad_norm"
LOSS_SCALE = "train/loss_scale"  # fp16 only
TOKENS_PER_SECOND = "perf/tokens_per_s"
MFU = "perf/mfu"
EPOCH = "data/epoch"  # fractional passes over the training split

METRICS: tuple[str, ...] = (
    TRAIN_LOSS,
    EVAL_LOSS,
    LEARNING_RATE,
    GRAD_NORM,
    LOSS_SCALE,
    TOKENS_PER_SECOND,
    MFU,
    EPOCH,
)

# -- events -----------------------------------------------------------------------------------
LOSS_SPIKE = "loss_spike"
ROLLBACK = "rollback"
RETRY = "retry"
RESUME = "resume"
STALE_RECOVERED = "stale_recovered"  # a run taken over from a dead or silent claimant
OVERFLOW_SKIP = "overflow_skip"  # fp16: non-finite gradients, step skipped, scale lowered
FAILURE = "failure"
CHECKPOINT_CORRUPT = "checkpoint_corrupt"  # a checkpoint failed its manifest or load; set aside
DATA = "data"  # the corpus a run trained on: fingerprint, unique_tokens (U), sizes, device
BRANCH_START = "branch_start"  # a cooldown branch loaded its trunk's checkpoint at the branch point
TRUNK_RETRAIN = "trunk_retrain"  # a trunk passes a branch point again: the checkpoint was missing
SIMULATED = "simulated"  # a run whose losses came from a known law (scaling.trainer.simulate)
ADAPTIVE_DECISION = "adaptive_decision"  # an adaptive sweep's refit and what it added, or why it stopped

EVENTS: tuple[str, ...] = (
    LOSS_SPIKE,
    ROLLBACK,
    RETRY,
    RESUME,
    STALE_RECOVERED,
    OVERFLOW_SKIP,
    FAILURE,
    INTERRUPTED,
    CHECKPOINT_CORRUPT,
    DATA,
    BRANCH_START,
    TRUNK_RETRAIN,
    SIMULATED,
    ADAPTIVE_DECISION,
)
