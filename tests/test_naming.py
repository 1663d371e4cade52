"""One validator for path-forming names: hostile sweep names are refused by the plan and the CLI alike."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scaling.errors import UserError
from scaling.naming import check_name, name_problem

HOSTILE = [
    "../../../elsewhere",  # climbs out of runs_dir
    "..",
    ".hidden",
    "a/b",
    "/abs",
    "nl\n",  # `$` would match before this trailing newline
    "esc\x1b[31m",  # a terminal escape
    "bell\a",
    "tab\tname",
    "sp ace",
    "",
    "x" * 101,
]


@pytest.mark.parametrize("name", ["adhoc", "example", "chinchilla-small", "run_1.2", "A" * 100, "0"])
def test_plain_names_pass(name: str) -> None:
    assert name_problem(name) is None
    assert check_name(name) == name


@pytest.mark.parametrize("name", HOSTILE, ids=[repr(n)[:20] for n in HOSTILE])
def test_hostile_names_are_refused_with_the_name_escaped(name: str) -> None:
    with pytest.raises(UserError) as exc:
        check_name(name, "--sweep")
    line = exc.value.one_line()
    assert line.startswith("error: --sweep: ") and "\n" not in line
    assert not any(ch in line for ch in "\x1b\a\t"), "control characters are shown escaped, never raw"


def test_non_text_is_refused() -> None:
    assert name_problem(3) is not None and name_problem(None) is not None


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    from scaling.cli import main

    monkeypatch.setattr(sys, "argv", ["scaling", *argv])
    with pytest.raises(SystemExit) as exc:
        main()
    return int(exc.value.code), capsys.readouterr().err


COMMANDS = [
    ["status", "--sweep"],
    ["runs", "--sweep"],
    ["fit", "--sweep"],
    ["recommend", "--sweep"],
    ["report", "--sweep"],
]


@pytest.mark.parametrize("name", ["../../../elsewhere", "nl\n", "esc\x1b[31m"], ids=["parent", "newline", "escape"])
@pytest.mark.parametrize("command", COMMANDS, ids=[c[0] for c in COMMANDS])
def test_cli_refuses_hostile_sweep_names(command: list[str], name: str, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    db = tmp_path / "x.db"
    code, err = _cli([*command, name, "--db", f"sqlite:///{db}"], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: --sweep: "), err
    assert "\x1b" not in err and "Traceback" not in err
    assert not db.exists() and list(tmp_path.iterdir()) == []


def test_train_refuses_a_sweep_outside_runs_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    spec = work / "spec.yaml"
    spec.write_text("model: {n_layer: 1, d_model: 8, n_head: 1, context: 16}\ntokens: 256\nbatch_tokens: 64\n")
    code, err = _cli(["train", str(spec), "--sweep", "../../../elsewhere"], capsys, monkeypatch)
    assert code == 2 and err.count("\n") == 1 and "--sweep" in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "b", "c", "spec.yaml"], "nothing written anywhere"


def test_run_display_names_refuse_control_characters() -> None:
    from scaling.errors import SpecError
    from scaling.trainer.spec import RunSpec

    fields = {"model": {"n_layer": 1, "d_model": 8, "n_head": 1, "context": 16}, "tokens": 256, "batch_tokens": 64}
    assert RunSpec.from_dict({**fields, "name": "sweep/N1e+04/D1e+06/s0"}).name == "sweep/N1e+04/D1e+06/s0"
    with pytest.raises(SpecError, match="control characters"):
        RunSpec.from_dict({**fields, "name": "x\x1b[2J"})
