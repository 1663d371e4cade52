"""A shard's sha256 and largest token, computed in one read and cached per file.

The run key carries the corpus fingerprint, so every plan needs each shard's digest. Reading a
20-GB corpus at every plan would cost minutes; instead each shard is read once, in one pass that
updates the sha256 and the largest token id (what the vocabulary check needs), and the pair is
cached under ``$SCALING_CACHE_DIR/shard-digests/`` keyed by the file the shard's path reaches
(its `FileStamp`: resolved path, device, inode, size, mtime and ctime) and how its bytes are read
(format, dtype, header length). A file rewritten in place, or a symlink pointed at another file
with the same size and mtime, gets a new ctime or inode, so a new digest. One small JSON file per shard, so concurrent planners never
rewrite each other's entries; an entry is untrusted input (bounded, every field checked) and
one that does not check out is recomputed and replaced.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from scaling.errors import SpecError
from scaling.trainer.cache import cache_dir
from scaling.trainer.data.progress import progress_bar
from scaling.trainer.data.shards import Shard

CACHE_FORMAT = 2
#: The most bytes a cache entry may have (an entry is about 300 bytes plus the path).
MAX_ENTRY_BYTES = 8192
_BLOCK = 1 << 24  # bytes read at once: a multiple of every token size
#: Shards hashed at once (sha256 releases the GIL: several shards use several cores, up to the disk's speed).
HASH_THREADS = 8
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Digest:
    """What one read of a shard measures: sha256 of its bytes (header included) and its largest token."""

    sha256: str
    max_token: int


def digests_root() -> Path:
    return cache_dir() / "shard-digests"


def _ident(shard: Shard) -> dict[str, Any]:
    stamp = shard.stamp
    return {"path": stamp.real, "device": stamp.device, "inode": stamp.inode, "size": stamp.size,
            "mtime_ns": stamp.mtime_ns, "ctime_ns": stamp.ctime_ns, "kind": shard.kind, "dtype": shard.dtype,
            "offset": shard.offset}


def _entry_path(ident: dict[str, Any]) -> Path:
    name = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:32]
    return digests_root() / f"{name}.json"


def cached(shard: Shard) -> Optional[Digest]:
    """The cached digest of ``shard`` as it is now, or None (absent, or an entry that does not check out)."""
    ident = _ident(shard)
    try:
        with open(_entry_path(ident), "rb") as fh:
            raw = fh.read(MAX_ENTRY_BYTES + 1)
        entry = json.loads(raw) if len(raw) <= MAX_ENTRY_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or set(entry) != {"format", "ident", "sha256", "max_token"}:
        return None
    sha, top = entry["sha256"], entry["max_token"]
    limit = 1 << (8 * np.dtype(shard.dtype).itemsize)
    if (entry["format"] != CACHE_FORMAT or entry["ident"] != ident or not isinstance(sha, str)
            or not _SHA256.fullmatch(sha) or type(top) is not int or not 0 <= top < limit):
        return None
    return Digest(sha, top)


def _store(shard: Shard, digest: Digest) -> None:
    ident = _ident(shard)
    path = _entry_path(ident)
    entry = {"format": CACHE_FORMAT, "ident": ident, "sha256": digest.sha256, "max_token": digest.max_token}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(json.dumps(entry).encode())
        os.replace(tmp, path)
    except OSError:
        pass  # an unwritable cache costs a re-read next time, nothing else


def measure(shard: Shard, advance: Callable[[int], Any] = lambda n: None) -> Digest:
    """Read ``shard`` once: sha256 of every byte and the largest token (``advance(bytes)`` after each block)."""
    digest = hashlib.sha256()
    dtype = np.dtype(shard.dtype)
    top = 0
    buf = bytearray(_BLOCK)
    view = memoryview(buf)
    try:
        with open(shard.path, "rb", buffering=0) as fh:
            head = _read_exact(fh, view[: shard.offset], shard)
            digest.update(head)
            advance(len(head))
            left = shard.n_tokens * dtype.itemsize
            while left:
                block = _read_exact(fh, view[: min(_BLOCK, left)], shard)
                digest.update(block)
                top = max(top, int(np.frombuffer(block, dtype=dtype).max()))
                left -= len(block)
                advance(len(block))
            if fh.read(1):
                raise _changed(shard)
            stat = os.fstat(fh.fileno())
    except OSError as exc:
        raise SpecError(f"data: {shard.path}: cannot read: {exc.strerror or exc}") from None
    if not shard.stamp.same_file(stat):
        raise _changed(shard)
    return Digest(digest.hexdigest(), top)


def _read_exact(fh: io.RawIOBase, into: memoryview, shard: Shard) -> memoryview:
    got = 0
    while got < len(into):
        n = fh.readinto(into[got:])
        if not n:
            raise _changed(shard)
        got += n
    return into


def _changed(shard: Shard) -> SpecError:
    return SpecError(f"data: {shard.path} changed while it was read (its size, times or inode moved); "
                     "plan again when it is complete")


def shard_digests(shards: Sequence[Shard], *, progress: Optional[bool] = None) -> list[Digest]:
    """Each shard's digest, from the cache or read once, several shards at a time (a rich progress
    bar on stderr while reading, when ``progress`` or, if None, when stderr is a terminal); what is
    read is cached."""
    found = [cached(s) for s in shards]
    todo = [i for i, d in enumerate(found) if d is None]
    if not todo:
        return [d for d in found if d is not None]
    show = sys.stderr.isatty() if progress is None else progress
    with progress_bar(show) as bar, ThreadPoolExecutor(min(len(todo), HASH_THREADS, os.cpu_count() or 1)) as pool:
        task = bar.add_task(f"hashing {len(todo):,} shard(s)", total=sum(shards[i].size for i in todo))

        def one(i: int) -> None:
            digest = measure(shards[i], lambda n: bar.advance(task, n))
            _store(shards[i], digest)
            found[i] = digest

        try:
            for future in [pool.submit(one, i) for i in todo]:
                future.result()  # the first shard refused raises here
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)  # shards not yet started are not read
            raise
    return [d for d in found if d is not None]
