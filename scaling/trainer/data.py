"""The training data: a byte-level corpus, a held-out split, and batches as a pure function.

Sources ``builtin``, ``text`` (optionally tokenized once, `scaling.trainer.prepare`) and
``tokens``; the batch at a cursor is a pure function of ``(seed, cursor)``. Sources, split,
shuffling and what is recorded with a run: docs/reference/modules.md.
"""

from __future__ import annotations

import functools
import hashlib
import math
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling.errors import SpecError
from scaling.userfiles import input_file
from scaling.trainer.files import file_sha256, read_corpus, text_files

if TYPE_CHECKING:  # torch is imported lazily so `resolve_data` works in torch-free callers
    import torch

    from scaling.trainer.spec import DataSpec, RunSpec

#: The built-in corpus: standard-library modules, pinned and sorted. Names that moved between
#: Python versions (``zipfile.py`` -> ``zipfile/__init__.py``) are listed both ways.
BUILTIN_FILES: tuple[str, ...] = (
    "_collections_abc.py", "_pydatetime.py", "_pydecimal.py", "_pyio.py", "_strptime.py", "abc.py",
    "argparse.py", "ast.py", "asyncio/base_events.py", "asyncio/events.py",
    "asyncio/selector_events.py", "asyncio/streams.py", "asyncio/tasks.py",
    "asyncio/unix_events.py", "base64.py", "bdb.py", "bisect.py", "calendar.py", "cmd.py",
    "code.py", "codecs.py", "codeop.py", "collections/__init__.py", "colorsys.py",
    "concurrent/futures/_base.py", "concurrent/futures/process.py", "configparser.py",
    "contextlib.py", "copy.py", "csv.py", "dataclasses.py", "datetime.py", "difflib.py", "dis.py",
    "doctest.py", "email/_header_value_parser.py", "email/feedparser.py", "email/header.py",
    "email/headerregistry.py", "email/message.py", "enum.py", "filecmp.py", "fileinput.py",
    "fnmatch.py", "fractions.py", "ftplib.py", "functools.py", "getopt.py", "getpass.py",
    "gettext.py", "glob.py", "gzip.py", "hashlib.py", "heapq.py", "hmac.py", "http/client.py",
    "http/cookiejar.py", "http/server.py", "imaplib.py", "importlib/_bootstrap.py",
    "importlib/_bootstrap_external.py", "importlib/metadata/__init__.py", "inspect.py",
    "ipaddress.py", "json/__init__.py", "json/decoder.py", "json/encoder.py", "keyword.py",
    "linecache.py", "locale.py", "logging/__init__.py", "logging/config.py", "logging/handlers.py",
    "mailbox.py", "mimetypes.py", "modulefinder.py", "multiprocessing/connection.py",
    "multiprocessing/managers.py", "multiprocessing/pool.py", "netrc.py", "ntpath.py", "numbers.py",
    "opcode.py", "operator.py", "optparse.py", "os.py", "pathlib.py", "pathlib/__init__.py",
    "pdb.py", "pickle.py", "pickletools.py", "pkgutil.py", "platform.py", "plistlib.py",
    "posixpath.py", "pprint.py", "profile.py", "pstats.py", "py_compile.py", "pydoc.py", "queue.py",
    "quopri.py", "random.py", "re/_compiler.py", "re/_parser.py", "reprlib.py", "rlcompleter.py",
    "runpy.py", "sched.py", "secrets.py", "selectors.py", "shelve.py", "shlex.py", "shutil.py",
    "signal.py", "site.py", "smtplib.py", "socket.py", "socketserver.py", "ssl.py", "stat.py",
    "statistics.py", "string.py", "struct.py", "subprocess.py", "symtable.py", "sysconfig.py",
    "tabnanny.py", "tarfile.py", "tempfile.py", "textwrap.py", "threading.py", "timeit.py",
    "tkinter/__init__.py", "tkinter/ttk.py", "tokenize.py", "tomllib/_parser.py", "trace.py",
    "traceback.py", "tracemalloc.py", "turtle.py", "types.py", "typing.py", "urllib/parse.py",
    "urllib/request.py", "uuid.py", "warnings.py", "wave.py", "weakref.py", "xml/dom/minidom.py",
    "xml/etree/ElementTree.py", "xmlrpc/client.py", "xmlrpc/server.py", "zipapp.py", "zipfile.py",
    "zipfile/__init__.py", "zipimport.py", "zoneinfo/_zoneinfo.py",
)

_SEPARATOR = b"\n\n"  # between files: a document boundary the model can learn


@dataclass(frozen=True)
class Corpus:
    """A tokenized corpus with its split and the facts recorded with the run."""

    tokens: np.ndarray  # the whole stream (uint8, uint16 or uint32, possibly a memmap)
    n_train: int  # tokens [0, n_train) train; [n_train, len) validation
    fingerprint: str
    source: str
    files: tuple[str, ...] = ()
    distinct_tokens: int = 0
    max_token: int = 0
    vocab_size: Optional[int] = None  # the tokenizer's vocabulary (None: bytes or a token file)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def train(self) -> np.ndarray:
        return self.tokens[: self.n_train]

    @property
    def val(self) -> np.ndarray:
        return self.tokens[self.n_train :]

    @property
    def unique_tokens(self) -> int:
        """U: tokens in the training split (what the data-constrained law calls unique data)."""
        return self.n_train

    def describe(self) -> dict[str, Any]:
        """What the run records about its data (the `data` event's detail)."""
        return {
            "source": self.source,
            "fingerprint": self.fingerprint,
            "unique_tokens": self.unique_tokens,
            "unique_tokens_meaning": "tokens in the training split (U of the data-constrained law)",
            "distinct_tokens": self.distinct_tokens,
            "train_tokens": self.n_train,
            "val_tokens": int(len(self.tokens) - self.n_train),
            "files": len(self.files),
            **self.details,
        }


def _sha256(buf: memoryview | bytes) -> str:
    return hashlib.sha256(buf).hexdigest()


_CHUNK = 1 << 24  # tokens per chunk when scanning a large token file


def _builtin_bytes() -> tuple[bytes, tuple[str, ...]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, used = [], []
    for name in BUILTIN_FILES:
        path = root / name
        if path.is_file():
            parts.append(path.read_bytes())
            used.append(name)
    if not parts:
        raise SpecError(f"data: no built-in corpus files found under {root}")
    return _SEPARATOR.join(parts), tuple(used)


def _split(n: int, val_fraction: float) -> int:
    return n - max(1, int(round(n * val_fraction)))


def load_corpus(data: "DataSpec") -> Corpus:
    """Read (or memory-map) the corpus that ``data`` names and compute its fingerprint.

    Cached per process on what selects the bytes (not on the fingerprint the spec carries).
    """
    return _load(data.source, data.path, data.dtype, data.val_fraction, data.tokenizer)


@functools.lru_cache(maxsize=4)
def _load(source: str, path_: str | None, dtype: str, val_fraction: float, tokenizer: Any = None) -> Corpus:
    details: dict[str, Any] = {}
    files: tuple[str, ...] = ()
    n_train: Optional[int] = None
    vocab_size: Optional[int] = None
    if source == "builtin":
        raw, files = _builtin_bytes()
        tokens = np.frombuffer(raw, dtype=np.uint8)
        details["python"] = ".".join(map(str, sys.version_info[:3]))
        details["stdlib"] = sysconfig.get_paths()["stdlib"]
        fingerprint = _sha256(raw)
    elif source == "text" and tokenizer is not None:
        from scaling.trainer.prepare import prepare
        from scaling.trainer.spec import DataSpec

        prepared = prepare(DataSpec(source="text", path=path_, val_fraction=val_fraction, tokenizer=tokenizer))
        tokens = np.memmap(prepared.tokens_path, dtype=prepared.dtype, mode="r")
        fingerprint, n_train, vocab_size = prepared.fingerprint, prepared.n_train, prepared.vocab_size
        files = prepared.files
        details["tokenizer"] = {
            "kind": tokenizer.train or "file", "vocab_size": prepared.vocab_size,
            "sha256": prepared.tokenizer_sha256, "prepared": str(prepared.folder),
        }
    elif source == "text":
        assert path_ is not None
        paths = text_files(path_)
        raw = _SEPARATOR.join(raw for _, raw in read_corpus(paths))
        files = tuple(str(p) for p in paths)
        tokens = np.frombuffer(raw, dtype=np.uint8)
        fingerprint = _sha256(raw)
    else:  # tokens
        assert path_ is not None
        path, size = input_file(path_, "token", error=SpecError, where="data.path")
        itemsize = np.dtype(dtype).itemsize
        if size % itemsize:
            raise SpecError(f"data.path: {path} is not a whole number of {dtype} tokens")
        if size < 4 * itemsize:  # an empty file cannot even be mapped
            raise SpecError(f"data.path: {path} holds only {size // itemsize} tokens; a corpus needs at least 4")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        fingerprint = file_sha256(path)
        files = (str(path),)
    if len(tokens) < 4:
        raise SpecError(f"data: corpus has only {len(tokens)} tokens")
    if n_train is None:
        n_train = _split(len(tokens), val_fraction)
    # In chunks: bincount and max would otherwise copy a multi-GB memmap as int64.
    counts = np.zeros(1, dtype=np.int64)
    max_token = 0
    for lo in range(0, len(tokens), _CHUNK):
        chunk = np.asarray(tokens[lo : lo + _CHUNK])
        max_token = max(max_token, int(chunk.max()))
        train_part = chunk[: max(0, n_train - lo)]
        if len(train_part):
            c = np.bincount(train_part)
            if len(c) > len(counts):
                counts = np.pad(counts, (0, len(c) - len(counts)))
            counts[: len(c)] += c
    return Corpus(
        tokens=tokens,
        n_train=n_train,
        fingerprint=fingerprint,
        source=source,
        files=files,
        distinct_tokens=int(np.count_nonzero(counts)),
        max_token=max_token,
        vocab_size=vocab_size,
        details=details,
    )


def resolve_data(spec: "RunSpec") -> "RunSpec":
    """``spec`` with ``data.fingerprint`` and ``data.unique_tokens`` filled from the corpus.

    The fingerprint is part of the run's key, so a plan resolved here trains on exactly the
    bytes it names. A spec that already carries a different fingerprint raises SpecError.
    With a tokenizer, ``model.vocab_size`` is set from it when the spec does not name one; a
    spec that names another vocabulary is refused (`check_corpus`).
    """
    corpus = load_corpus(spec.data)
    if corpus.vocab_size is not None and "vocab_size" not in spec.model.model_fields_set:
        spec = spec.model_copy(update={"model": spec.model.model_copy(update={"vocab_size": corpus.vocab_size})})
    check_corpus(spec, corpus)
    if spec.data.fingerprint == corpus.fingerprint and spec.data.unique_tokens == corpus.unique_tokens:
        return spec
    data = spec.data.model_copy(update={"fingerprint": corpus.fingerprint, "unique_tokens": corpus.unique_tokens})
    return spec.model_copy(update={"data": data})


def check_corpus(spec: "RunSpec", corpus: Corpus) -> None:
    """Refuse a corpus that does not match the spec (fingerprint, vocabulary, size)."""
    if spec.data.fingerprint is not None and spec.data.fingerprint != corpus.fingerprint:
        raise SpecError(
            f"data.fingerprint: the spec names {spec.data.fingerprint[:12]}… but the corpus on this "
            f"machine hashes to {corpus.fingerprint[:12]}… (the data changed since the run was planned)"
        )
    if spec.data.unique_tokens is not None and spec.data.unique_tokens != corpus.unique_tokens:
        raise SpecError(
            f"data.unique_tokens: the spec says {spec.data.unique_tokens} but the training split has "
            f"{corpus.unique_tokens}"
        )
    if corpus.vocab_size is not None and spec.model.vocab_size != corpus.vocab_size:
        raise SpecError(
            f"model.vocab_size: {spec.model.vocab_size} disagrees with the tokenizer's {corpus.vocab_size} tokens; "
            f"leave vocab_size out (it is taken from the tokenizer) or set it to {corpus.vocab_size}"
        )
    if corpus.max_token >= spec.model.vocab_size:
        raise SpecError(
            f"model.vocab_size: {spec.model.vocab_size} is too small for token id {corpus.max_token} in the data"
        )
    ctx = spec.model.context
    if corpus.n_train < 2 * ctx + 1:
        raise SpecError(f"data: the training split ({corpus.n_train} tokens) is shorter than two contexts of {ctx}")
    if len(corpus.val) < ctx + 1:
        raise SpecError(
            f"data.val_fraction: the validation split ({len(corpus.val)} tokens) is shorter than one "
            f"context of {ctx} + 1; raise val_fraction"
        )


class Batches:
    """Training batches as a pure function of ``(seed, cursor)``.

    Sample ``i`` (the ``j``-th sequence of batch ``cursor``: ``i = cursor * batch + j``) is
    window ``perm_e[i mod W]`` of epoch ``e = i // W``, where ``W`` is the number of windows
    and ``perm_e`` and the window phase come from ``numpy.random.default_rng([seed, e])``.
    """

    def __init__(self, corpus: Corpus, context: int, sequences_per_batch: int, seed: int) -> None:
        self.tokens = corpus.train
        self.context = context
        self.batch = sequences_per_batch
        self.seed = seed
        # The phase of an epoch is in [0, context), so every phase fits this many windows.
        self.windows = (len(self.tokens) - context) // context
        if self.windows < 1:
            raise SpecError(f"data: the training split is too short for context {context}")
        self._epochs: dict[int, tuple[int, np.ndarray]] = {}

    def _epoch(self, epoch: int) -> tuple[int, np.ndarray]:
        if epoch not in self._epochs:
            rng = np.random.default_rng([self.seed, epoch])
            phase = int(rng.integers(0, self.context))
            # Shuffled in place as int32 (4 bytes per window, the same order as permutation()).
            perm = np.arange(self.windows, dtype=np.int32 if self.windows < 2**31 else np.int64)
            rng.shuffle(perm)
            if len(self._epochs) >= 2:
                self._epochs.pop(min(self._epochs))
            self._epochs[epoch] = (phase, perm)
        return self._epochs[epoch]

    def epoch(self, cursor: int) -> float:
        """Fractional passes over the training split after ``cursor`` batches."""
        return cursor * self.batch / self.windows

    def starts(self, cursor: int, first: int, count: int) -> np.ndarray:
        """Start offsets of sequences ``first .. first+count`` of batch ``cursor``."""
        out = np.empty(count, dtype=np.int64)
        for n in range(count):
            i = cursor * self.batch + first + n
            epoch, pos = divmod(i, self.windows)
            phase, perm = self._epoch(epoch)
            out[n] = phase + int(perm[pos]) * self.context
        return out

    def get(self, cursor: int, first: int = 0, count: int | None = None) -> tuple["torch.Tensor", "torch.Tensor"]:
        """Inputs and targets (int64, ``count`` x context) of sequences ``first..`` of a batch."""
        import torch

        count = self.batch - first if count is None else count
        if first < 0 or count < 1 or first + count > self.batch:
            raise ValueError(f"sequences {first}..{first + count} outside a batch of {self.batch}")
        rows = np.stack([np.asarray(self.tokens[s : s + self.context + 1]) for s in self.starts(cursor, first, count)])
        rows_t = torch.from_numpy(rows.astype(np.int64))
        return rows_t[:, :-1], rows_t[:, 1:]

    def shard(self, cursor: int, rank: int, world: int) -> tuple[int, int]:
        """(first, count): rank ``rank``'s contiguous share of a batch across ``world`` ranks.

        Shares differ by at most one sequence when the batch does not divide evenly; the loop
        weights each sequence by 1/batch so the loss is the global batch's mean either way.
        """
        if world > self.batch:
            raise SpecError(f"batch_tokens: {self.batch} sequences per batch cannot feed {world} workers")
        first = rank * self.batch // world
        return first, (rank + 1) * self.batch // world - first


def eval_windows(corpus: Corpus, context: int, eval_tokens: int) -> "torch.Tensor":
    """The held-out windows evaluated every time: the first ceil(eval_tokens / context)
    non-overlapping windows of ``context + 1`` tokens of the validation split (fixed, so every
    evaluation of every run on this corpus sees the same tokens)."""
    import torch

    val = corpus.val
    available = (len(val) - 1) // context
    n = max(1, min(math.ceil(eval_tokens / context), available))
    rows = np.stack([np.asarray(val[i * context : i * context + context + 1]) for i in range(n)])
    return torch.from_numpy(rows.astype(np.int64))
