"""What scoring a run's tasks costs, as a share of its training (``scaling plan`` shows it).

Each choice of each item is one sequence sent forward (2N plus attention FLOPs per token, a
third of a training token's), at every evaluation. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scaling import vocab
from scaling.trainer.evaluation.next_line import CHOICES, line_limit, passage_limit
from scaling.trainer.evaluation.eval_tasks import TaskFile, load_task

if TYPE_CHECKING:
    from scaling.trainer.spec import RunSpec
    from scaling.trainer.evaluation.eval_tasks import EvalsSpec


@dataclass(frozen=True)
class EvalCost:
    """What scoring a run's tasks costs: forward passes at each evaluation, as a share of training."""

    evaluations: int  # evaluations over the run (every eval_interval steps and at the end)
    tokens: int  # tokens run forward per evaluation (an upper bound)
    flops: float  # over the run, at 2N (plus attention) per forward token
    fraction: float  # of the run's training FLOPs (6N plus attention per token)


def evaluation_steps(spec: "RunSpec") -> int:
    """How many evaluations the run makes: every ``eval_interval`` steps of its own, and at its end."""
    first = spec.branch.from_step if spec.branch else 0
    every = spec.execution.eval_interval
    count = spec.steps // every - first // every
    return count + (1 if spec.steps % every else 0)


def tokens_per_evaluation(spec: "RunSpec") -> int:
    """Tokens the run's tasks send forward at one evaluation, at most (one sequence per choice; a
    pipeline pads every sequence to its stages' shape, a whole context)."""
    window = spec.model.context + 1
    padded = spec.execution.pp > 1
    total = 0
    if spec.evals.next_line is not None:
        ctx = spec.model.context
        per = window if padded else min(window, passage_limit(ctx) + line_limit(ctx))
        total += spec.evals.next_line.count(spec.eval_tokens) * CHOICES * per
    if padded:
        return total + sum(window * sum(len(item.choices) for item in load_task(task).items) for task in spec.evals.tasks)
    return total + sum(file_tokens(task, window) for task in spec.evals.tasks)


def file_tokens(task: TaskFile, window: int) -> int:
    """A task file's tokens per evaluation at most, its sequences cut to ``window`` (bytes bound the
    tokens of a byte-level BPE); counted once per file version and context, not once per run."""
    loaded = load_task(task)  # cached per file version
    key = (loaded.sha256, loaded.delimiter, len(loaded.items), window)
    if key not in _FILE_TOKENS:
        total = 0
        for item in loaded.items:
            ctx = len(item.context.encode("utf-8", "surrogateescape"))
            total += sum(min(window, ctx + len((loaded.delimiter + c).encode())) for c in item.choices)
        _FILE_TOKENS[key] = total
    return _FILE_TOKENS[key]


_FILE_TOKENS: dict[tuple[str, str, int, int], int] = {}


def eval_cost(spec: "RunSpec") -> EvalCost:
    """The cost of scoring ``spec``'s tasks (none for a simulated run)."""
    if spec.simulate is not None or not spec.evals.enabled:
        return EvalCost(0, 0, 0.0, 0.0)
    shape = spec.shape
    per_token = shape.flops_per_token("6N_attention", "total")  # forward + backward
    evaluations = evaluation_steps(spec)
    tokens = tokens_per_evaluation(spec)
    flops = evaluations * tokens * per_token / 3  # forward only: a third of training's
    trained = spec.trained_tokens - spec.trunk_tokens
    return EvalCost(evaluations, tokens, flops, flops / (per_token * trained) if trained else math.inf)


def cost_row(spec: "RunSpec", est_seconds: float) -> dict[str, float]:
    """A run's task-scoring cost as ``scaling plan`` lists it: FLOPs, share of training, seconds
    (the share of the run's estimated time: forward passes run at training's rate)."""
    cost = eval_cost(spec)
    return {"task_eval_flops": cost.flops, "task_eval_fraction": cost.fraction,
            "task_eval_seconds": cost.fraction * est_seconds}


def cost_note(evals: "EvalsSpec", rows: list[dict[str, Any]]) -> list[str]:
    """The line ``scaling plan`` prints about scoring tasks: which, and their cost over the sweep."""
    flops = sum(r.get("task_eval_flops", 0.0) for r in rows)
    if flops <= 0:
        return []
    training = sum(r["task_eval_flops"] / r["task_eval_fraction"] for r in rows if r.get("task_eval_fraction"))
    names = ([vocab.NEXT_LINE] if evals.next_line is not None else []) + [t.name or "" for t in evals.tasks]
    seconds = sum(r.get("task_eval_seconds", 0.0) for r in rows)
    return [f"task scoring ({', '.join(names)}) at every evaluation and each run's end: {flops:.3g} FLOPs, "
            f"{100 * flops / training:.2g}% of training (about {seconds:.2g}s of the estimate); "
            "the plan's `evals:` section chooses them (next_line: false turns the built-in task off)"]
