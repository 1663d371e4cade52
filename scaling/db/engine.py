"""Database URLs and engines: resolution, SQLite settings, and errors a user can act on.

SQLite is the embedded default. Several processes (Ray workers) write one file at once, so the
engine runs SQLite in WAL mode with a busy timeout, opens every write transaction with
``BEGIN IMMEDIATE`` (a deferred transaction that later needs the write lock fails at once
instead of waiting), and :func:`retrying` repeats a transaction that still meets
"database is locked", so no caller ever sees that error.
"""

from __future__ import annotations

import os
import re
import random
import time
import warnings
from pathlib import Path
from typing import Callable, Optional, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SAWarning, SQLAlchemyError

from scaling.errors import DatabaseError, mask_url

T = TypeVar("T")

ENV_VAR = "SCALING_DB"
DEFAULT_FILE = "scaling.db"
SQLITE_BUSY_TIMEOUT_S = 30.0  # SQLite's own wait for a lock, per statement
LOCKED_RETRY_S = 120.0  # then whole transactions are retried for this long
CONNECT_TIMEOUT_S = 5  # PostgreSQL: fail fast when the server is unreachable


def resolve_url(cli: Optional[str] = None, plan: Optional[str] = None) -> str:
    """The database URL: ``--db``, then the plan's ``db:``, then ``$SCALING_DB``, then ./scaling.db.

    A bare path (no ``://``) means a SQLite file. SQLite paths are made absolute against the
    current directory, so every process of a sweep writes the same file.
    """
    if cli is not None and not str(cli).strip():  # an explicit --db "" is a mistake, not "use the default"
        raise DatabaseError("the database URL (--db) is empty: give a URL or a SQLite file path")
    for candidate in (cli, plan, os.environ.get(ENV_VAR)):
        if candidate is not None and str(candidate).strip():
            return normalize_url(str(candidate).strip())
    return normalize_url(str(Path.cwd() / DEFAULT_FILE))


#: A bare value that is a mistyped URL, not a file name: a dialect with ``:/`` or ``//`` but not
#: ``://`` (``postgresql+psycopg//u:pw@h/db``), or user-info before a host (``u:pw@h/db``).
_URL_TYPO = re.compile(r"^(postgres(ql)?|mysql|mariadb|sqlite|oracle|mssql)(\+\w+)?(:/?(?!/)|//)|^[^/@:\s]+:[^/@\s]*@",
                       re.IGNORECASE)


def normalize_url(url: str) -> str:
    """``url`` with a SQLite file path made absolute (a bare path becomes ``sqlite:///<abs>``)."""
    if "://" not in url:
        if _URL_TYPO.search(url):  # taken as a file name it would be printed, password and all
            shown = re.sub(r"(?<=:)[^:@/]*(?=@)", "***", url)
            raise DatabaseError(f"malformed database URL {shown}: no '://' after the dialect "
                                "(e.g. postgresql+psycopg://user@host/db; a value without '://' is a SQLite file path)")
        return "sqlite:///" + str(Path(url).expanduser().resolve())
    path = sqlite_path(url)
    if path is None:
        return url
    absolute = str(path.expanduser().resolve())
    if absolute == str(path):
        return url
    return _parse(url).set(database=absolute).render_as_string(hide_password=False)


def _parse(url: str) -> URL:
    try:
        return make_url(url)
    except (ArgumentError, ValueError) as exc:
        raise DatabaseError(f"malformed database URL {mask_url(url)}: {_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    """The driver's message without SQLAlchemy's background links, on one line."""
    orig = getattr(exc, "orig", None)
    text = str(orig if orig is not None else exc)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("(Background")]
    return " ".join(lines[:2]) or type(exc).__name__


def sqlite_path(url: str) -> Optional[Path]:
    """The file of a SQLite URL, or None for other databases and in-memory SQLite."""
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    db = parsed.database or ""
    if db in ("", ":memory:") or db.startswith("file:"):
        return None
    return Path(db)


def is_sqlite(url: str) -> bool:
    """True for a SQLite URL (a file or in memory)."""
    return _parse(url).get_backend_name() == "sqlite"


def is_in_memory(url: str) -> bool:
    """True for an in-memory SQLite URL (``sqlite://``, ``sqlite:///:memory:``, ``mode=memory``)."""
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite":
        return False
    db = parsed.database or ""
    return db in ("", ":memory:") or (db.startswith("file:") and "mode=memory" in db)


def refuse_in_memory(url: str) -> None:
    """Raise :class:`DatabaseError` for an in-memory SQLite URL: results must outlive the process."""
    if is_in_memory(url):
        raise DatabaseError(
            f"database {mask_url(url)} is in memory: an in-memory database cannot hold results across "
            "processes (the sweep's workers, the next command); use a file, e.g. --db sqlite:///results.db"
        )


def make_engine(url: str) -> Engine:
    """An engine for ``url`` (already normalized), configured for concurrent writers.

    Raises :class:`DatabaseError` for a malformed URL, an unknown driver, an in-memory SQLite
    database, or a SQLite file whose folder does not exist (SQLite would only say "unable to
    open database file").
    """
    parsed = _parse(url)
    backend = parsed.get_backend_name()
    kwargs: dict = {}
    refuse_in_memory(url)
    if backend == "sqlite":
        path = sqlite_path(url)
        if path is not None and not path.parent.is_dir():
            raise DatabaseError(f"cannot open database {mask_url(url)}: folder {path.parent} does not exist")
        kwargs["connect_args"] = {"timeout": SQLITE_BUSY_TIMEOUT_S, "check_same_thread": False}
    elif backend == "postgresql":
        kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT_S}
        kwargs["pool_pre_ping"] = True
        # One INSERT statement (one round trip) for a metrics batch of up to this many rows.
        kwargs["insertmanyvalues_page_size"] = 10_000
    try:
        with warnings.catch_warnings():  # e.g. query arguments the driver ignores: one line, not a warning
            warnings.simplefilter("error", SAWarning)
            engine = create_engine(parsed, **kwargs)
    except (ArgumentError, NoSuchModuleError, ImportError, SAWarning) as exc:
        raise DatabaseError(f"cannot use database URL {mask_url(url)}: {_first_line(exc)}") from None
    if backend == "sqlite":
        _configure_sqlite(engine)
    return engine


def _configure_sqlite(engine: Engine) -> None:
    """WAL, busy timeout, foreign keys; transactions begun by us (IMMEDIATE for writes)."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.isolation_level = None  # the driver must not BEGIN on its own
        cur = dbapi_conn.cursor()
        cur.execute(f"PRAGMA busy_timeout = {int(SQLITE_BUSY_TIMEOUT_S * 1000)}")
        mode = cur.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            _retry_locked(lambda: cur.execute("PRAGMA journal_mode = WAL"))
        cur.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes in WAL mode
        cur.execute("PRAGMA foreign_keys = ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn) -> None:  # type: ignore[no-untyped-def]
        immediate = conn.get_execution_options().get("scaling_write", False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


#: PostgreSQL's deadlock_detected and serialization_failure: the transaction was rolled back and may run again.
_PG_TRANSIENT = {"40P01", "40001"}


def is_locked(exc: BaseException) -> bool:
    """True for a transient lock conflict: SQLite's "database is locked" / "database is busy", or
    PostgreSQL's deadlock or serialization failure (its victim transaction is rolled back)."""
    orig = getattr(exc, "orig", exc)
    if getattr(orig, "sqlstate", None) in _PG_TRANSIENT:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "database is busy" in text or "database table is locked" in text


def _retry_locked(fn: Callable[[], T], budget_s: float = LOCKED_RETRY_S) -> T:
    deadline = time.monotonic() + budget_s
    delay = 0.005
    while True:
        try:
            return fn()
        except Exception as exc:  # sqlite3.OperationalError or SQLAlchemy's wrapper of it
            if not is_locked(exc) or time.monotonic() > deadline:
                raise
        time.sleep(delay * (0.5 + random.random()))
        delay = min(delay * 2, 0.5)


def retrying(fn: Callable[[], T], url: str, what: str = "use") -> T:
    """Run ``fn`` (one whole transaction), retrying it while the database says "locked" (see :func:`is_locked`).

    A failure the user can act on (unreachable, unopenable, read-only or damaged database)
    becomes one :class:`DatabaseError` line naming the masked URL; anything else (integrity or
    programming errors: bugs) keeps its traceback. ``fn`` must be safe to repeat: it is a
    complete transaction that rolled back on failure.
    """
    try:
        return _retry_locked(fn)
    except DatabaseError:
        raise
    except Exception as exc:
        line = _first_line(exc)
        if any(s in line.lower() for s in _DAMAGED):
            raise damaged(url, line) from None
        if not _is_user_problem(exc, line):
            raise
        raise DatabaseError(f"cannot {what} database {mask_url(url)}: {line}") from None


def damaged(url: str, detail: str) -> DatabaseError:
    """The error for a database file that is not, or no longer, a sound SQLite database."""
    path = sqlite_path(url)
    what = f"database file {path}" if path is not None else f"database {mask_url(url)}"
    return DatabaseError(f"{what} is damaged or not a SQLite database ({detail}): restore it from a backup or use another --db")


# What SQLite says about a file that is not, or no longer, a sound database.
_DAMAGED = ("file is not a database", "database disk image is malformed", "malformed database schema",
            "file is encrypted")


def _is_user_problem(exc: Exception, line: str) -> bool:
    """True when ``exc`` is the database's state (unreachable, unopenable, read-only), not a bug.

    ``exc`` is SQLAlchemy's wrapper or, from the read API's raw cursor, the driver's own error.
    """
    if isinstance(exc, OperationalError) or _is_driver_operational(exc):
        return True
    if isinstance(exc, DBAPIError) and (exc.connection_invalidated or _is_open_failure(line)):
        return True
    return isinstance(exc, SQLAlchemyError) and "connect" in type(exc).__name__.lower()


def _is_driver_operational(exc: Exception) -> bool:
    """The DBAPI driver's own OperationalError (raised through a raw cursor, unwrapped)."""
    import sqlite3
    import sys

    kinds: list[type] = [sqlite3.OperationalError]
    psycopg = sys.modules.get("psycopg")
    if psycopg is not None:
        kinds.append(psycopg.OperationalError)
    return isinstance(exc, tuple(kinds))


def _is_open_failure(line: str) -> bool:
    text = line.lower()
    return any(s in text for s in ("unable to open", "readonly", "read-only", "disk i/o", "connection"))
