"""Checkpoints of a run: one function saves, one loads (the distributed engineer extends both).

Layout: ``<run_dir>/checkpoints/step_<8 digits>/state.pt`` holding the model, optimizer and
loss-scaler state dicts and the trainer's own state (step, data cursor, spike window, RNG
states as tensors). A checkpoint is written into a hidden temporary folder and renamed into
place, so a crash mid-write never leaves a half checkpoint that looks complete; the last
``keep`` are kept. Loading uses ``torch.load(weights_only=True)``: no pickled code runs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from scaling.trainer.runtime import Runtime

STATE_FILE = "state.pt"
PREFIX = "step_"


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / "checkpoints"


def checkpoints(run_dir: str | Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def latest(run_dir: str | Path) -> Path | None:
    found = checkpoints(run_dir)
    return found[-1] if found else None


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(
    run_dir: str | Path,
    step: int,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    meta: dict[str, Any],
    keep: int,
    rt: Runtime,
) -> Path:
    """Write the checkpoint of ``step`` atomically and prune all but the last ``keep``.

    ``model`` is the unwrapped model. On several ranks (DDP, where every rank holds the same
    state) rank 0 writes and the others wait; sharded strategies need
    ``torch.distributed.checkpoint`` (see ``parallel.py``).
    """
    root = checkpoint_root(run_dir)
    final = root / f"{PREFIX}{step:08d}"
    if rt.is_main:
        root.mkdir(parents=True, exist_ok=True)
        tmp = root / f".{final.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict(),
            "meta": {**meta, "step": step, "rng": rng_state()},
        }
        with open(tmp / STATE_FILE, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        if final.exists():  # the same step again (after a rollback): replace it
            old = root / f".{final.name}.old{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        for stale in checkpoints(run_dir)[:-keep]:
            shutil.rmtree(stale, ignore_errors=True)
    rt.barrier()
    return final


def load(
    path: str | Path,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: Any,
    rt: Runtime,
) -> dict[str, Any]:
    """Restore model, optimizer, scaler and RNG from the checkpoint at ``path``; return its meta."""
    state = torch.load(Path(path) / STATE_FILE, map_location=rt.device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if state["scaler"]:
        scaler.load_state_dict(state["scaler"])
    meta = state["meta"]
    rng = meta.get("rng")
    if rng is not None:
        rng = {"cpu": rng["cpu"].cpu(), **({"cuda": [t.cpu() for t in rng["cuda"]]} if "cuda" in rng else {})}
        set_rng_state(rng)
    return meta
