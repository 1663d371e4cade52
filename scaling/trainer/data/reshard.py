"""A corpus written out as token shards (``scaling data prepare --shard-tokens``).

The training split becomes ``train_000000.EXT ...`` and the held-out split ``val_000000.EXT ...``,
each of at most ``shard_tokens`` tokens, in one of the formats `scaling.trainer.data.shards` reads, so
a plan trains on them with ``path: DIR/train_*.EXT`` and ``val_path: DIR/val_*.EXT``. The shards
are written into a temporary folder beside ``out`` and renamed into place: an error leaves nothing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from scaling.errors import SpecError
from scaling.trainer.data.progress import progress_bar
from scaling.trainer.data.shards import ShardFormat, TokenStream, shard_dtype, write_header

if TYPE_CHECKING:
    from scaling.trainer.data.corpus import Corpus

#: The most tokens in one shard (llm.c's header counts them in an int32).
MAX_SHARD_TOKENS = 2**31 - 1
_PIECE = 1 << 24  # tokens copied at once


@dataclass(frozen=True)
class Written:
    """What :func:`write_shards` wrote."""

    folder: Path
    kind: ShardFormat
    dtype: str
    train_files: tuple[str, ...]
    val_files: tuple[str, ...]
    train_tokens: int
    val_tokens: int

    @property
    def extension(self) -> str:
        return "npy" if self.kind == "npy" else "bin"

    def data_section(self) -> dict[str, Any]:
        """The plan's ``data`` section that trains on these shards."""
        return {"source": "tokens", "path": str(self.folder / f"train_*.{self.extension}"),
                "val_path": str(self.folder / f"val_*.{self.extension}"), "dtype": self.dtype}


def write_shards(corpus: "Corpus", out: Path, shard_tokens: int, kind: ShardFormat, *, show: bool) -> Written:
    """Write ``corpus``'s training and held-out splits as shards of ``kind`` into the new folder ``out``."""
    if not 1 <= shard_tokens <= MAX_SHARD_TOKENS:
        raise SpecError(f"--shard-tokens: {shard_tokens} is not between 1 and {MAX_SHARD_TOKENS:,}")
    out = out.expanduser()
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise SpecError(f"--out: {out} exists and is not an empty folder; name a new one")
    dtype = shard_dtype(kind, str(np.dtype(corpus.tokens.dtype)))
    ext = "npy" if kind == "npy" else "bin"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    except OSError as exc:
        raise SpecError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    try:
        with progress_bar(show) as bar:
            task = bar.add_task(f"writing {kind} shards", total=len(corpus.tokens))
            files = {}
            for split, tokens in (("train", corpus.train), ("val", corpus.val)):
                names = []
                for n, lo in enumerate(range(0, len(tokens), shard_tokens)):
                    name = f"{split}_{n:06d}.{ext}"
                    _write_one(tmp / name, tokens[lo : lo + shard_tokens], kind, dtype, lambda k: bar.advance(task, k))
                    names.append(str(out / name))
                files[split] = tuple(names)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.rename(tmp, out)
    except OSError as exc:
        raise SpecError(f"--out: cannot write {out} ({exc.strerror or exc})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Written(folder=out, kind=kind, dtype=dtype, train_files=files["train"], val_files=files["val"],
                   train_tokens=corpus.n_train, val_tokens=len(corpus.tokens) - corpus.n_train)


def _write_one(path: Path, tokens: np.ndarray | TokenStream, kind: ShardFormat, dtype: str,
               advance: Callable[[int], object]) -> None:
    with open(path, "wb") as fh:
        write_header(fh, kind, dtype, len(tokens))
        for lo in range(0, len(tokens), _PIECE):
            piece = np.asarray(tokens[lo : lo + _PIECE]).astype(dtype, copy=False)
            fh.write(piece.tobytes())
            advance(len(piece))
        fh.flush()
        os.fsync(fh.fileno())
