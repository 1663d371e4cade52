"""The database's place in the package: one vocabulary below everything, `db` importing nothing of
ours but `errors` and `vocab`, one engine lifecycle under `Store` (writes) and `Results` (reads)."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import scaling
from scaling import vocab
from scaling.db import Results, Store, connect
from scaling.db.database import Database
from scaling.db.jsonvalues import as_dict

PACKAGE = Path(scaling.__file__).parent
MIGRATIONS = PACKAGE / "db" / "migrations" / "versions"


def _our_imports(path: Path) -> set[str]:
    """The ``scaling...`` modules a file imports (at any depth: inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "scaling":
                found |= {f"scaling.{a.name}" for a in node.names}
            elif node.module.startswith("scaling."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("scaling")}
    return found


def test_vocab_imports_nothing() -> None:
    code = "import sys, scaling.vocab; print(sorted(m for m in sys.modules if m.startswith('scaling')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "['scaling', 'scaling.vocab']"
    assert not _our_imports(PACKAGE / "vocab.py")


def test_db_imports_nothing_of_ours_but_errors_and_vocab() -> None:
    outside = {
        f"{path.relative_to(PACKAGE)}: {module}"
        for path in (PACKAGE / "db").rglob("*.py")
        for module in _our_imports(path)
        if not module.startswith("scaling.db") and module not in ("scaling.errors", "scaling.vocab")
    }
    assert not outside


def test_one_home_for_names_and_statuses() -> None:
    assert importlib.util.find_spec("scaling.trainer.names") is None
    assert vocab.STATUSES == ("pending", "running", "completed", "failed", "interrupted", "superseded")
    assert vocab.TRAIN_LOSS in vocab.METRICS
    for module in ("scaling.db", "scaling.db.models"):
        assert not hasattr(importlib.import_module(module), "COMPLETED"), module


def test_the_status_check_is_spelled_from_the_vocabulary_and_matches_the_migration() -> None:
    from scaling.db.models import STATUS_CHECK

    assert STATUS_CHECK == "status IN ('pending', 'running', 'completed', 'failed', 'interrupted', 'superseded')"
    assert f'"{STATUS_CHECK}"' in (MIGRATIONS / "0006_superseded_status.py").read_text()  # the newest to set it


def test_the_database_refuses_a_status_outside_the_vocabulary(sqlite_url: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.exc import IntegrityError

    from db_helpers import records

    with Store(sqlite_url) as store:
        store.register("s", records(1))
        with pytest.raises(IntegrityError, match="CHECK constraint failed"):
            with store.engine.begin() as conn:
                conn.execute(text("UPDATE runs SET status = 'incomplete'"))


def test_store_writes_and_results_reads_over_one_base() -> None:
    assert issubclass(Store, Database) and issubclass(Results, Database)
    for reader in ("run", "runs_of", "sweep", "latest_sweep", "find_fit", "set_status"):
        assert not hasattr(Store, reader), reader
    for reader in ("run", "runs", "find_fit", "latest_sweep", "sweep_info", "sweep_name"):
        assert callable(getattr(Results, reader)), reader
    assert "scaling.db.store" not in _our_imports(PACKAGE / "db" / "results.py")


def test_one_is_sqlite_of_a_url() -> None:
    from scaling.db.engine import is_sqlite
    from scaling.orchestrator import sweep

    assert is_sqlite("sqlite:///x.db") and is_sqlite("sqlite://") and not is_sqlite("postgresql+psycopg://u@h/db")
    assert sweep.is_sqlite is is_sqlite


def test_both_sides_survive_pickling_and_fork(sqlite_url: str) -> None:
    import multiprocessing
    import pickle

    from db_helpers import records

    with Store(sqlite_url) as store, connect(sqlite_url) as res:
        store.register("s", records(2))
        assert len(res.runs()) == 2  # both hold pooled connections now
        for db in (store, res):
            clone = pickle.loads(pickle.dumps(db))
            assert type(clone) is type(db) and clone.url == db.url
            clone.close()
        if "fork" not in multiprocessing.get_all_start_methods():
            return

        def child() -> None:  # the very objects the parent holds, inherited through fork
            store.register("s", records(1, seed0=50))
            sys.exit(0 if len(res.runs()) == 3 else 1)

        proc = multiprocessing.get_context("fork").Process(target=child)
        proc.start()
        proc.join(60)
        assert proc.exitcode == 0
        assert len(res.runs()) == 3


def test_run_and_find_fit_read_what_the_store_wrote(db_url: str) -> None:
    from db_helpers import records

    recs = records(1)
    key = recs[0]["key"]
    with Store(db_url) as store, connect(db_url) as res:
        assert res.run(key) is None
        store.register("s", recs)
        row = res.run(key, sweep="s")
        assert row is not None and row["sweep"] == "s" and row["status"] == vocab.PENDING
        assert res.run(key, sweep="other") is None
        fit_id = store.save_fit("s", "kaplan", "curve_fit", {"alpha": 0.07}, "fp")
        found = res.find_fit("s", "kaplan", "curve_fit", "fp")
        assert found is not None and found["id"] == fit_id and found["sweep"] == "s" and found["result"] == {"alpha": 0.07}


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"a": 1}, {"a": 1}),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ('  {"a": 1}', {"a": 1}),
        ("{not json", {}),
        ("[1, 2]", {}),
        (None, {}),
        (float("nan"), {}),
        ("", {}),
    ],
)
def test_json_values_read_back_as_dicts(value: object, expected: dict) -> None:
    assert as_dict(value) == expected


def test_a_trainer_stopped_early_reports_a_database_status(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    from scaling.trainer.loop import Trainer
    from scaling.trainer.spec import RunSpec

    spec = RunSpec.from_dict({"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32},
                              "tokens": 32 * 8 * 4, "batch_tokens": 32 * 8, "eval_tokens": 32 * 16,
                              "execution": {"threads": 1}})
    monkeypatch.setenv("SCALING_PEAK_FLOPS", "1e11")  # MFU without the matmul probe
    result = Trainer(spec, None, tmp_path).result()  # before its first step
    assert result.status == vocab.INTERRUPTED and result.status in vocab.STATUSES
