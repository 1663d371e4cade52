"""Sweeps on a real local Ray: end to end, reruns, failures and retries, Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from scaling import vocab as names
from scaling.orchestrator.orphans import orphaned_ray_processes, raylet_pid_of, reap_orphaned_agents
from orch_helpers import assert_consistent, shape, write_plan

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("shared_ray")]
SCALING = str(Path(sys.executable).parent / "scaling")


def _run_sweep(plan: Path, url: str, **kw):
    from scaling.orchestrator.sweep import run_sweep

    return run_sweep(plan, db=url, fit=False, report=False, echo=lambda s: None, **kw)


def test_sweep_retries_failures_and_reruns_only_new_points(tmp_path: Path, sqlite_url: str) -> None:
    from scaling.db import connect

    grid = [
        {"models": [shape(1, 16), shape(2, 16)], "tokens": [512 * 8]},
        # fails on its first attempt only: the retry completes it
        {"models": [shape(1, 32)], "tokens": [512 * 8], "faults": {"raise_at_step": 3, "raise_attempts": 1}},
        # fails on every attempt: failed after 1 + retries attempts, with its error
        {"models": [shape(2, 32)], "tokens": [512 * 8], "faults": {"raise_at_step": 2}},
    ]
    plan = write_plan(tmp_path / "p.yaml", "faults", tmp_path / "runs", grid)
    out = _run_sweep(plan, sqlite_url).outcome
    assert len(out.completed) == 3 and len(out.failed) == 1
    res = connect(sqlite_url)
    runs = res.runs(sweep="faults").set_index("N")
    poisoned = runs.loc[runs["status"] == "failed"].iloc[0]
    assert "injected fault at step 2" in poisoned["error"]
    assert poisoned["attempts"] == 2  # 1 + retries
    retried = runs.loc[runs["attempts"] == 2]
    assert set(retried["status"]) == {"completed", "failed"}
    ev = res.events(sweep="faults", kinds=[names.FAILURE])
    assert ev.groupby("run_key").size().to_dict() == {poisoned["run_key"]: 2, **{
        k: 1 for k in retried.loc[retried["status"] == "completed", "run_key"]}}
    # Unaffected runs were tried once.
    assert sorted(runs.loc[runs["attempts"] == 1, "status"]) == ["completed", "completed"]

    from scaling.orchestrator.status import sweep_status

    st = sweep_status(sqlite_url, "faults")
    assert st["counts"] == {"completed": 3, "failed": 1}
    assert [f["key"] for f in st["failures"]] == [poisoned["run_key"]]
    assert "injected fault" in st["failures"][0]["error"]
    assert 0 < st["flops_remaining"] < st["flops_total"]

    # Rerun with one more point: only it trains; the exhausted failure is not retried again.
    grid[0]["models"].append(shape(3, 16))
    write_plan(plan, "faults", tmp_path / "runs", grid)
    import ray

    assert ray.is_initialized(), "a sweep shut down a Ray it did not start"
    from scaling.orchestrator.plan import load_plan

    out2 = _run_sweep(load_plan(plan)[0], sqlite_url).outcome  # a Plan object, as a notebook holds one
    assert len(out2.completed) == 1 and len(out2.skipped) == 3 and len(out2.failed) == 1
    runs2 = connect(sqlite_url).runs(sweep="faults")
    assert int(runs2["attempts"].sum()) == int(runs["attempts"].sum()) + 1
    for key in out.completed:
        assert (tmp_path / "runs" / "faults" / key).is_dir()  # <runs_dir>/<sweep>/<key>/


def _wait_for(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def _progress(url: str, sweep: str) -> tuple[dict[str, str], dict[str, int]]:
    from scaling.db import connect

    try:
        res = connect(url)
        runs = res.runs(sweep=sweep)
        m = res.metrics(names=[names.TRAIN_LOSS], sweep=sweep)
    except Exception:
        return {}, {}
    steps = m.groupby("run_key")["step"].max().to_dict() if len(m) else {}
    return dict(zip(runs["run_key"], runs["status"])), steps


@pytest.mark.parametrize("sig", [signal.SIGKILL, "two Ctrl-C"])
def test_killed_sweep_resumes(sig: int | str, tmp_path: Path, sqlite_url: str) -> None:
    """SIGKILL (or Ctrl-C pressed twice) mid-sweep, then rerun: nothing completed retrains, partial
    runs are taken again (a SIGKILLed run trained for real resumes from its checkpoint). A terminal's
    Ctrl-C goes to the whole process group, Ray's processes included; the first starts the clean stop
    (exit 130, runs marked interrupted), the second must not cut it short, so this case holds a single
    Ctrl-C's too. The clean stop is the Ctrl-C case's subject, not training: its runs are simulated,
    paced at 0.15 s a step (a row every step) so that they are in flight when the signals come."""
    from scaling.db import connect

    grid = [{"models": [shape(1, 16), shape(2, 32), shape(3, 32)], "tokens": [512 * 40]}]
    simulated = sig == "two Ctrl-C"
    paced = {"simulate": {"law": {"E": 1.8, "A": 480.0, "B": 2100.0, "alpha": 0.35, "beta": 0.37},
                          "points": 1000, "pace": 0.15}} if simulated else {}
    plan = write_plan(tmp_path / "p.yaml", "killed", tmp_path / "runs", grid,
                      resources={"num_cpus": 2, "max_concurrent": 2}, **paced)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = open(tmp_path / "sweep1.log", "w")
    proc = subprocess.Popen([SCALING, "sweep", str(plan), "--db", sqlite_url, "--no-fit", "--no-report"],
                            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        def one_done_one_partial() -> bool:
            status, steps = _progress(sqlite_url, "killed")
            done = [k for k, s in status.items() if s == "completed"]
            partial = [k for k, s in status.items() if s == "running" and steps.get(k, 0) >= 6]
            return bool(done) and bool(partial)

        _wait_for(one_done_one_partial, 150, "one completed and one partial run")
        _, steps_before = _progress(sqlite_url, "killed")  # (read first: a run claimed since has no steps here)
        before = connect(sqlite_url).runs(sweep="killed").set_index("run_key")
        raylet = next(p.pid for p in psutil.Process(proc.pid).children() if p.name() == "raylet")
        if sig == "two Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)
            time.sleep(0.3)
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, sig)
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
    if sig != signal.SIGKILL:
        text = (tmp_path / "sweep1.log").read_text()
        assert code == 130 and text.rstrip().endswith("interrupted"), text
        after_stop = connect(sqlite_url).runs(sweep="killed")
        assert "running" not in set(after_stop["status"])
        assert "interrupted" in set(after_stop["status"])
        _wait_for(lambda: not _group_alive(proc.pid), 30, "Ray's processes in the sweep's group to exit")
    else:
        assert code == -signal.SIGKILL
        # The killed sweep's raylet dies with it; its workers exit with it, and the sweep's watchdog
        # stops its agents: nothing it started runs on, before any other sweep starts.
        _wait_for(lambda: not _raylet_of(proc.pid), 30, "the killed sweep's raylet to exit")
        _wait_for(lambda: not _left_by(raylet), 20, "the killed sweep's agents and workers to be reaped")

    rerun = subprocess.run([SCALING, "sweep", str(plan), "--db", sqlite_url, "--no-fit", "--no-report",
                            "--stale-after", "2"], capture_output=True, text=True, timeout=240, env=env)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    runs = assert_consistent(sqlite_url, "killed").set_index("run_key")
    completed_before = before.index[before["status"] == "completed"]
    # Partial: running, 6 steps in (trained, with its checkpoint of step 4); one claimed just before the signal has none.
    partial_before = [k for k in before.index[before["status"] == "running"] if steps_before.get(k, 0) >= 6]
    for key in completed_before:
        assert runs.loc[key, "attempts"] == before.loc[key, "attempts"], "a completed run was retrained"
    if simulated:  # stopped cleanly: the partial runs were marked interrupted, and the rerun completed them
        assert set(after_stop.set_index("run_key").loc[partial_before, "status"]) <= {"interrupted"}
    else:
        resumes = connect(sqlite_url).events(sweep="killed", kinds=[names.RESUME])
        assert set(partial_before) <= set(resumes["run_key"]), "a partial run did not resume from its checkpoint"
    assert "running" not in set(runs["status"])


def test_reaping_spares_a_live_rays_processes() -> None:
    """Only a killed Ray's processes are reaped: one of a live Ray that is no raylet's child (a
    task's own subprocess keeps the task's ``ray::`` name) is left running, as is the live Ray
    (under pytest-xdist the other worker's Ray, or this one's, lives beside a killed sweep's)."""
    import ray

    @ray.remote(num_cpus=0)
    def fork_a_child() -> int:
        pid = os.fork()
        if pid == 0:  # the child: named as its task, no raylet's child, alive until killed
            time.sleep(300)
            os._exit(0)
        return pid

    child = psutil.Process(ray.get(fork_a_child.remote()))
    try:
        assert child.name().startswith("ray::") and child.parent().name() != "raylet"
        assert child not in orphaned_ray_processes()
        reap_orphaned_agents()
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE, "a live Ray's process was reaped"
        assert ray.get(ray.remote(lambda: 1).remote(), timeout=60) == 1  # the live Ray still runs tasks
    finally:
        child.kill()


def _left_by(raylet: int) -> list[psutil.Process]:
    """The running processes the raylet ``raylet`` started (its agents and workers)."""
    found = []
    for p in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            if p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            ray_child = (p.info["name"] or "").startswith("ray::") or any(
                "agent" in a for a in (p.info["cmdline"] or [])[:3])
            if ray_child and raylet_pid_of(p) == raylet:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, OSError):
            continue
    return found


def _raylet_of(pid: int) -> bool:
    return any(p.info["ppid"] == pid and p.info["name"] == "raylet"
               for p in psutil.process_iter(["ppid", "name"]))


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_two_worker_run_goes_through_ray_train_and_survives_a_killed_worker(tmp_path: Path, sqlite_url: str) -> None:
    """A run with workers: 2 goes through Ray Train once its two CPUs are set aside, as one
    tensor-parallel pair (ZeRO-3 asked for, with one data-parallel rank to shard over). ``faults.kill_at_step`` SIGKILLs rank 1's process when step 5
    starts (first attempt only): rank 0's tensor peer, so half of every block's weights is lost with
    it. Ray Train sees the worker die and restarts the group (the plan's ``retries``), which resumes
    from the step-4 checkpoint; the run completes with every step's loss stored once and equal to an
    uninterrupted single process's. The restart path is the same for every layout; which layouts'
    checkpoints reshard is the checkpoint tests' subject (test_checkpoint_reshard.py, and tp2 x dp2
    in test_tensor_parallel.py)."""
    import tempfile

    from scaling.db import connect
    from scaling.orchestrator.status import sweep_status
    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    grid = [{"models": [shape(2, 32)], "tokens": [512 * 10], "faults": {"kill_at_step": 5, "kill_attempts": 1}}]
    train_section = {"precision": "fp32", "batch_tokens": 512, "eval_interval": 1, "eval_tokens": 512,
                     "checkpoint_interval": 4, "optimizer": {"lr": 3e-3}}  # reported every step, as one process
    plan = write_plan(tmp_path / "p.yaml", "multi", tmp_path / "runs", grid, train=train_section,
                      resources={"num_cpus": 2, "workers": 2, "tp": 2, "strategy": "zero3", "cpus_per_worker": 1})
    out = _run_sweep(plan, sqlite_url).outcome
    assert len(out.completed) == 1 and not out.failed
    runs = assert_consistent(sqlite_url, "multi")
    spec = RunSpec.model_validate(runs.iloc[0]["spec"])
    assert (spec.execution.workers, spec.execution.tp, spec.execution.strategy) == (2, 2, "zero3")
    status = sweep_status(sqlite_url, "multi")
    assert status["counts"] == {"completed": 1} and status["flops_remaining"] == 0
    results = connect(sqlite_url)
    losses = results.metrics(run_keys=[spec.key], names=[names.TRAIN_LOSS])
    assert sorted(losses["step"].tolist()) == list(range(1, 11))  # each step once, none missing
    events = results.events(run_keys=[spec.key])
    assert events["kind"].tolist().count(names.RETRY) == 1
    retry = events[events["kind"] == names.RETRY].iloc[0]
    assert retry["step"] == 4
    assert "rank 1" in retry["detail"]["error"]  # what the controller saw die, recorded for the event
    assert names.RESUME in events["kind"].tolist()

    # The restored run computes what an uninterrupted run computes (fp32: reduction order only).
    single = RunSpec.model_validate({**spec.model_dump(), "execution": {
        **spec.execution.model_dump(), "workers": 1, "tp": 1, "strategy": "single"}})
    seen: list[dict] = []
    with tempfile.TemporaryDirectory() as ref_dir:  # attempt 2: the kill is the first attempt's only
        train(single, None, ref_dir, attempt=2, report=lambda step, metrics, ckpt: seen.append(metrics))
    ref = {m["step"]: m["train_loss"] for m in seen}
    got = dict(zip(losses["step"], losses["value"]))
    assert [got[s] for s in range(1, 11)] == pytest.approx([ref[s] for s in range(1, 11)], rel=1e-5, abs=0)


def test_a_sweep_into_another_database_does_not_resume_the_first_ones_runs(tmp_path: Path, sqlite_url: str) -> None:
    """Re-running a plan with --db B over the runs_dir a sweep into A trained: refused in one line
    (dry run too) before anything is registered in B, instead of runs "completed" there from A's
    final checkpoints with no metric rows."""
    from cli_run import run_main
    from scaling.db import connect

    plan = write_plan(tmp_path / "p.yaml", "moved", tmp_path / "runs", [{"models": [shape(1, 16)], "tokens": [512 * 4]}])
    assert len(_run_sweep(plan, sqlite_url).outcome.completed) == 1
    other = f"sqlite:///{tmp_path / 'other.db'}"
    for extra in ([], ["--dry-run"]):
        got = run_main("sweep", str(plan), "--db", other, "--no-fit", "--no-report", *extra)
        assert got.code == 2 and got.err.count("\n") == 1 and "Traceback" not in got.err, got
        assert "results.db" in got.err and "other.db" in got.err and "runs_dir" in got.err, got.err
    assert not (tmp_path / "other.db").exists() or connect(other).sweeps().empty
