"""Checkpoints read back from disk are untrusted: nothing in them runs, and a broken one is set aside.

Each test trains the tiny run until an injected fault at step 14 (checkpoints at 4, 8, 12 are
kept as the last three), damages the checkpoint of step 12 the way an attacker or a crash
would, and resumes. The hostile pickles write a marker file when unpickled; the marker must
never appear.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import torch

from scaling.db import connect
from scaling import vocab as names
from scaling.trainer.checkpoints import checkpoint
from scaling.trainer import train
from scaling.trainer.faults import InjectedFault


class _Payload:
    """Unpickling this writes ``marker`` (what a crafted file would do with os.system)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # noqa: ANN204
        return (Path.write_text, (self.marker, "pwned"))


def _crashed(make_spec, registered, tmp_path: Path):
    spec = make_spec(faults={"raise_at_step": 14, "raise_attempts": 1}, execution={"keep_checkpoints": 3})
    url = registered(spec)
    with pytest.raises(InjectedFault):
        train(spec, url, tmp_path / "run", attempt=1)
    latest = checkpoint.latest(tmp_path / "run")
    assert latest is not None and latest.name == "step_00000012"
    return spec, url, latest


def _forge_manifest(path: Path) -> None:
    """Rewrite the manifest to match whatever is in the folder now (an attacker can do this)."""
    (path / checkpoint.MANIFEST_FILE).unlink()
    checkpoint.write_manifest(path, int(path.name[len(checkpoint.PREFIX) :]))


def _corrupt_events(url: str, key: str) -> list[dict]:
    ev = connect(url).events(run_keys=[key])
    return [d for k, d in zip(ev["kind"], ev["detail"]) if k == names.CHECKPOINT_CORRUPT]


def test_a_checkpoint_holds_no_pickle_but_weights_only_state(make_spec, registered, tmp_path: Path) -> None:
    _, _, latest = _crashed(make_spec, registered, tmp_path)
    names_ = sorted(p.name for p in latest.iterdir())
    assert ".metadata" not in names_  # DCP's pickled index is not kept
    assert {checkpoint.STATE_FILE, checkpoint.METADATA_FILE, checkpoint.MANIFEST_FILE} <= set(names_)
    assert checkpoint.verify(latest) is None
    manifest = json.loads((latest / checkpoint.MANIFEST_FILE).read_text())
    assert set(manifest["files"]) == set(names_) - {checkpoint.MANIFEST_FILE}


@pytest.mark.parametrize("forged_manifest", [False, True])
def test_planted_dcp_metadata_pickle_never_runs(make_spec, registered, tmp_path: Path, capfd,
                                                forged_manifest: bool) -> None:
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    marker = tmp_path / "marker"
    (latest / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    if forged_manifest:
        _forge_manifest(latest)
    capfd.readouterr()
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert not marker.exists()
    assert resumed.status == "completed"
    if forged_manifest:  # the manifest lists it, but nothing ever reads DCP's pickle
        assert resumed.resumed_from == 12 and _corrupt_events(url, spec.key) == []
    else:  # a file the manifest does not list: set aside, the previous checkpoint is used
        assert resumed.resumed_from == 8
        (event,) = _corrupt_events(url, spec.key)
        assert event["checkpoint"] == "step_00000012" and ".metadata" in event["problem"]
        err = [ln for ln in capfd.readouterr().err.splitlines() if "step_00000012" in ln]
        assert len(err) == 1 and "falling back" in err[0]
        assert (latest.parent / ".step_00000012.corrupt").is_dir()


def test_hostile_state_pickle_with_forged_manifest_is_refused(make_spec, registered, tmp_path: Path) -> None:
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    marker = tmp_path / "marker"
    with open(latest / checkpoint.STATE_FILE, "wb") as fh:
        torch.save({"scaler": {}, "meta": {"step": 12, "x": _Payload(marker)}}, fh)
    _forge_manifest(latest)
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert not marker.exists()
    assert resumed.status == "completed" and resumed.resumed_from == 8
    (event,) = _corrupt_events(url, spec.key)
    assert "cannot load" in event["problem"] and "never loaded" in event["problem"]
    assert "weights_only" not in event["problem"]  # torch's advice to load it unsafely is not passed on


@pytest.mark.parametrize("damage", ["truncated_shard", "nested_manifest"])
def test_damage_that_passes_a_forged_manifest_still_falls_back(make_spec, registered, tmp_path: Path,
                                                                damage: str) -> None:
    """What the manifest cannot catch (an attacker rewrote it) fails in the loader: still set aside."""
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    if damage == "truncated_shard":  # distributed checkpoint raises CheckpointException, a BaseException
        shard = next(latest.glob("*.distcp"))
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size - 64])
        _forge_manifest(latest)
    else:  # a manifest nested past Python's recursion limit
        (latest / checkpoint.MANIFEST_FILE).write_text("[" * 200_000 + "]" * 200_000)
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert resumed.status == "completed" and resumed.resumed_from == 8
    (event,) = _corrupt_events(url, spec.key)
    expected = {"truncated_shard": "cannot load", "nested_manifest": "nested too deeply"}[damage]
    assert event["checkpoint"] == "step_00000012" and expected in event["problem"], event


def test_tampered_json_index_with_forged_manifest_falls_back(make_spec, registered, tmp_path: Path) -> None:
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    index = json.loads((latest / checkpoint.METADATA_FILE).read_text())
    index["storage"][0]["file"] = "../../../../etc/passwd"
    (latest / checkpoint.METADATA_FILE).write_text(json.dumps(index))
    _forge_manifest(latest)
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert resumed.resumed_from == 8
    (event,) = _corrupt_events(url, spec.key)
    assert "not in the checkpoint" in event["problem"]


@pytest.mark.parametrize("damage", ["truncate_shard", "truncate_state", "no_manifest", "flip_byte"])
def test_a_damaged_latest_checkpoint_falls_back_to_the_previous(make_spec, registered, tmp_path: Path,
                                                                damage: str) -> None:
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    shard = next(latest.glob("*.distcp"))
    if damage == "truncate_shard":
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    elif damage == "truncate_state":
        state = latest / checkpoint.STATE_FILE
        state.write_bytes(state.read_bytes()[:100])
    elif damage == "no_manifest":
        (latest / checkpoint.MANIFEST_FILE).unlink()
    else:
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert resumed.status == "completed" and resumed.resumed_from == 8 and resumed.steps == 24
    (event,) = _corrupt_events(url, spec.key)
    assert event["checkpoint"] == "step_00000012"
    expected = {"truncate_shard": "truncated", "truncate_state": "truncated", "no_manifest": "no manifest",
                "flip_byte": "sha256"}[damage]
    assert expected in event["problem"]
    assert [p.name for p in checkpoint.checkpoints(tmp_path / "run")][-1] == "step_00000024"


def test_every_checkpoint_corrupt_restarts_from_scratch(make_spec, registered, tmp_path: Path) -> None:
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    for path in checkpoint.checkpoints(tmp_path / "run"):
        (path / checkpoint.MANIFEST_FILE).write_text("{not json")
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert resumed.status == "completed" and resumed.resumed_from is None and resumed.steps == 24
    assert len(_corrupt_events(url, spec.key)) == 3


@pytest.mark.parametrize("rng", [{"cpu": torch.zeros(3)}, {"ranks": "not a list"}, {"ranks": []}])
def test_a_generator_state_that_does_not_fit_is_no_corruption(make_spec, registered, tmp_path: Path, capfd,
                                                              rng: dict) -> None:
    """Generator states are not the model: one that cannot be restored (wrong kind, or saved by
    other ranks than resume) is reported and the checkpoint still resumes the run."""
    spec, url, latest = _crashed(make_spec, registered, tmp_path)
    state = torch.load(latest / checkpoint.STATE_FILE, weights_only=True)
    state["meta"]["rng"] = rng
    torch.save(state, latest / checkpoint.STATE_FILE)
    _forge_manifest(latest)
    resumed = train(spec, url, tmp_path / "run", attempt=2)
    assert resumed.status == "completed" and resumed.resumed_from == 12
    assert _corrupt_events(url, spec.key) == []
    assert "continuing with the seeded generators" in capfd.readouterr().err


def test_an_older_entry_with_more_gpus_than_visible_restores_what_exists() -> None:
    """A checkpoint saved every visible GPU's state (8); a resume on one GPU takes its own index's,
    a resume on the CPU the CPU's alone, and an index beyond the saved ones none (no IndexError)."""
    cpu = torch.get_rng_state()
    per_gpu = [torch.full((16,), i, dtype=torch.uint8) for i in range(8)]
    saved = {"cpu": cpu, "cuda": per_gpu}
    assert checkpoint.own_rng_state(saved, rank=0, device_index=None) == {"cpu": cpu}
    assert checkpoint.own_rng_state(saved, rank=0, device_index=3)["cuda"] is per_gpu[3]
    assert "cuda" not in checkpoint.own_rng_state({"cpu": cpu, "cuda": per_gpu[:1]}, rank=0, device_index=5)
    ranks = {"ranks": [{"cpu": cpu, "cuda": per_gpu[0]}, {"cpu": cpu, "cuda": per_gpu[1]}]}
    assert checkpoint.own_rng_state(ranks, rank=1, device_index=0)["cuda"] is per_gpu[1]
    assert checkpoint.own_rng_state(ranks, rank=2, device_index=0) is None


def test_loads_that_all_fail_leave_the_run_as_drawn_from_its_seed(make_spec, registered, tmp_path: Path) -> None:
    """Truncated shards under forged manifests fail inside the loader, after it may have written
    some tensors: with no checkpoint left, the optimizer and scaler are as built and the trainer
    draws the seed's weights (no rank copies its part of the model to the host first)."""
    from scaling.trainer.families.model import build_model
    from scaling.trainer.loop import Trainer

    spec, url, _ = _crashed(make_spec, registered, tmp_path)
    paths = checkpoint.checkpoints(tmp_path / "run")
    for path in paths:
        for shard in path.glob("*.distcp"):
            shard.write_bytes(shard.read_bytes()[: shard.stat().st_size - 64])
        _forge_manifest(path)
    trainer = Trainer(spec, url, tmp_path / "run", attempt=2)
    trainer.start()
    trainer.rec.flush()
    problems = [e["problem"] for e in _corrupt_events(url, spec.key)]
    assert trainer.resumed_from is None and len(problems) == len(paths) and all("cannot load" in p for p in problems)
    drawn = build_model(spec.shape, spec.seed)
    for (name, a), b in zip(drawn.named_parameters(), trainer.par.model.parameters()):
        assert torch.equal(a, b), name
    assert not trainer.optimizer.state