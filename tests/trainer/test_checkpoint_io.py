"""Checkpoint I/O: each file hashed from the bytes as they are written, verified once on resume.

A small model and AdamW are saved and loaded through the checkpoint module directly (no run, no
database); ``open`` is wrapped (the real file objects still do the work) to see which files of a
checkpoint are read and how often.
"""

from __future__ import annotations

import builtins
import hashlib
import io
import json
from pathlib import Path

import pytest
import torch

from scaling.trainer.checkpoints import checkpoint
from scaling.trainer.runtime import Runtime


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def _trained(steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for i in range(steps):
        g = torch.Generator().manual_seed(i)
        model(torch.randn(8, 16, generator=g)).square().mean().backward()
        opt.step()
        opt.zero_grad()
    return model, opt


def _scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", enabled=False)


def _save(run_dir: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer) -> Path:
    return checkpoint.save(run_dir, step, model=model, optimizer=opt, scaler=_scaler(), meta={"key": "k"},
                           keep=3, rt=Runtime.current("cpu"))


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every (path, mode) opened through ``open`` / ``io.open`` / ``Path.open`` from now on."""
    seen: list[tuple[str, str]] = []
    real = io.open

    def recording_open(file, mode="r", *args, **kwargs):  # noqa: ANN001, ANN202
        seen.append((str(file), mode))
        return real(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", recording_open)
    monkeypatch.setattr(io, "open", recording_open)
    return seen


def _reads_under(seen: list[tuple[str, str]], folder: Path) -> list[str]:
    return [Path(p).name for p, mode in seen if "r" in mode and "+" not in mode and Path(p).parent == folder]


def test_saving_hashes_what_it_writes_without_reading_it_back(tmp_path: Path, opened) -> None:
    model, opt = _trained(2)
    path = _save(tmp_path, 2, model, opt)
    written = [Path(p).name for p, mode in opened if "w" in mode]
    assert any(n.endswith(".distcp") for n in written) and checkpoint.STATE_FILE in written
    assert not [(p, m) for p, m in opened if "r" in m and str(tmp_path) in p]  # no file of it read back
    manifest = json.loads((path / checkpoint.MANIFEST_FILE).read_bytes())
    files = {p.name for p in path.iterdir()} - {checkpoint.MANIFEST_FILE}
    assert set(manifest["files"]) == files
    for name, entry in manifest["files"].items():  # the streamed hashes are the files' own
        data = (path / name).read_bytes()
        assert entry == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, name


def test_a_manifest_hashed_by_reading_is_the_same_format(tmp_path: Path) -> None:
    """Checkpoints written before hashing-while-writing (their manifest made by reading each file
    back) verify and load as they did: the manifest is the same, byte for byte."""
    model, opt = _trained(2)
    path = _save(tmp_path, 2, model, opt)
    streamed = (path / checkpoint.MANIFEST_FILE).read_bytes()
    (path / checkpoint.MANIFEST_FILE).unlink()
    checkpoint.write_manifest(path, 2)  # every entry read from disk, as the older writer did
    assert (path / checkpoint.MANIFEST_FILE).read_bytes() == streamed
    fresh, fresh_opt = _model(), None
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    found = checkpoint.load_latest(tmp_path, model=fresh, optimizer=fresh_opt, scaler=_scaler(),
                                   rt=Runtime.current("cpu"), on_corrupt=lambda p, why: pytest.fail(why))
    assert found is not None and found[0] == path


def test_a_resume_verifies_each_file_once_and_restores_the_state(tmp_path: Path, opened) -> None:
    model, opt = _trained(3)
    path = _save(tmp_path, 3, model, opt)
    opened.clear()
    fresh = _model()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    found = checkpoint.load_latest(tmp_path, model=fresh, optimizer=fresh_opt, scaler=_scaler(),
                                   rt=Runtime.current("cpu"), on_corrupt=lambda p, why: pytest.fail(why))
    assert found is not None and found[0] == path and found[1]["step"] == 3
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)
    assert torch.equal(opt.state_dict()["state"][0]["exp_avg"], fresh_opt.state_dict()["state"][0]["exp_avg"])
    reads = _reads_under(opened, path)
    hashed = [n for n in reads if n != checkpoint.METADATA_FILE]  # DCP's index is read again by the loader
    assert sorted(set(hashed)) == sorted({p.name for p in path.iterdir()} - {checkpoint.METADATA_FILE})
    shard = next(n for n in hashed if n.endswith(".distcp"))
    assert hashed.count(shard) == 2  # once hashed, once loaded: never hashed twice


def test_a_corrupted_checkpoint_is_refused_in_one_line_naming_the_file(tmp_path: Path, capfd) -> None:
    model, opt = _trained(2)
    good = _save(tmp_path, 2, model, opt)
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    model, opt = _trained(4)
    bad = _save(tmp_path, 4, model, opt)
    shard = next(bad.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    capfd.readouterr()
    problems: list[tuple[Path, str]] = []
    fresh = _model()
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    found = checkpoint.load_latest(tmp_path, model=fresh, optimizer=fresh_opt, scaler=_scaler(),
                                   rt=Runtime.current("cpu"), on_corrupt=lambda p, why: problems.append((p, why)))
    assert found is not None and found[0] == good and found[1]["step"] == 2
    assert all(torch.equal(expected[k], v) for k, v in fresh.state_dict().items())
    assert problems == [(bad, f"{shard.name} does not match its sha256 in the manifest")]
    err = [ln for ln in capfd.readouterr().err.splitlines() if ln.strip()]
    assert len(err) == 1 and shard.name in err[0] and str(bad) in err[0] and "Traceback" not in err[0]
