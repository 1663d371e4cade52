"""An unusable runs_dir (procfs, a file in its place, a read-only folder) is one line, exit 2,
and the database is left as it was: nothing registered, no run left `running` (no Ray needed)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orch_helpers import shape, write_plan
from scaling import vocab
from scaling.db import Store, connect
from scaling.errors import UserError

SCALING = str(Path(sys.executable).with_name("scaling"))
GRID = [{"models": [shape(1, 16), shape(2, 16)], "tokens": [512 * 4]}]


def _unusable(tmp_path: Path, kind: str) -> Path:
    if kind == "proc":
        return Path("/proc/scaling-test/runs")  # procfs refuses new entries, even to root
    if kind == "file":
        (tmp_path / "taken").write_text("a file where the runs folder should go")
        return tmp_path / "taken"
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return folder


@pytest.mark.parametrize("kind", ["proc", "file", "read_only"])
def test_sweep_refuses_an_unusable_runs_dir_before_touching_the_database(tmp_path: Path, sqlite_url: str, kind: str) -> None:
    if kind == "read_only" and os.geteuid() == 0:
        pytest.skip("root writes through permission bits; the proc and file cases cover root")
    runs_dir = _unusable(tmp_path, kind)
    plan = write_plan(tmp_path / "plan.yaml", "rd", runs_dir, GRID)
    db_file = Path(sqlite_url.removeprefix("sqlite:///"))
    before = db_file.read_bytes()
    res = subprocess.run([SCALING, "sweep", str(plan), "--db", sqlite_url, "--no-fit", "--no-report"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("error: runs_dir ") and res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert str(runs_dir) in res.stderr
    assert db_file.read_bytes() == before
    with connect(sqlite_url) as res_:
        assert res_.sweeps().empty


def test_a_run_folder_that_cannot_be_made_leaves_its_run_unclaimed(tmp_path: Path, sqlite_url: str) -> None:
    """The scheduler makes a run's folder before claiming it, so a failure there (here a file has
    taken the sweep's folder after the up-front check) never leaves the run `running`."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.scheduler import Scheduler
    from scaling.orchestrator.sweep import register

    plan, source = load_plan(write_plan(tmp_path / "p.yaml", "rd", tmp_path / "runs", GRID))
    exp = expand(plan, source)
    with Store(sqlite_url) as store:
        register(store, plan, exp)
        sched = Scheduler(exp.runs, store, sqlite_url, "rd", tmp_path / "runs", retries=0)
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "rd").write_text("not a folder")
        with pytest.raises(UserError, match="cannot create the run folder"):
            sched._launch([[s] for s in sched.states])
    with connect(sqlite_url) as res:
        assert set(res.runs(sweep="rd")["status"]) == {vocab.PENDING}


def test_runs_claimed_together_but_never_submitted_are_not_left_running(tmp_path: Path, sqlite_url: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs admitted together are claimed in one transaction; when submitting one of them fails
    (a fault of Ray's that cannot be caused here, so ``_submit`` raises in its place), the runs
    not yet sent are released, and the one sent is left to the stop that follows (in flight)."""
    from scaling.orchestrator.expand import expand
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.scheduler import Scheduler
    from scaling.orchestrator.sweep import register

    plan, source = load_plan(write_plan(tmp_path / "p.yaml", "sub", tmp_path / "runs", GRID))
    exp = expand(plan, source)
    sent = []

    def submit(spec, *args, **kwargs):
        if sent:
            raise RuntimeError("the Ray cluster went away")
        sent.append(spec.key)
        return "ref"

    with Store(sqlite_url) as store:
        register(store, plan, exp)
        sched = Scheduler(exp.runs, store, sqlite_url, "sub", tmp_path / "runs", retries=0)
        monkeypatch.setattr(sched, "_submit", submit)
        with pytest.raises(RuntimeError, match="went away"):
            sched._launch([[s] for s in sched.states])
        assert [s.key for s in sched._running()] == sent
    with connect(sqlite_url) as res:
        status = dict(zip(res.runs(sweep="sub")["run_key"], res.runs(sweep="sub")["status"]))
    assert status == {s.key: vocab.RUNNING if s.key in sent else vocab.INTERRUPTED for s in sched.states}
