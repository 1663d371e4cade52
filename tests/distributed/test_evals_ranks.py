"""Tasks scored on two gloo workers (DDP, ZeRO-3, tensor-parallel) give the single process's figures."""

from __future__ import annotations

import tempfile

import pytest

from _workers import run_spec, spawn

LAYOUTS = ({"strategy": "ddp"}, {"strategy": "zero3"}, {"strategy": "zero2", "tp": 2})


def _scores(rank: int, world: int, run_dir: str) -> list[dict[str, float]]:
    """Each layout's task metrics at the initial weights (every rank takes part; each returns what it got)."""
    from scaling.trainer.loop import Trainer

    out = []
    for layout in LAYOUTS:
        trainer = Trainer(run_spec(layout["strategy"], execution=layout, evals={}), None, run_dir)
        out.append(trainer.tasks.evaluate(trainer.par.model, trainer.rt, trainer.par.group))
    return out


def test_every_layout_scores_what_one_process_scores() -> None:
    from scaling.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        single = Trainer(run_spec("single", workers=1, evals={}), None, tmp)
        want = single.tasks.evaluate(single.par.model, single.rt, single.par.group)
        ranks = spawn(_scores, 2, tmp, tmp)
    assert set(want) == {"task/next_line/acc", "task/next_line/acc_norm", "task/next_line/bpb"}
    for rank in ranks:
        for layout, got in zip(LAYOUTS, rank):
            assert got == pytest.approx(want, rel=1e-5), layout


#: Pipelines on four gloo workers: stages over dp (FSDP2), and stages split over tp.
PIPELINES = ({"pp": 2, "strategy": "zero3", "micro_batch_size": 2},
             {"pp": 2, "tp": 2, "strategy": "ddp", "micro_batch_size": 2, "pp_schedule": "gpipe"})


def _pipeline_scores(rank: int, world: int, run_dir: str) -> list[dict[str, float]]:
    """Each pipeline layout's task metrics at the initial weights, scored as the loop scores them."""
    from scaling.trainer.loop import Trainer

    out = []
    for layout in PIPELINES:
        trainer = Trainer(run_spec(layout["strategy"], workers=4, execution=layout, evals={}), None, run_dir)
        out.append(trainer.tasks.evaluate(trainer.par, trainer.rt, trainer.par.loss_group))
    return out


def test_a_pipeline_scores_what_one_process_scores() -> None:
    from scaling.trainer.loop import Trainer

    with tempfile.TemporaryDirectory() as tmp:
        single = Trainer(run_spec("single", workers=1, evals={}), None, tmp)
        want = single.tasks.evaluate(single.par.model, single.rt, single.par.group)
        ranks = spawn(_pipeline_scores, 4, tmp, tmp)
    assert set(want) == {"task/next_line/acc", "task/next_line/acc_norm", "task/next_line/bpb"}
    for rank in ranks:  # the loop records rank 0's; every rank holds the same figures
        for layout, got in zip(PIPELINES, rank):
            assert got == pytest.approx(want, rel=1e-5), layout
