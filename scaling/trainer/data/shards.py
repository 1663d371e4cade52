"""Token shards: the files a ``source: tokens`` corpus names, their formats, and one stream over them.

A corpus may be one file, a glob, or a list of files and globs (each glob sorted), read in that
order as one stream. Three formats, detected per file unless ``data.format`` names one:

- ``npy`` (a ``.npy`` name): a 1-D array of unsigned integers, build-nanogpt's FineWeb shards; the
  header is read by numpy's own format reader (a literal dict, never unpickled);
- ``llmc`` (a file that starts with llm.c's magic): llm.c's ``.bin``, a header of 256 little-endian
  int32 (magic, version, token count) and then the tokens (``dev/data/data_common.py``);
- ``bin``: raw tokens, nanoGPT's ``train.bin``, of ``data.dtype``.

Each shard is memory-mapped when a window first touches it, never read whole or concatenated.
Refusals (one SpecError line naming the shard): a wrong header, a length that is not a whole
number of tokens or disagrees with the header, a dtype other than ``data.dtype``, an empty
shard, a glob that matches nothing, more than :data:`MAX_SHARDS` shards, a shard named twice.
"""

from __future__ import annotations

import glob as globlib
import itertools
import operator
import os
import re
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal, Optional, Sequence, SupportsIndex

import numpy as np
from numpy.typing import DTypeLike

from scaling.errors import SpecError
from scaling.userfiles import input_file

ShardFormat = Literal["bin", "npy", "llmc"]
#: The most shards one corpus may name (each is a file to stat, check and hash).
MAX_SHARDS = 65_536
#: Shards memory-mapped at once: every map holds a file descriptor, and a process has about a thousand.
MAX_OPEN_SHARDS = 64
#: llm.c's header: 256 int32 before the tokens.
LLMC_HEADER_BYTES = 256 * 4
#: llm.c's (magic, version) and the token dtype each announces (GPT-2: uint16; Llama 3: uint32).
LLMC_VERSIONS: dict[tuple[int, int], str] = {(20240520, 1): "uint16", (20240801, 7): "uint32"}
LLMC_MAGICS = frozenset(magic for magic, _ in LLMC_VERSIONS)
#: The largest ``.npy`` header read (numpy's own default bound).
NPY_MAX_HEADER = 10_000
#: Token dtypes, as numpy spells them in a ``.npy`` header (little-endian unsigned integers).
_NPY_TOKEN_DTYPES = {"|u1": "uint8", "<u2": "uint16", "<u4": "uint32"}


@dataclass(frozen=True)
class FileStamp:
    """Which file a path reaches now, and which version of it: the resolved path (through every
    symlink), device, inode, size, mtime and ctime. ctime is set by the kernel at every change and
    cannot be set back (``touch -d`` sets only mtime), so a file swapped behind the same name,
    size and mtime still gets a new stamp."""

    real: str
    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, path: Path, stat: os.stat_result) -> "FileStamp":
        return cls(str(path.resolve()), stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)

    def same_file(self, stat: os.stat_result) -> bool:
        """Whether ``stat`` (of an open descriptor) is this version of this file."""
        return (self.device, self.inode, self.size, self.mtime_ns, self.ctime_ns) == (
            stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


@dataclass(frozen=True)
class Shard:
    """One checked token file: where its tokens start and how many it holds, as of its ``stamp``."""

    path: Path  # absolute
    kind: ShardFormat
    dtype: str
    offset: int  # bytes before the first token
    n_tokens: int
    size: int
    stamp: FileStamp

    def open(self) -> np.memmap:
        return np.memmap(self.path, dtype=self.dtype, mode="r", offset=self.offset, shape=(self.n_tokens,))


def _has_glob(entry: str) -> bool:
    return any(c in entry for c in "*?[")


def shard_paths(spec: str | Sequence[str], where: str) -> list[Path]:
    """The files ``spec`` (a path or glob, or a list of them) names, in stream order: each glob
    sorted, entries in the order given. Refuses (SpecError naming ``where``) a glob that matches
    no regular file, more than :data:`MAX_SHARDS` files, or one file named twice."""
    entries = [spec] if isinstance(spec, str) else list(spec)
    if not entries:
        raise SpecError(f"{where}: an empty list names no shard")
    out: list[Path] = []
    for entry in entries:
        if _has_glob(entry):
            pattern = str(Path(entry).expanduser())
            found = list(itertools.islice(globlib.iglob(pattern, recursive=True), MAX_SHARDS - len(out) + 1))
            files = sorted(Path(p).absolute() for p in found if Path(p).is_file())
            if not files:
                what = "no regular file (only folders, devices or pipes)" if found else "nothing"
                raise SpecError(f"{where}: the glob {entry!r} matches {what}")
        else:
            path, _ = input_file(entry, "token", error=SpecError, where=where)
            files = [path.absolute()]
        out.extend(files)
        if len(out) > MAX_SHARDS:
            raise SpecError(f"{where}: more than {MAX_SHARDS:,} shards (reached at {entry!r}); "
                            "merge them into larger shards")
    seen: dict[Path, Path] = {}
    for path in out:
        real = path.resolve()
        if real in seen:
            raise SpecError(f"{where}: the shard {path} is named twice")
        seen[real] = path
    return out


def read_shard(path: Path, dtype: str, fmt: Optional[ShardFormat], where: str) -> Shard:
    """``path`` checked as a token shard of ``dtype`` (its format ``fmt``, or detected)."""
    try:
        with open(path, "rb") as fh:
            stat = os.fstat(fh.fileno())  # the file opened, even if the name is swapped meanwhile
            stamp = FileStamp.of(path, stat)
            kind: ShardFormat = fmt or _detect(path, fh.read(8))
            fh.seek(0)
            if kind == "npy":
                offset, n_tokens, found = _npy_header(fh, path, where)
            elif kind == "llmc":
                offset, n_tokens, found = _llmc_header(fh.read(LLMC_HEADER_BYTES), path, where)
            else:
                offset, n_tokens, found = 0, None, dtype
    except OSError as exc:
        raise SpecError(f"{where}: {path}: cannot read: {exc.strerror or exc}") from None
    if found != dtype:
        raise SpecError(f"{where}: {path} holds {found} tokens ({kind} header) but data.dtype is {dtype}; "
                        f"set data.dtype: {found}")
    itemsize = np.dtype(dtype).itemsize
    body = stat.st_size - offset
    if body % itemsize:
        raise SpecError(f"{where}: {path} is not a whole number of {dtype} tokens "
                        f"({body} bytes after a {offset}-byte header)")
    if n_tokens is None:
        n_tokens = body // itemsize
    elif n_tokens != body // itemsize:
        raise SpecError(f"{where}: {path} has a wrong {kind} header: it announces {n_tokens:,} tokens "
                        f"but the file holds {body // itemsize:,}")
    if n_tokens == 0:
        raise SpecError(f"{where}: {path} holds only 0 tokens; a shard needs at least one")
    return Shard(path=path, kind=kind, dtype=dtype, offset=offset, n_tokens=n_tokens, size=stat.st_size,
                 stamp=stamp)


def _detect(path: Path, head: bytes) -> ShardFormat:
    if path.suffix.lower() == ".npy":
        return "npy"
    if len(head) >= 4 and int(np.frombuffer(head[:4], dtype="<i4")[0]) in LLMC_MAGICS:
        return "llmc"
    return "bin"


def _npy_header(fh: BinaryIO, path: Path, where: str) -> tuple[int, int, str]:
    from numpy.lib import format as npy

    try:
        version = npy.read_magic(fh)
        if version == (1, 0):
            shape, _, dt = npy.read_array_header_1_0(fh, max_header_size=NPY_MAX_HEADER)
        elif version == (2, 0):
            shape, _, dt = npy.read_array_header_2_0(fh, max_header_size=NPY_MAX_HEADER)
        else:
            raise ValueError(f".npy format version {version[0]}.{version[1]} is not one numpy writes for this")
    except Exception as exc:  # noqa: BLE001 - any parser failure on untrusted bytes is a refused header
        raise SpecError(f"{where}: {path} has a wrong npy header ({_npy_why(exc)}); a raw token file named .npy, as OLMo "
                        "writes them, is read with data.format: bin") from None
    found = _NPY_TOKEN_DTYPES.get(dt.str) if not dt.hasobject else None
    if found is None:
        raise SpecError(f"{where}: {path} holds {dt.str} values, not tokens (little-endian uint8, uint16 or uint32)")
    if len(shape) != 1:
        raise SpecError(f"{where}: {path} holds an array of shape {tuple(shape)}; a token shard is one-dimensional")
    if shape[0] < 0:
        raise SpecError(f"{where}: {path} has a wrong npy header: a shape of {tuple(shape)}")
    return fh.tell(), int(shape[0]), found


def _npy_why(exc: Exception) -> str:
    """Why numpy's reader refused a header, in words (never an object's repr or an address)."""
    import tokenize

    if isinstance(exc, (tokenize.TokenError, SyntaxError)):
        return "its brackets or quotes do not close"
    if isinstance(exc, RecursionError):
        return "it nests too deeply"
    text = " ".join(str(exc).split())
    if "malformed node" in text:
        return "it holds an expression, not a literal dict"
    return re.sub(r"<[^<>]* at 0x[0-9a-fA-F]+>", "an object", text)[:200] or type(exc).__name__


def _llmc_header(head: bytes, path: Path, where: str) -> tuple[int, int, str]:
    if len(head) < LLMC_HEADER_BYTES:
        raise SpecError(f"{where}: {path} has a wrong llmc header: {len(head)} bytes, shorter than llm.c's "
                        f"{LLMC_HEADER_BYTES}-byte header")
    magic, version, count = (int(v) for v in np.frombuffer(head, dtype="<i4", count=3))
    found = LLMC_VERSIONS.get((magic, version))
    if found is None:
        known = ", ".join(f"magic {m} version {v} ({d})" for (m, v), d in LLMC_VERSIONS.items())
        raise SpecError(f"{where}: {path} has a wrong llmc header: magic {magic} version {version} "
                        f"(llm.c writes {known})")
    if count < 0:
        raise SpecError(f"{where}: {path} has a wrong llmc header: a token count of {count}")
    return LLMC_HEADER_BYTES, count, found


def shard_dtype(kind: ShardFormat, dtype: str) -> str:
    """The dtype a shard of ``kind`` stores ``dtype`` tokens as (llm.c's headers know uint16 and uint32 only)."""
    return "uint16" if kind == "llmc" and dtype == "uint8" else dtype


def write_header(fh: BinaryIO, kind: ShardFormat, dtype: str, n_tokens: int) -> None:
    """Write the header a shard of ``kind`` with ``n_tokens`` tokens of ``dtype`` starts with (none for bin)."""
    if kind == "npy":
        from numpy.lib import format as npy

        npy.write_array_header_1_0(fh, {"descr": np.dtype(dtype).str, "fortran_order": False, "shape": (n_tokens,)})
    elif kind == "llmc":
        (version,) = [key for key, value in LLMC_VERSIONS.items() if value == dtype]
        if n_tokens >= 2**31:
            raise SpecError(f"an llm.c shard holds fewer than 2**31 tokens, not {n_tokens:,}")
        header = np.zeros(LLMC_HEADER_BYTES // 4, dtype="<i4")
        header[:3] = (version[0], version[1], n_tokens)
        fh.write(header.tobytes())


class ShardMaps:
    """The shards of one stream, each memory-mapped on first use; the least recently used map is
    dropped past :data:`MAX_OPEN_SHARDS` (a view handed out keeps its own map alive)."""

    def __init__(self, shards: Sequence[Shard]) -> None:
        self.shards = tuple(shards)
        self.starts = np.concatenate([[0], np.cumsum([s.n_tokens for s in self.shards], dtype=np.int64)])
        self.dtype = np.dtype(self.shards[0].dtype)
        self._open: OrderedDict[int, np.memmap] = OrderedDict()

    @property
    def mapped(self) -> int:
        """Shards memory-mapped now (at most :data:`MAX_OPEN_SHARDS`)."""
        return len(self._open)

    def map(self, i: int) -> np.memmap:
        found = self._open.get(i)
        if found is None:
            found = self.shards[i].open()
            self._open[i] = found
            if len(self._open) > MAX_OPEN_SHARDS:
                self._open.popitem(last=False)
        else:
            self._open.move_to_end(i)
        return found

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Tokens ``[lo, hi)`` of the stream: a view of one shard's map, or the pieces joined."""
        if hi <= lo:
            return np.empty(0, dtype=self.dtype)
        i = int(np.searchsorted(self.starts, lo, side="right")) - 1
        pieces = []
        while lo < hi:
            start, end = int(self.starts[i]), int(self.starts[i + 1])
            take = min(hi, end)
            pieces.append(self.map(i)[lo - start : take - start])
            lo, i = take, i + 1
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)


class TokenStream:
    """Tokens ``[lo, hi)`` of shards read as one stream, sliced like an array.

    A slice is another stream (nothing read); ``np.asarray`` reads the tokens it covers, so a
    training window that crosses from one shard into the next reads both pieces.
    """

    def __init__(self, maps: ShardMaps, lo: int = 0, hi: Optional[int] = None) -> None:
        self.maps = maps
        self.lo = lo
        self.hi = int(maps.starts[-1]) if hi is None else hi

    @property
    def dtype(self) -> np.dtype:
        return self.maps.dtype

    def __len__(self) -> int:
        return self.hi - self.lo

    def __getitem__(self, key: SupportsIndex | slice) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            if step != 1:
                raise ValueError("a token stream is sliced with step 1")
            return TokenStream(self.maps, self.lo + start, self.lo + max(start, stop))
        i = operator.index(key)
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError(f"token {key} outside a stream of {len(self)}")
        return self.maps.read(self.lo + i, self.lo + i + 1)[0]

    def __array__(self, dtype: DTypeLike = None, copy: bool | None = None) -> np.ndarray:
        out = self.maps.read(self.lo, self.hi)
        return out if dtype is None else out.astype(dtype)

    def tolist(self) -> list[int]:
        return np.asarray(self).tolist()

    def tobytes(self) -> bytes:
        return np.asarray(self).tobytes()
