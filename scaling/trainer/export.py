"""A run's checkpoint as a Hugging Face ``transformers`` model folder, for downstream evaluation.

Each family's module (``scaling.trainer.families.<name>``, its ``to_hf``) states its target:
a ``gpt2`` run is a ``GPT2LMHeadModel``, a ``llama`` run a ``LlamaForCausalLM`` (``Qwen3ForCausalLM``
with ``qk_norm``), an ``moe`` run a ``MixtralForCausalLM`` (``Qwen3MoeForCausalLM`` with ``qk_norm``
or dense first layers); a shape the target cannot express is refused in one line. Each folder
holds ``config.json`` and ``model.safetensors`` and, where the run has a tokenizer, that tokenizer
(``tokenizer.json`` and its config): lm-evaluation-harness or any tool that loads a folder with
``from_pretrained`` evaluates it. Before anything is written the exported model's
logits are compared with ours on the same tokens, so a ``transformers`` that computed the model
differently (or a model ours computes otherwise, e.g. a parametrization that scales its output)
is refused, not exported.

``transformers`` is an optional extra (``pip install 'scaling[hf]'``), imported here only when an
export runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional

from scaling.accounting import Shape, family_fields
from scaling.errors import NotFoundError, UserError, mask_url

if TYPE_CHECKING:
    import torch

    from scaling.trainer.families.model import Decoder

#: What `pip` installs for an export.
HF_EXTRA = "pip install 'scaling[hf]' (transformers and safetensors)"
#: Tokens of the sequence the exported model's logits are checked on (at most the context).
CHECK_TOKENS = 64
#: Largest difference allowed between our logits and the export's, relative to the largest logit
#: (fp32; room for another order of the same float operations: on a CPU they measured equal).
CHECK_RTOL = 1e-4


@dataclass(frozen=True)
class Exported:
    """What :func:`export_hf` wrote."""

    run_key: str
    sweep: str
    step: int
    folder: Path
    files: tuple[str, ...]
    #: The ``transformers`` class written (``GPT2LMHeadModel``, ``LlamaForCausalLM``, ...).
    architecture: str
    #: What tokenizer was written (or why none was).
    tokenizer: str
    #: The largest absolute difference between our logits and the exported model's on the check.
    max_logit_diff: float
    #: Why the checkpoint exported may not be the run's last (it is still training), else None.
    note: Optional[str] = None


def require_transformers() -> Any:
    """The ``transformers`` module; one line naming the extra when it (or safetensors) is missing."""
    try:
        import safetensors  # noqa: F401 - save_pretrained writes model.safetensors with it
        import transformers
    except ImportError as exc:
        raise UserError(f"scaling export --hf needs the 'hf' extra, which is not installed ({exc.name} is "
                        f"missing): {HF_EXTRA}") from None
    return transformers


# -- which run, which folder, which checkpoint ----------------------------------------------------


def find_run(url: str, run: str, sweep: Optional[str] = None) -> dict[str, Any]:
    """The run whose key is ``run`` or starts with it (in ``sweep`` when given), as ``Results.run``."""
    from scaling.db import connect

    if not run:
        raise UserError("RUN must be a run key or a unique prefix of one")
    with connect(url) as results:
        if sweep is not None:
            results.sweep_name(sweep)  # NotFoundError for an unknown sweep
        runs = results.runs(sweep, spec=False)
        hits = runs[runs["run_key"].astype(str).str.startswith(run)]  # astype: an empty table has no str column
        where = f"sweep {sweep!r}" if sweep is not None else mask_url(results.url)
        if hits.empty:
            raise NotFoundError(f"no run {run!r} in {where} (`scaling status --sweep NAME` lists a sweep's runs)")
        if hits["run_key"].nunique() > 1:
            keys = ", ".join(sorted(hits["run_key"].unique())[:4])
            raise UserError(f"run {run!r} is ambiguous in {where}: it starts {keys}...; give more of the key")
        if len(hits) > 1:
            sweeps = ", ".join(sorted(hits["sweep"]))
            raise UserError(f"run {run!r} is in several sweeps ({sweeps}): pass --sweep")
        key, in_sweep = hits.iloc[0]["run_key"], hits.iloc[0]["sweep"]
        row = results.run(key, sweep=in_sweep)
        plan = results.sweep_info(in_sweep).get("plan")
    assert row is not None
    row["runs_dir"] = plan.get("runs_dir") if isinstance(plan, dict) else None
    return row


def run_folder(row: dict[str, Any], run_dir: Optional[str | Path] = None) -> Path:
    """The run's folder: ``run_dir`` when given, else ``<runs_dir>/<sweep>/<key>`` with the sweep's
    plan's ``runs_dir`` (``scaling train``'s default for a run trained alone)."""
    from scaling.trainer.adhoc import DEFAULT_RUNS_DIR

    if run_dir is not None:
        folder = Path(run_dir).expanduser()
        if not folder.is_dir():
            raise UserError(f"--run-dir {folder} is not a folder")
        return folder
    folder = Path(row.get("runs_dir") or DEFAULT_RUNS_DIR) / row["sweep"] / row["run_key"]
    if not folder.is_dir():
        raise NotFoundError(f"run {row['run_key']} has no run folder at {folder} (where its sweep keeps runs, seen from "
                            "this directory): pass --run-dir")
    return folder


def newest_checkpoint(folder: Path, key: str, snapshot: Path) -> tuple[Path, int]:
    """The newest checkpoint in ``folder`` that verifies and belongs to run ``key``, linked (or copied)
    into the empty folder ``snapshot``, and its step.

    A run still training writes a checkpoint under a temporary name and renames it into place, and
    deletes older ones after a new one: a folder listed here may vanish while it is read. So each
    candidate's files are first linked into ``snapshot`` (a link keeps a file its checkpoint folder
    loses) and only the snapshot is verified and loaded; a candidate that vanishes gives way to the
    next newest.
    """
    import torch

    from scaling.trainer.checkpoints import checkpoint

    found = checkpoint.checkpoints(folder)
    if not found:
        raise NotFoundError(f"run {key} has no checkpoint in {folder} (a simulated run, or one that never "
                            "reached its first checkpoint)")
    problems = []
    for path in reversed(found):
        copy = snapshot / path.name
        shutil.rmtree(copy, ignore_errors=True)
        try:
            _link_files(path, copy)
        except OSError as exc:  # removed (pruned by the trainer) or unreadable while listed
            problems.append(f"{path.name}: {exc.strerror or exc}")
            continue
        problem = checkpoint.verify(copy)
        if problem is None:
            try:
                state = torch.load(copy / checkpoint.STATE_FILE, map_location="cpu", weights_only=True)
            except Exception:  # noqa: BLE001 - torch raises many types for a file that is not ours
                state = None
            meta = state.get("meta") if isinstance(state, dict) else None
            if not isinstance(meta, dict) or not isinstance(meta.get("step"), int):
                problem = f"{checkpoint.STATE_FILE} holds no trainer state it can read"
            elif meta.get("key") != key:
                raise UserError(f"{folder} holds checkpoints of run {meta.get('key')}, not {key}: wrong --run-dir?")
            else:
                return copy, meta["step"]
        problems.append(f"{path.name}: {problem}")
    raise UserError(f"run {key}: no intact checkpoint in {folder} ({'; '.join(problems[:3])})")


def _snapshot_folder(folder: Path, key: str) -> Path:
    """A new, empty, hidden folder for :func:`newest_checkpoint`'s snapshot: beside the checkpoints (same
    file system, so files are linked, not copied), else in the system's temporary folder."""
    from scaling.trainer.checkpoints.lineage import checkpoint_root

    try:
        return Path(tempfile.mkdtemp(prefix=f".export-{key[:8]}-", dir=checkpoint_root(folder)))
    except OSError:  # a run folder this user may read but not write
        return Path(tempfile.mkdtemp(prefix=f"scaling-export-{key[:8]}-"))


def _link_files(src: Path, dst: Path) -> None:
    """Every file of the checkpoint folder ``src`` hard-linked into the new folder ``dst`` (copied where
    links are not possible: another file system)."""
    dst.mkdir()
    for p in src.iterdir():
        if p.is_file():
            try:
                os.link(p, dst / p.name)
            except OSError:
                shutil.copy2(p, dst / p.name)  # raises in turn when the file is gone


def check_output(out: Path) -> None:
    """Refuse an output that is a file, a link or a folder with something in it (nothing is overwritten;
    the finished folder is renamed into place, which a link would not survive)."""
    if out.is_symlink():
        raise UserError(f"--hf {out} is a symbolic link: give a new or empty folder (the link's target, say)")
    if out.exists() and not out.is_dir():
        raise UserError(f"--hf {out} is a file, not a folder")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"--hf {out} exists and is not empty: give a new or empty folder")


# -- the models -----------------------------------------------------------------------------------


def load_ours(path: Path, shape: Shape) -> "Decoder":
    """Our model of ``shape`` with the weights of the checkpoint at ``path``, on the CPU, in eval mode."""
    import torch

    from scaling.trainer.checkpoints import checkpoint
    from scaling.trainer.families.model import build_meta_model, materialize

    model = build_meta_model(shape)
    materialize(model, torch.device("cpu"))  # every weight comes from the checkpoint: no init
    try:
        checkpoint.load_weights(path, model)
    except checkpoint.CorruptCheckpoint as exc:
        raise UserError(f"{path}: {exc}") from None
    return model.eval()


def to_hf(model: "Decoder") -> Any:
    """The ``transformers`` model of ``model``'s family with its weights (the family module's ``to_hf``)."""
    from scaling.trainer.families.common import family_module

    return family_module(model.cfg.family).to_hf(model)


def run_shape(row: Mapping[str, Any]) -> Shape:
    """The run's shape: its stored columns and the family fields of its spec's model section."""
    model_fields = (row.get("spec") or {}).get("model")
    try:
        return Shape(int(row["n_layer"]), int(row["d_model"]), int(row["n_head"]), int(row["vocab_size"]),
                     int(row["context"]), **family_fields(model_fields))  # type: ignore[arg-type]
    except (TypeError, ValueError) as exc:
        raise UserError(f"run {row['run_key']}: its stored model section is not a shape this version builds ({exc})") from None


def logit_difference(ours: "Decoder", hf: Any, seed: int = 0) -> tuple[float, float]:
    """(largest |difference|, largest |logit|) of the two models' logits on the same random tokens."""
    import torch

    shape = ours.cfg
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, shape.vocab_size, (2, min(shape.context, CHECK_TOKENS)), generator=g)
    with torch.no_grad():
        a = ours(idx).float()
        b = hf(input_ids=idx).logits.float()
    return float((a - b).abs().max()), float(a.abs().max())


def byte_tokenizer() -> Any:
    """A ``tokenizers.Tokenizer`` whose ids are the UTF-8 bytes of the text: byte-level data's.

    GPT-2's byte-level pre-tokenizer maps each byte to one printable character
    (:func:`byte_characters`); a BPE without merges whose vocabulary gives that character the
    byte's value then encodes every text to its bytes, and decodes them back."""
    import tokenizers as tk  # a dependency of scaling (transformers' fast tokenizers rest on it too)

    vocab = {char: byte for byte, char in byte_characters().items()}
    tok = tk.Tokenizer(tk.models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = tk.decoders.ByteLevel()
    return tok


def byte_characters() -> dict[int, str]:
    """GPT-2's byte -> character table (``bytes_to_unicode`` of its ``encoder.py``): printable
    bytes stand for themselves, the others for the characters from U+0100 on, in order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + len(table) - len(printable))
    return table


def hf_tokenizer(row: dict[str, Any]) -> tuple[Any, str]:
    """The run's tokenizer as a ``tokenizers.Tokenizer`` (None for pre-tokenized data) and what it is.

    A Hugging Face tokenizer comes from the prepared token cache (prepared again when absent); one
    whose data no longer gives the run's fingerprint is refused rather than exported beside the
    wrong model. Byte-level data gets :func:`byte_tokenizer`."""
    from scaling.trainer.data import tokenizer as hf
    from scaling.trainer.data.prepare import prepare
    from scaling.trainer.sections import DataSpec

    data_fields = (row.get("spec") or {}).get("data")
    data = DataSpec.model_validate(data_fields if isinstance(data_fields, dict) else {})
    if data.source == "tokens":
        return None, "no tokenizer (the run's data was tokenized before it)"
    if data.tokenizer is None:
        return byte_tokenizer(), "a byte tokenizer (the run's data is byte-level: token id = byte)"
    prepared = prepare(data, progress=False)
    if data.fingerprint is not None and prepared.fingerprint != data.fingerprint:
        raise UserError(f"run {row['run_key']}: its data ({data.path}) no longer gives the tokens it trained on "
                        "(fingerprint differs), so its tokenizer cannot be recovered")
    return hf.load(prepared.tokenizer_path, where="the run's prepared tokenizer"), "the run's tokenizer"


# -- the export ----------------------------------------------------------------------------------


def export_hf(url: str, run: str, out: str | Path, *, sweep: Optional[str] = None,
              run_dir: Optional[str | Path] = None) -> Exported:
    """Write run ``run``'s newest intact checkpoint to the folder ``out`` as a ``transformers`` model of
    its family (:func:`to_hf`).

    Everything is checked first (the extra installed, ``out`` new or empty, the run, its folder,
    checkpoint and tokenizer, the logits of the converted model); the folder is written under a
    temporary name beside ``out`` and renamed into place, so a refusal or a failure leaves nothing.
    """
    transformers = require_transformers()
    out = Path(out).expanduser()
    check_output(out)
    row = find_run(url, run, sweep)
    key = row["run_key"]
    folder = run_folder(row, run_dir)
    shape = run_shape(row)
    model_fields = (row.get("spec") or {}).get("model")
    if isinstance(model_fields, dict) and model_fields.get("parametrization", "standard") != "standard":
        raise UserError(f"run {key} is a μP model: its output multiplier and 1/head_dim attention have no "
                        "place in a Hugging Face folder")
    snapshot = _snapshot_folder(folder, key)
    try:
        path, step = newest_checkpoint(folder, key, snapshot)
        tok, tokenizer = hf_tokenizer(row)
        ours = load_ours(path, shape)
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)
    model = to_hf(ours)
    architecture = type(model).__name__
    diff, scale = logit_difference(ours, model)
    del ours
    if not diff <= CHECK_RTOL * max(1.0, scale):
        raise UserError(f"transformers {transformers.__version__}'s {architecture} gives logits up to {diff:.3g} away "
                        f"from ours (largest logit {scale:.3g}): not exported")

    from scaling.trainer.checkpoints.rundir import checked_folder

    tmp = out.parent / f".{out.name}.export-{os.getpid()}"
    with checked_folder(tmp, "--hf folder") as staging:
        try:
            model.save_pretrained(staging)
            if tok is not None:
                fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, model_max_length=shape.context)
                fast.save_pretrained(staging)
            files = tuple(sorted(p.name for p in staging.iterdir()))
            if out.is_dir():
                out.rmdir()  # empty (checked above): the staged folder takes its place
            os.replace(staging, out)
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise UserError(f"--hf {out}: cannot write there: {exc.strerror or exc}") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    note = None
    if row.get("status") == "running":
        note = (f"run {key} is still training: exported its newest complete checkpoint (step {step}); "
                "export again when it finishes for the final weights")
    return Exported(run_key=key, sweep=row["sweep"], step=step, folder=out, files=files, architecture=architecture,
                    tokenizer=tokenizer, max_logit_diff=diff, note=note)
