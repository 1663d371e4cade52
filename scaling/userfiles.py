"""Files a user names: a plan or spec, a CSV, a tokenizer, a token file to read; a page to write.

One check for each direction, so every command refuses the same things in the same words. An
input must be a regular file: a folder cannot be read, a pipe would block the command and a
device such as /dev/zero never ends; its size is bounded before it is read. An output must be a
regular file or a new one: a page renamed over /dev/null would replace the device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from scaling.errors import UserError


def input_file(path: str | Path, what: str, *, error: type[UserError] = UserError, where: str = "",
               max_bytes: Optional[int] = None, missing: Optional[type[UserError]] = None) -> tuple[Path, int]:
    """The regular file ``path`` names (``~`` expanded) and its size in bytes.

    Raises ``error`` (``missing`` for a file that is not there, when given) in one line that
    starts with ``where`` (the field or option that named the file) and names the ``what`` file
    expected; ``max_bytes`` refuses a larger file before anything is read.
    """
    p = Path(path).expanduser()
    prefix = f"{where}: " if where else ""
    if p.exists() and not p.is_file():
        raise error(f"{prefix}{p} is not a regular file (a folder, device or pipe); give a {what} file")
    if not p.is_file():
        raise (missing or error)(f"{prefix}{what} file not found: {p}")
    size = p.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise error(_too_large(prefix, p, what, max_bytes, size))
    return p, size


def read_input(path: str | Path, what: str, *, max_bytes: int, error: type[UserError] = UserError,
               where: str = "") -> bytes:
    """The bytes of :func:`input_file`'s file, never more than ``max_bytes`` read (a file whose
    size the file system does not tell, as under /proc, is bounded too)."""
    p, _ = input_file(path, what, error=error, where=where, max_bytes=max_bytes)
    prefix = f"{where}: " if where else ""
    try:
        with open(p, "rb") as fh:
            raw = fh.read(max_bytes + 1)
    except OSError as exc:
        raise error(f"{prefix}{p}: cannot read: {exc.strerror or exc}") from None
    if len(raw) > max_bytes:
        raise error(_too_large(prefix, p, what, max_bytes))
    return raw


def refuse_special_output(path: Path, label: str, advice: str) -> None:
    """Refuse to write over anything at ``path`` that is not a regular file (a device, pipe or
    socket): ``label`` names the output (an option and its value), ``advice`` ends the line."""
    if path.exists() and not path.is_file():
        raise UserError(f"{label}: is not a regular file (a device, pipe or socket); {advice}")


def _too_large(prefix: str, path: Path, what: str, max_bytes: int, size: Optional[int] = None) -> str:
    measured = f"{_amount(size)}, " if size is not None else ""
    return f"{prefix}{path} is larger than a {what} file may be: {measured}more than the {_amount(max_bytes)} allowed"


def _amount(n: int) -> str:
    """Bytes in the largest binary unit that keeps a number of at least one (64 MiB, 256 KiB)."""
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} bytes"
