"""The db tests' shared fixture: `scaling ARGS` run in-process with `scaling.cli.main`'s semantics."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.fixture
def scaling(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """Run `scaling ARGS` through `scaling.cli.main`; returns (exit code, stdout, stderr).

    The same code path as the console script without paying a Python start per case.
    """
    from scaling.cli import main

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        monkeypatch.setattr(sys, "argv", ["scaling", *args])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out = capsys.readouterr()
        return subprocess.CompletedProcess(list(args), code, out.out, out.err)

    return run


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    """An empty database on SQLite, and on PostgreSQL where one is configured."""
    return request.getfixturevalue(f"empty_{request.param}_url")
