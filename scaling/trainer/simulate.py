"""A simulated trainer: the loss curve a known Chinchilla law gives, with noise, instead of training.

``simulate(spec, ...)`` is what :func:`scaling.trainer.train` runs for a spec with ``simulate``
set. It writes what a trained run writes (train-loss rows along the run, a few eval-loss rows,
the final eval loss the fits use, one ``simulated`` event) through the same database API, in
milliseconds and without torch, so the scheduler, the adaptive loop and the fits can be tested at
any scale (1e24 FLOPs is a few rows); with ``simulate.pace`` a run takes that many wall seconds per
step instead, its rows written as its steps pass. Nothing is written to the run folder: there is no state to
resume, and a repeated attempt writes the same rows (metrics are idempotent on run, step and name).

The curve: after t of the run's D tokens the loss is L(N, t) = E + A / N^alpha + B / t^beta
(t = tokens seen so far, as if each prefix had been trained to completion), so the curve ends
at L(N, D). A law with ``hparams`` adds the same penalty to every point of the run,
k_lr (ln lr - ln lr*(N, D))^2 + k_batch (ln B - ln B*(D))^2 with lr* = lr_c N^lr_a D^lr_b and
B* = batch_d D^batch_e: zero at a known optimum, so sweeps of learning rate and batch have a
minimum to find. Every recorded value is multiplied by exp(noise * z), z standard normal, drawn
from a generator seeded by the run's key (which hashes the law, the noise, the simulator's
seed and the run's seed): the same run always gives the same numbers.

With a ``curve`` law (:class:`scaling.trainer.spec.SimulatedCurve`) the loss at each step follows
that law in the run's learning-rate schedule (the rate of every step from
:func:`scaling.lr_schedule.lr_steps`, as the trainer steps), plus A / N^alpha of the Chinchilla
law for the run's size: ``curve.evals`` eval-loss rows evenly spread after warmup, so the curve
fits of :mod:`scaling.fitting.curves` can be checked against a known truth.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling import vocab
from scaling.curve_forms import areas, curve_loss, warmup_end
from scaling.lr_schedule import lr_steps
from scaling.trainer.early_stop import FinalPrediction, Reference, references, stop_record, stopping_point
from scaling.trainer.result import TrainResult
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import SimulatedLaw

if TYPE_CHECKING:
    from scaling.db import Store

#: Eval-loss rows per run (log-spaced steps, the last step always among them).
EVAL_POINTS = 8


def law_loss(law: SimulatedLaw, N: float | np.ndarray, D: float | np.ndarray, sparsity: float = 0.0,
             granularity: float = 1.0) -> np.ndarray:
    """L(N, D) = E + K / N^alpha + B / D^beta, in float64 (N and D up to 1e13 and beyond are fine), K the
    law's A, or with an ``experts`` term A (1 - S)^delta + g / G^gamma at the run's sparsity S and granularity G."""
    N = np.asarray(N, dtype=float)
    D = np.asarray(D, dtype=float)
    return law.E + n_coefficient(law, sparsity, granularity) / N**law.alpha + law.B / D**law.beta


def n_coefficient(law: SimulatedLaw, sparsity: float = 0.0, granularity: float = 1.0) -> float:
    """The coefficient of the N term: A, or A (1 - S)^delta + g / G^gamma with an ``experts`` term."""
    term = law.experts
    if term is None:
        return law.A
    return law.A * (1.0 - sparsity) ** term.delta + term.g / granularity**term.gamma


def hparam_penalty(law: SimulatedLaw, N: float, D: float, lr: float, batch: float) -> float:
    """The loss a run of ``lr`` and ``batch`` tokens adds over the law (0 without ``hparams``).

    Computed in logs (ln lr* = ln lr_c + lr_a ln N + lr_b ln D), so no power overflows.
    """
    term = law.hparams
    if term is None:
        return 0.0
    ln_lr_opt = math.log(term.lr_c) + term.lr_a * math.log(N) + term.lr_b * math.log(D)
    ln_b_opt = math.log(term.batch_d) + term.batch_e * math.log(D)
    return term.k_lr * (math.log(lr) - ln_lr_opt) ** 2 + term.k_batch * (math.log(batch) - ln_b_opt) ** 2


def task_rows(spec: RunSpec, steps: np.ndarray, tokens: np.ndarray) -> list[tuple[int, int, float, str, float]]:
    """``task/<task>/bpb`` and ``acc`` of each simulated task at ``steps`` (``tokens`` seen by then).

    bpb follows the task's own law, with the run's log-normal noise; the accuracy is the sigmoid of
    the noiseless bpb, observed as a binomial share of the task's items. Drawn from a generator of
    their own, so a plan without tasks draws exactly what it drew before."""
    sim = spec.simulate
    if sim is None or not sim.tasks:
        return []
    rng = np.random.default_rng(np.random.SeedSequence([sim.seed, spec.seed, draw_key(spec), 1]))
    N, per_token = float(spec.n_params), spec.flops_per_token
    rows = []
    for task in sim.tasks:
        true_bpb = task.E + task.A / N**task.alpha + task.B / np.asarray(tokens, dtype=float) ** task.beta
        bpb = true_bpb * np.exp(sim.noise * rng.standard_normal(true_bpb.size))
        acc = task.chance + (1 - task.chance) / (1 + np.exp(np.clip(task.slope * (true_bpb - task.midpoint), -700, 700)))
        seen_acc = rng.binomial(task.items, acc) / task.items
        for kind, values in ((vocab.TASK_BPB, bpb), (vocab.TASK_ACC, seen_acc)):
            name = vocab.task_metric(task.name, kind)
            rows += [(int(s), int(t), float(per_token * t), name, float(v)) for s, t, v in zip(steps, tokens, values)]
    return rows


def curve_of(spec: RunSpec, N: float, penalty: float) -> tuple[Any, np.ndarray]:
    """The noiseless loss of a run under its ``simulate.curve`` law (a function of 1-based steps) and its
    eval steps: ``curve.evals`` of them, evenly spread from the end of warmup to the last step."""
    sim = spec.simulate
    assert sim is not None and sim.curve is not None
    lr = lr_steps(spec.steps, spec.optimizer.lr, spec.schedule)
    first = min(warmup_end(lr) + 1, spec.steps)
    evals = np.unique(np.linspace(first, spec.steps, sim.curve.evals).round().astype(np.int64))
    shift = n_coefficient(sim.law, spec.shape.expert_sparsity, spec.shape.granularity) / N**sim.law.alpha + penalty
    theta = sim.curve.theta()

    def expected(s: np.ndarray) -> np.ndarray:
        # A row at step s follows s updates: the rates of steps 0 .. s-1.
        idx = np.clip(np.asarray(s, np.int64) - 1, 0, spec.steps - 1)
        at, back = np.unique(idx, return_inverse=True)
        return curve_loss(sim.curve.form, theta, areas(lr, at))[back] + shift

    return expected, evals


def draw_key(spec: RunSpec) -> int:
    """What seeds a run's noise: its key without ``early_stop``, so a run that may stop early draws the
    curve the same run trained in full draws (and a sweep with the rule is comparable to one without)."""
    full = spec if spec.early_stop is None else spec.model_copy(update={"early_stop": None})
    return int(full.key, 16) % 2**63


def log_steps(steps: int, count: int) -> np.ndarray:
    """Up to ``count`` distinct steps from 1 to ``steps``, log-spaced, the last always included."""
    picked = np.unique(np.round(np.geomspace(1, steps, max(2, count))).astype(np.int64))
    return np.unique(np.append(picked[(picked >= 1) & (picked <= steps)], steps))


#: The Store a process's simulated runs write through: (url, identity of its SQLite file, Store).
_open: Optional[tuple[str, Optional[tuple[int, int]], "Store"]] = None


def _store(url: str) -> "Store":
    """One Store per process and database: a simulated run takes milliseconds, opening a Store
    (engine, schema check) takes more, and a Ray worker runs thousands of them in a big sweep.

    A SQLite file replaced since (another file at that path) is opened anew.
    """
    from scaling.db import Store
    from scaling.db.engine import sqlite_path

    global _open
    path = sqlite_path(url)
    identity = _file_identity(path)
    if _open is not None and _open[:2] == (url, identity) and (path is None or identity is not None):
        return _open[2]
    if _open is not None:
        _open[2].close()
    store = Store(url)
    _open = (url, _file_identity(path), store)
    return store


def _file_identity(path: Optional[Path]) -> Optional[tuple[int, int]]:
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if st is not None else None


def simulate(
    spec: RunSpec,
    store_url: Optional[str],
    run_dir: str | Path = "",
    *,
    attempt: Optional[int] = None,
    sweep: Optional[str] = None,
) -> TrainResult:
    """Write the simulated run's metrics and event to ``store_url``; returns its result."""
    refs = references(store_url, sweep, spec) if store_url is not None and spec.early_stop is not None else []
    rows, events, result = simulated_run(spec, attempt, run_dir, refs)
    store = _store(store_url) if store_url is not None else None
    if spec.simulate is not None and spec.simulate.pace:
        rows = _paced(spec.simulate.pace, result.steps, rows, store, spec.key, sweep)
    if store is not None:
        # One transaction for the rows and the events: a sweep of thousands of runs pays for one each.
        store.log_metrics(spec.key, rows, sweep=sweep, events=events)  # a stopped_early event sets stopped_step
    return result


def _paced(pace: float, steps: int, rows: list[tuple[int, int, float, str, float]], store: Optional["Store"],
           key: str, sweep: Optional[str]) -> list[tuple[int, int, float, str, float]]:
    """Take ``pace`` wall seconds per step of the run's ``steps``, writing each step's rows once its time
    has passed, as a trained run does; returns the last step's rows, left for the write that ends the run."""
    by_step: dict[int, list[tuple[int, int, float, str, float]]] = {}
    for row in rows:
        by_step.setdefault(row[0], []).append(row)
    order = sorted(by_step)
    start = time.monotonic()
    for step in order[:-1]:
        time.sleep(max(0.0, start + pace * step - time.monotonic()))
        if store is not None:
            store.log_metrics(key, by_step[step], sweep=sweep)
    time.sleep(max(0.0, start + pace * steps - time.monotonic()))
    return by_step[order[-1]] if order else []


def simulate_many(
    runs: list[tuple[RunSpec, int]], store_url: str, *, sweep: Optional[str] = None
) -> list[TrainResult | str]:
    """Simulate several runs, each (spec, attempt), writing all their rows and events in one
    transaction (what a scheduler packs into one task); each run's result, or the one-line error
    that stopped it. When the shared write fails, each run is written on its own, so an error is
    pinned on the run it belongs to."""
    from scaling.errors import SpecError
    from scaling.trainer.resolve import unresolved_problem

    outputs: dict[int, TrainResult | str] = {}
    writes: dict[int, tuple] = {}
    read: dict[str, list[Reference]] = {}  # the references of each schedule and peak rate, read once per task
    for i, (spec, attempt) in enumerate(runs):
        try:
            problem = unresolved_problem(spec)  # as train() checks
            if problem:
                raise SpecError(problem)
            refs = _references(store_url, sweep, spec, read) if spec.early_stop is not None else []
            rows, events, outputs[i] = simulated_run(spec, attempt, refs=refs)
            writes[i] = (spec.key, rows, events)
        except Exception as exc:  # noqa: BLE001 - one run's error is its own, the others go on
            outputs[i] = _error_line(exc)
    store = _store(store_url)
    try:
        store.log_runs(list(writes.values()), sweep=sweep)
    except Exception:  # noqa: BLE001 - find which run it was: write them one by one
        for i, write in writes.items():
            try:
                store.log_runs([write], sweep=sweep)
            except Exception as exc:  # noqa: BLE001
                outputs[i] = _error_line(exc)
    return [outputs[i] for i in range(len(runs))]


def _references(url: str, sweep: Optional[str], spec: RunSpec, read: dict[str, list[Reference]]) -> list[Reference]:
    """:func:`references` of ``spec``, read once per schedule and peak rate into ``read``."""
    recipe = json.dumps([spec.schedule.model_dump(mode="json"), spec.optimizer.lr], sort_keys=True)
    if recipe not in read:
        read[recipe] = references(url, sweep, spec)
    return read[recipe]


def _error_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:500]


def simulated_run(
    spec: RunSpec, attempt: Optional[int], run_dir: str | Path = "", refs: Optional[list[Reference]] = None
) -> tuple[list[tuple[int, int, float, str, float]], list[tuple[int, str, dict]], TrainResult]:
    """The run's metric rows, its events (step, kind, detail: ``simulated``, and ``stopped_early``
    for a run that stopped at an evaluation) and its result. ``refs``: the finished curves a run with
    ``early_stop`` predicts its final loss from (:func:`scaling.trainer.early_stop.references`)."""
    sim = spec.simulate
    if sim is None:
        raise ValueError("simulate() needs a spec with a simulate section")
    rng = np.random.default_rng(np.random.SeedSequence([sim.seed, spec.seed, draw_key(spec)]))
    N = float(spec.n_params)
    D = spec.trained_tokens
    batch = spec.batch_tokens
    steps = spec.steps
    per_token = spec.flops_per_token

    train_steps = log_steps(steps, sim.points)
    eval_steps = log_steps(steps, EVAL_POINTS)
    seen = lambda s: np.minimum(s.astype(float) * batch, float(D))  # noqa: E731 - tokens after each step
    penalty = hparam_penalty(sim.law, N, float(D), spec.optimizer.lr, float(batch))
    shape = spec.shape
    expected = lambda s: law_loss(sim.law, N, seen(s), shape.expert_sparsity,  # noqa: E731 - the noiseless curve
                                  shape.granularity) + penalty
    if sim.curve is not None:
        expected, eval_steps = curve_of(spec, N, penalty)
        train_steps = np.unique(np.concatenate([train_steps[train_steps >= eval_steps[0]], eval_steps[-1:]]))
    train = expected(train_steps) * np.exp(sim.noise * rng.standard_normal(train_steps.size))
    evals = expected(eval_steps) * np.exp(sim.noise * rng.standard_normal(eval_steps.size))
    stop = _stopping_point(spec, eval_steps, evals, refs or [])
    if stop is not None:  # what the run wrote up to the evaluation it stopped at
        train, train_steps = train[train_steps <= stop.step], train_steps[train_steps <= stop.step]
        evals, eval_steps = evals[eval_steps <= stop.step], eval_steps[eval_steps <= stop.step]

    rows = [(int(s), int(t), float(per_token * t), vocab.TRAIN_LOSS, float(v))
            for s, t, v in zip(train_steps, seen(train_steps), train)]
    rows += [(int(s), int(t), float(per_token * t), vocab.EVAL_LOSS, float(v))
             for s, t, v in zip(eval_steps, seen(eval_steps), evals)]
    rows += task_rows(spec, eval_steps, seen(eval_steps))
    detail = {"law": sim.law.model_dump(), "noise": sim.noise, "seed": sim.seed, "attempt": attempt,
              "N": N, "D": D, "expected_final_loss": float(expected(np.array([steps]))[0]),
              **({"curve": sim.curve.model_dump()} if sim.curve is not None else {}),
              **({"tasks": [t.model_dump() for t in sim.tasks]} if sim.tasks else {})}
    events = [(steps, vocab.SIMULATED, detail)]
    done, tokens, final = steps, D, float(evals[-1])
    data: dict[str, Any] = {"simulated": True}
    if stop is not None:
        done, tokens, final = stop.step, int(seen(np.array([stop.step]))[0]), stop.loss
        data["stopped_early"], detail = stop_record(stop, spec, attempt)
        events.append((stop.step, vocab.STOPPED_EARLY, detail))
    result = TrainResult(
        key=spec.key,
        status=vocab.COMPLETED,
        steps=done,
        tokens=tokens,
        flops=per_token * tokens,
        final_train_loss=float(train[-1]),
        final_eval_loss=final,
        run_dir=str(run_dir),
        data=data,
    )
    return rows, events, result


def _stopping_point(spec: RunSpec, eval_steps: np.ndarray, evals: np.ndarray,
                    refs: list[Reference]) -> Optional[FinalPrediction]:
    """Where a run with ``early_stop`` stops, or None (:mod:`scaling.trainer.early_stop`)."""
    rule = spec.early_stop
    if rule is None or not refs:
        return None
    return stopping_point(refs, eval_steps, evals, spec.steps, float(spec.n_params), tolerance=rule.tolerance,
                          after=rule.after, every=rule.every)
