"""Corpus files on disk: which files a ``data.path`` names, their bytes, and their sha256.

A ``.gz`` or ``.xz`` file is read decompressed, up to :data:`MAX_DECOMPRESSED_BYTES` (a small
hostile archive cannot expand without bound). Hashes of large files are cached per version of
the file (resolved path, inode, size, mtime, ctime), so a multi-GB token file is hashed once, not at every run start.
"""

from __future__ import annotations

import glob as globlib
import gzip
import hashlib
import json
import lzma
import os
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, Optional

from scaling.errors import SpecError
from scaling.trainer.cache import cache_dir

#: The most bytes one compressed corpus file may expand to.
MAX_DECOMPRESSED_BYTES = 2 << 30
#: The most bytes a whole corpus may hold, decompressed: it is read into memory whole, so many files
#: each under the per-file bound must not add up past what a machine holds.
MAX_CORPUS_BYTES = 4 << 30
_OPENERS: dict[str, Callable[[Path], BinaryIO]] = {
    ".gz": lambda p: gzip.open(p, "rb"),  # type: ignore[dict-item]
    ".xz": lambda p: lzma.open(p, "rb"),  # type: ignore[dict-item]
}
_BLOCK = 1 << 24


def text_files(pattern: str) -> list[Path]:
    """The files ``pattern`` names, sorted: a file, every file below a folder (hidden ones
    excepted), or a glob. Raises SpecError when nothing matches."""
    path = Path(pattern).expanduser()
    if any(c in pattern for c in "*?["):
        files = [Path(p) for p in globlib.glob(str(path), recursive=True)]
    elif path.is_dir():  # every file below it, hidden ones (.git, .cache ...) excepted
        files = [p for p in path.rglob("*") if not any(part.startswith(".") for part in p.relative_to(path).parts)]
    else:
        files = [path] if path.exists() else []
    regular = sorted(p for p in files if p.is_file())
    if not regular and files:
        raise SpecError(f"data.path: {pattern!r} names no regular file (only folders, devices or pipes)")
    if not regular:
        raise SpecError(f"data.path: no files match {pattern!r}")
    return regular


def read_corpus(paths: list[Path]) -> Iterator[tuple[Path, bytes]]:
    """Each file's bytes (decompressed), refusing a corpus past :data:`MAX_CORPUS_BYTES` in all."""
    total = 0
    for path in paths:
        left = MAX_CORPUS_BYTES - total
        if path.suffix.lower() not in _OPENERS and path.stat().st_size > left:
            raise _too_large(path)
        raw = read_bytes(path, corpus_left=left)
        total += len(raw)
        yield path, raw


def _too_large(path: Path) -> SpecError:
    return SpecError(f"data.path: the corpus holds more than {MAX_CORPUS_BYTES / 2**30:g} GiB (reached at {path}); "
                     f"use a pre-tokenized token file (source: tokens) for a corpus that large")


def read_bytes(path: Path, corpus_left: Optional[int] = None) -> bytes:
    """A file's bytes, decompressed when it ends in .gz or .xz (bounded per file and, with
    ``corpus_left``, by what the corpus may still hold)."""
    opener = _OPENERS.get(path.suffix.lower())
    if opener is None:
        return path.read_bytes()
    parts: list[bytes] = []
    size = 0
    try:
        with opener(path) as fh:
            while block := fh.read(_BLOCK):
                size += len(block)
                if size > MAX_DECOMPRESSED_BYTES:
                    raise SpecError(
                        f"data.path: {path} expands past {MAX_DECOMPRESSED_BYTES / 2**30:g} GiB; "
                        f"decompress it yourself if that is intended"
                    )
                if corpus_left is not None and size > corpus_left:
                    raise _too_large(path)
                parts.append(block)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise SpecError(f"data.path: {path} is not a readable {path.suffix} file ({exc})") from None
    return b"".join(parts)


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes as stored, cached per version of the file the path reaches (resolved
    path, device, inode, size, mtime and ctime, which no user sets back) in the scaling cache folder
    (hashing a multi-GB file at every run start would cost seconds each time)."""
    stat = path.stat()
    ident = "|".join(str(v) for v in (path.resolve(), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns,
                                      stat.st_ctime_ns))
    cache = cache_dir() / "fingerprints.json"
    try:
        table = json.loads(cache.read_text())
        if not isinstance(table, dict):
            table = {}
    except (OSError, ValueError):
        table = {}
    if isinstance(table.get(ident), str):
        return str(table[ident])
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(_BLOCK):
            digest.update(block)
    table[ident] = digest.hexdigest()
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(table))
        os.replace(tmp, cache)
    except OSError:
        pass  # an unwritable cache costs a re-hash next time, nothing else
    return str(table[ident])
