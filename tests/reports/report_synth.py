"""Synthetic but realistic sweeps, written through the real ``scaling.db.Store`` API.

Losses follow a known Chinchilla-form law L(N, D) = E + A/N^alpha + B/D^beta (so the fits have a
truth to find and each budget's minimum is interior), curves follow the same law along the
tokens seen, with noise, and the runs go through the Store's real life cycle: register, claim,
log_metrics, log_event, finish. Used by the report tests and by ``benchmarks/bench_report.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from scaling.accounting import ShapePolicy
from scaling.db import Store
from scaling import vocab as names
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import ModelSpec

# User text that would run as script if a report failed to escape it.
HOSTILE = "<script>alert(1)</script>"
HOSTILE_TAG = '<img src=x onerror="alert(2)">'
HOSTILE_ERROR = "boom </script><script>alert(3)</script> <!-- &amp;"

# A law whose losses look like a byte-level model's (ln 256 = 5.55 at the start).
TRUTH = dict(E=1.0, A=30.0, B=60.0, alpha=0.30, beta=0.30)


def true_loss(N: np.ndarray | float, D: np.ndarray | float, truth: dict[str, float] | None = None) -> np.ndarray:
    t = truth or TRUTH
    return t["E"] + t["A"] / np.power(N, t["alpha"]) + t["B"] / np.power(D, t["beta"])


def true_n_opt(C: float, truth: dict[str, float] | None = None) -> float:
    """N_opt of ``truth`` (default TRUTH) at C under C = 6ND (Hoffmann et al. 2022, eq. 4)."""
    t = truth or TRUTH
    G = (t["alpha"] * t["A"] / (t["beta"] * t["B"])) ** (1 / (t["alpha"] + t["beta"]))
    return G * (C / 6) ** (t["beta"] / (t["alpha"] + t["beta"]))


@dataclass
class SweepSpec:
    """What to generate: an IsoFLOP grid of budgets × sizes around each budget's optimum."""

    sweep: str = "synthetic"
    budgets: tuple[float, ...] = (1e13, 3e13, 1e14)
    sizes_per_budget: int = 5
    span: float = 8.0  # sizes from N_opt/span to N_opt*span, log-spaced
    steps: int = 200
    eval_every: int = 20
    perf_every: int = 1
    extra_metrics: bool = False  # also lr and grad norm at every step (as the trainer logs them)
    failures: tuple[int, ...] = ()  # run indices that fail part-way
    spikes: tuple[int, ...] = ()  # run indices with a loss spike, a rollback and a retry
    pending: tuple[int, ...] = ()  # run indices never started
    repeat_shapes: bool = False  # keep sizes the shape policy rounds to one shape (as extra seeds)
    name_of: Callable[[int], str | None] | None = None
    tags_of: Callable[[int], dict[str, str]] | None = None
    error_text: str = "RuntimeError: loss kept spiking after 5 rollbacks"
    plan: object = None
    seed: int = 0
    truth: dict[str, float] | None = None  # the law the losses follow (default TRUTH)
    params_convention: str = "non_embedding"
    flops_convention: str = "6N"
    keys: list[str] = field(default_factory=list)


def specs_for(s: SweepSpec) -> list[RunSpec]:
    """The runs of ``s``: per budget, sizes log-spaced around the true N_opt, D = C / (6N)."""
    policy = ShapePolicy(aspect_ratio=32, head_size=16, vocab_size=256, context=64)
    out: list[RunSpec] = []
    seen: set[str] = set()
    i = 0
    for C in s.budgets:
        centre = true_n_opt(C, s.truth)
        for N in np.exp(np.linspace(math.log(centre / s.span), math.log(centre * s.span), s.sizes_per_budget)):
            shape = policy.shape_for(float(N))
            model = ModelSpec(n_layer=shape.n_layer, d_model=shape.d_model, n_head=shape.n_head,
                              vocab_size=shape.vocab_size, context=shape.context)
            fpt = shape.flops_per_token(s.flops_convention, s.params_convention)
            D = max(int(C / fpt), 4096)
            spec = RunSpec(
                model=model, tokens=D, batch_tokens=512, seed=s.seed,
                params_convention=s.params_convention, flops_convention=s.flops_convention,
                name=s.name_of(i) if s.name_of else None,
                tags=s.tags_of(i) if s.tags_of else {},
            )
            if spec.key in seen and not s.repeat_shapes:
                continue
            while spec.key in seen:  # the shape policy gave this size already: another seed of it
                spec = spec.model_copy(update={"seed": spec.seed + 1})
            seen.add(spec.key)
            out.append(spec)
            i += 1
    return out


def build(url: str, s: SweepSpec | None = None) -> SweepSpec:
    """Write the sweep ``s`` into the database at ``url``; returns ``s`` with its run keys."""
    s = s or SweepSpec()
    rng = np.random.default_rng(s.seed)
    specs = specs_for(s)
    store = Store(url)
    try:
        store.register(s.sweep, [sp.record() for sp in specs], plan=s.plan,
                       params_convention=s.params_convention, flops_convention=s.flops_convention)
        for i, spec in enumerate(specs):
            s.keys.append(spec.key)
            if i in s.pending:
                continue
            _train(store, s, spec, i, rng)
    finally:
        store.close()
    return s


def _train(store: Store, s: SweepSpec, spec: RunSpec, i: int, rng: np.random.Generator) -> None:
    key, sweep = spec.key, s.sweep
    N, D = float(spec.n_params), float(spec.tokens)
    fpt = spec.flops_per_token
    store.claim(key, f"host-{i % 2}", sweep=sweep)
    steps = s.steps
    fail_at = int(steps * 0.6) if i in s.failures else None
    spike_at = int(steps * 0.4) if i in s.spikes else None
    tokens = np.linspace(D / steps, D, steps)
    base = true_loss(N, tokens, s.truth) + 0.6 * np.exp(-np.arange(steps) / (steps * 0.03))  # warm-up bump
    train = base * (1 + 0.01 * rng.standard_normal(steps))
    if spike_at is not None:
        train[spike_at] *= 3.0
    last = steps if fail_at is None else fail_at
    rows: list[tuple] = []
    tok_per_s = 2e5 / (N / 1e6) ** 0.8
    for k in range(last):
        step, t, f = k + 1, int(tokens[k]), float(tokens[k] * fpt)
        rows.append((step, t, f, names.TRAIN_LOSS, float(train[k])))
        if s.extra_metrics:
            rows.append((step, t, f, names.LEARNING_RATE, 1e-3 * min(1.0, step / (0.05 * steps))))
            rows.append((step, t, f, names.GRAD_NORM, float(abs(1 + 0.2 * rng.standard_normal()))))
        if step % s.perf_every == 0:
            rows.append((step, t, f, names.TOKENS_PER_SECOND, float(tok_per_s * (1 + 0.05 * rng.standard_normal()))))
            rows.append((step, t, f, names.MFU, float(0.3 * (1 + 0.05 * rng.standard_normal()))))
        if step % s.eval_every == 0 or step == steps:
            rows.append((step, t, f, names.EVAL_LOSS, float(base[k] * (1 + 0.003 * rng.standard_normal()))))
        if len(rows) >= 20_000:
            store.log_metrics(key, rows, sweep=sweep)
            rows = []
    if rows:
        store.log_metrics(key, rows, sweep=sweep)
    if spike_at is not None:
        store.log_event(key, spike_at, names.LOSS_SPIKE, {"loss": float(train[spike_at]), "threshold": float(base[spike_at] * 4)}, sweep=sweep)
        store.log_event(key, spike_at, names.ROLLBACK, {"to_step": spike_at - 10, "skipped_batches": 1}, sweep=sweep)
        # the first attempt lost its worker: failed, then claimed again (a second attempt, for real)
        store.finish(key, "failed", error="worker lost", sweep=sweep)
        store.log_event(key, spike_at + 5, names.RETRY, "worker restarted after a lost node", sweep=sweep)
        store.claim(key, "host-retry", sweep=sweep)
    if fail_at is not None:
        store.log_event(key, fail_at, names.FAILURE, s.error_text, sweep=sweep)
        store.finish(key, "failed", error=s.error_text, sweep=sweep)
        return
    final_eval = float(true_loss(N, D, s.truth) * (1 + 0.003 * rng.standard_normal()))
    store.finish(key, "completed", final_train_loss=float(train[-1]), final_eval_loss=final_eval, sweep=sweep)


#: The downstream task of :func:`build_answer_sweep`.
ANSWER_TASK = "arc_sim"


def build_answer_sweep(url: str, sweep: str = "answer", seed: int = 3) -> list[str]:
    """A sweep whose report's first screen has every answer: hyperparameter groups (lr and batch varied
    at 12 (N, D) points, :mod:`scaling.fitting.hyperparams.hparams_synthetic`) whose runs were also scored on a
    task at four evaluations (task loss from its own law, accuracy a sigmoid of it). Returns the keys."""
    from scaling.fitting.hyperparams import hparams_synthetic as HS
    from scaling.fitting.tasks.task_columns import metric_name

    rng = np.random.default_rng(seed)
    runs = HS.sweep(HS.HparamTruth(), rng, sizes=(5e7, 1e8, 2e8, 4e8), tokens_per_param=(10, 20, 40), n_lr=3,
                    n_batch=3, noise=0.001)
    keys = HS.store_sweep(url, runs, sweep)
    with Store(url) as store:
        for key, row in zip(keys, runs.itertuples(index=False)):
            rows = []
            for step, f in enumerate((0.25, 0.5, 0.75, 1.0), start=1):
                t = row.D * f
                bpb = (0.6 + 40 / row.N ** 0.3 + 300 / t ** 0.32) * math.exp(rng.normal(0, 0.004))
                acc = 0.6 / (1 + math.exp(6.0 * (bpb - 1.1))) + 0.25 + rng.normal(0, 0.004)
                rows += [(step, t, 6 * row.N * t, metric_name(ANSWER_TASK, "bpb"), bpb),
                         (step, t, 6 * row.N * t, metric_name(ANSWER_TASK, "acc"), acc)]
            store.log_metrics(key, rows)
    return keys


def reanswer(data) -> None:
    """``data``'s analysis with its recommendation redone from its laws as they stand (with the doubts a
    test added since): the report reads the analysis' answer and compares no laws of its own."""
    from dataclasses import replace

    from scaling.fitting.recommend import compare_laws
    from scaling.reports.html import next_budget

    data.sweep_fit = replace(data.sweep_fit, recommendation=compare_laws(data.fits, next_budget(data), source=data.sweep))
