"""A trained run of an adaptive sweep stops early by the rule the simulated trainer follows: at its
first check whose predicted final loss is within the tolerance, recorded completed with that
prediction, its ``stopped_step`` and a ``stopped_early`` event; a run whose prediction is too wide
trains to its end. Real training (the tiny model on the CPU) against reference curves in SQLite."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from early_refs import write_references
from scaling import vocab as names
from scaling.db import connect
from scaling.trainer import train
from scaling.trainer.checkpoints import checkpoint

RULE = {"tolerance": 0.05, "after": 0.3, "every": 0.1}


def _run(tiny: dict[str, Any], registered: Any, tmp_path: Path, spread: float) -> tuple[Any, str, Any]:
    """The tiny run (24 steps, evaluated every 4) with ``early_stop``, trained against references of
    ``spread``; its spec, the database URL and its result."""
    from scaling.trainer.spec import RunSpec

    tiny["execution"].update(eval_interval=4, checkpoint_interval=12)
    spec = RunSpec.from_dict({**tiny, "early_stop": RULE})
    url = registered(spec)
    write_references(url, "t", tiny, spread)
    return spec, url, train(spec, url, tmp_path, attempt=1, sweep="t")


def _evals(url: str, key: str) -> dict[int, float]:
    df = connect(url).metrics(run_keys=[key], names=[names.EVAL_LOSS])
    return dict(zip(df["step"].astype(int), df["value"]))


def test_a_trained_run_stops_at_its_first_narrow_prediction(tiny, registered, tmp_path: Path) -> None:
    spec, url, result = _run(tiny, registered, tmp_path, spread=0.001)
    # checks from 0.3 of 24 steps on: the evaluation at step 8 is the first, and its interval is narrow
    assert result.status == names.COMPLETED and result.steps == 8 and result.tokens == 8 * spec.batch_tokens
    evals = _evals(url, spec.key)
    assert max(evals) == 8  # nothing was trained or evaluated after the stop
    drop = (1 - 8 / 24) * 0.8 * (24 / 20) ** -0.5  # what the references say is still to come
    assert result.final_eval_loss == pytest.approx(evals[8] - drop, abs=0.01)
    events = connect(url).events(run_keys=[spec.key], kinds=[names.STOPPED_EARLY])
    assert len(events) == 1 and int(events["step"].iloc[0]) == 8
    detail = events["detail"].iloc[0]
    assert detail["loss"] == pytest.approx(result.final_eval_loss) and detail["tolerance"] == RULE["tolerance"]
    assert detail["lo"] <= result.final_eval_loss <= detail["hi"] and detail["hi"] - detail["lo"] <= 2 * RULE["tolerance"]
    assert detail["attempt"] == 1 and result.data["stopped_early"]["step"] == 8
    run = connect(url).runs(sweep="t").set_index("run_key").loc[spec.key]
    assert int(run["stopped_step"]) == 8
    assert checkpoint.latest(tmp_path).name == "step_00000008"  # the state it stopped in is saved

    again = train(spec, url, tmp_path, attempt=2, sweep="t")  # a retried attempt resumes stopped
    assert again.status == names.COMPLETED and again.steps == 8 and again.resumed_from == 8
    assert again.final_eval_loss == result.final_eval_loss and max(_evals(url, spec.key)) == 8


def test_a_trained_run_whose_prediction_is_wide_trains_to_its_end(tiny, registered, tmp_path: Path) -> None:
    spec, url, result = _run(tiny, registered, tmp_path, spread=1.0)
    assert result.status == names.COMPLETED and result.steps == spec.steps == 24
    assert result.final_eval_loss == pytest.approx(_evals(url, spec.key)[24]) and "stopped_early" not in result.data
    assert connect(url).events(run_keys=[spec.key], kinds=[names.STOPPED_EARLY]).empty
    run = connect(url).runs(sweep="t").set_index("run_key").loc[spec.key]
    assert run["stopped_step"] is None or math.isnan(run["stopped_step"])
