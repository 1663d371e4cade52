"""Metric and event names: the one place they are spelled.

The trainer writes them; the fitting and reports packages import them (this module imports
nothing heavy, so importing it never pulls in torch).
"""

from __future__ import annotations

# -- metrics (one row per run, step and name) ----------------------------------------------
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

# -- events ---------------------------------------------------------------------------------
LOSS_SPIKE = "loss_spike"
ROLLBACK = "rollback"
RETRY = "retry"
RESUME = "resume"
STALE_RECOVERED = "stale_recovered"
OVERFLOW_SKIP = "overflow_skip"  # fp16: non-finite gradients, step skipped, scale lowered
FAILURE = "failure"
INTERRUPTED = "interrupted"
CHECKPOINT_CORRUPT = "checkpoint_corrupt"  # a checkpoint failed its manifest or load; set aside
DATA = "data"  # the corpus a run trained on: fingerprint, unique_tokens (U), sizes, device

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
)
