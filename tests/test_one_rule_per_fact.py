"""Each of these facts has one rule in one place, and the old copies of it cannot come back.

- the device a run trains on: :func:`scaling.trainer.resolve.decide_device` (its precision, layout,
  memory model and rate all follow from it, for `scaling plan`, `scaling train` and the sweep alike);
- a batch rounded to whole sequences: :func:`scaling.batching.whole_sequences`;
- a run's steps from its tokens and batch: :func:`scaling.batching.steps_for`;
- a hyperparameter group's label, written and shown: :mod:`scaling.naming` (``group_label``,
  ``point_label``, ``group_title``);
- a task metric's name read back (``task/<task>/<kind>``): :func:`scaling.vocab.task_metric_parts`
  and :func:`scaling.vocab.parse_task_metric`.

The source is searched for each rule written out again by hand (as tests/test_one_interval_printer.py
does for intervals); the searches are shown to find the copies this file replaced.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SCALING = Path(__file__).resolve().parents[1] / "scaling"

#: fact -> (its one home, the pattern of the rule written out again)
RULES: dict[str, tuple[str, re.Pattern[str]]] = {
    # "cuda" if <anything> (else "cpu"): a device decided anywhere but the resolver
    "device": ("trainer/resolve.py", re.compile(r"""["']cuda["']\s+if\b|\belse\s+["']cpu["']""")),
    # round(x / context) * context, however spelled
    "batch rounding": ("batching.py", re.compile(r"round\([^()\n]*(?:\([^()\n]*\)[^()\n]*)*/\s*(?:ctx|context)\b")),
    # -(-tokens // batch) or ceil(tokens / batch_tokens): a run's steps counted by hand
    "run steps": ("batching.py", re.compile(r"-\(-[^\n]*(?:tokens|round\(D\))[^\n]*//|math\.ceil\([^\n]*/\s*[\w.]*batch")),
    # LxWxH D=...: a group label composed, N=..., D=...: a point's label, [ND]=: a label read
    "group label": ("naming.py",
                    re.compile(r"\}x\{[^\"'\n]*\}x\{[^\"'\n]*D=|N=\{num\([^}\n]*\}, D=\{num\(|\[ND\]\)=")),
    # task/<task>/<kind> split by hand
    "task metric": ("vocab.py", re.compile(r"len\(TASK_PREFIX\)\s*:\s*\]|[\"']task/[\"']")),
}


def copies(pattern: re.Pattern[str], source: str) -> list[tuple[int, str]]:
    """(line, text) of each place ``source`` writes the rule out itself."""
    return [(source.count("\n", 0, m.start()) + 1, m.group(0)) for m in pattern.finditer(source)]


@pytest.mark.parametrize("fact, line", [
    ("device", 'machine=host.machine("cuda" if ex.gpus_per_worker > 0 else "cpu", ex.workers)'),
    ("device", 'return "cuda" if self.gpus_per_worker > 0 else "cpu"'),
    ("device", 'default_backend("cuda" if scaling.use_gpu else "cpu", offload)'),
    ("batch rounding", 'batch = max(ctx, int(round(self._rule("batch_tokens", N, D, C) / ctx)) * ctx)'),
    ("batch rounding", "rounded = [max(context, int(round(own * f / context)) * context) for f in fs]"),
    ("batch rounding", "return int(max(1, round(tokens / context)) * context)"),
    ("run steps", "return math.ceil(self.tokens / self.batch_tokens)"),
    ("run steps", 'trunk_steps = -(-int(trunk["tokens"]) // int(trunk["batch_tokens"]))'),
    ("run steps", "total = -(-tokens // batch)"),
    ("run steps", "steps = -(-int(round(D)) // batch)"),
    ("run steps", "return [BranchRun(math.ceil(round(largest) / batch) * batch,"),
    ("group label", 'return f"{shape.n_layer}x{shape.d_model}x{shape.n_head} D={D:.6g}"'),
    ("group label", 'return f"N={num(N, 3)}, D={num(D, 3)}"'),
    ("group label", '_SIZE_IN_LABEL = re.compile(r"\\b([ND])=([0-9][0-9.]*)")'),
    ("task metric", 'task, sep, kind = name[len(TASK_PREFIX):].rpartition("/")'),
    ("task metric", 'if name.startswith("task/"):'),
])
def test_the_search_finds_the_old_copies(fact: str, line: str) -> None:
    assert copies(RULES[fact][1], line), (fact, line)


@pytest.mark.parametrize("fact, line", [
    ("device", "device = device_kind(ex, host)"),
    ("device", 'if device == "cuda":'),
    ("batch rounding", "batch = whole_sequences(self._rule('batch_tokens', N, D, C), ctx)"),
    ("batch rounding", "steps = math.ceil(round(D) / batch)"),
    ("group label", 'f"D={D:.3g} tokens is less than one batch ({batch} tokens)"'),
    ("group label", "base = f\"N={num(run['N'])} D={num(run['D'])}\""),  # a run's hover label, not a group's
    ("task metric", "loss = m[~m['name'].str.startswith(TASK_PREFIX)]"),
])
def test_the_search_passes_what_uses_the_rule(fact: str, line: str) -> None:
    assert not copies(RULES[fact][1], line), (fact, line)


@pytest.mark.parametrize("fact", sorted(RULES))
def test_each_fact_is_written_out_in_its_home_only(fact: str) -> None:
    home, pattern = RULES[fact]
    found = [f"{path.relative_to(SCALING.parent)}:{line}: {text}"
             for path in sorted(SCALING.rglob("*.py")) if path != SCALING / home
             for line, text in copies(pattern, path.read_text(encoding="utf-8"))]
    assert not found, f"the {fact} rule lives in scaling/{home}; use it there:\n" + "\n".join(found)
    assert copies(pattern, (SCALING / home).read_text(encoding="utf-8")), f"scaling/{home} no longer holds it"


def test_the_one_device_rule() -> None:
    from scaling.trainer.resolve import decide_device, worker_gpus

    assert decide_device("cuda", 0, probe=False) == "cuda"  # named: kept, GPUs reserved or not
    assert decide_device("cpu", 1, probe=False) == "cpu"
    assert decide_device("auto", 0.5, probe=False) == "cuda" and decide_device("auto", 0, probe=False) == "cpu"
    assert worker_gpus("cuda", 0) == 1.0 and worker_gpus("cuda", 2) == 2 and worker_gpus("cpu", 1) == 0.0


def test_the_one_batch_rounding() -> None:
    from scaling.batching import batch_problem, whole_sequences

    assert whole_sequences(700.0, 128) == 640 and whole_sequences(10.0, 128) == 128  # at least one sequence
    assert all(batch_problem(whole_sequences(t, 96), 96) is None for t in (1.0, 95.0, 1000.0, 1e6))


def test_the_one_task_metric_reading() -> None:
    from scaling.vocab import parse_task_metric, task_metric, task_metric_parts

    assert parse_task_metric(task_metric("hella.swag-2", "acc_norm")) == ("hella.swag-2", "acc_norm")
    assert parse_task_metric("task/x/accuracy") is None and parse_task_metric("TASK/x/acc") is None
    assert parse_task_metric("eval_loss") is None and parse_task_metric("task//acc") is None
    assert task_metric_parts("Task/x/ACC") == ("x", "ACC") and task_metric_parts("loss") is None
