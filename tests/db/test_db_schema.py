"""Schema creation on first open, refusal of an outdated schema, and `scaling db upgrade`."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect, text

from scaling.db import Store, connect
from scaling.db.engine import make_engine
from scaling.db.schema import alembic_config, current_revision, head_revision
from scaling.errors import DatabaseError, SchemaOutdatedError, mask_url

from db_helpers import mp_context

TABLES = {"sweeps", "runs", "metric_names", "metrics", "events", "fits", "alembic_version"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"empty_{request.param}_url")


def _revision(url: str) -> str | None:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return current_revision(conn)
    finally:
        engine.dispose()


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_head_constant_matches_the_migration_scripts() -> None:
    from scaling.db.schema import HEAD

    assert HEAD == head_revision()


def test_first_open_creates_schema_at_head(empty_url: str) -> None:
    Store(empty_url).close()
    assert TABLES <= _tables(empty_url)
    assert _revision(empty_url) == head_revision()
    # Opening again is a no-op (no error, same revision).
    with connect(empty_url) as res:
        assert res.runs().empty
    assert _revision(empty_url) == head_revision()


def test_older_revision_is_refused_with_the_upgrade_command(empty_url: str) -> None:
    from alembic import command

    engine = make_engine(empty_url)
    with engine.begin() as conn:
        command.upgrade(alembic_config(connection=conn), "0001")
    engine.dispose()
    assert _revision(empty_url) == "0001"

    with pytest.raises(SchemaOutdatedError) as err:
        Store(empty_url)
    msg = str(err.value)
    assert "0001" in msg and f"scaling db upgrade --db {mask_url(empty_url)}" in msg
    with pytest.raises(SchemaOutdatedError):
        connect(empty_url)

    from scaling.db.migrate import upgrade_database

    assert "upgraded from schema revision 0001 to" in upgrade_database(empty_url)
    assert _revision(empty_url) == head_revision()
    assert "nothing to do" in upgrade_database(empty_url)
    Store(empty_url).close()


def test_downgrade_to_base_and_back_keeps_migrations_reversible(empty_url: str) -> None:
    from alembic import command

    Store(empty_url).close()
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        command.downgrade(alembic_config(connection=conn), "base")
    engine.dispose()
    assert _tables(empty_url) <= {"alembic_version"}
    Store(empty_url).close()  # an emptied database is created afresh
    assert _revision(empty_url) == head_revision()


def test_newer_unknown_revision_is_refused(sqlite_url: str) -> None:
    engine = create_engine(sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff'"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="ffff.*newer scaling"):
        Store(sqlite_url)


def test_foreign_database_is_refused(empty_sqlite_url: str) -> None:
    engine = create_engine(empty_sqlite_url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE something (x INTEGER)"))
    engine.dispose()
    with pytest.raises(DatabaseError, match="not a scaling results database"):
        Store(empty_sqlite_url)


def _open(url: str) -> str | None:
    Store(url).close()
    return None


def test_concurrent_first_opens_create_the_schema_once(empty_url: str) -> None:
    """Several processes opening a brand-new database at once (as Ray workers would)."""
    with mp_context().Pool(4) as pool:
        pool.map(_open, [empty_url] * 4)
    assert _revision(empty_url) == head_revision()
