"""`scaling` commands of the train group (registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling import fmt
from scaling.cli.common import DbOption, app, check_sweep_name


@app.command()
def train(
    spec: Annotated[Path, typer.Argument(help="A run spec in YAML (the fields of RunSpec).", show_default=False)],
    db: DbOption = None,
    run_dir: Annotated[
        Optional[Path],
        typer.Option("--run-dir", help="Checkpoint folder (default ./scaling_runs/<sweep>/<key>).", show_default=False),
    ] = None,
    sweep: Annotated[
        str, typer.Option("--sweep", help="Sweep to record the run in.", callback=check_sweep_name)
    ] = "adhoc",
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Check the spec and its memory, show the run; train and write nothing.")
    ] = False,
) -> None:
    """Train one spec alone, recorded in the database like any run of a sweep.

    Example: scaling train spec.yaml --db sqlite:///scaling.db --run-dir runs/debug
    """
    from scaling.trainer.adhoc import AlreadyCompleted, check_memory, train_adhoc
    from scaling.trainer.resolve import local_host, resolve
    from scaling.trainer.spec import RunRequest

    request = RunRequest.from_yaml(spec)
    run_spec = resolve(request, local_host(request, data=not dry_run)).spec  # precision, layout (and data) decided
    est_gib = check_memory(run_spec)
    if dry_run:
        shape = run_spec.shape
        typer.echo(
            f"dry run: {shape.n_layer}x{shape.d_model} model, N={fmt.count(shape.params(run_spec.params_convention))}, "
            f"{fmt.count(run_spec.trained_tokens)} tokens in {run_spec.steps} steps, C={fmt.flops(run_spec.flops)} FLOPs, "
            f"about {est_gib:.3g} GiB; nothing trained or written"
        )
        return
    try:
        result = train_adhoc(run_spec, db, run_dir, sweep=sweep)
    except AlreadyCompleted as exc:
        typer.echo(str(exc))
        return
    typer.echo(
        f"run {result.key}: {result.status}, {result.steps} steps, {fmt.count(result.tokens)} tokens, "
        f"train loss {result.final_train_loss:.4f}, eval loss {result.final_eval_loss:.4f}"
        + (f", {result.rollbacks} rollbacks" if result.rollbacks else "")
    )
