"""Hugging Face tokenizers: read a user's ``tokenizer.json`` safely, or train a byte-level BPE.

A tokenizer file is JSON (never a pickle); it is size-bounded and parsed by Python's ``json``
first, so a file that is not a tokenizer is one line, not a Rust panic. A trained tokenizer is
GPT-2 style byte-level BPE: every UTF-8 text encodes, and decoding the ids gives the text back.
A tokenizer's identity is the sha256 of its canonical serialization (``Tokenizer.to_str()``),
so the same tokenizer hashes the same whatever file or formatting it came from.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from scaling.errors import SpecError
from scaling.userfiles import read_input

if TYPE_CHECKING:
    from tokenizers import Tokenizer

#: The largest tokenizer.json accepted (GPT-2's is 1.4 MB, a 200k-token vocabulary about 10 MB).
MAX_TOKENIZER_BYTES = 64 << 20
#: The largest vocabulary a run may use (ids are stored as uint32; the embedding must fit).
MAX_VOCAB = 1 << 20
#: The smallest trained BPE: the 256 byte symbols plus at least one merge.
MIN_TRAINED_VOCAB = 257
#: The longest text the BPE trainer sees at once. Its cost grows faster than linearly in a word's
#: length (a 1 MB line of one letter ran for minutes), so longer lines (minified JSON, base64, DNA)
#: are trained on in pieces of at most this many characters. Encoding is not affected.
MAX_TRAIN_CHARS = 4096
_LONG_LINE = re.compile(f"[^\n]{{{MAX_TRAIN_CHARS + 1},}}")


def _tokenizers():  # type: ignore[no-untyped-def]
    try:
        import tokenizers
    except ImportError:  # pragma: no cover - a dependency of scaling
        raise SpecError("data.tokenizer: the 'tokenizers' package is not installed (pip install tokenizers)") from None
    return tokenizers


def load(path: str | Path, where: str = "data.tokenizer.path") -> "Tokenizer":
    """The tokenizer in a ``tokenizer.json`` file; SpecError (one line) for anything else."""
    raw = read_input(path, "tokenizer", max_bytes=MAX_TOKENIZER_BYTES, error=SpecError, where=where)
    return from_json(raw, f"{where}: {Path(path).expanduser()}")


def from_json(raw: bytes, where: str) -> "Tokenizer":
    """A tokenizer from its JSON text, checked by Python's parser before the library sees it."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SpecError(f"{where} is not JSON ({type(exc).__name__})") from None
    if not isinstance(data, dict) or "model" not in data:
        raise SpecError(f"{where} is not a Hugging Face tokenizer.json (no 'model' section)")
    if not isinstance(data["model"], dict):
        raise SpecError(f"{where} is not a Hugging Face tokenizer.json: its 'model' is not a section (an object) "
                        f"but {json.dumps(data['model'])[:40]}")
    _check_ids(data, where)
    try:
        tok = _tokenizers().Tokenizer.from_str(raw.decode("utf-8"))
    except Exception as exc:  # the library's own parse error: a malformed tokenizer
        raise SpecError(f"{where} is not a valid tokenizer ({str(exc).splitlines()[0][:200]})") from None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    if not 1 < vocab <= MAX_VOCAB:
        raise SpecError(f"{where} has a vocabulary of {vocab} tokens; between 2 and {MAX_VOCAB} are supported")
    return tok


def _check_ids(data: dict, where: str) -> None:
    """Refuse a token id outside [0, MAX_VOCAB) before the library sees it.

    The library sizes its id tables by the largest id, not by how many tokens there are: one
    entry with id 2**31 in a 300-token file would cost gigabytes to load and serialise.
    """
    vocab = data["model"].get("vocab")
    ids = list(vocab.values()) if isinstance(vocab, dict) else []
    added = data.get("added_tokens")
    if isinstance(added, list):
        ids += [t.get("id") for t in added if isinstance(t, dict)]
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < MAX_VOCAB:
            raise SpecError(f"{where} has a token id {str(i)[:40]}, outside 0..{MAX_VOCAB - 1}")


def train_bpe(
    texts: Iterable[str], vocab_size: int, min_frequency: int = 2, *, on_text: Callable[[str], None] | None = None
) -> "Tokenizer":
    """A byte-level BPE trained on ``texts`` (the training split only); ``on_text`` sees each
    piece as the trainer reads it (progress). Deterministic for the same texts and settings."""
    tk = _tokenizers()
    tok = tk.Tokenizer(tk.models.BPE())
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def pieces() -> Iterable[str]:
        for text in texts:
            if on_text is not None:
                on_text(text)
            yield from training_pieces(text)

    tok.train_from_iterator(pieces(), trainer)
    return tok


def training_pieces(text: str) -> Iterator[str]:
    """``text`` as the trainer should see it: whole, unless a line is longer than :data:`MAX_TRAIN_CHARS`;
    such a line is cut into pieces of at most that many characters, before a space or tab in the
    piece's second half where there is one (so words stay whole). Joined, the pieces are ``text``."""
    start = 0
    for m in _LONG_LINE.finditer(text):
        if m.start() > start:
            yield text[start:m.start()]
        yield from _cut(text, m.start(), m.end())
        start = m.end()
    if start < len(text):
        yield text[start:] if start else text


def _cut(text: str, start: int, end: int) -> Iterator[str]:
    while end - start > MAX_TRAIN_CHARS:
        window = text[start:start + MAX_TRAIN_CHARS]
        space = max(window.rfind(" "), window.rfind("\t"))
        stop = start + (space if space > MAX_TRAIN_CHARS // 2 else MAX_TRAIN_CHARS)
        yield text[start:stop]
        start = stop
    yield text[start:end]


def vocab_size(tok: "Tokenizer") -> int:
    """Token ids a model must embed: the vocabulary with added (special) tokens."""
    return int(tok.get_vocab_size(with_added_tokens=True))


def digest(tok: "Tokenizer") -> str:
    """sha256 of the tokenizer's canonical JSON: its identity in the data fingerprint."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()


def library_version() -> str:
    return str(_tokenizers().__version__)
