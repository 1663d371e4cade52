"""`scaling report`: write a sweep's self-contained HTML report (registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from scaling.cli.common import DbOption, FitOption, SweepOption, app, check_fit

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.reports.html import Extra


@app.command()
def report(
    db: DbOption = None,
    sweep: SweepOption = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the HTML file.")
    ] = Path("report.html"),
    fit: FitOption = "sweep",
    store_fits: Annotated[
        bool,
        typer.Option("--store-fits", help="Store the new fits of --fit sweep in the database, as `scaling fit` "
                     "does (by default a report only reads the database)."),
    ] = False,
    open_: Annotated[
        bool, typer.Option("--open", help="Open the report in the default web browser when written.")
    ] = False,
    inference_tokens: Annotated[
        Optional[float], typer.Option("--inference-tokens", help="Add the over-training trade-off for a model that "
                                      "will serve this many tokens (approach 3).", show_default=False)
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Rewrite the report as runs finish until none is pending or running; "
                           "the page reloads itself meanwhile.")
    ] = False,
    interval: Annotated[
        Optional[float], typer.Option("--interval", help="--watch: seconds between checks and reloads (default 10, "
                                      "at most 3600).", show_default=False)
    ] = None,
) -> None:
    """Write one self-contained HTML report of a sweep (plotly inlined; opens without a network).

    Examples:

        scaling report --db sqlite:///runs/scaling.db -o report.html

        scaling report --sweep chinchilla-small --open
    """
    from scaling.db import resolve_url
    from scaling.errors import UserError
    from scaling.reports import write_report
    from scaling.reports.output import check_output

    check_fit(fit)
    if interval is not None and not watch:
        raise UserError("--interval applies to --watch only")
    if store_fits and fit != "sweep":
        raise UserError(f"--store-fits needs --fit sweep (--fit {fit} makes nothing to store)")
    check_output(output, db_url=resolve_url(db))
    extras = [] if inference_tokens is None else [_inference_extra(inference_tokens)]
    if watch:
        _watch(resolve_url(db), sweep, output, interval, fit=fit, extras=extras, store_fits=store_fits,
               open_=open_)
        return
    from scaling.orchestrator.sweep import ReportInputs, report_inputs

    inputs = report_inputs(resolve_url(db), sweep, save=store_fits) if fit == "sweep" else ReportInputs()
    try:
        path = write_report(resolve_url(db), sweep, output, fit=fit, store_fits=store_fits, extras=extras,
                            **inputs._asdict())
    except OSError as exc:
        raise UserError(f"--output {output}: cannot write there: {exc.strerror or exc}") from None
    typer.echo(str(path))
    if open_:
        _open(path)


def _inference_extra(tokens: float) -> Extra:
    """The report's over-training section for a model that serves ``tokens`` tokens (refused out of range)."""
    from scaling.errors import UserError
    from scaling.fitting.inference import MAX_INFERENCE_TOKENS
    from scaling.reports.figures_inference import inference_section

    if not (0 <= tokens <= MAX_INFERENCE_TOKENS):
        raise UserError(f"--inference-tokens must be a number of tokens in [0, {MAX_INFERENCE_TOKENS:.0e}], "
                        f"not {tokens}")
    return inference_section(tokens)


def _watch(url: str, sweep: Optional[str], output: Path, interval: Optional[float], *, fit: str, extras: list[Extra],
           store_fits: bool, open_: bool) -> None:
    """`scaling report --watch`: the report rewritten as runs finish, each write named on stderr."""
    from scaling.errors import UserError
    from scaling.fmt import bounds
    from scaling.reports.watch import MAX_INTERVAL, MIN_INTERVAL, watch as watch_report

    interval = 10.0 if interval is None else interval
    if not (MIN_INTERVAL <= interval <= MAX_INTERVAL):
        raise UserError(f"--interval must be a number of seconds in {bounds(MIN_INTERVAL, MAX_INTERVAL, 6)}, "
                        f"not {interval}")
    opened: list[Path] = []

    def on_write(p: Path, live: bool) -> None:
        typer.echo(f"{p} ({'sweep running' if live else 'sweep done'})", err=True)
        if open_ and not opened:
            opened.append(p)
            _open(p)

    try:
        path = watch_report(url, sweep, output, interval=interval, fit=fit, extras=extras,
                            on_write=on_write, store_fits=store_fits)
    except OSError as exc:
        raise UserError(f"--output {output}: cannot write there: {exc.strerror or exc}") from None
    typer.echo(str(path))


def _open(path: Path) -> None:
    import webbrowser

    # webbrowser.open returns False (and does nothing) where no browser is available.
    if not webbrowser.open(path.as_uri()):
        typer.echo("no web browser available: open the file above by hand", err=True)
