"""The typer app and the option types that several commands share."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from scaling.version import __version__

app = typer.Typer(
    name="scaling",
    help="Scaling-law experiments: plan a sweep, train it on Ray, fit power laws, write a report.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"scaling {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Scaling-law experiments: plan a sweep, train it on Ray, fit power laws, write a report."""


def command_group(name: str, help: str) -> typer.Typer:
    """A group of subcommands (``scaling NAME ...``) registered on :data:`app`."""
    group = typer.Typer(name=name, help=help, no_args_is_help=True, rich_markup_mode=None)
    app.add_typer(group, name=name)
    return group


DbOption = Annotated[
    Optional[str],
    typer.Option(
        "--db",
        help="Database URL (sqlite:///path or postgresql+psycopg://...). "
        "Default: the plan's `db:`, then $SCALING_DB, then ./scaling.db.",
        show_default=False,
    ),
]
def check_sweep_name(value: Optional[str]) -> Optional[str]:
    """A --sweep value must be a valid sweep name (it names a folder and is printed): see scaling.naming."""
    from scaling.naming import check_name

    return None if value is None else check_name(value, "--sweep")


SweepOption = Annotated[
    Optional[str],
    typer.Option("--sweep", help="Sweep name (default: the most recent sweep).", show_default=False,
                 callback=check_sweep_name),
]
FormatOption = Annotated[
    str, typer.Option("--format", help="Output format: table or json.")
]


FitOption = Annotated[
    str,
    typer.Option("--fit", help="Where the sweep's analysis comes from: 'sweep' analyses it as `scaling fit` does "
                 "(reusing a stored analysis of unchanged data); 'stored' only reads the stored one (a note says when "
                 "the sweep's runs changed since); 'memory' "
                 "analyses it quickly, storing nothing."),
]


def check_fit(fit: str) -> None:
    """``--fit`` of the commands that show a sweep's fits (``scaling report``, ``scaling compare``)."""
    from scaling.errors import UserError
    from scaling.reports.report_data import FIT_MODES

    if fit not in FIT_MODES:
        raise UserError(f"--fit must be one of {', '.join(FIT_MODES)}, not {fit!r}")


def check_format(fmt: str) -> None:
    """``--format`` of the commands that print a table or JSON."""
    from scaling.errors import UserError

    if fmt not in ("table", "json"):
        raise UserError(f"--format must be table or json, not {fmt!r}")
