"""Where a run's checkpoints live, and the trunk checkpoint a cooldown branch starts from.

Torch-free, so the orchestrator can tell whether a branch is ready (its trunk's checkpoint is
there, or it has checkpoints of its own) without importing the trainer's heavy parts.
A checkpoint folder is renamed into place only after its manifest is written
(`scaling.trainer.checkpoints.checkpoint.save`), so a folder with a manifest is complete.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from scaling.trainer.sections import BranchSpec

CHECKPOINTS = "checkpoints"
PREFIX = "step_"
MANIFEST_FILE = "manifest.json"
SUPERSEDED = ".superseded"


def checkpoint_root(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS


def step_folder(run_dir: str | Path, step: int) -> Path:
    """The checkpoint folder of ``step`` in ``run_dir``."""
    return checkpoint_root(run_dir) / f"{PREFIX}{step:08d}"


def step_of(path: Path) -> Optional[int]:
    digits = path.name[len(PREFIX):]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def parent_dir(run_dir: str | Path, branch: "BranchSpec") -> Path:
    """The trunk's run folder: the branch's sibling in the sweep's folder."""
    return Path(run_dir).parent / branch.parent


def parent_checkpoint(run_dir: str | Path, branch: "BranchSpec") -> Path:
    """The trunk checkpoint a branch starts from."""
    return step_folder(parent_dir(run_dir, branch), branch.from_step)


def complete(path: Path) -> bool:
    """Whether the checkpoint folder ``path`` was renamed into place (its manifest is written last)."""
    return (path / MANIFEST_FILE).is_file()


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether ``run_dir`` holds a complete checkpoint of its own (it resumes from it)."""
    root = checkpoint_root(run_dir)
    if not root.is_dir():
        return False
    return any(step_of(p) is not None and complete(p) for p in root.iterdir())


def set_aside_after(run_dir: str | Path, step: int) -> list[Path]:
    """Hide the checkpoints of ``run_dir`` later than ``step`` (renamed ``.step_N.superseded``),
    so the run resumes from before ``step`` and passes it again; returns the new paths."""
    root = checkpoint_root(run_dir)
    moved = []
    if root.is_dir():
        for p in sorted(root.iterdir()):
            s = step_of(p)
            if s is not None and s > step:
                aside = p.with_name(f".{p.name}{SUPERSEDED}")
                if aside.exists():
                    import shutil

                    shutil.rmtree(aside, ignore_errors=True)
                os.replace(p, aside)
                moved.append(aside)
    return moved
