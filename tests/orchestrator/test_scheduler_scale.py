"""The scheduler's work per event does not grow with the sweep: a run's key is computed once, and
admission, completion and the progress display touch the runs an event concerns, not all of them.

Counted, not timed: how often a run's state is read, and how many lines the display prints. The
scheduler is driven through its own steps (admit, complete, notify) against a real SQLite
database; Ray is replaced at its two touch points (the cluster's size, and task submission,
which returns a token) because what is counted is the driver's bookkeeping. Real Ray sweeps run
in test_sweep.py, and benchmarks/bench_sweep.py --scale measures the whole at 10,000 runs.
"""

from __future__ import annotations

import copy
import io
import pickle
from pathlib import Path

import pytest
import yaml

from scaling import vocab
from scaling.db import Store, connect
from scaling.db.lifecycle import RESERVING, IllegalTransition
from scaling.orchestrator.display import SweepDisplay, render
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.orchestrator import scheduler
from scaling.orchestrator.scheduler import RunState, Scheduler
from scaling.orchestrator.sweep import register
from scaling.orchestrator.worker import RunOutcome
from scaling.trainer.spec import RunRequest, RunSpec

LAW = {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37}
SIZES = [1e7, 2e7, 5e7, 1e8, 2e8, 5e8, 1e9, 2e9, 5e9, 1e10]


def test_a_spec_computes_its_key_once_and_keeps_the_stored_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    original = RunSpec.key_fields
    monkeypatch.setattr(RunSpec, "key_fields", lambda self: calls.append(1) or original(self))
    # A request keeps the spec defaults older keys were computed with (precision auto) and keys alike.
    spec = RunRequest(model={"n_layer": 2, "d_model": 64, "n_head": 2}, tokens=65536, batch_tokens=8192)
    assert {spec.key for _ in range(1000)} == {"6897d5a9e3062b8e"}  # the key stored databases hold
    assert len(calls) == 1
    # A copy with other fields has its own key (the cached one is not carried over) ...
    other = spec.model_copy(update={"seed": 1})
    assert other.key == RunRequest.model_validate({**spec.model_dump(), "seed": 1}).key != spec.key
    # ... a copy of the same fields, a pickled or a deep-copied spec keep the same.
    assert spec.model_copy().key == copy.deepcopy(spec).key == pickle.loads(pickle.dumps(spec)).key == spec.key
    # Not part of what is stored or sent to a worker, and no part of equality.
    assert "key" not in spec.model_dump() and "key" not in spec.model_dump_json()
    assert spec == RunRequest.model_validate_json(spec.model_dump_json())


def _scheduler(tmp_path: Path, url: str, runs: int, monkeypatch: pytest.MonkeyPatch) -> Scheduler:
    plan_path = tmp_path / f"p{runs}.yaml"
    plan_path.write_text(yaml.safe_dump({
        "name": f"scale{runs}", "runs_dir": str(tmp_path / "runs"),
        "simulate": {"law": LAW, "noise": 0.005, "seed": 0},
        "train": {"batch_tokens": 4 * 1024 * 1024}, "resources": {"num_cpus": 2},
        "seeds": list(range(runs // len(SIZES))), "grid": [{"models": SIZES, "compute": [1e22]}],
    }))
    plan, source = load_plan(plan_path)
    expansion = expand(plan, source)
    store = Store(url)
    register(store, plan, expansion)
    sched = Scheduler(expansion.runs, store, url, plan.name, tmp_path / "runs", retries=0)
    tokens = iter(range(10**9))
    monkeypatch.setattr(sched, "_cluster_capacity", lambda: (2.0, 0.0))
    monkeypatch.setattr(sched, "_submit", lambda *a, **kw: next(tokens))
    monkeypatch.setattr(sched, "_submit_simulated", lambda *a, **kw: next(tokens))
    return sched


def _drive(sched: Scheduler, display: SweepDisplay) -> None:
    """The scheduler's loop with each task done as soon as it is collected."""
    sched._prepare()
    display.update(sched)
    while sched._work_left():
        sched._admit()
        display.update(sched)  # each run is seen running, however many a task packs
        ref, states = next(iter(sched._in_flight.items()))
        del sched._in_flight[ref]
        sched._completed([(s, RunOutcome(s.key, final_train_loss=3.0, final_eval_loss=3.1)) for s in states])
        display.update(sched)


@pytest.mark.parametrize("live", [False, True], ids=["log", "live"])
def test_per_event_work_does_not_grow_with_the_sweep(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     live: bool) -> None:
    from rich.console import Console

    reads = [0]
    state = RunState.state
    monkeypatch.setattr(RunState, "state", property(lambda s: reads.__setitem__(0, reads[0] + 1) or state.fget(s),
                                                    state.fset))
    per_run = {}
    for runs in (50, 500):
        sched = _scheduler(tmp_path, f"sqlite:///{tmp_path / f'r{runs}.db'}", runs, monkeypatch)
        out = io.StringIO()
        reads[0] = 0
        with SweepDisplay(Console(file=out, width=200), live=live) as display:
            _drive(sched, display)
        per_run[runs] = reads[0] / runs
        outcome = sched.outcome()
        assert len(outcome.completed) == runs and outcome.ok
        with connect(sched.store_url) as results:
            assert set(results.runs(sweep=sched.sweep)["status"]) == {vocab.COMPLETED}
        if not live:  # a line per change of state seen (queued, running, completed)
            lines = out.getvalue().splitlines()
            assert len(lines) == 3 * runs
            assert sorted(line.split()[1] for line in lines if " completed " in line) == sorted(s.key for s in sched.states)
        assert sched.tally.counts() == {vocab.COMPLETED: runs}
    # A walk over every run at each event would read ten times as many states per run at 500 runs.
    assert per_run[500] <= 1.2 * per_run[50], per_run


def test_the_live_table_shows_running_runs_first_and_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rich.console import Console

    monkeypatch.setattr(scheduler, "SIMULATED_PER_TASK", 1)  # a run per task, as a trained run has
    sched = _scheduler(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", 100, monkeypatch)
    sched._prepare()
    sched._admit()
    running = [s.key for states in sched._in_flight.values() for s in states]
    assert len(running) == 2  # two CPUs
    out = io.StringIO()
    Console(file=out, width=200).print(render(sched))
    lines = [line for line in out.getvalue().splitlines() if any(k in line for k in (s.key for s in sched.states))]
    assert len(lines) == 30  # bounded whatever the sweep's size
    assert all(k in "".join(lines[:2]) for k in running) and "queued" in lines[2]
    assert "2 running" in out.getvalue() and "98 queued" in out.getvalue()


def test_a_stop_releases_runs_collected_but_not_yet_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task's runs leave the in-flight table when it is collected and are completed after: a stop
    between the two (an error or Ctrl-C) must still leave none of them running in the database."""
    sched = _scheduler(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", 100, monkeypatch)
    sched._prepare()
    sched._admit()
    collected = [s for states in sched._in_flight.values() for s in states]
    assert len(collected) == 2 * scheduler.SIMULATED_PER_TASK  # two CPUs, a pack each
    queued = next(sched.tally.queued())
    counts = sched.tally.counts()
    for s, illegal in [(collected[0], vocab.PENDING), (queued, vocab.INTERRUPTED), (queued, RESERVING + "!")]:
        with pytest.raises(IllegalTransition):  # a change the run state machine does not allow
            s.state = illegal
    assert sched.tally.counts() == counts and collected[0].state == vocab.RUNNING
    sched._in_flight.clear()  # collected; their outcome not written yet
    sched._stop("the sweep stopped: a database error")
    with connect(sched.store_url) as results:
        status = results.runs(sweep=sched.sweep).set_index("run_key")["status"]
    assert set(status[[s.key for s in collected]]) == {vocab.INTERRUPTED}
    assert set(status.drop([s.key for s in collected])) == {vocab.PENDING}


def test_the_sweeps_lines_and_live_table_write_counts_and_compute_as_the_report(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each run's N and D in the log lines and the live table as the report writes them (``1.00B``, ``2.05B``:
    :func:`scaling.fmt.count`), the compute caption as :func:`scaling.fmt.flops`."""
    import re

    from rich.console import Console

    from scaling import fmt

    sched = _scheduler(tmp_path, f"sqlite:///{tmp_path / 'r.db'}", 10, monkeypatch)
    out = io.StringIO()
    with SweepDisplay(Console(file=out, width=200), live=False) as display:
        _drive(sched, display)
    count = r"\d+(?:\.\d+)?[KMBT]?"
    lines = out.getvalue().splitlines()
    assert lines and all(re.match(rf"\[[\d:]+\] \S+ N={count} D={count} (queued|running|completed)", ln) for ln in lines), lines
    spec = sched.states[0].run.spec
    assert f" N={fmt.count(spec.n_params)} D={fmt.count(spec.trained_tokens)} " in out.getvalue()
    table = io.StringIO()
    Console(file=table, width=200).print(render(sched))
    row = next(ln for ln in table.getvalue().splitlines() if spec.key in ln)
    assert re.search(rf"│ +{fmt.count(spec.n_params)} │ +{fmt.count(spec.trained_tokens)} │", row), row
    assert re.search(r"compute \S+ / (\S+) FLOPs", table.getvalue())[1] == fmt.flops(sum(s.run.spec.flops for s in sched.states))
