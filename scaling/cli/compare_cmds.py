"""`scaling compare`: several sweeps side by side (registered on the shared app)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, List, Optional

import typer

from scaling.cli.common import DbOption, FitOption, app, check_fit

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.reports.compare_page import Comparison

#: Sweeps the terminal's table of exponents shows at most (a column each).
MAX_TERMINAL_SWEEPS = 8
#: Differences the terminal lists at most, significant ones first (pairs grow as the sweeps squared).
MAX_TERMINAL_DIFFERENCES = 40
#: Lines of notes (and of why a difference has no interval) the terminal prints at most.
MAX_TERMINAL_NOTES = 10


@app.command()
def compare(
    sweeps: Annotated[List[str], typer.Argument(help="Two or more sweep names.", show_default=False)],
    db: DbOption = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="Where to write the HTML page.")] = Path("compare.html"),
    json_out: Annotated[
        Optional[Path], typer.Option("--json", help="Also write the comparison as JSON to this file ('-': print it "
                                     "instead of the table).", show_default=False)
    ] = None,
    fit: FitOption = "sweep",
    params: Annotated[
        Optional[str], typer.Option("--params", help="Compare with N counting non_embedding or total parameters "
                                    "(default: the first sweep's convention).", show_default=False)
    ] = None,
    flops: Annotated[
        Optional[str], typer.Option("--flops", help="Compare with C = 6N or 6N_attention FLOPs per token "
                                    "(default: the first sweep's convention).", show_default=False)
    ] = None,
) -> None:
    """Compare the fitted exponents of several sweeps, with bootstrap intervals of their differences.

    Writes one self-contained HTML page (frontiers and IsoFLOP profiles on shared axes) and prints
    a table of the differences; a sweep in other conventions is converted exactly or refused.

    Examples:

        scaling compare kaplan-setup chinchilla-setup -o compare.html

        scaling compare a b c --json compare.json
    """
    from scaling.reports.output import check_output
    from scaling.db import resolve_url
    from scaling.errors import UserError
    from scaling.reports.compare_page import compare_sweeps

    check_fit(fit)
    check_output(output, db_url=resolve_url(db))
    to_file = json_out is not None and str(json_out) != "-"
    if to_file:
        check_output(json_out, "--json", db_url=resolve_url(db), other=("--output", output))  # type: ignore[arg-type]
    try:
        result = compare_sweeps(resolve_url(db), sweeps, output, fit=fit, params=params, flops=flops,
                                json_path=json_out if to_file else None)
    except OSError as exc:
        raise UserError(f"--output {output}: cannot write there: {exc.strerror or exc}") from None
    if json_out is not None and not to_file:
        typer.echo(result.to_json())
    else:
        print_table(result, json_path=json_out)
    typer.echo(str(result.path), err=json_out is not None and not to_file)


def print_table(result: Comparison, json_path: Optional[Path] = None) -> None:
    """The exponents per sweep and the differences between sweeps, as rich tables (user text not markup).

    Bounded whatever the number of sweeps: at most MAX_TERMINAL_SWEEPS columns of exponents,
    MAX_TERMINAL_DIFFERENCES differences (significant first) and MAX_TERMINAL_NOTES lines of
    notes, then one line that counts what is left out and points to the JSON and the page.
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from scaling.fitting.sweep_fit import SHORT
    from scaling.fmt import num
    from scaling.reports.compare import ranked, verdict_counts

    console = Console(highlight=False)
    names = [s.name for s in result.sides][:MAX_TERMINAL_SWEEPS]
    exps = Table(title="Exponents (95% bootstrap intervals)")
    exps.add_column("law")
    exps.add_column("exponent")
    for n in names:
        exps.add_column(Text(n), justify="right")
    by = {(x["law"], x["exponent"], x["sweep"]): x for x in result.exponents}
    for law, label, exp in dict.fromkeys((x["law"], x["label"], x["exponent"]) for x in result.exponents):
        cells = []
        for n in names:
            x = by.get((law, exp, n))
            cells.append(Text("–" if x is None else (x["interval"].text() if x["reliable"]
                                                     else f"{num(x['interval'].value, 3)} (unreliable)")))
        exps.add_row(Text(SHORT.get(law, label)), Text(exp), *cells)
    console.print(exps)
    diffs = Table(title="Differences of exponents (second − first)")
    diffs.add_column("law")
    diffs.add_column("exponent", no_wrap=True)
    diffs.add_column("sweeps")
    diffs.add_column("difference [95%]", justify="right")
    diffs.add_column("significant", no_wrap=True)
    why: dict[str, None] = {}
    listed = ranked(result.differences)[:MAX_TERMINAL_DIFFERENCES]
    for d in listed:
        diff = d["difference"]
        if diff.kind == "percentile":
            verdict = "yes" if d["significant"] else "no"
        else:
            verdict = "unreliable" if diff.kind == "unreliable" else "no interval"
            why[f"{SHORT.get(d['law'], d['label'])}, {d['second']} − {d['first']}: {d['reason']}"] = None
        diffs.add_row(Text(SHORT.get(d["law"], d["label"])), Text(d["exponent"]), Text(f"{d['second']} − {d['first']}"),
                      Text(diff.text()), Text(verdict))
    console.print(diffs)
    for line in list(why)[:MAX_TERMINAL_NOTES]:
        console.print(Text(f"no interval: {line}"))
    for note in result.notes[:MAX_TERMINAL_NOTES]:
        console.print(Text(f"note: {note}"))
    left_out = []
    if len(names) < len(result.sides):
        left_out.append(f"exponents of {len(result.sides) - len(names)} more sweeps")
    if len(listed) < len(result.differences):
        counts = verdict_counts(result.differences)
        left_out.append(f"{len(result.differences) - len(listed):,} more differences (of {len(result.differences):,}: "
                        + ", ".join(f"{n:,} {v}" for v, n in counts.items()) + "; significant ones listed first)")
    hidden_notes = max(0, len(why) - MAX_TERMINAL_NOTES) + max(0, len(result.notes) - MAX_TERMINAL_NOTES)
    if hidden_notes:
        left_out.append(f"{hidden_notes} more notes")
    if left_out:
        where = f"the JSON {json_path}" if json_path is not None else "--json FILE"
        console.print(Text(f"not shown here: {'; '.join(left_out)}. Every one is in {where} and on the page:"))
