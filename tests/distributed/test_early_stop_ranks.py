"""Early stopping on gloo workers: rank 0 alone reads the references and decides, and every rank
stops at the step it decided (a rank training on alone would wait forever in its next collective)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from _workers import run_spec, spawn
from early_refs import write_references
from scaling import vocab as names
from scaling.db import Store, connect
from scaling.trainer.sections import EarlyStopSpec

RULE = {"tolerance": 0.05, "after": 0.3, "every": 0.1}
#: Two workers: data-parallel, tensor-parallel, and a two-stage pipeline (its last stage holds the loss;
#: the eval loss is summed over the stages, so rank 0 decides from the loss every rank sees).
LAYOUTS = ({"strategy": "ddp"}, {"strategy": "zero2", "tp": 2}, {"strategy": "ddp", "pp": 2, "micro_batch_size": 2})


def _train(rank: int, world: int, runs: list[tuple[str, str, str]]) -> list[tuple[str, int, float]]:
    """Train each (database URL, run folder, spec) on every rank; each run's status, steps and final loss."""
    from scaling.trainer import train
    from scaling.trainer.spec import RunSpec

    out = []
    for url, run_dir, spec_json in runs:
        result = train(RunSpec.model_validate_json(spec_json), url, run_dir, attempt=1, sweep="t")
        out.append((result.status, result.steps, result.final_eval_loss))
    return out


def test_every_rank_stops_at_the_step_rank_0_decided() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs: list[tuple[str, str, str]] = []
        for i, layout in enumerate(LAYOUTS):  # ten steps evaluated every two: step 4 is the first check
            spec = run_spec(layout["strategy"], execution={**layout, "eval_interval": 2}).model_copy(
                update={"early_stop": EarlyStopSpec(**RULE)})
            url = f"sqlite:///{Path(tmp) / f'results{i}.db'}"
            with Store(url) as store:
                store.register("t", [spec.record()])
                assert store.claim(spec.key, "test", sweep="t") is not None
            fields: dict[str, Any] = spec.model_dump(mode="json", exclude={"early_stop"})
            write_references(url, "t", fields, spread=0.001)
            runs.append((url, str(Path(tmp) / f"run{i}"), spec.to_json()))
        ranks = spawn(_train, 2, tmp, runs)
        for (url, _, _), layout, got in zip(runs, LAYOUTS, zip(*ranks)):
            assert got[0] == got[1], layout  # the same step, status and predicted final on both ranks
            status, steps, final = got[0]
            assert status == names.COMPLETED and steps == 4, layout
            res = connect(url)
            assert sorted(res.runs(sweep="t")["stopped_step"].dropna().astype(int)) == [4], layout
            data = res.events(sweep="t", kinds=[names.DATA])["detail"]
            assert [d.get("pp", 1) for d in data] == [layout.get("pp", 1)], layout  # the layout it trained under


def _decide_and_fail(rank: int, world: int) -> str:
    """Rank 0's decision raises: every rank must raise it, none wait in the broadcast."""
    from scaling.trainer.runtime import Runtime

    def decide() -> bool:
        raise ValueError("references unreadable")

    try:
        Runtime.current("cpu").main_decides(decide)
    except RuntimeError as exc:
        return str(exc)
    return "no error"


def test_an_error_in_rank_0s_decision_is_raised_on_every_rank() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        messages = spawn(_decide_and_fail, 2, tmp)
    assert messages == ["rank 0 failed deciding for every rank: ValueError: references unreadable"] * 2
