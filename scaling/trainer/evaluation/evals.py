"""Scoring a run's tasks with the model it is training, at each evaluation and at its end.

Each choice of an item is one sequence, ``context + delimiter + choice`` (the context cut from
the left to fit the model's context), and its score is the log-likelihood of the continuation
``delimiter + choice``. Per task, over its items (lm-evaluation-harness's definitions, and
OLMo's task loss for ``bpb``):

- ``acc``: the gold choice has the highest log-likelihood;
- ``acc_norm``: the same with each log-likelihood divided by its continuation's UTF-8 bytes;
- ``bpb``: the gold continuation's negative log-likelihood in bits per byte, averaged over items.

Sequences are sorted by length and sent forward in batches of at most :func:`batch_tokens`
tokens, through the model the run trains (no second copy of the weights). On several workers
every rank takes part, as in the held-out loss: each data-parallel rank scores every dp-th
batch (ranks of a tensor-parallel group the same ones; every rank runs as many forward passes,
so sharded models gather their weights in step) and the per-sequence scores are summed over
the data-parallel group; the main rank records them. A pipeline-parallel run scores through its
schedule's evaluation: batches of at most one share's rows, padded to the stages' fixed shape,
the continuation's tokens the only targets; the last stage's per-row losses are summed over the
ranks whose losses add up (:attr:`Pipeline.loss_group`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from scaling import vocab
from scaling.errors import SpecError
from scaling.trainer.evaluation import next_line
from scaling.trainer.data.corpus import Corpus
from scaling.trainer.parallel.pipeline import IGNORE, Pipeline
from scaling.trainer.precision import autocast
from scaling.trainer.runtime import Runtime
from scaling.trainer.spec import RunSpec
from scaling.trainer.evaluation.eval_tasks import Task, check_tasks, text_encoding_problem

#: Tokens one scoring forward pass may hold, at least (a training micro-batch's may be more):
#: enough that tiny models are not run a few sequences at a time ...
MIN_BATCH_TOKENS = 8192
#: ... while the float32 logits of a batch stay within this many bytes on a large vocabulary.
MAX_LOGITS_BYTES = 1 << 28

Encoder = Callable[[str], list[int]]


@dataclass(frozen=True)
class Encoded:
    """A task's sequences (one per item and choice) as token ids, with what scoring needs."""

    task: Task
    sequences: list[np.ndarray]  # context then continuation, at most context + 1 tokens
    continuation: np.ndarray  # tokens of each sequence's continuation (at its end)
    nbytes: np.ndarray  # UTF-8 bytes of each continuation
    item: np.ndarray  # the item of each sequence
    gold: np.ndarray  # per item: the sequence index of its gold choice


def encode(task: Task, encoder: Encoder, context: int) -> Encoded:
    """``task``'s sequences; SpecError (naming the item) for a continuation longer than ``context``."""
    sequences, cont, nbytes, owner, gold = [], [], [], [], []
    for k, item in enumerate(task.items):
        ctx = encoder(item.context)
        for c, choice in enumerate(item.choices):
            text = task.delimiter + choice
            ids = encoder(text)
            if not ids or len(ids) > context:
                raise SpecError(f"{item.where}: choice {c} is {len(ids)} tokens; a continuation needs 1 to "
                                f"{context} (the model's context, leaving room for one context token)")
            keep = ctx[max(0, len(ctx) - (context + 1 - len(ids))):]
            if not keep:
                raise SpecError(f"{item.where}: the context encodes to no tokens")
            if c == item.gold:
                gold.append(len(sequences))
            sequences.append(np.asarray(keep + ids, dtype=np.int64))
            cont.append(len(ids))
            nbytes.append(len(text.encode("utf-8", "surrogateescape")))
            owner.append(k)
    return Encoded(task, sequences, np.asarray(cont), np.asarray(nbytes), np.asarray(owner), np.asarray(gold))


def batches(lengths: Sequence[int], max_tokens: int, max_rows: Optional[int] = None) -> list[list[int]]:
    """Sequence indices grouped longest first, each group's padded size (count x longest) at most
    ``max_tokens`` (a longer sequence goes alone), and at most ``max_rows`` sequences when given."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    out: list[list[int]] = []
    for i in order:
        if (out and (len(out[-1]) + 1) * lengths[out[-1][0]] <= max_tokens
                and (max_rows is None or len(out[-1]) < max_rows)):
            out[-1].append(i)
        else:
            out.append([i])
    return out


@torch.no_grad()
def continuation_logprobs(model: Callable[[torch.Tensor], torch.Tensor], sequences: Sequence[np.ndarray],
                          continuation: Sequence[int], device: torch.device) -> torch.Tensor:
    """Summed log-probabilities (float64) of each sequence's last ``continuation[i]`` tokens, the
    sequences sent forward as one right-padded batch (padding never changes a causal model's earlier logits)."""
    width = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), width, dtype=torch.long)
    mask = torch.zeros(len(sequences), width - 1, dtype=torch.bool)
    for r, (seq, c) in enumerate(zip(sequences, continuation)):
        ids[r, : len(seq)] = torch.from_numpy(seq)
        mask[r, len(seq) - 1 - c : len(seq) - 1] = True  # positions whose next token is the continuation's
    ids, mask = ids.to(device), mask.to(device)
    logits = model(ids[:, :-1]).float()
    logp = F.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return torch.where(mask, logp.double(), 0.0).sum(dim=1)


def pipeline_logprobs(pipe: Pipeline, sequences: Sequence[np.ndarray], continuation: Sequence[int]) -> torch.Tensor:
    """:func:`continuation_logprobs` through a pipeline: the rows padded to its (share, context)
    shape, each continuation's tokens the only targets; zeros on ranks without the last stage."""
    x = torch.zeros(pipe.share, pipe.spec.model.context, dtype=torch.long)
    y = torch.full_like(x, IGNORE)
    for r, (seq, c) in enumerate(zip(sequences, continuation)):
        n = len(seq) - 1  # inputs; the target of position p is seq[p + 1]
        x[r, :n] = torch.from_numpy(seq[:-1])
        y[r, n - c : n] = torch.from_numpy(seq[n - c + 1 :])
    return -pipe.row_losses(x, y)[: len(sequences)]


def task_metrics(enc: Encoded, scores: np.ndarray) -> dict[str, float]:
    """acc, acc_norm and bpb of a task from each sequence's continuation log-likelihood (nats)."""
    n = len(enc.task.items)
    bounds = np.append(np.searchsorted(enc.item, np.arange(n)), len(scores))  # an item's choices are contiguous

    def picked(values: np.ndarray) -> np.ndarray:  # the first choice at the maximum wins a tie (argmax)
        return np.array([bounds[k] + int(np.argmax(values[bounds[k]:bounds[k + 1]])) for k in range(n)])

    bpb = -scores[enc.gold] / (enc.nbytes[enc.gold] * math.log(2))
    return {
        vocab.TASK_ACC: float(np.mean(picked(scores) == enc.gold)),
        vocab.TASK_ACC_NORM: float(np.mean(picked(scores / enc.nbytes) == enc.gold)),
        vocab.TASK_BPB: float(np.mean(bpb)),
    }


def batch_tokens(micro: int, context: int, vocab_size: int) -> int:
    """Tokens per scoring forward pass: a training micro-batch's, or more while the logits stay small."""
    return max(micro * context, min(MIN_BATCH_TOKENS, MAX_LOGITS_BYTES // (4 * vocab_size)))


@torch.no_grad()
def score(model: Any, enc: Encoded, rt: Runtime, *, max_tokens: int, precision: str,
          group: Any = None) -> np.ndarray:
    """Each sequence's continuation log-likelihood; collective over ranks when distributed (see the module)."""
    pipe = model if isinstance(model, Pipeline) else None
    groups = batches([len(s) for s in enc.sequences], max_tokens, pipe.share if pipe is not None else None)
    out = torch.zeros(len(enc.sequences), dtype=torch.float64, device=rt.device)
    dp, rank = rt.dp, rt.dp_rank
    rounds = math.ceil(len(groups) / dp)
    for r in range(rounds):
        k = r * dp + rank
        idx = groups[k] if k < len(groups) else groups[0]  # a rank with no batch left repeats one, unrecorded
        seqs, cont = [enc.sequences[i] for i in idx], enc.continuation[idx]
        if pipe is not None:  # the schedule casts as it trains
            got = pipeline_logprobs(pipe, seqs, cont).to(rt.device)
        else:
            with autocast(precision, rt.device):
                got = continuation_logprobs(model, seqs, cont, rt.device)
        if k < len(groups):
            out[torch.as_tensor(idx, device=rt.device)] = got
    return rt.sum(out, group).cpu().numpy()


class TaskEvaluator:
    """A run's tasks, encoded once, scored by :meth:`evaluate` with the model being trained."""

    def __init__(self, tasks: list[Encoded], notes: dict[str, Any], max_tokens: int, precision: str) -> None:
        self.tasks = tasks
        self.notes = notes  # per task: items, source, digest; or why it is not scored
        self.max_tokens = max_tokens
        self.precision = precision

    def describe(self) -> dict[str, Any]:
        """What the run's data event records about its tasks."""
        return self.notes

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module | Pipeline, rt: Runtime, group: Any = None) -> dict[str, float]:
        """``task/<task>/<kind>`` of every task, scored with ``model`` (in eval mode meanwhile): the
        trained module, or a pipeline with ``group`` its loss group."""
        if not self.tasks:
            return {}
        net = model.model if isinstance(model, Pipeline) else model
        was_training = net.training
        net.eval()
        try:
            out: dict[str, float] = {}
            for enc in self.tasks:
                scores = score(model, enc, rt, max_tokens=self.max_tokens, precision=self.precision, group=group)
                for kind, value in task_metrics(enc, scores).items():
                    out[vocab.task_metric(enc.task.name, kind)] = value
            return out
        finally:
            net.train(was_training)


def encoder_for(spec: RunSpec) -> tuple[Optional[Encoder], Optional[Callable[[np.ndarray], bytes]]]:
    """(text -> token ids, held-out token ids -> bytes) for the run's data; (None, None) for a token file."""
    if text_encoding_problem(spec.data):
        return None, None
    if spec.data.tokenizer is None:  # bytes are the tokens
        return (lambda text: list(text.encode("utf-8", "surrogateescape"))), (lambda ids: np.asarray(ids, np.uint8).tobytes())
    from scaling.trainer.data import tokenizer
    from scaling.trainer.data.prepare import prepare

    tok = tokenizer.load(prepare(spec.data).tokenizer_path)
    return ((lambda text: tok.encode(text, add_special_tokens=False).ids),
            (lambda ids: tok.decode(np.asarray(ids).tolist()).encode("utf-8", "surrogateescape")))


def build_evaluator(spec: RunSpec, corpus: Corpus, micro: int) -> Optional[TaskEvaluator]:
    """The run's tasks encoded for its data and context, or None when it scores none.

    Raises SpecError (before anything trains) for a task file that is malformed or does not fit.
    """
    evals = spec.evals
    if not evals.enabled:
        return None
    context = spec.model.context
    files = check_tasks(evals, spec.data, context)
    notes: dict[str, Any] = {}
    encoder, to_bytes = encoder_for(spec)
    tasks: list[Task] = list(files)
    if evals.next_line is not None:
        if encoder is None or to_bytes is None:
            notes[vocab.NEXT_LINE] = "not scored: a token file has no text to cut into lines"
        else:
            scan = corpus.val[: next_line.MAX_SCAN_BYTES // (1 if spec.data.tokenizer is None else 4)]
            built, note = next_line.build(to_bytes(scan), corpus.fingerprint, evals.next_line.count(spec.eval_tokens), context)
            if built is None:
                notes[vocab.NEXT_LINE] = f"not scored: {note}"
            else:
                tasks.insert(0, built)
    assert encoder is not None or not files  # check_tasks refused task files on a token file
    encoded = [encode(t, encoder, context) for t in tasks] if encoder is not None else []
    notes.update({t.name: t.describe() for t in tasks})
    return TaskEvaluator(encoded, notes, batch_tokens(micro, context, spec.model.vocab_size), spec.precision)
