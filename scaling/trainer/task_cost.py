"""What scoring a run's tasks costs, as a share of its training (``scaling plan`` shows it).

Each choice of each item is one sequence sent forward (2N plus attention FLOPs per token, a
third of a training token's), at every evaluation. Torch-free.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from scaling.trainer.next_line import CHOICES, line_limit, passage_limit
from scaling.trainer.tasks import load_task

if TYPE_CHECKING:
    from scaling.trainer.spec import RunSpec


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
    """Tokens the run's tasks send forward at one evaluation, at most (one sequence per choice)."""
    window = spec.model.context + 1
    total = 0
    if spec.evals.next_line is not None:
        ctx = spec.model.context
        total += spec.evals.next_line.count(spec.eval_tokens) * CHOICES * min(window, passage_limit(ctx) + line_limit(ctx))
    for task in spec.evals.tasks:
        for item in load_task(task).items:  # bytes bound tokens for byte-level BPE tokenizers
            ctx = len(item.context.encode())
            total += sum(min(window, ctx + len((task.delimiter + c).encode())) for c in item.choices)
    return total


def eval_cost(spec: "RunSpec") -> EvalCost:
    """The cost of scoring ``spec``'s tasks (none for a simulated or pipeline-parallel run)."""
    if spec.simulate is not None or spec.execution.pp > 1 or not spec.evals.enabled:
        return EvalCost(0, 0, 0.0, 0.0)
    shape = spec.shape
    per_token = shape.flops_per_token("6N_attention", "total")  # forward + backward
    evaluations = evaluation_steps(spec)
    tokens = tokens_per_evaluation(spec)
    flops = evaluations * tokens * per_token / 3  # forward only: a third of training's
    trained = spec.trained_tokens - spec.trunk_tokens
    return EvalCost(evaluations, tokens, flops, flops / (per_token * trained) if trained else math.inf)
