"""Run folders (``<runs_dir>/<sweep>/<key>/``: checkpoints, Ray Train storage), checked up front.

A folder that cannot be written (read-only, a file in its place, a path under /proc) is found
before anything is registered in the database, so the user gets one line and the database
never holds a run claimed for a folder it could not use.
"""

from __future__ import annotations

import contextlib
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
