"""`scaling db upgrade`: bring a database to the code's schema revision."""

from __future__ import annotations

from typing import Optional

from scaling.db.engine import make_engine, resolve_url, retrying
from scaling.db.schema import head_revision, upgrade
from scaling.errors import mask_url


def upgrade_database(url: Optional[str] = None) -> str:
    """Apply every pending migration to the database at ``url``; return a one-line summary."""
    url = resolve_url(url)
    engine = make_engine(url)
    try:
        before, after = retrying(lambda: upgrade(engine, url), url, "upgrade")
    finally:
        engine.dispose()
    if before == after:
        return f"database {mask_url(url)} is at schema revision {after} (head {head_revision()}): nothing to do"
    return f"database {mask_url(url)} upgraded from schema revision {before or '(empty)'} to {after}"
