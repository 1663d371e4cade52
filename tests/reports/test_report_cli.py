"""`scaling report`: writes the file and prints its path; user errors are one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from cli_run import run_cli, run_completed

SCALING = str(Path(sys.executable).with_name("scaling"))


def _run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """``scaling report ARGS`` in this process (as :mod:`cli_run` runs the CLI), ``env`` set around it."""
    saved = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        return run_completed("report", *args)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


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


def _copy_db(url: str, tmp_path: Path) -> tuple[str, Path]:
    import shutil

    from scaling.db.engine import sqlite_path

    copy = tmp_path / "results.db"
    shutil.copyfile(sqlite_path(url), copy)
    return f"sqlite:///{copy}", copy


def test_an_output_on_the_database_or_on_the_other_output_is_refused(sweeps, tmp_path: Path) -> None:
    url, db = _copy_db(sweeps["one_run"][0], tmp_path)
    res = _run("--db", url, "--sweep", "one-run", "-o", str(db), "--fit", "stored")
    assert res.returncode == 2 and "is the results database" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert db.read_bytes().startswith(b"SQLite format 3\x00")
    page = tmp_path / "same.out"
    res = subprocess.run([SCALING, "compare", "a", "b", "--db", url, "-o", str(page), "--json", str(page)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 2 and "is also --output's path" in res.stderr, res.stderr
    assert not page.exists()


def test_outputs_that_are_not_regular_files_or_are_database_sidecars_are_refused(sweeps, tmp_path: Path) -> None:
    """A device would be replaced by the page and a pipe would block: each is one line, exit 2, untouched."""
    import stat

    url, db = _copy_db(sweeps["one_run"][0], tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    targets = {fifo: "is not a regular file", tmp_path / ("a" * 300 + ".html"): "File name too long",
               Path(f"{db}-wal"): "the results database's wal file", Path(f"{db}-shm"): "database's shm file"}
    device = tmp_path / "full"
    try:
        os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # a /dev/full of our own
        targets[device] = "is not a regular file"
    except PermissionError:  # needs CAP_MKNOD; the pipe covers the same check
        pass
    targets[Path("-")] = "not written to standard output"
    for target, says in targets.items():
        args = ("report", "--db", url, "--sweep", "one-run", "-o", str(target), "--fit", "stored")
        if target == fifo:  # a process with a timeout: were the check gone, opening the pipe would block
            res = subprocess.run([SCALING, *args], capture_output=True, text=True, timeout=60)
            code, err = res.returncode, res.stderr
        else:
            code, _, err = run_cli(*args)
        assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and not Path(f"{db}-wal").exists()
    if device.exists():
        assert stat.S_ISCHR(device.lstat().st_mode)


def test_a_refused_report_leaves_no_folder(sweeps, tmp_path: Path) -> None:
    url, _ = sweeps["one_run"]
    for db, sweep in ((f"sqlite:///{tmp_path / 'none.db'}", "one-run"), (url, "missing")):
        res = _run("--db", db, "--sweep", sweep, "-o", str(tmp_path / "new" / "deep" / "r.html"))
        assert res.returncode == 2, res.stderr
        assert not (tmp_path / "new").exists()


def test_a_failed_write_keeps_the_previous_report_whole(sweeps, tmp_path: Path, monkeypatch, capsys) -> None:
    """A full disk cannot be caused here, so fsync is made to fail as it would (a mock of that fault)."""
    import errno

    import pytest

    from scaling.cli import main
    from scaling.reports import output

    url, _ = _copy_db(sweeps["one_run"][0], tmp_path)
    out = tmp_path / "r.html"
    out.write_text("OLD")

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output.os, "fsync", full)
    monkeypatch.setattr(sys, "argv", ["scaling", "report", "--db", url, "--sweep", "one-run", "-o", str(out),
                                      "--fit", "stored"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2 and "No space left on device" in capsys.readouterr().err
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("results.db"))  # SQLite's own -wal/-shm
    assert out.read_text() == "OLD" and left == ["r.html"], left  # no temporary page left behind


def test_an_output_name_with_a_terminal_escape_is_refused(sweeps, tmp_path: Path) -> None:
    """The path printed must be the file written: a name with an escape sequence is refused, shown escaped."""
    url, _ = sweeps["one_run"]
    folder = tmp_path / "out"
    res = _run("--db", url, "--sweep", "one-run", "-o", str(folder / "r\x1b[31m.html"), "--fit", "stored")
    assert res.returncode == 2 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert "r\\x1b[31m.html" in res.stderr and "control character \\x1b" in res.stderr and "\x1b" not in res.stderr
    assert not folder.exists()
