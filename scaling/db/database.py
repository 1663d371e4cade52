"""`Database`: one open results database — URL, engine, schema check, transactions — for `Store`
(writes) and `Results` (reads) alike.

Opening creates the schema in an empty database and refuses one at another revision. Each
transaction is retried while SQLite reports "database is locked", and a database problem the
user can act on becomes one :class:`~scaling.errors.DatabaseError` line. A pickled instance
carries only its URL (safe to send to Ray tasks) and reconnects on arrival; after a fork the
child never reuses the parent's pooled connections.
"""

from __future__ import annotations

import os
from typing import Callable, Optional, TypeVar

from sqlalchemy import Connection, Engine, select

from scaling.db.engine import make_engine, resolve_url, retrying, sqlite_path
from scaling.db.models import Sweep
from scaling.db.schema import ensure_schema
from scaling.errors import DatabaseError, NotFoundError, mask_url

T = TypeVar("T")


class AmbiguousRunError(LookupError):
    """A run key that is in several sweeps, none of them running it: the caller must pass sweep=."""


class Database:
    """The results database at ``url`` (None: :func:`~scaling.db.engine.resolve_url`'s default).

    ``must_exist``: refuse a SQLite file that does not exist yet or is empty, rather than creating
    an empty database where the user expected results (the read side).
    """

    def __init__(self, url: Optional[str] = None, *, must_exist: bool = False) -> None:
        self.url = resolve_url(url)
        path = sqlite_path(self.url)
        if must_exist and path is not None:
            why = (f"{path} is a folder, not a file" if path.is_dir() else f"file {path} not found"
                   if not path.is_file() else f"file {path} is empty" if path.stat().st_size == 0 else None)
            if why:  # an empty file too: reading must not write a schema into it
                raise DatabaseError(f"no results database at {mask_url(self.url)}: {why}")
        self.engine: Engine = make_engine(self.url)
        self._pid = os.getpid()
        try:
            retrying(lambda: ensure_schema(self.engine, self.url), self.url, "open")
        except BaseException:
            self.engine.dispose()
            raise

    def __reduce__(self) -> tuple:
        return (type(self), (self.url,))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({mask_url(self.url)!r})"

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self: T) -> T:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _after_fork(self) -> None:
        if self._pid != os.getpid():  # forked: never reuse the parent's pooled connections
            self.engine.dispose(close=False)
            self._pid = os.getpid()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one read transaction, retried while locked."""
        return self._transaction(fn, write=False)

    def _write(self, fn: Callable[[Connection], T]) -> T:
        """Run ``fn`` in one write transaction (``BEGIN IMMEDIATE`` on SQLite), retried while locked."""
        return self._transaction(fn, write=True)

    def _transaction(self, fn: Callable[[Connection], T], *, write: bool) -> T:
        self._after_fork()

        def attempt() -> T:
            with self.engine.connect() as conn:
                conn.execution_options(scaling_write=write)
                with conn.begin():
                    return fn(conn)

        return retrying(attempt, self.url, "write to" if write else "read")

    def _sweep_id(self, conn: Connection, name: str) -> int:
        sid = conn.scalar(select(Sweep.id).where(Sweep.name == name))
        if sid is None:
            raise NotFoundError(f"sweep {name!r} not found in {mask_url(self.url)}")
        return sid
