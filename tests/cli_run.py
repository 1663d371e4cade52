"""Run the `scaling` command line as a user does: in-process through ``scaling.cli.main`` (fast,
with SystemExit and both streams captured) or as a real subprocess."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    code: int
    out: str
    err: str


def run_main(*args: str) -> Outcome:
    """``scaling ARGS`` in this process; any exception other than SystemExit propagates."""
    from scaling.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return Outcome(code, out.getvalue(), err.getvalue())


def run_cli(*args: str) -> tuple[int, str, str]:
    """:func:`run_main` as a plain (exit code, stdout, stderr) tuple."""
    outcome = run_main(*args)
    return outcome.code, outcome.out, outcome.err


def run_completed(*args: str) -> subprocess.CompletedProcess:
    """:func:`run_main` shaped as :func:`subprocess.run`'s result, for tests written against a process."""
    outcome = run_main(*args)
    return subprocess.CompletedProcess(["scaling", *args], outcome.code, outcome.out, outcome.err)


def run_process(*args: str, cwd: Path | None = None, timeout: float = 120) -> Outcome:
    """``scaling ARGS`` as a separate Python process (this checkout first on the path)."""
    code = "import sys; sys.argv[0] = 'scaling'; from scaling.cli import main; main()"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                       env=env, cwd=cwd)
    return Outcome(p.returncode, p.stdout, p.stderr)
