"""The results database: `Store` writes, `connect` reads DataFrames, Alembic keeps the schema.

SQLite (a file, WAL mode) is the embedded default; PostgreSQL works through the same code.
See docs/architecture.md ("Database") for the contract.
"""

from scaling.db.engine import normalize_url, resolve_url
from scaling.db.models import (
    CLAIMABLE,
    COMPLETED,
    FAILED,
    INTERRUPTED,
    PENDING,
    RUNNING,
    STATUSES,
)
from scaling.db.results import Results, connect
from scaling.db.store import HEARTBEAT_TIMEOUT_S, AmbiguousRunError, Store

__all__ = [
    "Store",
    "Results",
    "connect",
    "resolve_url",
    "normalize_url",
    "AmbiguousRunError",
    "HEARTBEAT_TIMEOUT_S",
    "STATUSES",
    "CLAIMABLE",
    "PENDING",
    "RUNNING",
    "COMPLETED",
    "FAILED",
    "INTERRUPTED",
]
