"""Schema versioning with Alembic: create a fresh database, refuse an outdated one, upgrade.

A database with no tables is brought to the head revision automatically on first open. One at
an older revision raises :class:`SchemaOutdatedError` naming the command that upgrades it
(`scaling db upgrade --db URL`), because migrating silently could surprise a team sharing it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Optional

from sqlalchemy import Connection, Engine, inspect, text

from scaling.db.engine import damaged
from scaling.errors import DatabaseError, SchemaOutdatedError, mask_url

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).with_name("migrations")
# The newest revision in migrations/versions. Opening an up-to-date database compares against
# this constant, so the common path imports no Alembic (a test checks it equals Alembic's head).
HEAD = "0007"
# Serializes concurrent first opens of one PostgreSQL database (SQLite uses BEGIN IMMEDIATE).
_PG_LOCK_ID = 0x5CA11


def alembic_config(url: Optional[str] = None, connection: Optional[Connection] = None) -> Config:
    """An Alembic config for our migrations, without an ini file on disk."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def head_revision() -> str:
    """The head revision as Alembic computes it from the migration scripts."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "no migrations packaged"
    return head


def current_revision(conn: Connection) -> Optional[str]:
    """The database's revision (None when it has no schema), read without importing Alembic."""
    if not inspect(conn).has_table("alembic_version"):
        return None
    rows = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    if len(rows) > 1:
        raise DatabaseError(f"database has several schema heads ({', '.join(rows)}): not a scaling database")
    return rows[0] if rows else None


def _lock(conn: Connection) -> None:
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": _PG_LOCK_ID})


def ensure_schema(engine: Engine, url: str) -> None:
    """Create the schema in an empty database; raise if the database is at another revision."""
    with engine.connect() as conn:
        conn = conn.execution_options(scaling_write=False)
        rev = current_revision(conn)
        conn.rollback()
    if rev == HEAD:
        return
    if rev is None:
        with engine.connect() as conn:
            conn.execution_options(scaling_write=True)
            with conn.begin():
                _lock(conn)
                rev = current_revision(conn)  # another process may have created it meanwhile
                if rev is None:
                    _refuse_foreign(conn, url)
                    from alembic import command

                    command.upgrade(alembic_config(connection=conn), "head")
                    return
    if rev == HEAD:
        return
    _refuse_unknown(rev, url)
    raise SchemaOutdatedError(
        f"database {mask_url(url)} has schema revision {rev}, older than this scaling's {HEAD}: "
        f"run `scaling db upgrade --db {mask_url(url)}`"
    )


def upgrade(engine: Engine, url: str, revision: str = "head") -> tuple[Optional[str], str]:
    """Apply migrations up to ``revision``; returns (revision before, revision after).

    Refuses, as opening does, a database with tables but no scaling schema (it is someone
    else's) and one at a revision this scaling does not know (a newer scaling wrote it); and a
    SQLite file that fails SQLite's integrity check, which a migration could only make worse.
    """
    with engine.connect() as conn:
        conn.execution_options(scaling_write=True)
        with conn.begin():
            _lock(conn)
            _refuse_damaged(conn, url)
            before = current_revision(conn)
            if before is None:
                _refuse_foreign(conn, url)
            else:
                _refuse_unknown(before, url)
            from alembic import command

            command.upgrade(alembic_config(connection=conn), revision)
        after = current_revision(conn)
        conn.rollback()
    return before, after or ""


def _refuse_damaged(conn: Connection, url: str) -> None:
    if conn.dialect.name == "sqlite":
        problems = conn.exec_driver_sql("PRAGMA quick_check").scalars().all()
        if problems != ["ok"]:
            raise damaged(url, " ".join(str(problems[0]).split())[:200])


def _refuse_foreign(conn: Connection, url: str) -> None:
    """Raise if a database without our schema version has tables: it holds someone else's data."""
    tables = set(inspect(conn).get_table_names()) - {"alembic_version"}
    if tables:
        raise DatabaseError(
            f"database {mask_url(url)} has tables ({', '.join(sorted(tables)[:5])}) "
            "but no scaling schema version: not a scaling results database"
        )


def _refuse_unknown(rev: str, url: str) -> None:
    """Raise if ``rev`` is not one of our migrations (a newer scaling wrote the database)."""
    from alembic.script import ScriptDirectory

    known = {s.revision for s in ScriptDirectory.from_config(alembic_config()).walk_revisions()}
    if rev not in known:
        raise DatabaseError(
            f"database {mask_url(url)} has schema revision {rev}, unknown to this scaling "
            f"(head {HEAD}): it was written by a newer scaling; upgrade scaling"
        )
