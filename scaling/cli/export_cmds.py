"""`scaling export`: a run's checkpoint as a Hugging Face model folder, or a sweep to MLflow, W&B or TensorBoard
(registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from scaling.cli.common import DbOption, app, check_sweep_name


def _tracker_option(flag: str, what: str) -> Any:
    return typer.Option(flag, help=f"Write the sweep's runs (config, curves, final metrics) and its fitted laws as "
                        f"{what} here; a new or empty folder. Needs pip install 'scaling[export]'.", show_default=False)


@app.command()
def export(
    run: Annotated[Optional[str], typer.Argument(help="The run: its key or a unique prefix of it (needed by --hf; "
                                                 "the trackers export the whole sweep without one).",
                                                 show_default=False)] = None,
    hf: Annotated[
        Optional[Path],
        typer.Option("--hf", help="Write a Hugging Face transformers model folder (GPT2LMHeadModel; LlamaForCausalLM "
                     "for a llama run, Qwen3ForCausalLM for a llama run with qk_norm: config.json, model.safetensors, the tokenizer if the run has one) here; a "
                     "new or empty folder.",
                     show_default=False),
    ] = None,
    mlflow: Annotated[Optional[Path], _tracker_option("--mlflow", "a local MLflow store (mlflow.db and artifacts/)")] = None,
    wandb: Annotated[Optional[Path], _tracker_option("--wandb", "Weights & Biases offline runs (wandb sync uploads "
                                                                 "them)")] = None,
    tensorboard: Annotated[Optional[Path], _tracker_option("--tensorboard", "TensorBoard event files, a folder per "
                                                                             "run")] = None,
    bootstrap: Annotated[int, typer.Option("--bootstrap", min=2, help="Bootstrap replicates of the laws' intervals "
                                           "(the sweep's stored fits are reused where they match).")] = 200,
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
    """Export a run's newest checkpoint for downstream tools (lm-evaluation-harness, transformers), or a sweep's
    runs and fitted laws to MLflow, Weights & Biases (offline) or TensorBoard.

    --hf needs the optional extra pip install 'scaling[hf]'; the exported model's logits are checked
    against ours on the same tokens before anything is written. --mlflow, --wandb and --tensorboard
    need pip install 'scaling[export]'.

    Example: scaling export 3f2a --hf exports/3f2a --db sqlite:///runs/scaling.db;
    scaling export --mlflow exports/mlflow --tensorboard exports/tb --sweep example
    """
    from scaling.db import resolve_url
    from scaling.errors import UserError

    trackers = {name: folder for name, folder in (("mlflow", mlflow), ("wandb", wandb), ("tensorboard", tensorboard))
                if folder is not None}
    if hf is None and not trackers:
        raise UserError("name what to export to: --hf DIR (with a RUN), or --mlflow DIR, --wandb DIR, --tensorboard DIR")
    if trackers:
        from scaling.trackers import export_sweep

        if hf is not None:
            raise UserError("--hf exports one run's checkpoint; export to the trackers in a command of its own")
        for done in export_sweep(resolve_url(db), trackers, sweep, run=run, n_bootstrap=bootstrap):
            typer.echo(f"{done.tracker}: {done.runs} runs (the fitted laws included) -> {done.folder}")
        return
    if run is None:
        raise UserError("--hf needs the RUN to export (its key or a unique prefix)")
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
