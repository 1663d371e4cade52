"""`scaling report`: write a sweep's self-contained HTML report (registered on the shared app)."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Annotated, Optional

import typer

from scaling.cli.common import DbOption, SweepOption, app


#: Files SQLite keeps beside a database (write-ahead log, shared memory, rollback journal).
SQLITE_SIDECARS = ("", "-wal", "-shm", "-journal")


def _check_output(path: Path, option: str = "--output", *, db_url: Optional[str] = None,
                  other: Optional[tuple[str, Path]] = None) -> None:
    """Refuse an output the report could not or must not be written to, before any work (one line, exit 2).

    Refused too: the results database and its SQLite sidecar files (``db_url``), the path of the
    command's ``other`` output (option, path), and anything that is not a regular file (a device
    such as /dev/null would be replaced by the page, a pipe would block). Nothing is created
    here: the folders are made when the page is written, so a command refused later leaves none.
    """
    from scaling.db.engine import sqlite_path
    from scaling.errors import UserError

    if str(path) == "-":
        raise UserError(f"{option} -: a page is not written to standard output; name a file")
    odd = next((c for c in str(path) if _is_control(c)), None)
    if odd is not None:  # the name printed would not be the file written (or would rewrite the terminal)
        raise UserError(f"{option} {_escaped(str(path))}: the name holds the control character {_escaped(odd)}; "
                        "choose a file name without one")
    out = path.expanduser()
    try:
        db_file = sqlite_path(db_url) if db_url else None
        if db_file is not None:
            for suffix in SQLITE_SIDECARS:
                if _same_file(out, db_file.with_name(db_file.name + suffix)):
                    what = "the results database" + (f"'s {suffix[1:]} file" if suffix else "")
                    raise UserError(f"{option} {path}: is {what}; writing there would destroy it")
        if other is not None and _same_file(out, other[1].expanduser()):
            raise UserError(f"{option} {path}: is also {other[0]}'s path; give the two outputs different files")
        if out.is_dir():
            raise UserError(f"{option} {path}: is a directory; name the file, e.g. {path / 'report.html'}")
        if out.exists() and not out.is_file():
            raise UserError(f"{option} {path}: is not a regular file (a device, pipe or socket); name a file")
        ancestor = next(p for p in [out.parent, *out.parent.parents] if p.exists())
        if not ancestor.is_dir():
            raise UserError(f"{option} {path}: {ancestor} is a file, not a folder")
        longest = max(len(os.fsencode(part)) for part in out.relative_to(ancestor).parts) if out != ancestor else 0
        if longest > os.pathconf(ancestor, "PC_NAME_MAX"):
            raise OSError(errno.ENAMETOOLONG, os.strerror(errno.ENAMETOOLONG))
        if out.exists():
            with open(out, "a"):  # a regular file: opening it cannot block
                pass
        elif ancestor == out.parent:
            with tempfile.NamedTemporaryFile(dir=ancestor, prefix=".scaling-write-check-"):
                pass
        elif not os.access(ancestor, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as exc:
        raise UserError(f"{option} {path}: cannot write there: {exc.strerror or exc}") from None


#: Format characters that reorder how a name is displayed (bidirectional embeddings, overrides, isolates).
_BIDI = frozenset("\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _is_control(c: str) -> bool:
    import unicodedata

    return unicodedata.category(c) == "Cc" or c in _BIDI


def _escaped(text: str) -> str:
    """``text`` with each control character written as a Python escape (\\x1b, \\n, \\u202e)."""
    return "".join(repr(c)[1:-1] if _is_control(c) else c for c in text)


def _same_file(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return a.samefile(b)
    return a.resolve() == b.resolve()


@app.command()
def report(
    db: DbOption = None,
    sweep: SweepOption = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the HTML file.")
    ] = Path("report.html"),
    fit: Annotated[
        str,
        typer.Option(
            "--fit",
            help="Where the fits come from: 'sweep' fits as `scaling fit` does (reusing a stored fit of "
            "unchanged data); 'stored' only reads stored fits; 'memory' fits quickly for this report.",
        ),
    ] = "sweep",
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
    from scaling.reports.data import FIT_MODES

    if fit not in FIT_MODES:
        raise UserError(f"--fit must be one of {', '.join(FIT_MODES)}, not {fit!r}")
    if interval is not None and not watch:
        raise UserError("--interval applies to --watch only")
    if store_fits and fit != "sweep":
        raise UserError(f"--store-fits needs --fit sweep (--fit {fit} makes nothing to store)")
    _check_output(output, db_url=resolve_url(db))
    extras = []
    if inference_tokens is not None:
        from scaling.reports.figures_inference import inference_section

        from scaling.fitting.inference import MAX_INFERENCE_TOKENS

        if not (0 <= inference_tokens <= MAX_INFERENCE_TOKENS):
            raise UserError(f"--inference-tokens must be a number of tokens in [0, {MAX_INFERENCE_TOKENS:.0e}], "
                            f"not {inference_tokens}")
        extras.append(inference_section(inference_tokens))
    if watch:
        from scaling.reports.watch import MAX_INTERVAL, MIN_INTERVAL, watch as watch_report

        interval = 10.0 if interval is None else interval
        if not (MIN_INTERVAL <= interval <= MAX_INTERVAL):
            raise UserError(f"--interval must be a number of seconds in [{MIN_INTERVAL:g}, {MAX_INTERVAL:g}], "
                            f"not {interval}")
        opened: list[Path] = []

        def on_write(p: Path, live: bool) -> None:
            typer.echo(f"{p} ({'sweep running' if live else 'sweep done'})", err=True)
            if open_ and not opened:
                opened.append(p)
                _open(p)

        try:
            path = watch_report(resolve_url(db), sweep, output, interval=interval, fit=fit, extras=extras,
                                on_write=on_write, store_fits=store_fits)
        except OSError as exc:
            raise UserError(f"--output {output}: cannot write there: {exc.strerror or exc}") from None
        typer.echo(str(path))
        return
    try:
        path = write_report(resolve_url(db), sweep, output, fit=fit, store_fits=store_fits, extras=extras)
    except OSError as exc:
        raise UserError(f"--output {output}: cannot write there: {exc.strerror or exc}") from None
    typer.echo(str(path))
    if open_:
        _open(path)


def _open(path: Path) -> None:
    import webbrowser

    # webbrowser.open returns False (and does nothing) where no browser is available.
    if not webbrowser.open(path.as_uri()):
        typer.echo("no web browser available: open the file above by hand", err=True)
