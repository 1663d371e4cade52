"""The `scaling` command line: thin typer commands over the library's public functions.

Each command group lives in its own module and registers itself on :data:`app`. Heavy
imports (torch, Ray, plotly) happen inside the command functions so `scaling --help` is fast.
"""

from __future__ import annotations

import sys

from scaling.cli.common import app
from scaling.errors import UserError

# Register the command modules (each adds its commands to `app`).
from scaling.cli import db_cmds, train_cmds, sweep_cmds, fit_cmds, report_cmds  # noqa: E402,F401


def main() -> None:
    """Console entry point: run the app, print user errors as one line and exit 2."""
    try:
        # Non-standalone typer returns (not raises) the code of typer.Exit and of Ctrl-C (130).
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            if code == 130:
                print("interrupted", file=sys.stderr)
            sys.exit(code)
    except UserError as exc:
        print(exc.one_line(), file=sys.stderr)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click's own usage errors arrive here in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.Abort):
            print("aborted", file=sys.stderr)
            sys.exit(130)
        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
