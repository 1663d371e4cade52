"""When a cooldown branch may start: the scheduler's one dependency rule.

A branch (``spec.branch``) starts from its trunk's checkpoint at the branch point, so it is
ready as soon as that checkpoint is on disk, while the trunk trains on, or once it has
checkpoints of its own (then it resumes from them and needs the trunk no more). Otherwise it
waits while its trunk is still to run; a trunk that completed without that checkpoint (deleted,
or the branch was added later) must pass the branch point again; a trunk that failed for good
fails its branches.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from scaling import vocab
from scaling.trainer.checkpoints import lineage
from scaling.trainer.spec import RunSpec

READY = "ready"
WAIT = "wait"
RETRAIN_TRUNK = "retrain_trunk"
FAIL = "fail"


@dataclass(frozen=True)
class Verdict:
    kind: str  # READY, WAIT, RETRAIN_TRUNK or FAIL
    reason: str = ""


def verdict(spec: RunSpec, run_dir: Path, parent_state: Optional[str]) -> Verdict:
    """What a queued run should do now; ``parent_state`` is its trunk's scheduler state (None: unknown)."""
    branch = spec.branch
    if branch is None or lineage.has_checkpoint(run_dir):
        return Verdict(READY)
    ckpt = lineage.parent_checkpoint(run_dir, branch)
    if lineage.complete(ckpt):
        return Verdict(READY)
    if parent_state is None:
        return Verdict(FAIL, f"its trunk {branch.parent} is not a run of this sweep")
    if parent_state == vocab.FAILED:
        return Verdict(FAIL, f"its trunk {branch.parent} failed")
    if parent_state == vocab.COMPLETED:
        return Verdict(RETRAIN_TRUNK, f"trunk {branch.parent} has no checkpoint at step {branch.from_step} ({ckpt})")
    return Verdict(WAIT, f"waits for trunk {branch.parent} to reach step {branch.from_step}")
