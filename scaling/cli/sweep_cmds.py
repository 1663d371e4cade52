"""`scaling plan`, `scaling sweep`, `scaling status` (registered on the shared app)."""

from __future__ import annotations

import json
import shlex
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from scaling.cli.common import DbOption, FormatOption, SweepOption, app, check_format
from scaling.errors import mask_data, mask_text

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.orchestrator.sweep import SweepResult

PlanArg = Annotated[str, typer.Argument(help="The plan file (YAML).", show_default=False)]


REFRESH_HELP = ("A rule `{fitted: SWEEP}` keeps the law recorded when this sweep was first registered; this refits "
                "it on SWEEP as it is now (and records the new law).")


@app.command("plan")
def plan_cmd(
    plan: PlanArg,
    db: DbOption = None,
    format: FormatOption = "table",
    explain: Annotated[
        Optional[str],
        typer.Option("--explain", help="Why this run (a key or a unique prefix) got its layout.", show_default=False),
    ] = None,
    refresh_transfer: Annotated[bool, typer.Option("--refresh-transfer", help=REFRESH_HELP)] = False,
) -> None:
    """Show the runs a plan resolves to (key, N, shape, D, C, layout, memory per rank, compute,
    communication and bubble time, why); writes nothing.

    Example: scaling plan examples/gpu-cluster.yaml --explain 3f2a
    """
    check_format(format)
    from rich.console import Console

    from scaling.orchestrator.planning import explain as explain_run
    from scaling.orchestrator.planning import find_run, plan_summary, render_groups, render_table, to_json

    summary = plan_summary(plan, db=db, refresh_transfer=refresh_transfer)  # db: where a `{fitted: SWEEP}` rule reads its sweep, as `scaling sweep`
    if explain is not None:
        lines = explain_run(summary, explain)
        if format == "json":  # the run's row of the plan, which holds every figure the lines show
            run = find_run(summary, explain)
            typer.echo(mask_text(json.dumps({"run": run, "explanation": lines}, indent=2)))
            return
        for line in lines:
            typer.echo(mask_text(line))
        return
    if format == "json":
        typer.echo(to_json(summary))
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=240)  # piped: keep every column readable
    console.print(render_table(summary))
    groups = render_groups(summary)
    if groups is not None:  # a plan with hparams: each group's runs and cost
        console.print(groups)
    for note in summary["notes"]:
        console.print(f"note: {note}", markup=False, highlight=False)


@app.command("sweep")
def sweep_cmd(
    plan: PlanArg,
    db: DbOption = None,
    address: Annotated[
        Optional[str],
        typer.Option("--address", help="Join the Ray cluster at this address (needs a database server).",
                     show_default=False),
    ] = None,
    max_concurrent: Annotated[
        Optional[int], typer.Option("--max-concurrent", min=1, help="At most this many runs at once.",
                                    show_default=False)
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would run; train and write nothing.")] = False,
    no_fit: Annotated[bool, typer.Option("--no-fit", help="Do not fit the laws at the end.")] = False,
    no_report: Annotated[bool, typer.Option("--no-report", help="Do not write the HTML report at the end.")] = False,
    stale_after: Annotated[
        float, typer.Option("--stale-after", min=0.5, help="Seconds without heartbeat before a `running` run "
                            "left by a dead orchestrator is taken over.")
    ] = 60.0,
    refresh_transfer: Annotated[bool, typer.Option("--refresh-transfer", help=REFRESH_HELP)] = False,
) -> None:
    """Train every run of the plan not yet completed, on Ray, with a live display.

    Re-running resumes: completed runs are skipped, interrupted ones resume from checkpoints,
    failed ones are retried up to the plan's `retries`. Ctrl-C marks running runs interrupted.

    Example: scaling sweep examples/plan.yaml --db sqlite:///runs.db --max-concurrent 2
    """
    from rich.console import Console

    from scaling.orchestrator.display import SweepDisplay
    from scaling.orchestrator.sweep import run_sweep

    console = Console()
    # soft_wrap: a long line (a path, a reason) stays one line when piped, for grep and scripts
    echo = lambda text: console.print(text, markup=False, highlight=False, soft_wrap=True)  # noqa: E731
    if dry_run:
        result = run_sweep(plan, db=db, address=address, max_concurrent=max_concurrent, dry_run=True, echo=echo,
                           refresh_transfer=refresh_transfer)
        todo = result.would_run or []
        echo(f"dry run: sweep {result.sweep}: {len(todo)} run(s) to train: {' '.join(todo) if todo else '-'}")
        return
    with SweepDisplay(console) as display:
        result = run_sweep(
            plan, db=db, address=address, max_concurrent=max_concurrent, fit=not no_fit, report=not no_report,
            stale_after_s=stale_after, display=display, echo=echo, refresh_transfer=refresh_transfer,
        )
    out = result.outcome
    assert out is not None
    echo(
        f"sweep {result.sweep}: {len(out.completed)} trained, {len(out.skipped)} already done, "
        f"{len(out.failed)} failed, {len(out.interrupted)} interrupted in {out.wall_seconds:.0f}s"
    )
    for key, error in out.failed.items():
        echo(mask_text(f"failed {key}: {error}"))
    for line in answer(result):
        echo(mask_text(line))
    if result.report_path:
        echo(f"report: {result.report_path}")
    if out.failed:
        raise typer.Exit(1)


def answer(result: SweepResult) -> list[str]:
    """The end of a sweep: the recommendation in a few lines, each law left out in one, and where the
    full tables are (nothing when the sweep was not fitted)."""
    from scaling.errors import UserError, mask_url
    from scaling.fitting import Analysis
    from scaling.fitting.brief import brief, moe_lines
    from scaling.fitting.recommend import NEXT_BUDGET_FACTOR
    from scaling.orchestrator.expand import sweep_recommendation

    if not isinstance(result.fit, Analysis):
        return []
    try:  # the sweep's analysis, as it just made it: nothing is fitted again
        rec = sweep_recommendation(result.url, result.fit)
        lines = brief(rec, budget_why=f"{NEXT_BUDGET_FACTOR:g}x the largest run", skipped=result.fit.skipped,
                      moe=result.fit.moe)
    except UserError as exc:  # no dense law answers: the laws of sparsity still may
        family = " from the dense laws" if result.fit.moe is not None else ""
        lines = [f"no recommendation{family}: {' '.join(str(exc).split())}"]
        if result.fit.moe is not None:
            lines += moe_lines(result.fit.moe)
    where = f"--db {shlex.quote(mask_url(result.url))} --sweep {shlex.quote(result.sweep)}"
    moe = []
    if result.fit.moe is not None:  # runs with experts: their laws of sparsity (N active) answer for them
        moe = [f"laws of sparsity ({', '.join(law.law for law in result.fit.moe.laws.values())}; N = active "
               f"parameters): scaling recommend {where} --law moe"]
    return lines + moe + [f"every law's parameters, intervals and notes: scaling fit {where}",
                          f"every law at this budget, and the runs worth adding: scaling recommend {where}"]


@app.command("status")
def status_cmd(db: DbOption = None, sweep: SweepOption = None, format: FormatOption = "table") -> None:
    """A sweep's progress, failures with their reasons, compute spent and remaining.

    Example: scaling status --sweep example
    """
    check_format(format)
    import json

    from rich.console import Console

    from scaling.db import resolve_url
    from scaling.orchestrator.status import render_status, sweep_status

    status = mask_data(sweep_status(resolve_url(cli=db), sweep))  # failure texts may quote a URL
    if format == "json":
        typer.echo(json.dumps(status, indent=2))
    else:
        Console().print(render_status(status))
