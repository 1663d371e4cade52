"""Data: the built-in corpus, fingerprints, batches as a pure function, rank shards."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from scaling.errors import SpecError
from scaling.trainer.data import corpus as corpus_module
from scaling.trainer.data.corpus import BUILTIN_FILES, Batches, eval_windows, load_corpus, resolve_data
from scaling.trainer.sections import DataSpec


def test_builtin_corpus_is_real_pinned_text() -> None:
    corpus = load_corpus(DataSpec())
    assert list(BUILTIN_FILES) == sorted(BUILTIN_FILES)
    assert 2_000_000 < len(corpus.tokens) < 20_000_000
    assert len(corpus.files) >= 100
    assert b"def " in corpus.tokens[:100_000].tobytes()
    assert corpus.unique_tokens == corpus.n_train
    assert 50 < corpus.distinct_tokens <= 256
    assert len(corpus.fingerprint) == 64
    again = load_corpus(DataSpec(val_fraction=0.05, fingerprint=corpus.fingerprint))
    assert again is corpus  # cached on what selects the bytes


def test_resolve_data_puts_the_fingerprint_in_the_key(make_spec) -> None:
    spec = make_spec()
    resolved = resolve_data(spec)
    assert resolved.data.fingerprint == load_corpus(spec.data).fingerprint
    assert resolved.data.unique_tokens == load_corpus(spec.data).n_train
    assert resolved.key != spec.key and resolve_data(resolved) is resolved
    wrong = make_spec(data={"fingerprint": "0" * 64})
    with pytest.raises(SpecError, match="data.fingerprint"):
        resolve_data(wrong)


def test_batches_are_a_pure_function_of_seed_and_cursor() -> None:
    corpus = load_corpus(DataSpec())
    a, b = Batches(corpus, 64, 8, seed=3), Batches(corpus, 64, 8, seed=3)
    for cursor in (0, 5, 1000):
        xa, ya = a.get(cursor)
        xb, yb = b.get(cursor)
        assert torch.equal(xa, xb) and torch.equal(ya, yb)
        assert torch.equal(xa[:, 1:], ya[:, :-1])  # targets are the inputs shifted by one
    assert not torch.equal(a.get(0)[0], a.get(1)[0])
    assert not torch.equal(a.get(0)[0], Batches(corpus, 64, 8, seed=4).get(0)[0])


def test_rank_shards_union_is_the_global_batch() -> None:
    corpus = load_corpus(DataSpec())
    batches = Batches(corpus, 32, 12, seed=0)
    whole = batches.get(7)[0]
    for world in (1, 2, 3, 4, 5, 7, 12):  # uneven splits too: shares differ by at most one
        parts, counts = [], []
        for rank in range(world):
            first, count = batches.shard(7, rank, world)
            parts.append(batches.get(7, first, count)[0])
            counts.append(count)
        assert torch.equal(torch.cat(parts), whole)
        assert max(counts) - min(counts) <= 1
    with pytest.raises(SpecError, match="cannot feed 13 workers"):
        batches.shard(0, 0, 13)


def test_epochs_cover_every_window_once(tmp_path: Path) -> None:
    text = tmp_path / "a.txt"
    text.write_bytes(bytes(range(256)) * 40)  # 10,240 bytes
    corpus = load_corpus(DataSpec(source="text", path=str(text), val_fraction=0.1))
    batches = Batches(corpus, 16, 4, seed=0)
    per_epoch = batches.windows // 4
    starts = np.concatenate([batches.starts(c, 0, 4) for c in range(per_epoch)])
    phase = starts[0] % 16
    assert len(set(starts.tolist())) == len(starts)  # no window twice within an epoch
    assert all(s % 16 == phase for s in starts)
    assert batches.epoch(per_epoch) == pytest.approx(per_epoch * 4 / batches.windows)


def test_text_glob_and_token_file_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "b.txt").write_text("hello world\n" * 200)
    (tmp_path / "a.txt").write_text("second file\n" * 200)
    glob_corpus = load_corpus(DataSpec(source="text", path=str(tmp_path / "*.txt")))
    assert glob_corpus.files == (str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))  # sorted
    assert glob_corpus.tokens[:11].tobytes() == b"second file"
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "index").write_bytes(b"\x00binary")
    dir_corpus = load_corpus(DataSpec(source="text", path=str(tmp_path)))
    assert dir_corpus.files == glob_corpus.files and dir_corpus.fingerprint == glob_corpus.fingerprint

    ids = (np.arange(5000) * 7919 % 50000).astype(np.uint16)
    path = tmp_path / "train.bin"
    ids.tofile(path)
    corpus = load_corpus(DataSpec(source="tokens", path=str(path), dtype="uint16"))
    assert isinstance(corpus.tokens, np.memmap) and corpus.max_token == int(ids.max())
    assert np.array_equal(np.asarray(corpus.tokens), ids)
    assert corpus.fingerprint == hashlib.sha256(path.read_bytes()).hexdigest()
    assert corpus.distinct_tokens is None  # not counted for token files: a full read at every start
    n_train = corpus.n_train
    whole = corpus_module._scan(ids, n_train)
    assert whole == (len(np.unique(ids[:n_train])), int(ids.max()))
    monkeypatch.setattr(corpus_module, "_CHUNK", 777)  # the chunked scan agrees with the whole-array one
    assert corpus_module._scan(ids, n_train) == whole
    with pytest.raises(SpecError, match="no files match"):
        load_corpus(DataSpec(source="text", path=str(tmp_path / "*.none")))


def test_corpus_checks_name_the_field(make_spec, tmp_path: Path) -> None:
    ids = np.full(5000, 300, dtype=np.uint16)
    path = tmp_path / "big.bin"
    ids.tofile(path)
    spec = make_spec(data={"source": "tokens", "path": str(path)})
    with pytest.raises(SpecError, match="model.vocab_size"):
        resolve_data(spec)


@pytest.mark.parametrize("case", ["empty", "folder", "device"])
def test_a_token_file_that_holds_nothing_is_one_line(case: str, tmp_path: Path) -> None:
    path = {"empty": tmp_path / "empty.bin", "folder": tmp_path, "device": Path("/dev/zero")}[case]
    if case == "empty":
        path.touch()
    expected = {"empty": "holds only 0 tokens", "folder": "is not a regular file", "device": "is not a regular file"}
    with pytest.raises(SpecError, match=expected[case]):
        load_corpus(DataSpec(source="tokens", path=str(path), dtype="uint16"))


def test_eval_windows_are_fixed_and_held_out() -> None:
    corpus = load_corpus(DataSpec())
    rows = eval_windows(corpus, 64, 1000)
    assert rows.shape == (16, 65)
    assert torch.equal(rows, eval_windows(corpus, 64, 1000))
    assert rows[0].tolist() == corpus.val[:65].tolist()
