"""`scaling data prepare`: tokenize a text corpus once into the cache every run memory-maps, or
write a corpus as token shards (`scaling.trainer.data.reshard`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from pydantic import ValidationError

from scaling.cli.common import FormatOption, check_format, command_group

if TYPE_CHECKING:
    from scaling.trainer.data.shards import ShardFormat
    from scaling.trainer.sections import DataSpec

#: ``--shard-format`` values (`scaling.trainer.data.shards.ShardFormat`).
SHARD_FORMATS = ("npy", "bin", "llmc")

data_app = command_group(
    "data", "Prepare training data (tokenize text once; every run and sweep reuses it; write token shards).")


def _data_of(file: Path) -> "DataSpec":
    """The data section of a plan (a mapping with a grid) or of a run spec."""
    from scaling import safe_yaml
    from scaling.errors import SpecError
    from scaling.orchestrator.plan import load_plan
    from scaling.trainer.spec import RunRequest

    parsed, _ = safe_yaml.parse(safe_yaml.read_text(file, SpecError, "plan"), str(file), SpecError)
    if isinstance(parsed, dict) and "grid" in parsed:
        return load_plan(file)[0].data
    return RunRequest.from_yaml(file).data  # a spec file may leave precision and layout to the resolver


def _option_error(exc: "ValidationError") -> str:
    """One line naming the option whose value the data section built from the options refused."""
    from scaling.errors import FieldProblem

    problem = FieldProblem(exc)
    loc = [str(p) for p in problem.loc]
    if "vocab_size" in loc:
        option = "--train-bpe"
    elif loc[:1] == ["tokenizer"]:
        option = "--tokenizer"
    else:
        option = {"path": "--path", "val_fraction": "--val-fraction"}.get(loc[0] if loc else "", ".".join(loc))
    return f"{option}: {problem.message} (got {problem.value!r})"


@data_app.command("prepare")
def prepare(
    file: Annotated[
        Optional[Path],
        typer.Argument(help="A plan or run spec whose `data` section names text and a tokenizer "
                       "(any data, with --shard-tokens).", show_default=False),
    ] = None,
    path: Annotated[
        Optional[str], typer.Option("--path", help="Text file, folder or glob (instead of a plan).", show_default=False)
    ] = None,
    tokenizer: Annotated[
        Optional[str], typer.Option("--tokenizer", help="A Hugging Face tokenizer.json.", show_default=False)
    ] = None,
    train_bpe: Annotated[
        Optional[int],
        typer.Option("--train-bpe", metavar="VOCAB", min=257,
                     help="Train a byte-level BPE of this vocabulary on the training split.", show_default=False),
    ] = None,
    val_fraction: Annotated[
        float, typer.Option("--val-fraction", help="Share of the text held out (with --path).")
    ] = 0.05,
    shard_tokens: Annotated[
        Optional[int],
        typer.Option("--shard-tokens", metavar="N", min=1,
                     help="Also write the tokens as shards of at most N tokens into --out.", show_default=False),
    ] = None,
    shard_format: Annotated[
        str, typer.Option("--shard-format", help="The shards' format: npy, bin (raw) or llmc (llm.c's header).")
    ] = "npy",
    out: Annotated[
        Optional[Path], typer.Option("--out", help="A new folder for the shards (with --shard-tokens).",
                                     show_default=False)
    ] = None,
    format: FormatOption = "table",
) -> None:
    """Tokenize a corpus once (with a progress bar) into the token cache every run reuses, and
    optionally write it out as token shards (train_*.EXT, val_*.EXT) a plan can name.

    Examples: scaling data prepare examples/cpu-ladder.yaml;
    scaling data prepare --path corpus/ --train-bpe 8192;
    scaling data prepare --path corpus/ --train-bpe 8192 --shard-tokens 100000000 --out shards/
    """
    from scaling.errors import UserError
    from scaling.trainer.sections import DataSpec

    check_format(format)
    sharding = shard_tokens is not None
    if sharding != (out is not None):
        raise UserError("give --shard-tokens N and --out DIR together")
    if shard_format not in SHARD_FORMATS:
        raise UserError(f"--shard-format must be one of {', '.join(SHARD_FORMATS)}, not {shard_format!r}")
    by_option = path is not None or tokenizer is not None or train_bpe is not None
    if file is not None and by_option:
        raise UserError("give a plan (or spec) file, or --path with --tokenizer/--train-bpe, not both")
    if file is not None:
        data = _data_of(file)
        if data.tokenizer is None and not sharding:
            raise UserError(
                f"{file}: data has no tokenizer; byte-level text and token files are read as they are, "
                f"nothing to prepare (--shard-tokens writes them as shards)"
            )
    else:
        if path is None or (tokenizer is not None and train_bpe is not None) or (
                not sharding and tokenizer is None and train_bpe is None):
            raise UserError("give --path and one of --tokenizer FILE or --train-bpe VOCAB (or a plan file)")
        tok = ({"path": tokenizer} if tokenizer is not None else
               {"train": "bpe", "vocab_size": train_bpe} if train_bpe is not None else None)
        try:
            data = DataSpec(source="text", path=path, tokenizer=tok, val_fraction=val_fraction)  # type: ignore[arg-type]
        except ValidationError as exc:
            raise UserError(_option_error(exc)) from None
    if sharding:
        assert shard_tokens is not None and out is not None
        _write_shards(data, out, shard_tokens, shard_format, format)  # type: ignore[arg-type]
        return
    _prepare(data, format)


def _write_shards(data: "DataSpec", out: Path, shard_tokens: int, kind: "ShardFormat", format: str) -> None:
    """Load (or prepare) ``data`` and write it as shards into ``out``; print what was written."""
    import sys

    from scaling.trainer.data.corpus import load_corpus
    from scaling.trainer.data.reshard import write_shards

    corpus = load_corpus(data)
    written = write_shards(corpus, out, shard_tokens, kind, show=format != "json" and sys.stderr.isatty())
    facts = {
        "folder": str(written.folder), "format": written.kind, "dtype": written.dtype,
        "train_shards": len(written.train_files), "val_shards": len(written.val_files),
        "train_tokens": written.train_tokens, "val_tokens": written.val_tokens,
        "vocab_size": corpus.vocab_size, "data": written.data_section(),
    }
    if format == "json":
        typer.echo(json.dumps(facts, indent=2))
        return
    section = written.data_section()
    vocab = f", vocabulary {corpus.vocab_size:,} (set model.vocab_size)" if corpus.vocab_size else ""
    typer.echo(
        f"wrote {len(written.train_files)} training and {len(written.val_files)} held-out {written.kind} shard(s) "
        f"({written.train_tokens:,} + {written.val_tokens:,} {written.dtype} tokens{vocab}) to {written.folder}\n"
        f"data: {{source: tokens, path: '{section['path']}', val_path: '{section['val_path']}', "
        f"dtype: {written.dtype}}}"
    )


def _prepare(data: "DataSpec", format: str) -> None:
    from scaling.trainer.data.prepare import prepare as prepare_tokens

    prepared = prepare_tokens(data, progress=None if format == "json" else True)
    facts = {
        "folder": str(prepared.folder),
        "reused": prepared.reused,
        "seconds": round(prepared.seconds, 3),
        "tokens": prepared.n_tokens,
        "train_tokens": prepared.n_train,
        "val_tokens": prepared.n_tokens - prepared.n_train,
        "vocab_size": prepared.vocab_size,
        "dtype": prepared.dtype,
        "fingerprint": prepared.fingerprint,
        "tokenizer_sha256": prepared.tokenizer_sha256,
        "files": len(prepared.files),
    }
    if format == "json":
        typer.echo(json.dumps(facts, indent=2))
        return
    how = "reused" if prepared.reused else f"prepared in {prepared.seconds:.1f}s"
    typer.echo(
        f"{how}: {prepared.n_tokens:,} tokens ({prepared.n_train:,} train, {prepared.n_tokens - prepared.n_train:,} "
        f"validation) from {len(prepared.files)} file(s), vocabulary {prepared.vocab_size:,} ({prepared.dtype}), "
        f"fingerprint {prepared.fingerprint[:16]}\n{prepared.folder}"
    )
