"""`scaling export`: a run's checkpoint as a Hugging Face model folder (registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling.cli.common import DbOption, app, check_sweep_name


@app.command()
def export(
    run: Annotated[str, typer.Argument(help="The run: its key or a unique prefix of it.", show_default=False)],
    hf: Annotated[
        Path,
        typer.Option("--hf", help="Write a Hugging Face transformers model folder (GPT2LMHeadModel; LlamaForCausalLM "
                     "for a llama run, Qwen3ForCausalLM for a llama run with qk_norm: config.json, model.safetensors, the tokenizer if the run has one) here; a "
                     "new or empty folder.",
                     show_default=False),
    ],
    db: DbOption = None,
    sweep: Annotated[
        Optional[str],
        typer.Option("--sweep", help="The sweep holding the run (needed when its key is in several).",
                     show_default=False, callback=check_sweep_name),
    ] = None,
    run_dir: Annotated[
        Optional[Path],
        typer.Option("--run-dir", help="The run's folder (default: <runs_dir>/<sweep>/<key> of its sweep's plan, "
                     "./scaling_runs/<sweep>/<key> for `scaling train`).", show_default=False),
    ] = None,
) -> None:
    """Export a run's newest checkpoint for downstream tools (lm-evaluation-harness, transformers).

    Needs the optional extra: pip install 'scaling[hf]'. The exported model's logits are checked
    against ours on the same tokens before anything is written.

    Example: scaling export 3f2a --hf exports/3f2a --db sqlite:///runs/scaling.db
    """
    from scaling.db import resolve_url
    from scaling.trainer.export import export_hf

    try:  # transformers' progress bars would interleave with our lines (absent: export_hf says so)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    done = export_hf(resolve_url(db), run, hf, sweep=sweep, run_dir=run_dir)
    typer.echo(f"run {done.run_key} (sweep {done.sweep}), step {done.step} -> {done.folder}: {done.architecture} "
               f"with {done.tokenizer}; largest logit difference from ours {done.max_logit_diff:.2g}")
    typer.echo(f"files: {', '.join(done.files)}")
    if done.note:
        typer.echo(f"note: {done.note}", err=True)
