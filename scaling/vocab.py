"""The words every part of scaling shares: run statuses, metric names and event kinds.

One place spells each of them. The database stores them, the trainer and orchestrator write
them, fitting and reports read them. This module imports nothing, so any part may import it.
"""

from __future__ import annotations

# -- run statuses -----------------------------------------------------------------------------
# Which status a run may move to from which: scaling.db.lifecycle.TRANSITIONS.
PENDING = "pending"
RUNNING = "running"
COMPLETED = "completed"
FAILED = "failed"
INTERRUPTED = "interrupted"  # stopped before its last step; also the event that records it
SUPERSEDED = "superseded"  # never completed, and a later plan trains its point under another key

STATUSES: tuple[str, ...] = (PENDING, RUNNING, COMPLETED, FAILED, INTERRUPTED, SUPERSEDED)

# -- metrics (one row per run, step and name) -------------------------------------------------
TRAIN_LOSS = "train/loss"
EVAL_LOSS = "eval/loss"
LEARNING_RATE = "train/lr"
GRAD_NORM = "train/grad_norm"
Z_LOSS = "train/z_loss"  # the z-loss term alone (models with a z_loss coefficient)
LOSS_SCALE = "train/loss_scale"  # fp16 only
TOKENS_PER_SECOND = "perf/tokens_per_s"
MFU = "perf/mfu"
EPOCH = "data/epoch"  # fractional passes over the training split
# mixture-of-experts runs: the router's auxiliary loss term (balance and router z-loss, averaged over
# the MoE blocks), and the balance: the busiest and idlest expert's tokens over the mean (1: balanced),
# the extremes over the MoE blocks
MOE_AUX_LOSS = "moe/aux_loss"
MOE_LOAD_MAX = "moe/load_max"
MOE_LOAD_MIN = "moe/load_min"
#: Tokens routed to each expert in a step, summed over the MoE blocks and ranks: moe/expert_<i>/tokens.
MOE_EXPERT_PREFIX = "moe/expert_"
MOE_EXPERT_TOKENS = "tokens"

METRICS: tuple[str, ...] = (
    TRAIN_LOSS,
    EVAL_LOSS,
    LEARNING_RATE,
    GRAD_NORM,
    Z_LOSS,
    LOSS_SCALE,
    TOKENS_PER_SECOND,
    MFU,
    EPOCH,
    MOE_AUX_LOSS,
    MOE_LOAD_MAX,
    MOE_LOAD_MIN,
)

# -- downstream-task metrics: task/<task>/<kind> (scaling.trainer.evaluation.evals writes them) -----------------
TASK_PREFIX = "task/"
TASK_ACC = "acc"  # share of items whose gold choice has the highest log-likelihood
TASK_ACC_NORM = "acc_norm"  # the same with each choice's log-likelihood divided by its bytes
TASK_BPB = "bpb"  # the gold continuation's negative log-likelihood in bits per byte (OLMo's task loss)
TASK_KINDS: tuple[str, ...] = (TASK_ACC, TASK_ACC_NORM, TASK_BPB)
#: The built-in task: the true next line of a held-out passage among four (scaling.trainer.evaluation.next_line).
NEXT_LINE = "next_line"
#: Longest task name: the database stores metric names of at most 64 characters.
MAX_TASK_NAME = 64 - len(TASK_PREFIX) - 1 - max(len(k) for k in TASK_KINDS)
_TASK_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def task_name_problem(task: str) -> str | None:
    """Why ``task`` cannot name a task (None: it can): it becomes part of a metric name."""
    if not task or len(task) > MAX_TASK_NAME:
        return f"a task name has 1 to {MAX_TASK_NAME} characters, not {len(task)}"
    if not task[0].isalnum() or not task.isascii() or not set(task) <= _TASK_NAME_CHARS:
        return f"task name {task!r}: use letters, digits, '_', '.' and '-', starting with a letter or digit"
    return None


def task_metric(task: str, kind: str) -> str:
    """The metric of ``kind`` (one of :data:`TASK_KINDS`) on ``task``: ``task/<task>/<kind>``."""
    problem = task_name_problem(task)
    if problem:
        raise ValueError(problem)
    if kind not in TASK_KINDS:
        raise ValueError(f"task metric kind {kind!r} is not one of {', '.join(TASK_KINDS)}")
    return f"{TASK_PREFIX}{task}/{kind}"


def task_metric_parts(name: str) -> tuple[str, str] | None:
    """``(task, kind)`` of a name spelled ``task/<task>/<kind>`` (the prefix in any case), split at
    its last ``/`` and not checked (either may be empty); None for a name without the prefix. The
    one reading of a task metric's name: :func:`parse_task_metric` checks it, a CSV reader words
    what is wrong with it."""
    if name[:len(TASK_PREFIX)].lower() != TASK_PREFIX:
        return None
    task, _, kind = name[len(TASK_PREFIX):].rpartition("/")
    return task, kind


def parse_task_metric(name: str) -> tuple[str, str] | None:
    """``(task, kind)`` of a task metric of the vocabulary (:func:`task_metric`'s spelling, a valid
    task name and kind), or None for any other name."""
    parts = task_metric_parts(name) if name.startswith(TASK_PREFIX) else None
    if parts is None or parts[1] not in TASK_KINDS or task_name_problem(parts[0]) is not None:
        return None
    return parts


def expert_tokens_metric(expert: int) -> str:
    """The metric of the tokens routed to expert ``expert`` (from 0): ``moe/expert_<i>/tokens``."""
    if expert < 0:
        raise ValueError(f"an expert's index is 0 or more, not {expert}")
    return f"{MOE_EXPERT_PREFIX}{expert}/{MOE_EXPERT_TOKENS}"


def metric_problem(name: str) -> str | None:
    """Why ``name`` is not a metric of the vocabulary (None: it is): one of :data:`METRICS`,
    ``task/<task>/<kind>`` with a valid task name and kind, or ``moe/expert_<i>/tokens``."""
    if name in METRICS or parse_task_metric(name) is not None:
        return None
    if name.startswith(MOE_EXPERT_PREFIX):
        index, sep, kind = name[len(MOE_EXPERT_PREFIX):].partition("/")
        if sep and kind == MOE_EXPERT_TOKENS and index.isdigit() and index.isascii():
            return None
    return (f"metric {name!r} is not in scaling.vocab (METRICS, task/<task>/<{'|'.join(TASK_KINDS)}>, "
            f"or {MOE_EXPERT_PREFIX}<i>/{MOE_EXPERT_TOKENS})")

# -- run tags ---------------------------------------------------------------------------------
#: The tag of a run spec naming its hyperparameter group (the runs of one point of a plan's
#: ``hparams:`` sweep); stored as the runs table's ``hparam_group`` and read by the fits.
HPARAM_GROUP_TAG = "hparam_group"
#: The tag of a trunk whose cooldowns are predicted, not trained: the token budgets, comma-separated.
PREDICT_TOKENS_TAG = "predict_tokens"

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
