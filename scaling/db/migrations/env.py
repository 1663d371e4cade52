"""Alembic environment (the stock online/offline `env.py`, SQLite in batch mode).

`scaling.db.schema` runs it programmatically, handing over an open connection in
``config.attributes["connection"]``; the ``alembic`` command line works too with
``-x url=...`` or ``$SCALING_DB``.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import engine_from_config, pool

from scaling.db.models import Base

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    from scaling.db.engine import resolve_url

    return context.get_x_argument(as_dictionary=True).get("url") or config.get_main_option("sqlalchemy.url") or resolve_url()


def run_migrations_offline() -> None:
    """Emit SQL to stdout instead of applying it."""
    url = _url()
    context.configure(
        url=url,
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=url.startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Apply migrations on the given connection (or one opened from the URL)."""
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    connectable = engine_from_config(
        {"sqlalchemy.url": _url()}, prefix="sqlalchemy.", poolclass=pool.NullPool
    )
    with connectable.connect() as conn:
        _run(conn)


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite cannot ALTER most things
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
