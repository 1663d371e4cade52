"""Writing a page or a JSON file a user asked for: whole or not at all.

A write that fails half-way (a full disk, a quota) must neither leave a truncated page nor have
destroyed the previous one, so every output goes to a temporary file in the same folder first
and is renamed over the target in one step.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from scaling.errors import UserError


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one step: a temporary file in the same folder, then rename.

    Only a regular file (or a new one) is replaced: renaming over a device or a pipe would
    destroy it.
    """
    if path.exists() and not path.is_file():
        raise UserError(f"{path}: is not a regular file (a device, pipe or socket); the page was not written")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is shared like any written file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
