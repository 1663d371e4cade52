"""A sweep exported to MLflow, Weights & Biases (offline) and TensorBoard, read back with each real library.

A simulated sweep (three budgets of five sizes) is trained in this process by the real simulated
trainer; `scaling export --mlflow --wandb --tensorboard` writes it once, and each tracker's files
are read back by that tracker's own reader (MLflow's client on its store, TensorBoard's event
accumulator, W&B's protobuf records in its offline run files): every run, its configuration, its
curves step by step, its final metrics and the fitted laws must be there. Skipped, saying so,
without the extra (``pip install -e '.[export]'``; CI installs it).
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import yaml
from cli_run import run_main
from in_process_sweep import train_plan

pytest.importorskip("mlflow", reason="the export extra is not installed: pip install -e '.[export]'")
pytest.importorskip("wandb", reason="the export extra is not installed: pip install -e '.[export]'")
pytest.importorskip("tensorboardX", reason="the export extra is not installed: pip install -e '.[export]'")
pytest.importorskip("tensorboard", reason="the export extra is not installed: pip install -e '.[export]'")

PLAN = {
    "name": "sim-export",
    "simulate": {"law": {"E": 1.5, "A": 40.0, "B": 60.0, "alpha": 0.3, "beta": 0.3}, "noise": 0.002, "seed": 0},
    "model": {"vocab_size": 256, "context": 64},
    "train": {"batch_tokens": 256, "optimizer": {"lr": 0.004}},
    "grid": [{"compute": [3e11, 1e12, 3e12], "models": [{"n_layer": 2, "d_model": d, "n_head": 2}
                                                       for d in (16, 24, 32, 48, 64)]}],
}


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("export")
    (folder / "plan.yaml").write_text(yaml.safe_dump({**PLAN, "runs_dir": str(folder / "runs")}, sort_keys=False))
    url = f"sqlite:///{folder / 'results.db'}"
    train_plan(folder / "plan.yaml", url, folder)
    out = run_main("export", "--db", url, "--bootstrap", "10", "--mlflow", str(folder / "mlflow"),
                   "--wandb", str(folder / "wandb"), "--tensorboard", str(folder / "tb"))
    assert out.code == 0, out.err
    from scaling.db import connect

    with connect(url) as res:
        runs = res.runs("sim-export")
        metrics = res.metrics(sweep="sim-export")
    return {"folder": folder, "url": url, "out": out.out, "runs": runs, "metrics": metrics}


def curve(exported: dict, key: str, name: str) -> list[tuple[int, float]]:
    m = exported["metrics"]
    m = m[(m["run_key"] == key) & (m["name"] == name)]
    return list(zip(m["step"].astype(int), m["value"].astype(float)))


def same_curve(got: list[tuple[int, float]], want: list[tuple[int, float]], rel: float = 1e-9) -> None:
    assert [s for s, _ in got] == [s for s, _ in want] and len(want) > 10
    assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=rel)


def test_the_command_says_what_it_wrote(exported) -> None:
    n = len(exported["runs"]) + 1
    for tracker, sub in (("mlflow", "mlflow"), ("wandb", "wandb"), ("tensorboard", "tb")):
        assert f"{tracker}: {n} runs (the fitted laws included) -> {exported['folder'] / sub}" in exported["out"]


def test_mlflow_holds_every_run_its_config_curves_finals_and_the_laws(exported) -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{exported['folder'] / 'mlflow' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("sim-export")
    found = {r.data.tags.get("scaling.run_key", r.info.run_name): r for r in client.search_runs([exp.experiment_id])}
    keys = list(exported["runs"]["run_key"])
    assert set(found) == {*keys, "fitted-laws"}
    row = exported["runs"].iloc[0]
    run = found[row["run_key"]]
    assert run.data.params["optimizer.lr"] == "0.004" and float(run.data.params["N"]) == row["N"]
    assert run.data.metrics["final/eval_loss"] == pytest.approx(row["final_loss"])
    history = client.get_metric_history(run.info.run_id, "train/loss")
    same_curve([(h.step, h.value) for h in sorted(history, key=lambda h: h.step)],
               curve(exported, row["run_key"], "train/loss"))
    laws = found["fitted-laws"]
    assert {"law/approach3/alpha", "law/approach3/reliable"} <= set(laws.data.metrics)
    names = {a.path for a in client.list_artifacts(laws.info.run_id)}
    assert {"fitted_laws.txt", "fitted_laws.json"} <= names


def test_tensorboard_event_files_hold_each_runs_curves_and_the_laws(exported) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = exported["folder"] / "tb"
    key = exported["runs"].iloc[-1]["run_key"]
    acc = EventAccumulator(str(root / key))
    acc.Reload()
    got = [(e.step, e.value) for e in acc.Scalars("train/loss")]
    same_curve(got, curve(exported, key, "train/loss"), rel=1e-6)  # float32 in the event file
    assert {"train/loss", "eval/loss"} <= set(acc.Tags()["scalars"])
    laws = EventAccumulator(str(root / "fitted-laws"))
    laws.Reload()
    assert "law/approach3/alpha" in laws.Tags()["scalars"]
    assert sorted(p.name for p in root.iterdir()) == sorted([*exported["runs"]["run_key"], "fitted-laws"])


def wandb_records(path: Path) -> list:
    """The protobuf records of a W&B run file (its LevelDB-style log: 32 KiB blocks of checksummed chunks)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    out, pending, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # a block's tail too short for a chunk header is padding
            pos += block - pos % block
            continue
        length, kind = struct.unpack("<HB", data[pos + 4:pos + 7])
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            rec = pb.Record()
            rec.ParseFromString(pending)
            out.append(rec)
            pending = b""
        elif kind == 0:
            break
    return out


def test_wandb_offline_runs_hold_each_runs_config_curves_finals_and_the_laws(exported) -> None:
    import json

    root = exported["folder"] / "wandb" / "wandb"
    files = {p.parent.name.rsplit("-", 1)[-1] if "fitted-laws" not in p.parent.name else "fitted-laws": p
             for p in root.glob("offline-run-*/run-*.wandb")}
    runs = exported["runs"]
    assert len(files) == len(runs) + 1 and "fitted-laws" in files
    row = runs.iloc[1]
    path = next(p for p in root.glob(f"offline-run-*-{row['run_key']}/run-{row['run_key']}.wandb"))
    records = wandb_records(path)
    config = {u.key: json.loads(u.value_json) for r in records if r.WhichOneof("record_type") == "run"
              for u in r.run.config.update}  # the config given to wandb.init travels in the run record
    assert config["optimizer.lr"] == 0.004 and config["N"] == row["N"]
    history = []
    for r in records:
        if r.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            if "train/loss" in items:
                history.append((int(items["_step"]), items["train/loss"]))
    same_curve(history, curve(exported, row["run_key"], "train/loss"))
    summary = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for r in records
               if r.WhichOneof("record_type") == "summary" for i in r.summary.update}
    assert summary["final/eval_loss"] == pytest.approx(row["final_loss"])
    laws = {i.key or "/".join(i.nested_key) for r in wandb_records(files["fitted-laws"])
            if r.WhichOneof("record_type") == "summary" for i in r.summary.update}
    assert "law/approach3/alpha" in laws


def test_a_folder_in_use_or_no_tracker_is_refused_in_one_line(exported) -> None:
    url, folder = exported["url"], exported["folder"]
    out = run_main("export", "--db", url, "--mlflow", str(folder / "mlflow"))
    assert out.code == 2 and "is not empty; give a new or empty folder" in out.err
    out = run_main("export", "--db", url)
    assert out.code == 2 and "--mlflow DIR" in out.err and "Traceback" not in out.err
