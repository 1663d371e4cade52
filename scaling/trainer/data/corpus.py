"""The training data: a corpus (bytes, text or token shards), a held-out split, batches as a pure function.

Sources ``builtin``, ``text`` (optionally tokenized once, `scaling.trainer.data.prepare`) and
``tokens``; the batch at a cursor is a pure function of ``(seed, cursor)``. Sources, split,
shuffling and what is recorded with a run: docs/reference/modules.md.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

import numpy as np

from scaling.errors import SpecError
from scaling.trainer.data.digests import Digest, shard_digests
from scaling.trainer.data.files import read_corpus, text_files
from scaling.trainer.data.shards import Shard, ShardFormat, ShardMaps, TokenStream, read_shard, shard_paths

if TYPE_CHECKING:  # torch is imported lazily so `resolve_data` works in torch-free callers
    import torch

    from scaling.trainer.spec import RunSpec
    from scaling.trainer.sections import DataSpec, TokenizerSpec

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

    tokens: Any  # the whole stream (uint8, uint16 or uint32): an array, a memmap or a TokenStream
    n_train: int  # tokens [0, n_train) train; [n_train, len) validation
    fingerprint: str
    source: str
    files: tuple[str, ...] = ()
    distinct_tokens: Optional[int] = 0  # None: not counted (token files: it would cost a full read)
    max_token: int = 0
    max_tokens: tuple[tuple[str, int], ...] = ()  # each token file and its largest token id
    vocab_size: Optional[int] = None  # the tokenizer's vocabulary (None: bytes or a token file)
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def train(self) -> Any:
        return self.tokens[: self.n_train]

    @property
    def val(self) -> Any:
        return self.tokens[self.n_train :]

    @property
    def unique_tokens(self) -> int:
        """U: tokens in the training split (what the data-constrained law calls unique data)."""
        return self.n_train

    def describe(self) -> dict[str, Any]:
        """What the run records about its data (the `data` event's detail)."""
        out = {
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
        if self.distinct_tokens is None:
            out.pop("distinct_tokens")
        return out


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
    return _load(data.source, data.path, data.dtype, data.val_fraction, data.tokenizer, data.val_path, data.format)


@functools.lru_cache(maxsize=4)
def _load(source: str, path_: str | tuple[str, ...] | None, dtype: str, val_fraction: float,
          tokenizer: Optional[TokenizerSpec] = None,
          val_path: str | tuple[str, ...] | None = None, fmt: Optional[ShardFormat] = None) -> Corpus:
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
        from scaling.trainer.data.prepare import prepare
        from scaling.trainer.sections import DataSpec, TokenizerSpec

        prepared = prepare(DataSpec(source="text", path=path_, val_fraction=val_fraction, tokenizer=tokenizer))
        tokens = np.memmap(prepared.tokens_path, dtype=prepared.dtype, mode="r")
        fingerprint, n_train, vocab_size = prepared.fingerprint, prepared.n_train, prepared.vocab_size
        files = prepared.files
        details["tokenizer"] = {
            "kind": tokenizer.train or "file", "vocab_size": prepared.vocab_size,
            "sha256": prepared.tokenizer_sha256, "prepared": str(prepared.folder),
        }
    elif source == "text":
        assert isinstance(path_, str)
        paths = text_files(path_)
        raw = _SEPARATOR.join(raw for _, raw in read_corpus(paths))
        files = tuple(str(p) for p in paths)
        tokens = np.frombuffer(raw, dtype=np.uint8)
        fingerprint = _sha256(raw)
    else:  # tokens
        assert path_ is not None
        return _token_corpus(path_, val_path, dtype, fmt, val_fraction)
    if len(tokens) < 4:
        raise SpecError(f"data: corpus has only {len(tokens)} tokens")
    if n_train is None:
        n_train = _split(len(tokens), val_fraction)
    distinct, max_token = _scan(tokens, n_train)
    return Corpus(
        tokens=tokens,
        n_train=n_train,
        fingerprint=fingerprint,
        source=source,
        files=files,
        distinct_tokens=distinct,
        max_token=max_token,
        vocab_size=vocab_size,
        details=details,
    )


def _scan(tokens: np.ndarray, n_train: int) -> tuple[int, int]:
    """(distinct token ids in the training split, largest id in the stream): one read, in chunks
    (bincount and max would otherwise copy a multi-GB memmap as int64)."""
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
    return int(np.count_nonzero(counts)), max_token


def _token_corpus(path_: str | tuple[str, ...], val_path: str | tuple[str, ...] | None, dtype: str,
                  fmt: Optional[ShardFormat], val_fraction: float) -> Corpus:
    """Token shards as one stream (`scaling.trainer.data.shards`), fingerprinted from cached per-shard digests.

    One raw file without ``val_path`` is the corpus it always was: its memmap and the file's sha256
    as the fingerprint. Otherwise the fingerprint hashes every shard's sha256 and reading (train
    then held-out). Distinct tokens are not counted: that would read the whole corpus at every start.
    """
    train = [read_shard(p, dtype, fmt, "data.path") for p in shard_paths(path_, "data.path")]
    held_paths = shard_paths(val_path, "data.val_path") if val_path else []
    held = [read_shard(p, dtype, fmt, "data.val_path") for p in held_paths]
    overlap = {s.path.resolve() for s in train} & {s.path.resolve() for s in held}
    if overlap:
        raise SpecError(f"data.val_path: {min(overlap)} is both a training and a held-out shard")
    shards = train + held
    digests = shard_digests(shards)
    max_tokens = tuple((str(s.path), d.max_token) for s, d in zip(shards, digests))
    max_token = max(m for _, m in max_tokens)
    total = sum(s.n_tokens for s in shards)
    if total < 4:
        raise SpecError(f"data.path: the shards hold only {total} tokens; a corpus needs at least 4")
    details: dict[str, Any] = {"shards": len(train), "val_shards": len(held),
                               "formats": sorted({s.kind for s in shards})}
    n_train = sum(s.n_tokens for s in train) if held else _split(total, val_fraction)
    if len(shards) == 1 and train[0].kind == "bin":
        tokens: Any = train[0].open()
        fingerprint = digests[0].sha256
    else:
        tokens = TokenStream(ShardMaps(shards))
        fingerprint = shards_fingerprint(train, held, digests)
    return Corpus(tokens=tokens, n_train=n_train, fingerprint=fingerprint, source="tokens",
                  files=tuple(str(s.path) for s in shards), distinct_tokens=None, max_token=max_token,
                  max_tokens=max_tokens, details=details)


def shards_fingerprint(train: list[Shard], held: list[Shard], digests: list[Digest]) -> str:
    """The fingerprint of a sharded corpus: sha256 over each shard's sha256 and how it is read, in
    stream order, training shards then held-out ones (names and folders do not count)."""
    rows = [[d.sha256, s.kind, s.dtype, s.offset, s.n_tokens] for s, d in zip(train + held, digests)]
    doc = {"format": "shards-1", "train": rows[: len(train)], "val": rows[len(train) :]}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


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
    vocab = spec.model.vocab_size
    if corpus.max_token >= vocab:
        where = next((f" in {name}" for name, top in corpus.max_tokens if top >= vocab), " in the data")
        top = next((top for _, top in corpus.max_tokens if top >= vocab), corpus.max_token)
        raise SpecError(f"model.vocab_size: {vocab} is too small for token id {top}{where}")
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
