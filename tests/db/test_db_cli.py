"""`scaling runs` and `scaling db upgrade` with `scaling.cli.main`'s semantics.

Most cases call `main()` in-process (the ``scaling`` fixture of conftest.py); one case runs the
real script.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from scaling.db import Store

from db_helpers import records

SCALING = str(Path(sys.executable).with_name("scaling"))


def script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SCALING, *args], capture_output=True, text=True, timeout=120)


def _fill(url: str) -> tuple[str, list[dict]]:
    old, new = records(2), records(3, seed0=100)
    with Store(url) as store:
        store.register("old", old)
        store.register("new", new)
        store.claim(new[0]["key"], "gpu-7")
        store.finish(new[0]["key"], "completed", final_train_loss=3.25, final_eval_loss=3.5)
    return url, new


@pytest.fixture
def filled(db_url: str) -> tuple[str, list[dict]]:
    return _fill(db_url)


def test_runs_lists_the_latest_sweep_in_each_format(filled: tuple[str, list[dict]], scaling) -> None:  # type: ignore[no-untyped-def]
    url, new = filled
    table = scaling("runs", "--db", url)
    assert table.returncode == 0, table.stderr
    assert "sweep new: 3 runs" in table.stdout and "gpu-7" in table.stdout and "3.5000" in table.stdout
    assert all(r["key"] in table.stdout for r in new)

    js = scaling("runs", "--db", url, "--format", "json")
    assert js.returncode == 0, js.stderr
    rows = json.loads(js.stdout)
    assert [r["run_key"] for r in rows] == [r["key"] for r in new]
    assert rows[0]["status"] == "completed" and rows[0]["final_loss"] == 3.5 and rows[0]["N"] == new[0]["N"]

    out = scaling("runs", "--db", url, "--sweep", "old", "--format", "csv")
    assert out.returncode == 0, out.stderr
    parsed = list(csv.DictReader(io.StringIO(out.stdout)))
    assert len(parsed) == 2 and {r["sweep"] for r in parsed} == {"old"} and "spec" not in parsed[0]


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--sweep", "nope"], "sweep 'nope' not found"),
        (["--format", "xml"], "--format must be one of"),
    ],
)
def test_runs_user_errors_exit_2_with_one_line(filled: tuple[str, list[dict]], args: list[str], expect: str, scaling) -> None:  # type: ignore[no-untyped-def]
    url, _ = filled
    res = scaling("runs", "--db", url, *args)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and expect in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(
    "url, expect",
    [
        ("postgresql+psycopg://bob:hunter2@127.0.0.1:1/x", "bob:***@127.0.0.1:1"),
        ("sqlite:////nonexistent-dir/x.db", "no results database"),
        ("nosuch://bob:hunter2@h/x", "bob:***@h"),
    ],
)
def test_bad_database_exits_2_with_the_masked_url(url: str, expect: str, scaling) -> None:  # type: ignore[no-untyped-def]
    res = scaling("runs", "--db", url)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1
    assert expect in res.stderr and "hunter2" not in res.stderr


def test_db_upgrade_creates_and_reports(tmp_path: Path, scaling) -> None:  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/new.db"
    first = scaling("db", "upgrade", "--db", url)
    assert first.returncode == 0, first.stderr
    assert "upgraded from schema revision (empty)" in first.stdout
    again = scaling("db", "upgrade", "--db", url)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    empty = scaling("runs", "--db", url)
    assert empty.returncode == 2 and "no sweeps" in empty.stderr
    bad = scaling("db", "upgrade", "--db", f"sqlite:///{tmp_path}/missing/new.db")
    assert bad.returncode == 2 and "does not exist" in bad.stderr


def test_the_console_script_lists_runs_and_fails_cleanly(sqlite_url: str) -> None:
    """The installed `scaling` script itself (once; the in-process cases cover both databases)."""
    url, new = _fill(sqlite_url)
    ok = script("runs", "--db", url, "--format", "json")
    assert ok.returncode == 0, ok.stderr
    assert [r["run_key"] for r in json.loads(ok.stdout)] == [r["key"] for r in new]
    bad = script("runs", "--db", "postgresql+psycopg://bob:hunter2@127.0.0.1:1/x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "bob:***@127.0.0.1:1" in bad.stderr
    assert "Traceback" not in bad.stderr and "hunter2" not in bad.stderr
