"""The results database: `Store` writes, `connect` reads, Alembic keeps the schema.

SQLite (a file, WAL mode) is the embedded default; PostgreSQL works through the same code.
Run statuses, metric names and event kinds are spelled in :mod:`scaling.vocab`.
See docs/reference/internals.md ("Database") for the contract.
"""

from scaling.db.claimant import claimant_id
from scaling.db.database import AmbiguousRunError
from scaling.db.engine import normalize_url, resolve_url
from scaling.db.store import HEARTBEAT_TIMEOUT_S, Store


def __getattr__(name: str):  # type: ignore[no-untyped-def]
    """`connect` and `Results` load pandas, so they are imported on first use (trainers skip it)."""
    if name in ("connect", "Results"):
        from scaling.db import results

        return getattr(results, name)
    raise AttributeError(f"module 'scaling.db' has no attribute {name!r}")


__all__ = [
    "Store",
    "Results",
    "connect",
    "resolve_url",
    "normalize_url",
    "AmbiguousRunError",
    "HEARTBEAT_TIMEOUT_S",
    "claimant_id",
]
