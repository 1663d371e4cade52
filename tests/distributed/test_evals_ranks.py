"""Tasks scored on gloo workers (DDP, ZeRO-3, tensor-parallel; pipelines over dp and over tp) give
the single process's figures."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from _workers import run_spec, spawn

#: Two workers: data-parallel and tensor-parallel layouts.
LAYOUTS = ({"strategy": "ddp"}, {"strategy": "zero3"}, {"strategy": "zero2", "tp": 2})
#: Four workers: stages over dp (FSDP2), and stages split over tp.
PIPELINES = ({"pp": 2, "strategy": "zero3", "micro_batch_size": 2},
             {"pp": 2, "tp": 2, "strategy": "ddp", "micro_batch_size": 2, "pp_schedule": "gpipe"})


def _scores(rank: int, world: int, run_dir: str, layouts: tuple[dict[str, Any], ...]) -> list[dict[str, float]]:
    """Each layout's task metrics at the initial weights, scored as the loop scores them (every rank
    takes part; each returns what it got)."""
    from scaling.trainer.loop import Trainer

    return [Trainer(run_spec(layout["strategy"], workers=world, execution=layout, evals={}), None, run_dir)
            .task_scores() for layout in layouts]


@pytest.mark.parametrize("world, layouts", [(2, LAYOUTS), (4, PIPELINES)], ids=["dp-tp", "pipelines"])
def test_every_layout_scores_what_one_process_scores(world: int, layouts: tuple[dict[str, Any], ...]) -> None:
    from scaling.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        want = Trainer(run_spec("single", workers=1, evals={}), None, tmp).task_scores()
        ranks = spawn(_scores, world, tmp, tmp, layouts)
    assert set(want) == {"task/next_line/acc", "task/next_line/acc_norm", "task/next_line/bpb"}
    for rank in ranks:  # the loop records rank 0's; every rank holds the same figures
        for layout, got in zip(layouts, rank):
            assert got == pytest.approx(want, rel=1e-5), layout
