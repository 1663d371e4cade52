"""Text tokenized once into a content-addressed cache folder that every run memory-maps.

``prepare(data)`` splits the corpus, loads or trains the tokenizer on the training split, and
writes ``tokens.bin``, ``tokenizer.json`` and ``meta.json`` under ``$SCALING_CACHE_DIR/tokens``;
a folder read back is checked and rebuilt when it does not match. Details: docs/reference/modules.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Iterator, Optional, Protocol

import numpy as np

from scaling.errors import SpecError
from scaling.trainer.data import tokenizer as hf
from scaling.trainer.cache import cache_dir
from scaling.trainer.data.files import file_sha256, read_corpus, text_files
from scaling.trainer.data.progress import progress_bar

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from scaling.trainer.sections import DataSpec

FORMAT = 1
TOKENS, TOKENIZER, META = "tokens.bin", "tokenizer.json", "meta.json"
SEPARATOR = "\n\n"  # between files, as in the byte-level text source
PIECE_CHARS = 1 << 20  # text handed to the tokenizer at once (cut after a newline)
_MAX_META_BYTES = 1 << 20


@dataclass(frozen=True)
class Prepared:
    """A prepared token folder: where its files are and what ``meta.json`` says about them."""

    folder: Path
    dtype: str
    n_tokens: int
    n_train: int
    vocab_size: int
    fingerprint: str
    tokenizer_sha256: str
    files: tuple[str, ...]
    reused: bool = False
    seconds: float = 0.0

    @property
    def tokens_path(self) -> Path:
        return self.folder / TOKENS

    @property
    def tokenizer_path(self) -> Path:
        return self.folder / TOKENIZER


def tokens_root() -> Path:
    """Where prepared folders live: ``$SCALING_CACHE_DIR/tokens`` (shared storage on a cluster
    saves each node from preparing its own copy)."""
    return cache_dir() / "tokens"


def prepare(data: "DataSpec", *, progress: Optional[bool] = None) -> Prepared:
    """The prepared folder for ``data`` (built once; see the module docstring).

    ``progress``: show a rich progress bar on stderr (None: when stderr is a terminal).
    """
    if data.tokenizer is None or data.source != "text" or not data.path:
        raise SpecError("data.tokenizer: only text with a tokenizer is prepared")
    started = time.perf_counter()
    paths = text_files(data.path)
    tok_spec = data.tokenizer
    given = hf.load(tok_spec.path) if tok_spec.path is not None else None
    identity = _identity(paths, data, given)
    folder = tokens_root() / identity[:32]
    found = _read(folder, identity)
    if found is not None:
        return found
    text = read_text(paths)  # before any folder exists: a binary or empty corpus leaves nothing behind
    show = sys.stderr.isatty() if progress is None else progress
    root = tokens_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{identity[:12]}-", dir=root))
    except OSError as exc:
        raise SpecError(f"data: cannot write the token cache {root} ({exc.strerror}); set SCALING_CACHE_DIR") from None
    try:
        _build(tmp, paths, text, data, given, identity, show)
        _publish(tmp, folder, identity)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    found = _read(folder, identity)
    if found is None:  # pragma: no cover - only if the folder is removed between rename and read
        raise SpecError(f"data: the prepared tokens in {folder} could not be read back")
    return Prepared(**{**found.__dict__, "reused": False, "seconds": time.perf_counter() - started})


def _identity(paths: list[Path], data: "DataSpec", given: Optional[Tokenizer]) -> str:
    """sha256 of what determines a prepared folder's content."""
    tok = data.tokenizer
    assert tok is not None
    if given is not None:
        tokenizer_id: dict[str, Any] = {"sha256": hf.digest(given)}
    else:
        tokenizer_id = {"train": tok.train, "vocab_size": tok.vocab_size, "min_frequency": tok.min_frequency,
                        "tokenizers": hf.library_version(), "max_train_chars": hf.MAX_TRAIN_CHARS}
    ident = {"format": FORMAT, "files": [file_sha256(p) for p in paths], "val_fraction": data.val_fraction,
             "separator": SEPARATOR, "tokenizer": tokenizer_id}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()


def read_text(paths: list[Path]) -> str:
    """The corpus as one text: UTF-8 files joined by a blank line. Binary or empty is refused."""
    texts = []
    for path, raw in read_corpus(paths):
        nul = raw.find(b"\x00")
        if nul >= 0:
            raise SpecError(f"data.path: {path} looks binary (a NUL byte at offset {nul}); a tokenizer needs text")
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise SpecError(
                f"data.path: {path} is not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
            ) from None
    text = SEPARATOR.join(texts)
    if not text.strip():
        raise SpecError(f"data.path: the corpus ({len(paths)} file(s), first {paths[0]}) is empty")
    return text


def split_text(text: str, val_fraction: float) -> int:
    """Where validation starts: the last ``val_fraction`` of the characters, moved back to the
    start of its line (when the training part keeps a line)."""
    target = len(text) - max(1, int(round(len(text) * val_fraction)))
    line = text.rfind("\n", 0, target) + 1
    return line if line > 0 else target


def pieces(text: str, size: int = PIECE_CHARS) -> Iterator[str]:
    """``text`` in consecutive pieces of about ``size`` characters, each ending after a newline
    where there is one: the same text always gives the same pieces (and so the same ids)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def _build(
    folder: Path, paths: list[Path], text: str, data: "DataSpec", given: Any, identity: str, show: bool
) -> None:
    tok_spec = data.tokenizer
    assert tok_spec is not None
    with progress_bar(show) as bar:
        cut = split_text(text, data.val_fraction)
        train_text, val_text = text[:cut], text[cut:]
        if not train_text or not val_text:
            raise SpecError(f"data.path: the corpus has {len(text)} character(s), too few to split into training "
                            f"and validation text (val_fraction {data.val_fraction:g})")
        if given is None:
            task = bar.add_task(f"training BPE ({tok_spec.vocab_size} tokens) on the training split", total=len(train_text))
            tok = hf.train_bpe(
                pieces(train_text), tok_spec.vocab_size or 0, tok_spec.min_frequency or 2,
                on_text=lambda piece: bar.advance(task, len(piece)),
            )
        else:
            tok = given
        vocab = hf.vocab_size(tok)
        dtype = np.dtype(np.uint16 if vocab <= 1 << 16 else np.uint32)
        encode = bar.add_task("tokenizing", total=len(text))
        digest = hashlib.sha256()
        counts = []
        with open(folder / TOKENS, "wb") as fh:
            for part in (train_text, val_text):
                n = 0
                batch: list[str] = []
                for piece in pieces(part):
                    batch.append(piece)
                    if len(batch) >= 8:
                        n += _encode(tok, batch, vocab, dtype, fh, digest)
                        bar.advance(encode, sum(map(len, batch)))
                        batch = []
                if batch:
                    n += _encode(tok, batch, vocab, dtype, fh, digest)
                    bar.advance(encode, sum(map(len, batch)))
                counts.append(n)
            fh.flush()
            os.fsync(fh.fileno())
    n_train, n_val = counts
    for n, part, name in ((n_train, train_text, "training"), (n_val, val_text, "validation")):
        if n == 0:  # neither split is empty (checked above): the tokenizer dropped all of it
            who = f"data.tokenizer: {tok_spec.path}" if given is not None else "data.tokenizer: the trained BPE"
            raise SpecError(f"{who} yields no tokens for the {len(part):,} characters of the {name} split "
                            "(its vocabulary covers none of that text, and it has no unknown token)")
    tok.save(str(folder / TOKENIZER), pretty=False)
    tok_sha = hf.digest(tok)
    tokens_sha = digest.hexdigest()
    meta = {
        "format": FORMAT,
        "identity": identity,
        "dtype": dtype.name,
        "n_tokens": n_train + n_val,
        "n_train": n_train,
        "vocab_size": vocab,
        "tokens_sha256": tokens_sha,
        "tokenizer_sha256": tok_sha,
        "fingerprint": fingerprint(tokens_sha, n_train, tok_sha),
        "files": [str(p) for p in paths],
        "train_chars": len(train_text),
        "val_chars": len(val_text),
        "tokenizer": "bpe" if given is None else "file",
        "tokenizers_version": hf.library_version(),
    }
    (folder / META).write_text(json.dumps(meta, indent=1))


def fingerprint(tokens_sha256: str, n_train: int, tokenizer_sha256: str) -> str:
    """The data fingerprint of tokenized text (part of every run's key)."""
    text = f"tokens:{tokens_sha256}|train:{n_train}|tokenizer:{tokenizer_sha256}"
    return hashlib.sha256(text.encode()).hexdigest()


class Hasher(Protocol):
    """A running hash (``hashlib.sha256()``)."""

    def update(self, data: bytes, /) -> None: ...


def _encode(tok: Tokenizer, batch: list[str], vocab: int, dtype: np.dtype, fh: BinaryIO, digest: Hasher) -> int:
    ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in tok.encode_batch(batch, add_special_tokens=False)])
    if len(ids) and (int(ids.max()) >= vocab or int(ids.min()) < 0):
        raise SpecError(f"data.tokenizer: the tokenizer produced id {int(ids.max())}, outside its vocabulary of {vocab}")
    raw = ids.astype(dtype).tobytes()
    fh.write(raw)
    digest.update(raw)
    return len(ids)


def _publish(tmp: Path, folder: Path, identity: str) -> None:
    """Rename the built folder into place; a valid folder already there (a concurrent prepare)
    wins, an invalid one is moved aside first."""
    for _ in range(3):
        try:
            os.rename(tmp, folder)
            return
        except OSError:
            if _read(folder, identity) is not None:
                return
            aside = folder.with_name(f".{folder.name}.bad-{os.getpid()}-{time.monotonic_ns()}")
            try:
                os.rename(folder, aside)
            except OSError:
                continue
            shutil.rmtree(aside, ignore_errors=True)
    raise SpecError(f"data: could not publish prepared tokens to {folder}")


def _read(folder: Path, identity: str) -> Optional[Prepared]:
    """A prepared folder whose meta.json and token file check out, else None."""
    meta_path, tokens = folder / META, folder / TOKENS
    try:
        if meta_path.stat().st_size > _MAX_META_BYTES:
            return None
        meta = json.loads(meta_path.read_text())
        dtype = np.dtype(meta["dtype"])
        ok = (
            meta["format"] == FORMAT and meta["identity"] == identity and dtype.name in ("uint16", "uint32")
            and isinstance(meta["n_tokens"], int) and isinstance(meta["n_train"], int)
            and 0 < meta["n_train"] < meta["n_tokens"]
            and tokens.stat().st_size == meta["n_tokens"] * dtype.itemsize
            and (folder / TOKENIZER).is_file()
            and file_sha256(tokens) == meta["tokens_sha256"]
            and meta["fingerprint"] == fingerprint(meta["tokens_sha256"], meta["n_train"], meta["tokenizer_sha256"])
        )
        if not ok:
            return None
        tok = hf.load(folder / TOKENIZER, where="data: the prepared tokenizer")
        if hf.digest(tok) != meta["tokenizer_sha256"] or hf.vocab_size(tok) != meta["vocab_size"]:
            return None  # replaced or edited: for a trained BPE this file is the only copy, so rebuild
        return Prepared(
            folder=folder, dtype=dtype.name, n_tokens=meta["n_tokens"], n_train=meta["n_train"],
            vocab_size=int(meta["vocab_size"]), fingerprint=str(meta["fingerprint"]),
            tokenizer_sha256=str(meta["tokenizer_sha256"]), files=tuple(map(str, meta["files"])), reused=True,
        )
    except (OSError, ValueError, KeyError, TypeError, SpecError):
        return None

