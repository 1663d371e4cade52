"""The `scaling` command line: thin typer commands over the library's public functions.

Each command group lives in its own module and registers itself on :data:`app`. Heavy
imports (torch, Ray, plotly) happen inside the command functions so `scaling --help` is fast.
"""

from __future__ import annotations

import functools
import importlib
import sys

try:  # Ctrl-C while the command line loads (a second or so): the same one line and exit as during a command
    import typer

    from scaling.cli.common import app
    from scaling.errors import UserError

    # Register the command modules (each adds its commands to `app`).
    from scaling.cli import db_cmds, train_cmds, sweep_cmds, fit_cmds, report_cmds, compare_cmds, data_cmds, export_cmds  # noqa: E402,F401
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    raise SystemExit(130) from None


def _click_errors() -> tuple[type[Exception], ...]:
    """The ClickException classes typer raises: its bundled ``typer._click`` (typer >= 0.2x)
    and, where installed, the separate ``click`` (older typer)."""
    found: list[type[Exception]] = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        found.append(module.ClickException)
    return tuple(found)


def _aborts() -> tuple[type[Exception], ...]:
    found: list[type[Exception]] = [typer.Abort]
    try:
        import click

        found.append(click.exceptions.Abort)
    except ImportError:
        pass
    return tuple(found)


@functools.cache
def command() -> "typer.core.TyperGroup":
    """The click command tree of :data:`app`, built once per process: typer builds it afresh on every call
    of ``app(...)``, a tenth of a second that a process running many commands (the test suite) pays each time.
    ``app`` disables typer's pretty exceptions, so calling the tree directly changes nothing a user sees."""
    return typer.main.get_command(app)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: usage errors as click's short usage message, user errors as one
    line, both with exit 2; Ctrl-C exits 130. Anything else is a bug and keeps its traceback."""
    try:
        # Non-standalone typer returns (not raises) the code of typer.Exit and of Ctrl-C (130).
        code = command()(args=argv, prog_name="scaling", standalone_mode=False)
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
    except _aborts():
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except _click_errors() as exc:  # usage errors (missing argument, bad option) in non-standalone mode
        exc.show()  # type: ignore[attr-defined]
        sys.exit(exc.exit_code)  # type: ignore[attr-defined]
