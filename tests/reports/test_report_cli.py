"""`scaling report`: writes the file and prints its path; user errors are one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCALING = str(Path(sys.executable).with_name("scaling"))


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SCALING, "report", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_writes_the_report_and_prints_its_path(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["one_run"]
    out = tmp_path / "r.html"
    # --open with a harmless "browser" (webbrowser honours $BROWSER), as on a headless machine
    res = _run("--db", url, "--sweep", "one-run", "-o", str(out), "--fit", "stored", "--open", env={"BROWSER": "true"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str(out.resolve())
    assert out.stat().st_size > 1_000_000  # plotly.js is inside


def test_unknown_sweep_is_one_line_exit_2(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["one_run"]
    res = _run("--db", url, "--sweep", "missing", "-o", str(tmp_path / "r.html"))
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [f"error: no sweep named 'missing' in the database at {url}"]
    assert "Traceback" not in res.stderr


def test_missing_database_and_bad_fit_mode(tmp_path: Path) -> None:
    res = _run("--db", f"sqlite:///{tmp_path / 'none.db'}")
    assert res.returncode == 2 and "none.db" in res.stderr and "Traceback" not in res.stderr
    res = _run("--db", f"sqlite:///{tmp_path / 'none.db'}", "--fit", "guess")
    assert res.returncode == 2 and "--fit must be one of" in res.stderr
    res = _run("--db", f"sqlite:///{tmp_path / 'none.db'}", "--fit", "stored", "--store-fits")
    assert res.returncode == 2 and res.stderr.strip().splitlines() == [
        "error: --store-fits needs --fit sweep (--fit stored makes nothing to store)"]
