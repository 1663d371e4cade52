"""Run folders (``<runs_dir>/<sweep>/<key>/``: checkpoints, Ray Train storage), checked up front.

A folder that cannot be written (read-only, a file in its place, a path under /proc) is found
before anything is registered in the database, so the user gets one line and the database
never holds a run claimed for a folder it could not use.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

from scaling.errors import UserError


def writable_folder(folder: str | Path, what: str = "run folder") -> Path:
    """Create ``folder`` (with its parents) and prove a file can be written there; return it.

    Raises :class:`~scaling.errors.UserError` naming ``what`` and the folder otherwise.
    """
    path = Path(folder).expanduser()
    blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserError(f"{what} {path} cannot be created: {blocker} is a file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".scaling-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise UserError(f"{what} {path} cannot be created or written: {reason}") from None
    return path


@contextlib.contextmanager
def checked_folder(folder: str | Path, what: str = "run folder") -> Iterator[Path]:
    """:func:`writable_folder` for a block that may still refuse: if the block raises, the folders
    this call created are removed again (when still empty), so a refused command leaves no trace."""
    path = Path(folder).expanduser().absolute()
    created = [p for p in (path, *path.parents) if not p.exists()]
    try:
        writable_folder(path, what)
        yield path
    except BaseException:
        for p in created:  # deepest first
            with contextlib.suppress(OSError):
                p.rmdir()
        raise


#: Beside a run's checkpoints: the database its metrics were recorded into. A run folder resumed
#: from while recording into another database would "complete" there with no curve.
OWNER_FILE = "owner.json"
MAX_OWNER_BYTES = 4096


def database_identity(url: str) -> str:
    """The database a URL names, without password or driver options (a SQLite file by its real path)."""
    from sqlalchemy.engine import URL, make_url

    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return f"sqlite:///{Path(parsed.database or '').resolve()}"
    return URL.create(parsed.get_backend_name(), username=parsed.username, host=parsed.host, port=parsed.port,
                      database=parsed.database).render_as_string(hide_password=False)


def owner_problem(run_dir: str | Path, url: str) -> str | None:
    """Why ``run_dir`` cannot be resumed by a run that records into ``url``, or None if it can."""
    from scaling.errors import mask_url

    path = Path(run_dir) / OWNER_FILE
    if not path.is_file():
        return None  # a new folder, or one kept from before folders recorded their database
    try:
        with path.open("rb") as f:
            owner = json.loads(f.read(MAX_OWNER_BYTES + 1)[:MAX_OWNER_BYTES])
        recorded = str(owner["database"])
    except (OSError, ValueError, KeyError, TypeError):
        return f"{path} is damaged: remove it if the checkpoints beside it belong to this database"
    if recorded == database_identity(url):
        return None
    return (f"run folder {run_dir} holds checkpoints of a run recorded in the database {mask_url(recorded)}, not in "
            f"{mask_url(database_identity(url))}: resuming would leave this database without the run's curves; use "
            "another runs_dir (or --run-dir), or remove the folder to retrain")


def record_owner(run_dir: str | Path, url: str) -> None:
    """Write ``run_dir``'s owner record (once; atomically, as every rank may call it)."""
    folder = Path(run_dir)
    target = folder / OWNER_FILE
    if target.is_file():
        return
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".owner-", delete=False) as f:
        json.dump({"database": database_identity(url)}, f)
    Path(f.name).replace(target)
