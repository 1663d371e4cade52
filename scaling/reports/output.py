"""Writing a page or a JSON file a user asked for: whole or not at all.

A write that fails half-way (a full disk, a quota) must neither leave a truncated page nor have
destroyed the previous one, so every output goes to a temporary file in the same folder first
and is renamed over the target in one step. An output that could not or must not be written to
is refused before any work (:func:`check_output`), by ``report`` and ``compare`` alike.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Optional

from scaling.errors import UserError
from scaling.userfiles import refuse_special_output


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one step: a temporary file in the same folder, then rename.

    Only a regular file (or a new one) is replaced: renaming over a device or a pipe would
    destroy it.
    """
    refuse_special_output(path, str(path), "the page was not written")
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


#: Files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal).
SQLITE_SIDECARS = ("", "-wal", "-shm", "-journal")


def check_output(path: Path, option: str = "--output", *, db_url: Optional[str] = None,
                  other: Optional[tuple[str, Path]] = None) -> None:
    """Refuse an output the report could not or must not be written to, before any work (one line, exit 2).

    Refused too: the results database and its SQLite sidecar files (``db_url``), the path of the
    command's ``other`` output (option, path), and anything that is not a regular file (a device
    such as /dev/null would be replaced by the page, a pipe would block). Nothing is created
    here: the folders are made when the page is written, so a command refused later leaves none.
    """
    from scaling.db.engine import sqlite_path

    if str(path) == "-":
        raise UserError(f"{option} -: a page is not written to standard output; name a file")
    odd = next((c for c in str(path) if _is_control(c)), None)
    if odd is not None:  # the name printed would not be the file written (or would rewrite the terminal)
        raise UserError(f"{option} {_escaped(str(path))}: the name holds the control character {_escaped(odd)}; "
                        "choose a file name without one")
    out = path.expanduser()
    try:
        db_file = sqlite_path(db_url) if db_url else None
        if db_file is not None:
            for suffix in SQLITE_SIDECARS:
                if _same_file(out, db_file.with_name(db_file.name + suffix)):
                    what = "the results database" + (f"'s {suffix[1:]} file" if suffix else "")
                    raise UserError(f"{option} {path}: is {what}; writing there would destroy it")
        if other is not None and _same_file(out, other[1].expanduser()):
            raise UserError(f"{option} {path}: is also {other[0]}'s path; give the two outputs different files")
        if out.is_dir():
            raise UserError(f"{option} {path}: is a directory; name the file, e.g. {path / 'report.html'}")
        refuse_special_output(out, f"{option} {path}", "name a file")
        ancestor = next(p for p in [out.parent, *out.parent.parents] if p.exists())
        if not ancestor.is_dir():
            raise UserError(f"{option} {path}: {ancestor} is a file, not a folder")
        longest = max(len(os.fsencode(part)) for part in out.relative_to(ancestor).parts) if out != ancestor else 0
        if longest > os.pathconf(ancestor, "PC_NAME_MAX"):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        if out.exists():
            with open(out, "a"):  # a regular file: opening it cannot block
                pass
        elif ancestor == out.parent:
            with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".scaling-write-check-"):
                pass
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there: {exc.strerror or exc}") from None


#: Format characters that reorder how a name is displayed (bidirectional embeddings, overrides, isolates).
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _is_control(c: str) -> bool:
    import unicodedata

    return unicodedata.category(c) == "Cc" or c in _BIDI


def _escaped(text: str) -> str:
    """``text`` with each control character written as a Python escape (\\x1b, \\n, \\u202e)."""
    return "".join(repr(c)[1:-1] if _is_control(c) else c for c in text)


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return a.samefile(b)
    return a.resolve() == b.resolve()
