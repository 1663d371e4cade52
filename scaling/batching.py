"""How a batch of tokens becomes whole sequences and each rank's micro-batches: the one rounding of
a batch and the one split of it, which the plan's checks, the memory model and the training loop share.
Pure arithmetic: no torch, no other module of the project."""

from __future__ import annotations


def whole_sequences(tokens: float, context: int) -> int:
    """A batch of ``tokens`` rounded to the nearest whole number of sequences of ``context`` tokens,
    at least one: the one rounding of a batch that a rule, a batch factor or a fitted law gives
    (a plan refuses any batch that is not whole sequences, :func:`batch_problem`)."""
    return int(max(1, round(tokens / context))) * context


def steps_for(tokens: int, batch_tokens: int) -> int:
    """Optimizer steps that consume ``tokens`` in batches of ``batch_tokens`` (the last batch may overshoot):
    the one count of a run's steps that the trainer, the early-stopping rule and the curve fits share.
    Exact integer arithmetic (no float rounding at any size); 0 for a batch that is not positive."""
    return -(-int(tokens) // int(batch_tokens)) if int(batch_tokens) > 0 else 0


def batch_problem(batch_tokens: int, context: int, workers: int = 1) -> str | None:
    """Why a global batch of ``batch_tokens`` cannot be trained, or None.

    A batch is a whole number of sequences of ``context`` tokens (a remainder would be stored
    but never trained, and every estimate would count it), and every worker takes at least one
    sequence of it.
    """
    if batch_tokens < context:
        return f"{batch_tokens} is less than one sequence (context {context})"
    if batch_tokens % context:
        lower = batch_tokens // context * context
        return (f"{batch_tokens} is not a whole number of sequences of context {context} "
                f"(use {lower} or {lower + context})")
    if batch_tokens // context < workers:
        return f"{batch_tokens // context} sequences of {context} tokens per batch cannot feed {workers} workers"
    return None


def micro_batches(batch: int, world: int, share: int, requested: int | None) -> list[tuple[int, int]]:
    """(offset, count) of each micro-batch of a rank's ``share`` of a ``batch`` over ``world`` ranks.

    Every rank runs the same number of micro-batches (sharded models gather parameters in each
    forward pass, so the ranks' passes must pair up): enough for the largest share at no more
    than ``requested`` sequences each. Sizes differ by at most one; a count of 0 can occur only
    with ``requested=1`` on a smaller share, and the loop runs it with weight 0.
    """
    largest = -(-batch // world)
    size = min(requested or largest, largest)
    n = -(-largest // size)
    counts = [share // n + (1 if i < share % n else 0) for i in range(n)]
    offsets = [sum(counts[:i]) for i in range(n)]
    return list(zip(offsets, counts))


def micro_batch_size(batch: int, world: int, requested: int | None) -> int:
    """Sequences in the largest forward pass of any rank: the memory estimate's ``b``.

    ``batch`` sequences are shared over ``world`` ranks as :func:`micro_batches` splits them;
    ``requested`` is the micro-batch size asked for (None: a rank's whole share).
    """
    largest = -(-batch // world)
    return max(count for _, count in micro_batches(batch, world, largest, requested))
