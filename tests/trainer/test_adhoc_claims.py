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
