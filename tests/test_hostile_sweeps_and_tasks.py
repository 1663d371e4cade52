"""Hostile inputs to hyperparameter sweeps and downstream tasks: each is one line naming the problem
and where (never a traceback), and a printed prediction never reads as outside its own interval."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml

from scaling.errors import FitError, PlanError, SpecError
from scaling.fitting.core.measurements import FitData
from scaling.fitting.tasks.task_data import from_frame as tasks_from_frame
from scaling.fitting.tasks.task_laws import task_lines
from scaling.orchestrator.expand import expand
from scaling.orchestrator.plan import load_plan
from scaling.trainer.evaluation.eval_tasks import parse_lines

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sim-hparams.yaml"
GOOD = b'{"context": "a", "choices": ["b", "c"], "gold": 0}\n'


# -- task files -------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    b'{"context": "a", "choices": ["\\ud800", "c"], "gold": 0}',
    b'{"context": "\\udcff", "choices": ["b", "c"], "gold": 0}',
    b'{"context": "a", "few_shot": "x\\udbff", "choices": ["b", "c"], "gold": 1}',
])
def test_a_lone_surrogate_escape_is_one_line_naming_file_and_line(line: bytes) -> None:
    with pytest.raises(SpecError, match=r"t\.jsonl:2: a string holds a lone surrogate escape"):
        parse_lines(GOOD + line, "t.jsonl")


def test_an_escaped_surrogate_pair_is_text() -> None:
    (item,) = parse_lines(b'{"context": "\\ud83d\\ude00", "choices": ["b", "c"], "gold": 0}', "t.jsonl")
    assert item.context == "\U0001F600"


# -- hparams: values the plan computes from a rule --------------------------------------------------
def _plan(tmp_path: Path, hparams: dict, rules: dict | None = None) -> Path:
    plan = yaml.safe_load(EXAMPLE.read_text())
    plan["runs_dir"] = str(tmp_path / "runs")
    plan["grid"] = plan["grid"][:1]
    plan["grid"][0]["hparams"] = hparams
    plan["rules"].update(rules or {})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan, sort_keys=False))
    return path


@pytest.mark.parametrize("factor", [1e308, 1e-308])
def test_a_rule_factor_far_beyond_any_run_is_refused_at_its_line(tmp_path: Path, factor: float) -> None:
    path = _plan(tmp_path, {"batch_tokens": {"from": "rule", "factors": [factor, 1.0]}}, {"batch_tokens": "512"})
    with pytest.raises(PlanError, match=r"grid\.0\.hparams\.batch_tokens: factors: item 0 .*between 1e-06 and 1e\+06"):
        expand(*load_plan(path))


def test_a_swept_value_the_trainer_refuses_names_the_field_and_the_sweep(tmp_path: Path) -> None:
    path = _plan(tmp_path, {"lr": {"from": "rule", "factors": [1e5, 1.0]}})
    with pytest.raises(PlanError, match=r"grid\.0\.hparams\.lr: optimizer\.lr [0-9.e+]+: .*less than or equal to 100"):
        expand(*load_plan(path))


# -- task columns of a CSV, and the predictions printed ----------------------------------------------
def test_an_accuracy_out_of_range_is_shown_as_the_number_it_is() -> None:
    df = pd.DataFrame({"N": [1e6, 2e6], "D": [2e7, 4e7], "loss": [3.0, 2.9], "acc_hellaswag": [0.3, 1.5]})
    with pytest.raises(FitError) as exc:
        tasks_from_frame(df, FitData(points=pd.DataFrame(), flops_per_param_token=6.0), source="m.csv")
    assert str(exc.value).startswith("m.csv: column 'acc_hellaswag', data row 2: 1.5: an accuracy must lie in [0, 1]")


def test_a_predicted_accuracy_is_printed_to_the_digits_of_its_interval() -> None:
    from scaling.fmt import Interval

    iv = Interval(0.53349, 0.5334, 0.54, kind="percentile")
    lines = task_lines({"hellaswag": {"N": 1e6, "D": 2e7, "sigmoid": iv}})
    assert "hellaswag [sigmoid]: 0.5335 [0.5334, 0.54]" in lines[1]


# -- {fitted: SWEEP} rules read the database the command names ----------------------------------------
def test_scaling_plan_reads_a_fitted_rule_from_the_database_db_names(tmp_path: Path) -> None:
    from tests.cli_run import run_main

    top = yaml.safe_load((EXAMPLE.parent / "sim-hparams-top.yaml").read_text())
    top["runs_dir"] = str(tmp_path / "runs")
    (tmp_path / "top.yaml").write_text(yaml.safe_dump(top, sort_keys=False))
    url = f"sqlite:///{tmp_path / 'elsewhere.db'}"
    got = run_main("plan", str(tmp_path / "top.yaml"), "--db", url)
    assert got.code == 2 and f"no results database at {url}" in got.err, got
    assert "Traceback" not in got.err and not (tmp_path / "elsewhere.db").exists()


# -- scaling export's output folder ---------------------------------------------------------------------
@pytest.mark.parametrize("target", ["empty", "nowhere"])
def test_an_export_folder_that_is_a_link_is_refused_naming_it(tmp_path: Path, target: str) -> None:
    from scaling.errors import UserError
    from scaling.trainer.export import check_output

    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / target)
    with pytest.raises(UserError, match=r"--hf .*link is a symbolic link"):
        check_output(tmp_path / "link")
    check_output(tmp_path / "empty")  # an empty folder, or a new one, is fine
    check_output(tmp_path / "new")
