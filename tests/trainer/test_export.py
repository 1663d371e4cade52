"""`scaling export RUN --hf DIR`: a trained run as a transformers GPT2LMHeadModel (a llama run as a
LlamaForCausalLM) whose logits are ours.

Tiny runs are really trained (`scaling train`: a GPT-2 on BPE-tokenized text, a grouped-query
Llama on bytes), exported through the CLI and loaded back with `transformers`' own
`from_pretrained`; our side loads the checkpoint through the trainer's resume path. Bad inputs are
one line, exit 2, and leave nothing behind.
"""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
import torch
import yaml

from cli_run import run_main
from scaling.accounting import Shape

transformers = pytest.importorskip("transformers", reason="the 'hf' extra is not installed")

REPO = Path(__file__).resolve().parents[2]
TEXT = "The old man looked at the river; it was late, and the lamps were already lit along the bank."


def _train(root: Path, spec: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """``spec`` trained by `scaling train` in its default folder under ``root``, with its run's row."""
    from scaling.db import connect

    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    url = f"sqlite:///{root / 'results.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # the run's folder is scaling train's default, ./scaling_runs/adhoc/<key>
        mp.setenv("SCALING_PEAK_FLOPS", "1e11")
        mp.setenv("SCALING_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))  # the trainer tests' cache
        torch.set_num_threads(1)
        got = run_main("train", "spec.yaml", "--db", url)
        assert got.code == 0 and "completed, 12 steps" in got.out, got
        (row,) = connect(url).runs(sweep="adhoc").to_dict("records")
        yield {"root": root, "url": url, "key": row["run_key"], "row": row}


def _novel(root: Path, chars: int = 40_000) -> Path:
    with lzma.open(REPO / "examples" / "corpus" / "crime-and-punishment.txt.xz", "rt", encoding="utf-8") as fh:
        (root / "novel.txt").write_text(fh.read(chars), encoding="utf-8")
    return root / "novel.txt"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 2-layer, 2-head run on BPE-tokenized prose trained by `scaling train` in its default folder."""
    root = tmp_path_factory.mktemp("export")
    spec = {
        "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "context": 32},
        "data": {"source": "text", "path": str(_novel(root)), "tokenizer": {"train": "bpe", "vocab_size": 300}},
        "tokens": 32 * 8 * 12, "batch_tokens": 32 * 8, "eval_tokens": 32 * 8,
        "optimizer": {"lr": 3e-3},
        "execution": {"eval_interval": 6, "checkpoint_interval": 6, "threads": 1},
    }
    yield from _train(root, spec, tmp_path_factory)


@pytest.fixture(scope="module")
def trained_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """A 2-layer Llama with 4 query heads sharing 2 key/value heads and an untied output layer, on bytes."""
    root = tmp_path_factory.mktemp("export-llama")
    spec = {
        "model": {"family": "llama", "n_layer": 2, "d_model": 32, "n_head": 4, "n_kv_head": 2, "ffn": 64,
                  "context": 32, "rope_theta": 500.0},
        "data": {"source": "text", "path": str(_novel(root, 20_000))},
        "tokens": 32 * 8 * 12, "batch_tokens": 32 * 8, "eval_tokens": 32 * 8,
        "optimizer": {"lr": 1e-2},
        "execution": {"eval_interval": 6, "checkpoint_interval": 6, "threads": 1},
        "evals": {"next_line": False},
    }
    yield from _train(root, spec, tmp_path_factory)


def _ours(trained: dict[str, Any]) -> tuple[torch.nn.Module, Shape]:
    """The run's model as a resume would load it (model, optimizer, scaler, RNG from the last checkpoint)."""
    from scaling.trainer.checkpoints import checkpoint
    from scaling.trainer.families.model import build_model
    from scaling.trainer.runtime import Runtime

    from scaling.trainer.export import run_shape

    shape = run_shape(trained["row"])
    model = build_model(shape, 0)
    opt = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    path = checkpoint.latest(trained["root"] / "scaling_runs" / "adhoc" / trained["key"])
    meta = checkpoint.load(path, model=model, optimizer=opt, scaler=scaler, rt=Runtime.current("cpu"))
    assert meta["step"] == 12
    return model.eval(), shape


def test_the_export_loads_in_transformers_with_our_logits_and_tokenizer(trained: dict[str, Any]) -> None:
    out = trained["root"] / "hf"
    got = run_main("export", trained["key"][:8], "--hf", str(out), "--db", trained["url"])
    assert got.code == 0, got
    assert f"run {trained['key']} (sweep adhoc), step 12" in got.out and "with the run's tokenizer" in got.out
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    assert not [p for p in out.parent.iterdir() if p.name.startswith(".hf.export")]  # no staging left

    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel" and hf.dtype == torch.float32
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()  # tied, as ours
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ours, shape = _ours(trained)
    from scaling.trainer.data import tokenizer as ours_tok
    from scaling.trainer.data.prepare import prepare
    from scaling.trainer.sections import DataSpec

    bpe = ours_tok.load(prepare(DataSpec.model_validate(trained["row"]["spec"]["data"])).tokenizer_path)
    ids = tok(TEXT)["input_ids"]
    assert ids == bpe.encode(TEXT).ids and tok.decode(ids) == TEXT  # the run's own tokenizer
    idx = torch.tensor([ids[: shape.context], list(range(shape.context))])
    with torch.no_grad():
        theirs, mine = hf(input_ids=idx).logits, ours(idx)
    assert theirs.shape == mine.shape == (2, shape.context, shape.vocab_size)
    torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=0)
    # the trained weights, not the init: prose is likelier under them
    from scaling.trainer.families.model import build_model

    with torch.no_grad():
        init = build_model(shape, trained["row"]["seed"])(idx[:1])
    loss = torch.nn.functional.cross_entropy(theirs[0, :-1], idx[0, 1:])
    assert loss < torch.nn.functional.cross_entropy(init[0, :-1], idx[0, 1:]) - 0.2


def test_the_mapping_keeps_heads_apart() -> None:
    """An untrained 4-head model (heads interleaved in our QKV, grouped in GPT-2's) maps exactly."""
    from scaling.trainer.export import logit_difference, to_hf
    from scaling.trainer.families.model import build_model

    ours = build_model(Shape(2, 32, 4, 97, 16), 3).eval()
    diff, scale = logit_difference(ours, to_hf(ours))
    assert scale > 0.1 and diff < 1e-5


def test_the_llama_export_loads_in_transformers_with_our_logits(trained_llama: dict[str, Any]) -> None:
    out = trained_llama["root"] / "hf"
    got = run_main("export", trained_llama["key"][:8], "--hf", str(out), "--db", trained_llama["url"])
    assert got.code == 0, got
    assert f"run {trained_llama['key']} (sweep adhoc), step 12 -> {out}: LlamaForCausalLM with a byte tokenizer" in got.out
    hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    config = hf.config
    assert type(hf).__name__ == "LlamaForCausalLM" and hf.dtype == torch.float32
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (4, 2, 8)  # GQA kept
    assert (config.intermediate_size, config.rope_parameters["rope_theta"], config.rms_norm_eps) == (64, 500.0, 1e-5)
    assert not config.tie_word_embeddings and not config.attention_bias and not config.mlp_bias
    assert hf.lm_head.weight.data_ptr() != hf.model.embed_tokens.weight.data_ptr()  # untied, as ours
    tok = transformers.AutoTokenizer.from_pretrained(out)
    ids = tok(TEXT)["input_ids"]
    assert ids == list(TEXT.encode()) and tok.decode(ids) == TEXT
    ours, shape = _ours(trained_llama)
    assert shape.family == "llama" and shape.kv_heads == 2
    idx = torch.tensor([ids[: shape.context], ids[-shape.context:]])
    with torch.no_grad():
        theirs, mine = hf(input_ids=idx).logits, ours(idx)
    assert theirs.shape == mine.shape == (2, shape.context, 256)
    torch.testing.assert_close(theirs, mine, atol=1e-5, rtol=0)
    # the trained weights, not the init: prose is likelier under them
    from scaling.trainer.families.model import build_model

    with torch.no_grad():
        init = build_model(shape, trained_llama["row"]["seed"])(idx[:1])
    loss = torch.nn.functional.cross_entropy(theirs[0, :-1], idx[0, 1:])
    assert loss < torch.nn.functional.cross_entropy(init[0, :-1], idx[0, 1:]) - 0.2


@pytest.mark.parametrize("fields, architecture", [
    ({"n_kv_head": 1, "tie_embeddings": True}, "LlamaForCausalLM"),  # multi-query, tied
    ({"n_kv_head": 2, "qk_norm": True, "norm_eps": 1e-6}, "Qwen3ForCausalLM"),  # Llama has no qk-norm
])
def test_llama_variants_round_trip_through_from_pretrained(fields: dict[str, Any], architecture: str,
                                                           tmp_path: Path) -> None:
    """Untrained llama shapes with random norm weights (ones would hide a norm mapped to the wrong
    place), saved and loaded back by `transformers`, give our logits."""
    from scaling.trainer.export import logit_difference, to_hf
    from scaling.trainer.families.model import build_model

    shape = Shape(2, 32, 4, 97, 16, family="llama", **fields)
    ours = build_model(shape, 3).eval()
    with torch.no_grad():
        for name, p in ours.named_parameters():
            if name.endswith("norm.weight") or ".ln_" in name or name.startswith("ln_f"):
                p.uniform_(0.5, 1.5)
    to_hf(ours).save_pretrained(tmp_path)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    assert type(hf).__name__ == architecture and hf.config.num_key_value_heads == fields["n_kv_head"]
    tied = hf.lm_head.weight.data_ptr() == hf.model.embed_tokens.weight.data_ptr()
    assert tied == shape.tied
    diff, scale = logit_difference(ours, hf)
    assert scale > 0.1 and diff < 1e-5


def test_a_model_transformers_computes_otherwise_is_refused(trained_llama: dict[str, Any], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The logits check is what stands between a wrong conversion and a folder: a conversion that
    rotates interleaved pairs (Meta's layout, which ours is not) is refused, nothing written."""
    from scaling.trainer.families import llama

    real = llama.llama_state_dict

    def interleaved(ours: Any, shape: Shape) -> dict[str, torch.Tensor]:  # the permutation ours must not get
        out = real(ours, shape)
        hd = shape.head_dim
        for name in [n for n in out if n.endswith(("q_proj.weight", "k_proj.weight"))]:
            w = out[name]
            out[name] = w.view(-1, hd // 2, 2, w.size(1)).transpose(1, 2).reshape(w.shape)
        return out

    monkeypatch.setattr(llama, "llama_state_dict", interleaved)
    out = tmp_path / "hf"
    got = run_main("export", trained_llama["key"], "--hf", str(out), "--db", trained_llama["url"])
    _refused(got, "LlamaForCausalLM gives logits up to")
    assert "not exported" in got.err and not out.exists() and list(tmp_path.iterdir()) == []


def test_byte_level_runs_get_a_tokenizer_whose_ids_are_the_bytes() -> None:
    from scaling.trainer.export import byte_tokenizer

    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=byte_tokenizer())
    text = "naïve café — 日本語 🙂\n\tdef f(x):  return x\x00\x7f"
    ids = tok(text)["input_ids"]
    assert ids == list(text.encode("utf-8")) and tok.decode(ids) == text and len(tok) == 256


def _refused(got: Any, message: str) -> None:
    assert got.code == 2 and got.out == "" and "Traceback" not in got.err, got
    assert got.err.strip().count("\n") == 0 and message in got.err, got.err


def test_bad_inputs_are_one_line_and_write_nothing(trained: dict[str, Any], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from scaling.db import Store
    from scaling.trainer.spec import RunSpec

    url, key, out = trained["url"], trained["key"], tmp_path / "out"
    _refused(run_main("export", "f" * 64, "--hf", str(out), "--db", url), "no run 'ffff")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("x")
    _refused(run_main("export", key, "--hf", str(tmp_path / "full"), "--db", url), "exists and is not empty")
    assert [p.name for p in (tmp_path / "full").iterdir()] == ["keep.txt"]
    # a registered run that never trained: no folder, then an empty one
    spec = RunSpec.from_dict({"model": {"n_layer": 1, "d_model": 32, "n_head": 2, "context": 32}, "tokens": 4096,
                              "batch_tokens": 256})
    with Store(url) as store:
        store.register("untrained", [spec.record()])
    _refused(run_main("export", spec.key, "--hf", str(out), "--db", url), "has no run folder")
    with Store(url) as store:  # the same run in a sweep whose plan names its runs_dir
        store.register("planned", [spec.record()], plan={"runs_dir": str(tmp_path / "runs")})
    _refused(run_main("export", spec.key, "--hf", str(out), "--db", url), "is in several sweeps (planned, untrained)")
    (tmp_path / "runs" / "planned" / spec.key).mkdir(parents=True)
    _refused(run_main("export", spec.key, "--hf", str(out), "--db", url, "--sweep", "planned"),
             f"has no checkpoint in {tmp_path / 'runs' / 'planned' / spec.key}")
    # the trained run's folder given for another run
    folder = str(trained["root"] / "scaling_runs" / "adhoc" / key)
    _refused(run_main("export", spec.key, "--hf", str(out), "--db", url, "--sweep", "planned", "--run-dir", folder),
             f"holds checkpoints of run {key}")
    monkeypatch.setitem(sys.modules, "transformers", None)  # as if the extra were not installed
    _refused(run_main("export", key, "--hf", str(out), "--db", url), "needs the 'hf' extra")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["full", "runs"]


def test_a_run_still_training_is_exported_from_a_snapshot_of_its_newest_checkpoint(
        trained: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trainer deletes a checkpoint folder (a newer one written, the older pruned) while an export
    reads it. That timing cannot be caused on demand, so the deletion is made at the moment it hurts:
    right after the newest checkpoint verifies (a fault injected into the real verify, and said so)."""
    import shutil
    import sqlite3

    from scaling.trainer.checkpoints import checkpoint

    root = tmp_path / "live"
    shutil.copytree(trained["root"] / "scaling_runs", root / "scaling_runs")
    shutil.copy(trained["root"] / "results.db", root / "results.db")
    with sqlite3.connect(root / "results.db") as db:
        db.execute("UPDATE runs SET status = 'running' WHERE key = ?", (trained["key"],))
    folder = root / "scaling_runs" / "adhoc" / trained["key"]
    newest = checkpoint.latest(folder)
    real_verify = checkpoint.verify

    def verify_then_pruned(path: Path) -> str | None:
        problem = real_verify(path)
        shutil.rmtree(newest, ignore_errors=True)  # what the trainer's pruning does to a listed checkpoint
        return problem

    monkeypatch.setattr(checkpoint, "verify", verify_then_pruned)
    monkeypatch.chdir(root)
    got = run_main("export", trained["key"], "--hf", str(tmp_path / "hf"), "--db", f"sqlite:///{root / 'results.db'}")
    assert got.code == 0, got
    assert f"step 12 -> {tmp_path / 'hf'}" in got.out and "Traceback" not in got.err
    assert f"run {trained['key']} is still training: exported its newest complete checkpoint (step 12)" in got.err
    assert not newest.exists() and not any(p.name.startswith(".export") for p in newest.parent.iterdir())


def test_importing_scaling_does_not_import_transformers() -> None:
    code = ("import sys, scaling, scaling.cli, scaling.trainer.export, scaling.cli.export_cmds; "
            "assert 'transformers' not in sys.modules")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)
