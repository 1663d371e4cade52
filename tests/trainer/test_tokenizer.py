"""Real tokenized data: Hugging Face tokenizers, the prepared token cache, and the vocabulary
flowing into shapes, N and FLOPs.

Everything here is real: BPE is trained by the `tokenizers` library on real text (the first
pages of the example corpus), token files are written to disk and memory-mapped, runs train.
"""

from __future__ import annotations

import gzip
import json
import lzma
import multiprocessing
import os
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from cli_run import run_main
from scaling.accounting import Shape
from scaling.errors import PlanError, SpecError
from scaling.trainer.data import files, prepare as prep, tokenizer as hf
from scaling.trainer.data.corpus import load_corpus, resolve_data
from scaling.trainer.data.prepare import prepare
from scaling.trainer.spec import RunSpec
from scaling.trainer.sections import DataSpec

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "examples" / "corpus"


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCALING_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def novel() -> str:
    """About 150,000 characters of real English prose (public domain, see examples/corpus/SOURCE.md)."""
    with lzma.open(CORPUS / "crime-and-punishment.txt.xz", "rt", encoding="utf-8") as fh:
        return fh.read(150_000)


@pytest.fixture
def corpus_dir(tmp_path: Path, novel: str) -> Path:
    folder = tmp_path / "corpus"
    folder.mkdir()
    half = len(novel) // 2
    (folder / "a.txt").write_text(novel[:half], encoding="utf-8")
    (folder / "b.txt").write_text(novel[half:], encoding="utf-8")
    return folder


def bpe(path: Path, vocab: int = 400, val_fraction: float = 0.1) -> DataSpec:
    return DataSpec(source="text", path=str(path), val_fraction=val_fraction,
                    tokenizer={"train": "bpe", "vocab_size": vocab})


def test_round_trip_of_the_prepared_tokens(corpus_dir: Path) -> None:
    data = bpe(corpus_dir)
    prepared = prepare(data)
    tok = hf.load(prepared.tokenizer_path)
    text = prep.read_text(files.text_files(str(corpus_dir)))
    cut = prep.split_text(text, data.val_fraction)
    ids = np.fromfile(prepared.tokens_path, dtype=prepared.dtype)
    assert prepared.dtype == "uint16" and len(ids) == prepared.n_tokens
    assert tok.decode(ids[: prepared.n_train].tolist()) == text[:cut]  # encode -> decode gives the text
    assert tok.decode(ids[prepared.n_train :].tolist()) == text[cut:]
    assert text[cut - 1] == "\n" and 0.09 < (len(text) - cut) / len(text) < 0.11
    unicode = "naïve café — «ёлка» 日本語 🙂\n\ttabs  and  spaces\n"
    assert tok.decode(tok.encode(unicode).ids) == unicode  # byte-level: any UTF-8 text
    corpus = load_corpus(data)
    assert isinstance(corpus.tokens, np.memmap) and corpus.vocab_size == prepared.vocab_size == 400
    assert corpus.unique_tokens == prepared.n_train and corpus.max_token < 400
    assert corpus.describe()["tokenizer"]["sha256"] == hf.digest(tok)
    # 144 merges already make ~1.9 bytes a token: a BPE that really merges, not bytes
    assert 1.5 < len(text.encode()) / prepared.n_tokens < 3


def test_the_tokenizer_is_trained_on_the_training_split_only(tmp_path: Path, novel: str) -> None:
    word = "Zyxwvutsrqponm"
    text = novel[:60_000] + "\n" + (f"{word} " * 2000) + "\n"  # the invented word: validation only
    path = tmp_path / "c.txt"
    path.write_text(text)
    data = bpe(path, vocab=600, val_fraction=0.2)
    prepared = prepare(data)
    cut = prep.split_text(text, 0.2)
    assert word not in text[:cut] and word in text[cut:]
    vocab = hf.load(prepared.tokenizer_path).get_vocab()
    assert not any("rqpon" in t for t in vocab)
    whole = hf.train_bpe([text], 600)  # control: trained on all of it, the word becomes tokens
    assert any("rqpon" in t for t in whole.get_vocab())


def test_fingerprint_follows_the_corpus_and_the_tokenizer_and_nothing_else(tmp_path: Path, corpus_dir: Path) -> None:
    base = prepare(bpe(corpus_dir))
    assert prepare(bpe(corpus_dir)).fingerprint == base.fingerprint
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in corpus_dir.iterdir():  # the same bytes elsewhere, compressed: the same data
        with gzip.open(copy / f"{f.name}.gz", "wb") as out:
            out.write(f.read_bytes())
    assert prepare(bpe(copy)).fingerprint == base.fingerprint

    # a tokenizer file: its identity, not its formatting or where it lies
    tok_json = json.loads(base.tokenizer_path.read_text())
    compact, pretty = tmp_path / "t1.json", tmp_path / "sub" / "t2.json"
    pretty.parent.mkdir()
    compact.write_text(json.dumps(tok_json))
    pretty.write_text(json.dumps(tok_json, indent=4))
    by_file = [prepare(DataSpec(source="text", path=str(corpus_dir), val_fraction=0.1, tokenizer={"path": str(p)}))
               for p in (compact, pretty)]
    assert by_file[0].fingerprint == by_file[1].fingerprint == base.fingerprint
    assert by_file[0].folder == by_file[1].folder  # one cache entry

    other_vocab = prepare(bpe(corpus_dir, vocab=420))
    assert other_vocab.fingerprint != base.fingerprint
    other_split = prepare(bpe(corpus_dir, val_fraction=0.2))
    assert other_split.fingerprint != base.fingerprint
    (corpus_dir / "b.txt").write_text((corpus_dir / "b.txt").read_text() + "One more line.\n")
    assert prepare(bpe(corpus_dir)).fingerprint != base.fingerprint

    # same token ids, another tokenizer (a different decoder): another fingerprint
    tok_json["decoder"] = None
    (tmp_path / "t3.json").write_text(json.dumps(tok_json))
    (corpus_dir / "b.txt").write_text((corpus_dir / "b.txt").read_text().removesuffix("One more line.\n"))
    no_decoder = prepare(DataSpec(source="text", path=str(corpus_dir), val_fraction=0.1,
                                  tokenizer={"path": str(tmp_path / "t3.json")}))
    assert np.array_equal(np.fromfile(no_decoder.tokens_path, "uint16"), np.fromfile(base.tokens_path, "uint16"))
    assert no_decoder.fingerprint != base.fingerprint


def test_prepare_is_reused_and_a_damaged_cache_is_rebuilt(corpus_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = prepare(bpe(corpus_dir))
    assert not first.reused
    stamp = first.tokens_path.stat().st_mtime_ns

    def no_second_tokenization(*args: object, **kwargs: object) -> None:
        raise AssertionError("prepared data was tokenized again")

    with monkeypatch.context() as m:
        m.setattr(prep, "_build", no_second_tokenization)
        again = prepare(bpe(corpus_dir))
        assert again.reused and again.folder == first.folder and again.fingerprint == first.fingerprint
        assert load_corpus(bpe(corpus_dir)).fingerprint == first.fingerprint
    assert first.tokens_path.stat().st_mtime_ns == stamp

    with open(first.tokens_path, "r+b") as fh:  # damaged on disk: same size, other bytes
        fh.write(b"\xff\xff")
    rebuilt = prepare(bpe(corpus_dir))
    assert not rebuilt.reused and rebuilt.fingerprint == first.fingerprint
    assert [p.name for p in prep.tokens_root().iterdir()] == [first.folder.name]  # nothing left behind


@pytest.mark.parametrize("damage", ["tokenizer emptied", "tokenizer swapped", "vocab_size edited"])
def test_a_cache_whose_tokenizer_or_vocabulary_was_changed_is_rebuilt(damage: str, corpus_dir: Path,
                                                                      tmp_path: Path) -> None:
    """meta.json records the tokenizer's sha256 and vocabulary: a folder whose tokenizer.json was replaced
    (by {} or by another tokenizer) or whose vocab_size was edited is rebuilt, not reused (for a trained
    BPE the folder holds the only copy of the tokenizer, and a wrong vocabulary sizes the model)."""
    first = prepare(bpe(corpus_dir))
    meta_path = first.folder / prep.META
    if damage == "tokenizer emptied":
        first.tokenizer_path.write_text("{}")
    elif damage == "tokenizer swapped":
        other = tmp_path / "other"
        other.mkdir()
        (other / "c.txt").write_text("a different corpus, a different vocabulary\n" * 200)
        hf.train_bpe([(other / "c.txt").read_text()], 400).save(str(first.tokenizer_path))
    else:
        meta = json.loads(meta_path.read_text())
        meta["vocab_size"] = 50_000
        meta_path.write_text(json.dumps(meta))
    again = prepare(bpe(corpus_dir))
    assert not again.reused and again.vocab_size == first.vocab_size == 400
    assert hf.digest(hf.load(again.tokenizer_path)) == first.tokenizer_sha256
    assert load_corpus(bpe(corpus_dir)).vocab_size == 400
    assert [p.name for p in prep.tokens_root().iterdir()] == [first.folder.name]  # nothing left behind


def test_an_unwritable_cache_is_one_line(corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SCALING_CACHE_DIR", str(blocker))
    got = run_main("data", "prepare", "--path", str(corpus_dir), "--train-bpe", "300")
    assert got.code == 2 and "Traceback" not in got.err
    assert got.err.startswith("error: data: cannot write the token cache") and "SCALING_CACHE_DIR" in got.err


def _prepare_in_child(path: str, cache: str, queue: multiprocessing.Queue) -> None:
    os.environ["SCALING_CACHE_DIR"] = cache
    queue.put(prepare(bpe(Path(path))).fingerprint)


def test_concurrent_prepares_agree_and_leave_one_folder(corpus_dir: Path, tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_child, args=(str(corpus_dir), str(tmp_path / "cache"), queue))
             for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert all(p.exitcode == 0 for p in procs)
    prints = {queue.get(timeout=5) for _ in procs}
    assert len(prints) == 1
    folders = list(prep.tokens_root().iterdir())
    assert len(folders) == 1 and prepare(bpe(corpus_dir)).reused


def test_ids_past_65535_are_stored_as_uint32(tmp_path: Path) -> None:
    words = {f"w{i}": i for i in range(70_000)}
    spec = {"version": "1.0", "model": {"type": "WordLevel", "vocab": words, "unk_token": "w0"},
            "pre_tokenizer": {"type": "Whitespace"}, "decoder": None, "normalizer": None, "post_processor": None,
            "added_tokens": [], "truncation": None, "padding": None}
    (tmp_path / "wl.json").write_text(json.dumps(spec))
    (tmp_path / "c.txt").write_text(" ".join(f"w{i}" for i in range(69_000, 70_000)) + "\n" + "w69999 w1\n" * 200)
    prepared = prepare(DataSpec(source="text", path=str(tmp_path / "c.txt"), tokenizer={"path": str(tmp_path / "wl.json")}))
    assert prepared.dtype == "uint32" and prepared.vocab_size == 70_000
    ids = np.fromfile(prepared.tokens_path, dtype="uint32")
    assert ids[:3].tolist() == [69_000, 69_001, 69_002] and int(ids.max()) == 69_999


@pytest.mark.parametrize("case", ["missing", "empty", "binary", "latin-1", "gz bomb"])
def test_bad_corpora_are_one_line(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.txt"
    if case == "empty":
        path.write_text("  \n\n")
    elif case == "binary":
        path.write_bytes(b"ELF\x00\x01\x02" * 100)
    elif case == "latin-1":
        path.write_bytes("Café au lait\n".encode("latin-1") * 100)
    elif case == "gz bomb":
        path = tmp_path / "c.txt.gz"
        path.write_bytes(gzip.compress(b"a" * (3 << 20)))
        monkeypatch.setattr(files, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    expected = {"missing": "no files match", "empty": "is empty", "binary": "looks binary (a NUL byte at offset 3)",
                "latin-1": "is not UTF-8 text (byte 0xe9 at offset 3)", "gz bomb": "expands past"}[case]
    with pytest.raises(SpecError, match=re.escape(expected)):
        prepare(bpe(path))
    got = run_main("data", "prepare", "--path", str(path), "--train-bpe", "300")
    assert got.code == 2 and "Traceback" not in got.err and got.out == ""
    assert len(got.err.strip().splitlines()) == 1 and expected.split(" (")[0] in got.err
    assert not prep.tokens_root().exists() or not any(prep.tokens_root().iterdir())  # nothing half-written


@pytest.mark.parametrize("case", ["not json", "deeply nested", "no model", "model not an object", "bad model",
                                  "too large", "huge id", "huge added id"])
def test_hostile_tokenizer_files_are_refused(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             corpus_dir: Path) -> None:
    path = tmp_path / "tokenizer.json"
    if case == "not json":
        path.write_bytes(b"\x80\x04\x95 pickle?")
    elif case == "deeply nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif case == "no model":
        path.write_text('{"version": "1.0"}')
    elif case == "model not an object":
        path.write_text('{"model": NaN}')  # Python's json reads NaN
    elif case == "bad model":
        path.write_text('{"model": {"type": "NoSuchModel", "vocab": {"a": 0}, "merges": []}}')
    elif case == "huge id":  # the library would size its tables by the id: gigabytes for a 300-token file
        path.write_text('{"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483648}, "merges": []}}')
    elif case == "huge added id":
        path.write_text('{"added_tokens": [{"id": 5000000, "content": "<x>"}], '
                        '"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}')
    else:
        with open(path, "wb") as fh:  # sparse: 65 MiB on paper, nothing read
            fh.truncate(65 << 20)
    expected = {"not json": "is not JSON", "deeply nested": "is not JSON", "no model": "no 'model' section",
                "model not an object": "its 'model' is not a section (an object) but NaN",
                "bad model": "is not a valid tokenizer", "too large": "more than the 64 MiB allowed",
                "huge id": "has a token id 2147483648, outside 0..1048575",
                "huge added id": "has a token id 5000000, outside"}[case]
    with pytest.raises(SpecError, match=re.escape(expected)):
        hf.load(path)
    got = run_main("data", "prepare", "--path", str(corpus_dir), "--tokenizer", str(path))
    assert got.code == 2 and "Traceback" not in got.err and expected in got.err
    assert len(got.err.strip().splitlines()) == 1


def test_byte_level_data_keeps_its_keys() -> None:
    """Specs without a tokenizer serialize as before tokenizers existed (their run keys stay)."""
    assert "tokenizer" not in DataSpec().model_dump()
    assert "tokenizer" in bpe(Path("x")).model_dump()
    with pytest.raises(ValueError, match="needs source 'text'"):
        DataSpec(source="tokens", path="x.bin", tokenizer={"train": "bpe"})
    with pytest.raises(ValueError, match="either path"):
        DataSpec(source="text", path="x", tokenizer={"path": "t.json", "train": "bpe"})


def test_vocab_comes_from_the_tokenizer_or_a_disagreeing_spec_is_refused(corpus_dir: Path, make_spec) -> None:
    data = {"source": "text", "path": str(corpus_dir), "val_fraction": 0.1,
            "tokenizer": {"train": "bpe", "vocab_size": 400}}
    spec = RunSpec.from_dict({"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32},
                              "tokens": 32 * 8 * 4, "batch_tokens": 32 * 8, "data": data})
    resolved = resolve_data(spec)
    assert resolved.model.vocab_size == 400 and resolved.key != spec.key
    assert resolved.data.fingerprint == prepare(spec.data).fingerprint
    other = bpe(corpus_dir, vocab=420)
    assert resolve_data(spec.model_copy(update={"data": other})).key != resolved.key  # the tokenizer is in the key
    named = make_spec(model={"vocab_size": 512}, data=data)
    with pytest.raises(SpecError, match="model.vocab_size: 512 disagrees with the tokenizer's 400 tokens"):
        resolve_data(named)


def _plan(tmp_path: Path, corpus: Path, **model: object) -> Path:
    plan = {
        "name": "tok",
        "runs_dir": str(tmp_path / "runs"),
        "data": {"source": "text", "path": str(corpus), "val_fraction": 0.1,
                 "tokenizer": {"train": "bpe", "vocab_size": 300}},
        "model": {"aspect_ratio": 16, "head_size": 16, "context": 32, **model},
        "conventions": {"params": "total", "flops": "6N"},
        "train": {"precision": "fp32", "batch_tokens": 128, "eval_interval": 20, "eval_tokens": 1024,
                  "checkpoint_interval": 50, "optimizer": {"lr": 1e-2}},
        "grid": [{"models": [{"n_layer": 1, "d_model": 16, "n_head": 1}, {"n_layer": 1, "d_model": 32, "n_head": 2}],
                  "tokens": [2560]}],
    }
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan))
    return path


def test_a_plan_takes_its_vocabulary_from_the_tokenizer(tmp_path: Path, corpus_dir: Path, sqlite_url: str) -> None:
    from scaling.db import Store, connect
    from scaling.orchestrator.expand import expand, size_run
    from scaling.orchestrator.plan import load_plan
    from scaling.orchestrator.sweep import register

    plan, source = load_plan(_plan(tmp_path, corpus_dir))
    expansion = expand(plan, source)
    assert expansion.plan.model.vocab_size == 300
    with Store(sqlite_url) as store:
        register(store, plan, expansion)
    with connect(sqlite_url) as results:
        stored = results.sweep_info("tok")["plan"]
    assert stored["model"]["vocab_size"] == 300  # recommendations size runs with the tokenizer's vocabulary
    assert size_run(stored, 1e5, 1e6, 6e11)["shape"]["vocab_size"] == 300
    for run in expansion.runs:
        shape = run.spec.shape
        assert shape.vocab_size == 300
        assert run.spec.n_params == Shape(shape.n_layer, shape.d_model, shape.n_head, 300, 32).params_total
        assert run.spec.flops == 6 * run.spec.n_params * run.spec.tokens
    got = run_main("plan", str(_plan(tmp_path, corpus_dir, vocab_size=256)))
    assert got.code == 2 and "Traceback" not in got.err
    assert "model.vocab_size: 256 disagrees with the tokenizer's 300 tokens" in got.err
    with pytest.raises(PlanError, match=r"plan.yaml:\d+: model.vocab_size"):
        expand(*load_plan(_plan(tmp_path, corpus_dir, vocab_size=256)))
    missing = _plan(tmp_path, corpus_dir)
    text = missing.read_text().replace("train: bpe\n    vocab_size: 300", f"path: {tmp_path / 'none.json'}")
    missing.write_text(text)
    got = run_main("plan", str(missing))
    assert got.code == 2 and ": data.tokenizer.path: tokenizer file not found" in got.err and "data: data." not in got.err


def test_scaling_train_on_bpe_tokens_counts_n_and_flops_with_that_vocabulary(
    tmp_path: Path, corpus_dir: Path, sqlite_url: str
) -> None:
    from scaling.db import connect

    spec = {
        "model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32},
        "tokens": 32 * 8 * 30, "batch_tokens": 32 * 8, "eval_tokens": 32 * 16,
        "optimizer": {"lr": 1e-2}, "precision": "fp32",
        "params_convention": "total", "flops_convention": "6N",
        "data": {"source": "text", "path": str(corpus_dir), "val_fraction": 0.1,
                 "tokenizer": {"train": "bpe", "vocab_size": 512}},
        "execution": {"eval_interval": 10, "checkpoint_interval": 15, "threads": 1},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    prepared = run_main("data", "prepare", str(path))
    assert prepared.code == 0 and "vocabulary 512 (uint16)" in prepared.out, prepared.err
    assert run_main("data", "prepare", str(path)).out.startswith("reused:")
    got = run_main("train", str(path), "--db", sqlite_url, "--run-dir", str(tmp_path / "run"))
    assert got.code == 0 and "completed, 30 steps" in got.out, got.err
    (row,) = connect(sqlite_url).runs(sweep="adhoc").to_dict("records")
    n_total = Shape(1, 32, 2, 512, 32).params_total
    assert row["vocab_size"] == 512 and row["N"] == row["N_total"] == n_total
    assert row["C"] == pytest.approx(6 * n_total * spec["tokens"])
    assert row["spec"]["data"]["fingerprint"] == prepare(RunSpec.from_yaml(path).data).fingerprint
    # it learned from the tokens: well below a uniform guess over 512 ids (ln 512 = 6.24)
    assert 0 < row["final_loss"] < 5.8


def test_the_cpu_ladder_plan_is_what_its_readme_says() -> None:
    """examples/cpu-ladder.yaml: >= 4 IsoFLOP budgets over >= 30x compute, every budget with its own
    models, real text through a BPE trained here, its corpus present (preparing it is left to the sweep)."""
    from scaling.orchestrator.plan import load_plan

    plan, _ = load_plan(REPO / "examples" / "cpu-ladder.yaml")
    budgets = sorted(C for block in plan.grid for C in block.compute or ())
    assert len(budgets) >= 4 and budgets[-1] / budgets[0] >= 30
    assert all(len(block.models) >= 4 for block in plan.grid)
    assert plan.data.source == "text" and plan.data.tokenizer is not None and plan.data.tokenizer.train == "bpe"
    assert "vocab_size" not in plan.model.model_fields_set  # taken from the tokenizer
    paths = files.text_files(str(REPO / plan.data.path))
    assert len(paths) == 9 and sum(p.stat().st_size for p in paths) < 4 << 20  # small enough to commit


@pytest.mark.parametrize("args, expected", [
    (("--train-bpe", "300", "--val-fraction", "0.7"), "error: --val-fraction: Input should be less than 0.5 (got 0.7)"),
    (("--train-bpe", "300", "--val-fraction", "nan"), "error: --val-fraction: Input should be a finite number"),
    (("--train-bpe", "100000000"), "error: --train-bpe: Input should be less than or equal to"),
])
def test_a_refused_option_is_named_with_its_value(args: tuple[str, ...], expected: str, corpus_dir: Path) -> None:
    got = run_main("data", "prepare", "--path", str(corpus_dir), *args)
    assert got.code == 2 and got.err.startswith(expected) and len(got.err.strip().splitlines()) == 1, got


@pytest.mark.parametrize("compressed", [True, False])
def test_a_corpus_of_many_files_is_bounded_in_all(compressed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each file is under the per-file bound, together they are over the corpus's: refused, nothing written."""
    monkeypatch.setattr(files, "MAX_DECOMPRESSED_BYTES", 1 << 20)
    monkeypatch.setattr(files, "MAX_CORPUS_BYTES", 2 << 20)
    for i in range(3):
        text = (f"file {i} says hello\n" * 40_000).encode()  # 0.76 MiB each, 2.3 MiB in all
        if compressed:
            (tmp_path / f"c{i}.txt.gz").write_bytes(gzip.compress(text))
        else:
            (tmp_path / f"c{i}.txt").write_bytes(text)
    pattern = str(tmp_path / "c*.txt*")
    with pytest.raises(SpecError, match=r"the corpus holds more than 0\.00195\d* GiB \(reached at .*c2\.txt"):
        prepare(bpe(Path(pattern)))
    with pytest.raises(SpecError, match="the corpus holds more than"):  # byte-level text reads it too
        load_corpus(DataSpec(source="text", path=pattern))
    assert not prep.tokens_root().exists() or not any(prep.tokens_root().iterdir())


def test_a_device_or_folder_is_not_taken_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="is not a regular file"):
        hf.load(tmp_path)
    with pytest.raises(SpecError, match="is not a regular file"):
        hf.load("/dev/zero")
    with pytest.raises(SpecError, match="names no regular file"):
        files.text_files("/dev/zero")
    with pytest.raises(SpecError, match="no files match"):
        files.text_files(str(tmp_path / "absent.txt"))


def test_training_pieces_bound_a_line_and_keep_the_text() -> None:
    """The BPE trainer's cost grows faster than linearly in a word's length: an over-long line is handed
    to it in bounded pieces, cut before whitespace where there is some, and nothing is lost or reordered."""
    bound = hf.MAX_TRAIN_CHARS
    prose = "a short line\n" * 50 + ("word " * (3 * bound)) + "\nend\n"
    for text in ("a" * 1_000_000, "ACGT" * 250_000 + "\n" + "x" * 10, prose):
        parts = list(hf.training_pieces(text))
        assert "".join(parts) == text
        assert max(map(len, parts)) <= bound
    long_prose = [p for p in hf.training_pieces(prose) if p.startswith("word") or p.startswith(" word")]
    assert len(long_prose) > 1 and all(p.endswith("word") for p in long_prose[:-1])  # cut before a space
    assert list(hf.training_pieces("a short line\n" * 50)) == ["a short line\n" * 50]  # short lines: as given


def test_a_megabyte_on_one_line_prepares_in_bounded_work(tmp_path: Path) -> None:
    """1 MB without a newline (minified JSON, base64, DNA): the trained BPE merges it and the tokens
    decode back to the text. Unbounded, the trainer ran for minutes; the subprocess's timeout guards it."""
    from cli_run import run_process

    path = tmp_path / "one-line.txt"
    path.write_text("a" * 1_000_000)
    got = run_process("data", "prepare", "--path", str(path), "--train-bpe", "300", timeout=150,
                      cwd=tmp_path)
    assert got.code == 0 and "Traceback" not in got.err, got.err
    prepared = prepare(bpe(path, vocab=300))
    ids = np.fromfile(prepared.tokens_path, dtype=prepared.dtype)
    assert hf.load(prepared.tokenizer_path).decode(ids.tolist()) == "a" * 1_000_000
    assert prepared.n_tokens < 10_000  # merged into long tokens, not one per byte


def test_a_tokenizer_that_maps_the_corpus_to_nothing_is_named(tmp_path: Path, corpus_dir: Path) -> None:
    """A vocabulary covering none of the text (and no unknown token) drops every character: the
    tokenizer is named as the cause, not the corpus's size; nothing is left in the cache."""
    path = tmp_path / "tokenizer.json"
    path.write_text('{"version": "1.0", "model": {"type": "BPE", "vocab": {"\u00e6": 0, "\u00f8": 1}, "merges": []}}')
    with pytest.raises(SpecError, match="yields no tokens") as exc:
        prepare(DataSpec(source="text", path=str(corpus_dir), tokenizer={"path": str(path)}))
    assert "too small" not in str(exc.value) and str(path) in str(exc.value)
    got = run_main("data", "prepare", "--path", str(corpus_dir), "--tokenizer", str(path))
    assert got.code == 2 and "Traceback" not in got.err and len(got.err.strip().splitlines()) == 1, got.err
    assert "yields no tokens" in got.err and "too small" not in got.err
    assert not prep.tokens_root().exists() or not any(p for p in prep.tokens_root().iterdir())


def test_a_corpus_too_short_to_split_is_named_so(tmp_path: Path) -> None:
    """One character cannot be both training and validation text: said so, not blamed on the tokenizer."""
    path = tmp_path / "one.txt"
    path.write_text("a")
    got = run_main("data", "prepare", "--path", str(path), "--train-bpe", "300")
    assert got.code == 2 and len(got.err.strip().splitlines()) == 1, got.err
    assert "1 character(s), too few to split" in got.err and "yields no tokens" not in got.err
    assert not prep.tokens_root().exists() or not any(prep.tokens_root().iterdir())
