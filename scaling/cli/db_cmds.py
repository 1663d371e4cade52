"""`scaling runs` and `scaling db upgrade`: list a sweep's runs; migrate a results database."""

from __future__ import annotations

from typing import Annotated

import typer

from scaling.cli.common import DbOption, SweepOption, app, command_group

db_app = command_group("db", "Manage the results database (schema migrations).")

RunsFormatOption = Annotated[
    str, typer.Option("--format", help="Output format: table, json or csv.", show_default=True)
]


@app.command()
def runs(db: DbOption = None, sweep: SweepOption = None, format: RunsFormatOption = "table") -> None:
    """List the runs of a sweep (default: the most recent) with their status and final loss.

    Example: scaling runs --db sqlite:///scaling.db --sweep demo --format csv
    """
    from scaling.orchestrator.status import list_runs

    typer.echo(list_runs(db, sweep, format, warn=lambda line: typer.echo(line, err=True)), nl=False)


@db_app.command("upgrade")
def upgrade(db: DbOption = None) -> None:
    """Apply the schema migrations to a results database (creating it when empty).

    Example: scaling db upgrade --db postgresql+psycopg://user@host/scaling
    """
    from scaling.db.migrate import upgrade_database

    typer.echo(upgrade_database(db))
