"""How downstream-task measurements are named: metric names in the database and CSV columns.

The trainer writes ``task/<task>/<kind>`` per evaluation step (kind: ``acc``, ``acc_norm``,
``bpb``, the bits per byte of the correct continuation). A CSV of someone's ladder may use the
same names as columns, or ``<kind>_<task>`` (``acc_hellaswag``, ``bpb_hellaswag``), or
``err_<task>`` for an error rate 1 - accuracy (Gadre et al. 2024 publish errors). This module
imports nothing of the fitting code, so the CSV reader can leave task columns out of the
grouping keys of a point. The names themselves are the vocabulary's (:mod:`scaling.vocab`).
"""

from __future__ import annotations

from scaling.vocab import TASK_KINDS, TASK_PREFIX, task_metric, task_metric_parts, task_name_problem
from scaling.vocab import parse_task_metric as parse_metric

#: Column prefixes a CSV may use instead of ``task/<task>/<kind>``; ``err`` is 1 - accuracy.
COLUMN_KINDS = ("acc_norm", "acc", "bpb", "err")
#: Column prefix of a task's chance level (``chance_<task>``: the accuracy of guessing, e.g. 0.25 for four
#: choices), one value for the task; step 2's predictions do not fall below it.
CHANCE_PREFIX = "chance_"
#: Most tasks read from one source: every task is a fit with a bootstrap.
MAX_TASKS = 64

__all__ = ["CHANCE_PREFIX", "COLUMN_KINDS", "MAX_TASKS", "chance_column", "TASK_KINDS", "TASK_PREFIX", "is_task_column", "metric_name", "parse_column",
           "parse_metric", "task_name_problem"]


def metric_name(task: str, kind: str) -> str:
    """The database metric of ``kind`` on ``task``, spelled as the trainer writes it."""
    return task_metric(task, kind)


def parse_column(column: str) -> tuple[str, str] | None:
    """(task, kind) of a CSV column (kind ``err`` for an error rate), or None when it is not a task column."""
    name = column.strip()
    parts = task_metric_parts(name)
    if parts is not None:
        task, kind = parts[0], parts[1].lower()
        return (task, kind) if task and kind in TASK_KINDS + ("err",) else (task or name, kind or "?")
    low = name.lower()
    for kind in COLUMN_KINDS:
        if low.startswith(kind + "_") and len(name) > len(kind) + 1:
            return name[len(kind) + 1:], kind
    return None


def chance_column(column: str) -> str | None:
    """The task whose chance level the CSV column gives (``chance_<task>``), or None."""
    name = column.strip()
    if name.lower().startswith(CHANCE_PREFIX) and len(name) > len(CHANCE_PREFIX):
        return name[len(CHANCE_PREFIX):]
    return None


def is_task_column(column: str) -> bool:
    """Whether a CSV column holds a task measurement or a task's chance level (so is not a description of the run)."""
    return parse_column(column) is not None or chance_column(column) is not None
