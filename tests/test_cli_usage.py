"""Usage errors print click's short usage message and exit 2, never a traceback; an output the
report cannot be written to is one line and exit 2, before any work."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_run import run_main, run_process

USAGE_ERRORS = {
    "missing argument": (["plan"], "Missing argument"),
    "unknown option": (["plan", "x.yaml", "--bogus"], "No such option: --bogus"),
    "unknown command": (["bogus"], "No such command 'bogus'"),
    "not an integer": (["fit", "--bootstrap", "abc"], "Invalid value for '--bootstrap'"),
    "below the minimum": (["sweep", "x.yaml", "--max-concurrent", "0"], "Invalid value for '--max-concurrent'"),
    "option without value": (["report", "--db"], "requires an argument"),
    "extra argument": (["status", "extra"], "unexpected extra argument"),
}


@pytest.mark.parametrize("kind", list(USAGE_ERRORS))
def test_usage_errors_print_usage_and_exit_2(kind: str) -> None:
    args, expected = USAGE_ERRORS[kind]
    got = run_main(*args)
    assert got.code == 2, got
    assert "Traceback" not in got.err and got.out == ""
    assert expected in got.err and "Error: " in got.err, got.err
    # click's usage line leads, except where click itself has no command context to show
    assert got.err.startswith("Usage: scaling") or kind == "option without value", got.err


@pytest.mark.parametrize("kind", ["missing argument", "unknown command", "not an integer"])
def test_usage_errors_in_a_real_process(kind: str) -> None:
    args, expected = USAGE_ERRORS[kind]
    got = run_process(*args)
    assert got.code == 2 and "Traceback" not in got.err and expected in got.err, got.err
    assert "Try 'scaling" in got.err


def test_no_arguments_prints_help_and_help_exits_0() -> None:
    bare = run_main()
    assert bare.code == 2 and "Commands" in bare.out + bare.err
    helped = run_main("--help")
    assert helped.code == 0 and "plan" in helped.out


def test_a_user_error_is_one_line(tmp_path: Path) -> None:
    got = run_main("plan", str(tmp_path / "absent.yaml"))
    assert got.code == 2 and got.err.strip().count("\n") == 0 and "plan file not found" in got.err


@pytest.mark.parametrize("where", ["existing_dir", "dir_with_slash", "under_a_file", "unwritable"])
def test_report_output_that_cannot_be_written(tmp_path: Path, sqlite_url: str, where: str) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "a_file").write_text("x")
    output = {
        "existing_dir": str(tmp_path / "out"),
        "dir_with_slash": str(tmp_path / "out") + "/",
        "under_a_file": str(tmp_path / "a_file" / "r.html"),
        "unwritable": "/proc/scaling-report.html",  # refused even to root
    }[where]
    got = run_main("report", "--db", sqlite_url, "-o", output)
    assert got.code == 2, got
    assert "Traceback" not in got.err and got.err.strip().count("\n") == 0, got.err
    assert got.err.startswith("error: --output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "out", "results.db"]
    assert list((tmp_path / "out").iterdir()) == []


def test_report_interval_is_bounded_and_needs_watch(tmp_path: Path, sqlite_url: str) -> None:
    out = str(tmp_path / "r.html")
    alone = run_main("report", "--db", sqlite_url, "-o", out, "--interval", "5")
    assert alone.code == 2 and "--interval applies to --watch only" in alone.err, alone
    for interval in ("1e10", "0", "-1", "nan", "0.001"):
        got = run_main("report", "--db", sqlite_url, "-o", out, "--watch", "--interval", interval)
        assert got.code == 2 and "--interval must be a number of seconds in [1, 3600]" in got.err, (interval, got)
        assert got.err.strip().count("\n") == 0
    assert not (tmp_path / "r.html").exists()


def test_compare_json_output_that_cannot_be_written_names_json(tmp_path: Path, sqlite_url: str) -> None:
    (tmp_path / "a_file").write_text("x")
    got = run_main("compare", "a", "b", "--db", sqlite_url, "-o", str(tmp_path / "c.html"),
                   "--json", str(tmp_path / "a_file" / "x.json"))
    assert got.code == 2 and got.err.startswith("error: --json "), got
    assert got.err.strip().count("\n") == 0


def _leaf_commands() -> list[list[str]]:
    """Every command of the typer app, as the words a user types (``db upgrade``)."""
    import typer.main

    from scaling.cli import app

    def walk(command, path: list[str]) -> list[list[str]]:  # type: ignore[no-untyped-def]
        subs = getattr(command, "commands", None)
        return [leaf for name, sub in subs.items() for leaf in walk(sub, [*path, name])] if subs else [path]

    return walk(typer.main.get_command(app), [])


def test_every_command_answers_through_the_installed_console_script() -> None:
    """One real ``scaling`` process per command (the other command tests run in-process): the
    entry point in pyproject.toml reaches each. The processes run at once."""
    import subprocess
    import sys

    script = str(Path(sys.executable).with_name("scaling"))
    commands = _leaf_commands()
    assert len(commands) >= 12 and ["db", "upgrade"] in commands and ["sweep"] in commands and ["export"] in commands
    procs = [(words, subprocess.Popen([script, *words, "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)) for words in commands]
    for words, proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0 and "Traceback" not in err, (words, err)
        assert f"Usage: scaling {' '.join(words)}" in out, (words, out[:300])


def test_export_help_names_the_class_each_family_becomes() -> None:
    helped = run_main("export", "--help")
    words = " ".join(helped.out.replace("│", " ").split())
    assert helped.code == 0 and all(name in words for name in ("GPT2LMHeadModel", "LlamaForCausalLM", "Qwen3ForCausalLM"))
    assert "Qwen3ForCausalLM for a llama run with qk_norm" in words, words
