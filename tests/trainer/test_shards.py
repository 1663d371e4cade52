"""Token shards: three formats train as one stream, resume exactly, fingerprint from cached digests,
and every bad shard is one line, exit 2, nothing written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml

from scaling import vocab as names
from scaling.db import connect
from scaling.trainer.checkpoints import checkpoint
from scaling.trainer.data import digests, shards
from scaling.trainer import train
from scaling.trainer.data.corpus import Batches, load_corpus, resolve_data
from scaling.trainer.faults import InjectedFault
from scaling.trainer.sections import DataSpec
from cli_run import run_main

EXT = {"bin": "bin", "npy": "npy", "llmc": "bin"}


def _stream(n: int = 12_000) -> np.ndarray:
    """Bytes of real text as uint16 tokens (something a tiny model learns)."""
    raw = (Path(shards.__file__).read_bytes() * 8)[:n]
    return np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)


def _write(path: Path, tokens: np.ndarray, kind: str) -> Path:
    with open(path, "wb") as fh:
        shards.write_header(fh, kind, str(tokens.dtype), len(tokens))  # type: ignore[arg-type]
        fh.write(tokens.tobytes())
    return path


def _shard_folder(folder: Path, tokens: np.ndarray, kind: str, parts: int = 3) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for i, part in enumerate(np.array_split(tokens, parts)):
        _write(folder / f"part_{i:03d}.{EXT[kind]}", part, kind)
    return str(folder / f"part_*.{EXT[kind]}")


def _losses(url: str, key: str) -> list[tuple[int, float]]:
    df = connect(url).metrics(run_keys=[key], names=[names.TRAIN_LOSS])
    return list(zip(df["step"].tolist(), df["value"].tolist()))


def test_one_token_file_keeps_its_key_and_batches(make_spec, tmp_path: Path) -> None:
    """A single raw file is read as it always was: the same key fields, fingerprint and batches
    (the batch sums were measured with the single-file reader these shards extend)."""
    ids = (np.arange(20000, dtype=np.int64) * 7919 % 50000).astype(np.uint16)
    path = tmp_path / "legacy.bin"
    ids.tofile(path)
    spec = resolve_data(make_spec(model={"vocab_size": 50000}, data={"source": "tokens", "path": str(path)}))
    assert spec.key_fields()["data"] == {
        "source": "tokens", "path": str(path), "dtype": "uint16", "val_fraction": 0.05,
        "fingerprint": hashlib.sha256(path.read_bytes()).hexdigest(), "unique_tokens": 19000,
    }
    corpus = load_corpus(spec.data)
    assert isinstance(corpus.tokens, np.memmap) and corpus.max_token == 49998
    batches = Batches(corpus, 32, 8, seed=0)
    assert [int(batches.get(k)[0].sum()) for k in (0, 1, 100)] == [6421600, 6451520, 6437136]
    assert batches.get(0)[0][0, :6].tolist() == [29541, 37460, 45379, 3298, 11217, 19136]


@pytest.mark.parametrize("kind", ["bin", "npy", "llmc"])
def test_shards_train_and_resume_as_the_one_file_they_split(kind: str, make_spec, registered, tmp_path: Path) -> None:
    """Shards in each format give the batches of the concatenated file (windows cross shard
    boundaries), so the losses are the same floats; a run from shards that crashes and resumes
    from its checkpoint reproduces them exactly."""
    tokens = _stream()
    whole = tmp_path / "whole.bin"
    tokens.tofile(whole)
    pattern = _shard_folder(tmp_path / "shards", tokens, kind)
    steps = {"tokens": 32 * 8 * 10}
    one_file = make_spec(data={"source": "tokens", "path": str(whole)}, **steps)
    crashing = make_spec(data={"source": "tokens", "path": pattern}, faults={"raise_at_step": 7, "raise_attempts": 1},
                         **steps)
    assert load_corpus(crashing.data).details["formats"] == [kind]
    url = registered(one_file)
    registered(crashing)
    ref = train(one_file, url, tmp_path / "one")
    with pytest.raises(InjectedFault):
        train(crashing, url, tmp_path / "crash", attempt=1)
    assert checkpoint.latest(tmp_path / "crash").name == "step_00000004"
    resumed = train(crashing, url, tmp_path / "crash", attempt=2)
    assert resumed.resumed_from == 4 and resumed.status == "completed" and resumed.steps == 10
    assert _losses(url, crashing.key) == _losses(url, one_file.key)  # exact floats, every step
    assert resumed.final_eval_loss == ref.final_eval_loss


def test_val_path_holds_out_whole_shards(tmp_path: Path) -> None:
    tokens = _stream()
    for i, part in enumerate(np.array_split(tokens, 4)):
        _write(tmp_path / f"s{i}.npy", part, "npy")
    corpus = load_corpus(DataSpec(source="tokens", path=[str(tmp_path / "s0.npy"), str(tmp_path / "s[12].npy")],
                                  val_path=str(tmp_path / "s3.npy")))
    train_len = sum(len(p) for p in np.array_split(tokens, 4)[:3])
    assert corpus.n_train == train_len and np.array_equal(np.asarray(corpus.val), tokens[train_len:])
    assert np.array_equal(np.asarray(corpus.train), tokens[:train_len]) and corpus.distinct_tokens is None
    with pytest.raises(Exception, match="both a training and a held-out shard"):
        load_corpus(DataSpec(source="tokens", path=str(tmp_path / "s*.npy"), val_path=str(tmp_path / "s3.npy")))


def test_digests_are_cached_and_a_changed_shard_changes_the_key(
        make_spec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.trainer.data import corpus

    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path / "cache"))
    reads: list[str] = []
    real_measure = digests.measure
    monkeypatch.setattr(digests, "measure", lambda shard, advance=None: reads.append(shard.path.name)
                        or real_measure(shard, advance or (lambda n: None)))
    pattern = _shard_folder(tmp_path / "shards", _stream(), "llmc")
    spec = make_spec(data={"source": "tokens", "path": pattern})

    first = resolve_data(spec)
    assert sorted(reads) == ["part_000.bin", "part_001.bin", "part_002.bin"]  # a miss reads each shard once
    entries = sorted((tmp_path / "cache" / "shard-digests").glob("*.json"))
    assert len(entries) == 3
    corpus._load.cache_clear()
    assert resolve_data(spec).key == first.key and len(reads) == 3  # a hit reads nothing

    entries[0].write_text("[1, 2]")  # an entry that does not check out is a miss, re-read and replaced
    entries[1].write_text("x" * (digests.MAX_ENTRY_BYTES + 10))
    entry = json.loads(entries[2].read_text())
    entries[2].write_text(json.dumps({**entry, "max_token": -1}))
    corpus._load.cache_clear()
    assert resolve_data(spec).key == first.key and len(reads) == 6

    changed = tmp_path / "shards" / "part_001.bin"
    tokens = np.fromfile(changed, dtype=np.uint16, offset=shards.LLMC_HEADER_BYTES)
    tokens[5] = (int(tokens[5]) + 1) % 256
    _write(changed, tokens, "llmc")
    stat = changed.stat()
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # a new mtime even on a coarse clock
    corpus._load.cache_clear()
    again = resolve_data(spec)
    assert reads[6:] == ["part_001.bin"]  # only the changed shard is read
    assert again.data.fingerprint != first.data.fingerprint and again.key != first.key


def _bad_case(case: str, folder: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict, str]:
    """(the data section, the text the one-line error must hold) of each refused corpus."""
    good = _stream(6000)
    folder.mkdir()
    _write(folder / "good.bin", good, "bin")
    bad = folder / "bad.bin"
    if case == "llmc-header":
        _write(bad, good, "llmc")
        with open(bad, "r+b") as fh:
            fh.seek(4)
            fh.write(np.int32(3).tobytes())  # version 3 under GPT-2's magic
        expected = f"{bad} has a wrong llmc header: magic 20240520 version 3"
        return {"path": [str(folder / "good.bin"), str(bad)]}, expected
    if case == "npy-header":
        bad = folder / "bad.npy"
        bad.write_bytes(b"\x93NUMPY\x01\x00" + b"\xff" * 40)
        return {"path": [str(folder / "good.bin"), str(bad)]}, f"{bad} has a wrong npy header"
    if case == "odd-length":
        bad.write_bytes(good.tobytes() + b"\x01")
        return {"path": str(folder / "*.bin")}, f"{bad} is not a whole number of uint16 tokens"
    if case == "count-mismatch":
        _write(bad, good, "llmc")
        with open(bad, "ab") as fh:
            fh.write(b"\x00\x00")
        return {"path": str(folder / "*.bin")}, f"{bad} has a wrong llmc header: it announces 6,000 tokens"
    if case == "dtype":
        bad = folder / "bad.npy"
        np.save(bad, good.astype(np.uint32))
        expected = f"{bad} holds uint32 tokens (npy header) but data.dtype is uint16"
        return {"path": [str(folder / "good.bin"), str(bad)]}, expected
    if case == "vocab":
        _write(bad, np.full(100, 300, dtype=np.uint16), "bin")
        return {"path": str(folder / "*.bin")}, f"model.vocab_size: 256 is too small for token id 300 in {bad}"
    if case == "no-match":
        return {"path": str(folder / "*.npy")}, "the glob"
    if case == "too-many":
        monkeypatch.setattr(shards, "MAX_SHARDS", 1)
        _write(bad, good, "bin")
        return {"path": str(folder / "*.bin")}, "more than 1 shards"
    raise AssertionError(case)


@pytest.mark.parametrize("case", ["llmc-header", "npy-header", "odd-length", "count-mismatch", "dtype", "vocab",
                                  "no-match", "too-many"])
def test_a_bad_shard_is_one_line_exit_2_and_nothing_written(
        case: str, tiny: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data, expected = _bad_case(case, tmp_path / "data", monkeypatch)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({**tiny, "data": {"source": "tokens", **data}}))
    db, runs = tmp_path / "runs.db", tmp_path / "runs"
    out = run_main("train", str(spec), "--db", f"sqlite:///{db}", "--run-dir", str(runs))
    assert out.code == 2, out.err + out.out
    assert out.err.count("\n") == 1 and expected in out.err and "Traceback" not in out.err, out.err
    assert not db.exists() and not runs.exists()


@pytest.mark.parametrize("kind", ["npy", "llmc"])
def test_data_prepare_writes_shards_that_read_back_as_the_corpus(kind: str, tmp_path: Path) -> None:
    text = tmp_path / "corpus.txt"
    text.write_bytes(Path(shards.__file__).read_bytes())
    out = tmp_path / "out"
    done = run_main("data", "prepare", "--path", str(text), "--shard-tokens", "4000", "--shard-format", kind,
                    "--out", str(out), "--format", "json")
    assert done.code == 0, done.err
    facts = json.loads(done.out)
    source = load_corpus(DataSpec(source="text", path=str(text)))
    shards_data = DataSpec(**facts["data"])
    assert facts["dtype"] == ("uint16" if kind == "llmc" else "uint8") and facts["train_shards"] > 1
    back = load_corpus(shards_data)
    assert back.n_train == source.n_train and np.array_equal(np.asarray(back.tokens), np.asarray(source.tokens))
    again = run_main("data", "prepare", "--path", str(text), "--shard-tokens", "4000", "--out", str(out))
    assert again.code == 2 and "is not an empty folder" in again.err and again.err.count("\n") == 1


def test_a_stream_keeps_few_maps_open_and_reads_across_boundaries(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(shards, "MAX_OPEN_SHARDS", 2)
    tokens = _stream(5000)
    paths = [_write(tmp_path / f"p{i}.bin", part, "bin") for i, part in enumerate(np.array_split(tokens, 5))]
    maps = shards.ShardMaps([shards.read_shard(p, "uint16", None, "data.path") for p in paths])
    stream = shards.TokenStream(maps)
    for lo in range(0, 5000 - 700, 333):  # windows across one or more boundaries
        assert np.array_equal(np.asarray(stream[lo : lo + 700]), tokens[lo : lo + 700])
        assert maps.mapped <= 2
    assert stream[-1] == tokens[-1] and stream[1000:3000][5] == tokens[1005] and len(stream[4990:9999]) == 10


def test_a_shard_that_changes_while_it_is_hashed_is_refused(tmp_path: Path) -> None:
    from scaling.errors import SpecError

    path = _write(tmp_path / "s.bin", _stream(4000), "bin")
    shard = shards.read_shard(path, "uint16", None, "data.path")
    with open(path, "ab") as fh:
        fh.write(b"\x00\x00")
    with pytest.raises(SpecError, match="changed while it was read"):
        digests.measure(shard)
