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


def test_the_superseded_status_comes_with_its_migration_and_goes_back_as_interrupted(empty_url: str) -> None:
    """Revision 0006 lets runs.status be 'superseded' on a database holding runs; a downgrade turns
    such runs into interrupted ones, which revision 0005's constraint allows."""
    from alembic import command
    from sqlalchemy.exc import IntegrityError

    def sql(statement: str) -> None:
        engine = make_engine(empty_url)
        try:
            with engine.begin() as conn:
                conn.execute(text(statement))
        finally:
            engine.dispose()

    def migrate(step: object, revision: str) -> None:
        engine = make_engine(empty_url)
        with engine.begin() as conn:
            step(alembic_config(connection=conn), revision)  # type: ignore[operator]
        engine.dispose()

    migrate(command.upgrade, "0005")
    sql("INSERT INTO sweeps (id, name, params_convention, flops_convention, created_at) "
        "VALUES (1, 's', 'non_embedding', '6N', '2026-12-07 00:00:00')")
    sql("INSERT INTO runs (sweep_id, key, n_params, n_params_total, n_layer, d_model, n_head, vocab_size, context, "
        "tokens, flops, seed, spec, status, attempts, created_at, trunk_tokens) VALUES (1, 'k', 1, 1, 1, 8, 1, 8, 8, "
        "8, 1.0, 0, '{}', 'interrupted', 1, '2026-12-07 00:00:00', 0)")
    with pytest.raises(IntegrityError):
        sql("UPDATE runs SET status = 'superseded'")
    migrate(command.upgrade, "0006")
    sql("UPDATE runs SET status = 'superseded'")
    migrate(command.downgrade, "0005")
    engine = make_engine(empty_url)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT status FROM runs")).scalar() == "interrupted"
    engine.dispose()
