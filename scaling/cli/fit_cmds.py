"""`scaling fit` and `scaling recommend` (registered on the shared app)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling.cli.common import DbOption, FormatOption, SweepOption, app

CsvOption = Annotated[
    Optional[Path],
    typer.Option("--csv", help="CSV of measurements (columns N|params|n_params|Model Size, D|tokens, "
                 "C|flops|compute|Training FLOP, loss) instead of a sweep.", show_default=False),
]
BootOption = Annotated[int, typer.Option("--bootstrap", help="Bootstrap replicates for the intervals.")]
SeedOption = Annotated[int, typer.Option("--seed", help="Seed of the bootstrap resampling.")]


def _check_format(fmt: str) -> None:
    from scaling.errors import UserError

    if fmt not in ("table", "json"):
        raise UserError(f"--format must be table or json, not {fmt!r}")


@app.command()
def fit(
    db: DbOption = None,
    sweep: SweepOption = None,
    csv: CsvOption = None,
    law: Annotated[str, typer.Option("--law", help="kaplan, chinchilla (approaches 1-3) or all.")] = "all",
    fmt: FormatOption = "table",
    bootstrap: BootOption = 200,
    seed: SeedOption = 0,
    flops: Annotated[str, typer.Option("--flops", help="FLOP convention of a CSV: C = 6ND unless given.")] = "6N",
    unique_tokens: Annotated[
        Optional[float], typer.Option("--unique-tokens", help="CSV: the corpus's unique tokens U; fit on Muennighoff "
                                      "et al.'s effective data D' instead of D (repeated data).", show_default=False)
    ] = None,
    effective_data: Annotated[
        bool, typer.Option("--effective-data", help="Sweep: fit on effective data D' using the specs' unique_tokens.")
    ] = False,
) -> None:
    """Fit power laws and print every parameter with its 95% interval.

    From a sweep the fits are stored (fits table, with the data's fingerprint) and reused while
    the data are unchanged. Examples: `scaling fit`, `scaling fit --csv points.csv --law chinchilla`.
    """
    from scaling.errors import UserError
    from scaling.fitting import fit_csv, fit_sweep

    _check_format(fmt)
    if csv is not None and sweep is not None:
        raise UserError("give either --sweep or --csv, not both")
    if csv is not None:
        summary = fit_csv(str(csv), law, bootstrap, seed, flops_convention=flops, unique_tokens=unique_tokens)
    else:
        from scaling.db import resolve_url

        summary = fit_sweep(resolve_url(db), sweep, law, bootstrap, seed, effective_data=effective_data)
    typer.echo(json.dumps(summary.to_dict(), indent=2) if fmt == "json" else summary.table(), nl=fmt == "json")


@app.command()
def recommend(
    compute: Annotated[
        Optional[float], typer.Option("--compute", help="Target budget in FLOPs (default: 10x the largest run).",
                                      show_default=False)
    ] = None,
    db: DbOption = None,
    sweep: SweepOption = None,
    csv: CsvOption = None,
    fmt: FormatOption = "table",
    bootstrap: BootOption = 200,
    seed: SeedOption = 0,
) -> None:
    """The compute-optimal run at a budget: N*, D*, loss with intervals from every method.

    With a sweep, also a concrete shape, hyperparameters and memory from the plan, and the
    extra runs that would narrow the interval on N* most. Example: `scaling recommend --compute 1e21`.
    """
    from scaling.fitting import recommend as do_recommend
    from scaling.orchestrator.plan import size_run

    _check_format(fmt)
    if csv is not None:
        rec = do_recommend(compute, csv=str(csv), sweep=sweep, n_bootstrap=bootstrap, seed=seed)
    else:
        from scaling.db import resolve_url

        rec = do_recommend(compute, url=resolve_url(db), sweep=sweep, n_bootstrap=bootstrap, seed=seed,
                           size_run=size_run)
    typer.echo(json.dumps(rec.to_dict(), indent=2) if fmt == "json" else rec.table(), nl=fmt == "json")
