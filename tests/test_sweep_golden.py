"""The results of one simulated sweep, compared with what they were when this file was written.

A small sweep of the simulated trainer with hyperparameter groups and two downstream tasks
(:mod:`sweep_golden`) is trained in this process; its loss, hyperparameter and task fits, the
recommendation, the closing answer and the report's visible text are compared with
``tests/data/sweep_golden.json`` (numbers at 4 significant figures). A change to how results are
computed or worded shows here as a diff; a deliberate one is recorded by running this file with
``SCALING_UPDATE_GOLDEN=1`` and reviewing the diff of the JSON.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import sweep_golden as G

GOLDEN = Path(__file__).resolve().parent / "data" / "sweep_golden.json"


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("golden")
    url, sweep, _ = G.build(folder)
    return json.loads(json.dumps(G.snapshot(url, sweep, G.plan_dict(folder), folder)))


def test_a_simulated_sweeps_results_are_the_golden_ones(snapshot: dict) -> None:
    if os.environ.get("SCALING_UPDATE_GOLDEN"):
        GOLDEN.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())
    for part in golden:  # part by part, so that a failure names what changed
        assert snapshot.get(part) == golden[part], part
    assert set(snapshot) == set(golden)
