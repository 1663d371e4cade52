"""`scaling train SPEC.yaml`: one spec recorded like any run; bad specs give one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from scaling.cli.common import app
from scaling.db import connect
from scaling.errors import SpecError, UserError
from scaling import vocab as names
from scaling.trainer.spec import RunSpec


def _main(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    code = "from scaling.cli import main; main()"
    env = {**os.environ, "SCALING_PEAK_FLOPS": "1e11"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_an_unreachable_database_leaves_no_run_folder(tmp_path: Path, tiny: dict) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny))
    (tmp_path / "kept").mkdir()  # a folder that was there before stays
    out = CliRunner().invoke(app, ["train", str(path), "--db", "postgresql+psycopg://nobody@127.0.0.1:1/none",
                                   "--run-dir", str(tmp_path / "kept" / "run" / "here")])
    assert isinstance(out.exception, UserError) and "cannot open database" in str(out.exception), out.output
    assert list((tmp_path / "kept").iterdir()) == []


def test_scaling_train_registers_claims_trains_and_finishes(sqlite_url: str, tmp_path: Path, tiny: dict) -> None:
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny))
    runner = CliRunner()
    out = runner.invoke(app, ["train", str(path), "--db", sqlite_url, "--run-dir", str(tmp_path / "run")])
    assert out.exit_code == 0, out.output
    assert "completed, 24 steps" in out.output
    runs = connect(sqlite_url).runs(sweep="adhoc")
    (row,) = runs.to_dict("records")
    assert row["status"] == "completed" and row["attempts"] == 1 and row["final_loss"] > 0
    assert row["spec"]["data"]["fingerprint"]  # resolved before registering: the key carries it
    again = runner.invoke(app, ["train", str(path), "--db", sqlite_url, "--run-dir", str(tmp_path / "run")])
    assert again.exit_code == 0 and "completed" in again.output and "24 steps" not in again.output


def test_a_failing_run_is_recorded_failed(sqlite_url: str, tmp_path: Path, tiny: dict, monkeypatch) -> None:
    from scaling.errors import TrainingError

    spec = {**tiny, "faults": {"poison_steps": [13]}, "spike": {"max_rollbacks": 0}}
    path = tmp_path / "spiky.yaml"
    path.write_text(yaml.safe_dump(spec))
    monkeypatch.chdir(tmp_path)
    out = CliRunner().invoke(app, ["train", str(path), "--db", sqlite_url])
    # `scaling.cli.main` prints a UserError such as TrainingError as one line and exits 2
    # (checked end to end by the bad-spec test below).
    assert isinstance(out.exception, TrainingError) and "kept spiking" in str(out.exception)
    (row,) = connect(sqlite_url).runs(sweep="adhoc").to_dict("records")
    assert row["status"] == "failed" and "kept spiking" in row["error"]
    kinds = connect(sqlite_url).events(sweep="adhoc")["kind"].tolist()
    assert names.LOSS_SPIKE in kinds and names.FAILURE in kinds
    assert (tmp_path / "scaling_runs" / "adhoc").is_dir()


@pytest.mark.parametrize(
    "patch,field",
    [
        ({"model": {"n_layer": 0, "d_model": 32, "n_head": 2}}, "model.n_layer"),
        ({"model": {"n_layer": 1, "d_model": 30, "n_head": 4}}, "model"),
        ({"batch_tokens": 16}, "batch_tokens"),
        ({"precision": "fp8"}, "precision"),
        ({"optimizer": {"lr": -1}}, "optimizer.lr"),
        ({"schedule": {"kind": "linear"}}, "schedule.kind"),
        ({"execution": {"threads": 0}}, "execution.threads"),
        ({"data": {"source": "text"}}, "data"),
        ({"learning_rate": 0.1}, "learning_rate"),
        ({"execution": {"workers": 9}}, "batch_tokens"),
    ],
)
def test_bad_spec_values_name_the_field(patch: dict, field: str, tiny: dict) -> None:
    with pytest.raises(SpecError) as err:
        RunSpec.from_dict({**tiny, **patch}, where="spec.yaml")
    message = str(err.value)
    assert message.startswith(f"spec.yaml: {field}") and "\n" not in message


def test_bad_spec_file_exits_2_with_one_line(tmp_path: Path, tiny: dict) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**tiny, "batch_tokens": 16}))
    proc = _main("train", str(path), "--db", f"sqlite:///{tmp_path / 'x.db'}", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "batch_tokens" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_held_by_a_live_claimant_is_refused(sqlite_url: str, tmp_path: Path, tiny: dict) -> None:
    from scaling.db import Store
    from scaling.errors import UserError
    from scaling.trainer.resolve import resolve
    from scaling.trainer.spec import RunRequest

    spec = resolve(RunRequest.from_dict(tiny)).spec  # as `scaling train` keys it
    with Store(sqlite_url) as store:
        store.register("adhoc", [spec.record()])
        assert store.claim(spec.key, "other-host", sweep="adhoc") == 1
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny))
    out = CliRunner().invoke(app, ["train", str(path), "--db", sqlite_url])
    assert isinstance(out.exception, UserError) and "other-host" in str(out.exception)
