"""Bad database input: one DatabaseError line naming the masked URL; nothing half-written."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from scaling.db import Store, connect, normalize_url, resolve_url
from scaling.errors import DatabaseError

from db_helpers import records


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://alice:s3cret@127.0.0.1:notaport/db",
        "nosuchdialect://alice:s3cret@host/db",
        "postgresql+nosuchdriver://alice:s3cret@host/db",
        "://alice:s3cret@host/db",
    ],
)
def test_malformed_url(url: str) -> None:
    for opener in (Store, connect):
        with pytest.raises(DatabaseError) as err:
            opener(url)
        msg = str(err.value)
        assert "s3cret" not in msg and "\n" not in msg
        assert "***" in msg or "alice" not in msg


def test_unreachable_postgres_fails_fast_and_masks_the_password() -> None:
    t0 = time.monotonic()
    with pytest.raises(DatabaseError) as err:
        Store("postgresql+psycopg://alice:s3cret@127.0.0.1:1/results")  # nothing listens on port 1
    assert time.monotonic() - t0 < 10
    msg = str(err.value)
    assert "postgresql+psycopg://alice:***@127.0.0.1:1/results" in msg and "s3cret" not in msg
    assert "\n" not in err.value.one_line()


def test_a_silent_postgres_times_out_in_about_five_seconds() -> None:
    """A server that accepts TCP but never answers (a hung host): the connect timeout ends it."""
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes handshakes; nobody ever replies
        port = silent.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(DatabaseError, match="timeout"):
            Store(f"postgresql+psycopg://alice:s3cret@127.0.0.1:{port}/results")
        assert time.monotonic() - t0 < 20


def test_sqlite_in_a_missing_folder(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no/such/folder/results.db"
    with pytest.raises(DatabaseError, match="folder .*no/such/folder does not exist"):
        Store(url)
    assert not (tmp_path / "no").exists()


def test_sqlite_query_arguments_the_driver_ignores_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="not accepted by the pysqlite driver") as exc:
        Store(f"sqlite:///{tmp_path / 'x.db'}?password=Hunter2zz")
    assert "Hunter2zz" not in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "x.db").exists()


def test_sqlite_in_a_read_only_folder(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        folder = Path("/proc")  # root ignores permission bits; procfs refuses new files even to root
    else:
        folder = tmp_path / "ro"
        folder.mkdir()
        folder.chmod(0o555)
    url = f"sqlite:///{folder}/results.db"
    try:
        with pytest.raises(DatabaseError) as err:
            Store(url)
    finally:
        if folder != Path("/proc"):
            folder.chmod(0o755)
    assert f"{folder}/results.db" in str(err.value)


def test_connect_to_a_missing_file_does_not_create_it(tmp_path: Path) -> None:
    path = tmp_path / "missing.db"
    with pytest.raises(DatabaseError, match="no results database"):
        connect(str(path))
    assert not path.exists()


def test_an_empty_url_is_refused_not_taken_as_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatabaseError, match="is empty"):
        connect("  ")
    assert list(tmp_path.iterdir()) == []


def test_connect_to_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="is a folder, not a file"):
        connect(str(tmp_path))


def test_connect_to_an_empty_file_does_not_write_a_schema_into_it(tmp_path: Path) -> None:
    path = tmp_path / "touched.db"
    path.touch()
    with pytest.raises(DatabaseError, match="is empty"):
        connect(str(path))
    assert path.stat().st_size == 0


def test_a_failed_register_writes_nothing(db_url: str) -> None:
    recs = records(3)
    bad = dict(recs[2], N="not a number")
    with Store(db_url) as store:
        with pytest.raises(ValueError):
            store.register("s", [recs[0], recs[1], bad])
        assert connect(db_url).sweeps().empty
        assert store.register("s", recs) == [r["key"] for r in recs]


def test_url_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SCALING_DB", raising=False)
    assert resolve_url() == f"sqlite:///{tmp_path}/scaling.db"
    monkeypatch.setenv("SCALING_DB", "env.db")
    assert resolve_url() == f"sqlite:///{tmp_path}/env.db"
    assert resolve_url(plan="sqlite:///plan.db") == f"sqlite:///{tmp_path}/plan.db"
    assert resolve_url(cli="cli.db", plan="plan.db") == f"sqlite:///{tmp_path}/cli.db"
    assert normalize_url("sqlite:////abs/x.db") == "sqlite:////abs/x.db"
    pg = "postgresql+psycopg://u:p@h:5432/db"
    assert normalize_url(pg) == pg
