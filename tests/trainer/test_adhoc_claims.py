"""`scaling train` claims as ``host:pid`` like a sweep: after its process is SIGKILLed the next
`scaling train` takes the run over at once and resumes it; an unusable run folder is refused
before anything is registered."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from scaling import vocab
from scaling.db import connect


def _train(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, int]:
    """`scaling train ARGS` in its own process; returns its outcome and its pid."""
    code = "from scaling.cli import main; main()"
    env = {**os.environ, "SCALING_PEAK_FLOPS": "1e11"}
    with subprocess.Popen([sys.executable, "-c", code, "train", *args], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        out, err = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), proc.pid


def test_a_sigkilled_train_is_taken_over_at_once_by_the_next(sqlite_url: str, tmp_path: Path, tiny: dict) -> None:
    # The first attempt's process SIGKILLs itself when step 14 starts (a real SIGKILL: no handler,
    # no finally runs), after its checkpoint at step 12; the run is left `running` with a fresh
    # heartbeat, far inside the 120 s a heartbeat alone would need to go stale.
    spec = {**tiny, "faults": {"kill_at_step": 14, "kill_attempts": 1}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    args = (str(path), "--db", sqlite_url, "--run-dir", str(tmp_path / "run"))
    first, pid = _train(*args, cwd=tmp_path)
    assert first.returncode == -9, first.stderr
    (row,) = connect(sqlite_url).runs(sweep="adhoc").to_dict("records")
    assert row["status"] == vocab.RUNNING and row["host"] == f"{socket.gethostname()}:{pid}"

    second, _ = _train(*args, cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "completed, 24 steps" in second.stdout
    with connect(sqlite_url) as res:
        (row,) = res.runs(sweep="adhoc").to_dict("records")
        events = res.events(sweep="adhoc")
    assert row["status"] == vocab.COMPLETED and row["attempts"] == 2
    taken = events[events["kind"] == vocab.STALE_RECOVERED]["detail"].tolist()
    assert len(taken) == 1 and taken[0]["reason"] == "its claimant process is gone"
    resumed = events[events["kind"] == vocab.RESUME]["detail"].tolist()
    assert [d["attempt"] for d in resumed] == [2]  # from its checkpoint, not from scratch


@pytest.mark.parametrize("where", ["proc", "file"])
def test_an_unusable_run_folder_registers_nothing(sqlite_url: str, tmp_path: Path, tiny: dict, where: str) -> None:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(tiny))
    if where == "proc":  # procfs refuses new entries even to root
        run_dir = Path("/proc/scaling-test/run")
    else:
        (tmp_path / "taken").write_text("a file where the run folder should go")
        run_dir = tmp_path / "taken" / "run"
    out, _ = _train(str(path), "--db", sqlite_url, "--run-dir", str(run_dir), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert str(run_dir) in out.stderr
    with connect(sqlite_url) as res:
        assert res.sweeps().empty


def test_a_run_folder_is_not_resumed_into_another_database(tmp_path: Path, tiny: dict) -> None:
    """A run trained into database A, then started with --db B on the same run folder, would resume
    from A's final checkpoint and "complete" in B with no curve: it is refused in one line, B gets
    nothing, and the folder trains on into A as before."""
    from cli_run import run_main

    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(tiny))
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    run_dir = str(tmp_path / "run")
    first = run_main("train", str(path), "--db", a, "--run-dir", run_dir)
    assert first.code == 0, first.err
    other = run_main("train", str(path), "--db", b, "--run-dir", run_dir)
    assert other.code == 2 and other.err.count("\n") == 1 and "Traceback" not in other.err, other.err
    assert "a.db" in other.err and "b.db" in other.err and "another runs_dir" in other.err, other.err
    with connect(b) as res:
        assert res.sweeps().empty  # nothing registered, claimed or recorded in B
    again = run_main("train", str(path), "--db", a, "--run-dir", run_dir)
    assert again.code == 0 and "already completed" in again.out, again  # A's own folder stays A's
    assert connect(a).metrics(sweep="adhoc")["step"].nunique() > 1


def test_the_owner_record_names_a_database_without_its_password(tmp_path: Path) -> None:
    from scaling.trainer.checkpoints.rundir import database_identity, owner_problem, record_owner

    pg = "postgresql+psycopg://alice:s3cr3t-pw@db.example:5432/results?sslmode=require"
    record_owner(tmp_path, pg)
    assert "s3cr3t-pw" not in (tmp_path / "owner.json").read_text()
    assert owner_problem(tmp_path, pg) is None
    assert owner_problem(tmp_path, "postgresql+psycopg://alice:other@db.example:5432/results") is None  # same database
    problem = owner_problem(tmp_path, f"sqlite:///{tmp_path / 'x.db'}")
    assert problem and "postgresql://alice@db.example:5432/results" in problem and "s3cr3t" not in problem
    assert database_identity(f"sqlite:///{tmp_path}/./x.db") == database_identity(f"sqlite:///{tmp_path / 'x.db'}")
    (tmp_path / "owner.json").write_text("{not json")
    assert "damaged" in owner_problem(tmp_path, pg)
