"""A database that is damaged, someone else's, from a newer scaling, or in memory: every command
says so in one line on stderr and exits 2 (no traceback, nothing written)."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path

import pytest
import yaml
from sqlalchemy import create_engine, text

from scaling.db import Store

from db_helpers import metric_rows, records

EXAMPLE_PLAN = Path(__file__).resolve().parents[2] / "examples" / "plan.yaml"
DAMAGE = ("random_bytes", "truncated", "bad_page")


def damaged_database(folder: Path, damage: str) -> Path:
    """A SQLite results file damaged as a disk, a copy or a stray write would damage it."""
    path = folder / "results.db"
    if damage == "random_bytes":
        path.write_bytes(random.Random(0).randbytes(64 * 1024))
        return path
    recs = records(3)
    with Store(f"sqlite:///{path}") as store:
        store.register("s", recs)
        for i, rec in enumerate(recs):
            store.claim(rec["key"], "h")
            store.log_metrics(rec["key"], metric_rows(range(600), ("train/loss", "eval/loss")))
            store.finish(rec["key"], "completed", final_eval_loss=3.0 - i / 10)
    assert not path.with_name(path.name + "-wal").exists()  # checkpointed: the file holds everything
    if damage == "truncated":
        with path.open("r+b") as f:
            f.truncate(path.stat().st_size // 3)
    else:  # garbage over the first bytes of the runs table's root page: the schema itself reads fine
        conn = sqlite3.connect(path)
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        conn.close()
        with path.open("r+b") as f:
            f.seek((root - 1) * page_size)
            f.write(b"\xff" * 64)
    return path


def _example_plan(folder: Path) -> Path:
    plan = yaml.safe_load(EXAMPLE_PLAN.read_text())
    plan["runs_dir"] = str(folder / "runs")
    path = folder / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def _one_line(res, *expected: str) -> None:  # type: ignore[no-untyped-def]
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stderr.startswith("error: ") and res.stderr.count("\n") == 1, res.stderr
    assert "Traceback" not in res.stderr
    for text_ in expected:
        assert text_ in res.stderr, res.stderr


@pytest.mark.parametrize("damage", DAMAGE)
def test_every_command_names_the_damaged_file(tmp_path: Path, damage: str, scaling, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    path = damaged_database(tmp_path, damage)
    before = path.read_bytes()
    monkeypatch.chdir(tmp_path)
    plan = _example_plan(tmp_path)
    commands = [
        ["status"], ["runs"], ["fit"], ["report", "-o", str(tmp_path / "r.html")], ["db", "upgrade"],
        ["sweep", str(plan), "--no-fit", "--no-report"], ["sweep", str(plan), "--dry-run"],
    ]
    for args in commands:
        res = scaling(*args, "--db", str(path))
        _one_line(res, f"database file {path} is damaged or not a SQLite database")
    assert path.read_bytes() == before and not (tmp_path / "r.html").exists()


def test_the_console_script_on_a_damaged_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = damaged_database(tmp_path, "random_bytes")
    res = subprocess.run([str(Path(sys.executable).with_name("scaling")), "status", "--db", str(path)],
                         capture_output=True, text=True, timeout=120)
    _one_line(res, str(path), "file is not a database")


def test_db_upgrade_refuses_a_newer_schema(sqlite_url: str, scaling, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    dry_run = ["sweep", str(_example_plan(tmp_path)), "--dry-run"]  # not a list of runs "to train"
    for args in (["db", "upgrade"], ["status"], dry_run):  # the same line from each
        _one_line(scaling(*args, "--db", sqlite_url), "schema revision ffff", "newer scaling")


def test_db_upgrade_refuses_a_foreign_database(empty_sqlite_url: str, scaling) -> None:  # type: ignore[no-untyped-def]
    engine = create_engine(empty_sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)"))
    engine.dispose()
    for args in (["db", "upgrade"], ["status"]):
        _one_line(scaling(*args, "--db", empty_sqlite_url), "invoices", "not a scaling results database")
    engine = create_engine(empty_sqlite_url)
    with engine.connect() as conn:
        assert set(conn.execute(text("SELECT name FROM sqlite_master WHERE type = 'table'")).scalars()) == {"invoices"}
    engine.dispose()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_is_refused(url: str, tmp_path: Path, scaling, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(tmp_path)
    plan = _example_plan(tmp_path)
    sweep = ["sweep", str(plan), "--no-fit", "--no-report"]
    for args in (["runs"], ["status"], ["db", "upgrade"], ["fit"], sweep, [*sweep, "--dry-run"]):
        _one_line(scaling(*args, "--db", url), "in memory", "cannot hold results across processes")
