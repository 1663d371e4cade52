"""The comparison page: one self-contained HTML file in the sweep report's template
(:func:`compare_sweeps` loads the sweeps, compares them and writes it).

Sections: the sweeps and their conventions, each law's exponents with intervals, the differences
of exponents between sweeps (significant or not, or why there is none), frontiers and IsoFLOP
profiles on shared axes. User text (sweep names, notes) is escaped as in the report.

Bounded whatever the number of sweeps (pairs of sweeps grow as its square): the figures draw the
first :data:`~scaling.reports.compare.MAX_FIGURE_SWEEPS` sweeps, the differences table lists at
most :data:`~scaling.reports.compare.MAX_PAGE_DIFFERENCES` rows, significant ones first, and
the page says what it left out (the JSON, ``--json``, has everything).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from scaling.fmt import escape as e
from scaling.fmt import num
from scaling.reports import figures_compare as FC
from scaling.reports.blocks import Page, interval, kv, missing, section
from scaling.reports.compare import (
    MAX_FIGURE_DIFFERENCES, MAX_FIGURE_SWEEPS, MAX_PAGE_DIFFERENCES, Comparison, load_comparison, ranked,
    verdict_counts,
)
from scaling.reports.html import render_page
from scaling.reports.output import write_atomic

SECTIONS = (
    ("sweeps", "Sweeps"),
    ("exponents", "Exponents"),
    ("differences", "Differences"),
    ("frontiers", "Frontiers"),
    ("isoflop", "IsoFLOP profiles"),
)


def render(c: Comparison) -> str:
    """The comparison as one HTML string."""
    page = Page()
    drawn = c.sides[:MAX_FIGURE_SWEEPS]
    left_out = ("" if len(drawn) == len(c.sides) else
                f"<p>Drawn: the first {len(drawn)} of the {len(c.sides)} sweeps (the tables list every one).</p>")
    body = "\n".join([
        _sweeps(c),
        _exponents(c),
        _differences(c, page),
        section("frontiers", "Frontiers", page.figure("compare-frontiers", FC.frontiers(drawn))
                 + "<p>Colour: sweep; line style: law. Shaded: 95% bootstrap band of N*. Laws flagged unreliable "
                   "are hidden until clicked in the legend.</p>" + left_out),
        section("isoflop", "IsoFLOP profiles", page.figure("compare-isoflop", FC.isoflop_profiles(drawn)) + left_out),
    ])
    title = "Comparison: " + " vs ".join(s.name for s in c.sides)
    return render_page(title=title, sections=SECTIONS, body=body, page=page, notes=c.notes, source=c.source,
                       notes_title="Notes")


def _sweeps(c: Comparison) -> str:
    rows = [("compared in", e(f"N counts {c.conventions['params']} parameters; C = {c.conventions['flops']} FLOPs "
                              "per token × D"))]
    for s in c.sides:
        conv = f"N {s.conventions['params']}, C {s.conventions['flops']}" + (" (converted)" if s.converted else "")
        rows.append((s.name, e(f"{len(s.runs)} runs, {len(s.completed)} completed; {conv}; laws: "
                               + (", ".join(sorted(s.laws)) or "none"))))
    return section("sweeps", "Sweeps", kv(rows))


def _exponents(c: Comparison) -> str:
    if not c.exponents:
        return section("exponents", "Exponents", missing("No law is fitted for these sweeps."))
    names = [s.name for s in c.sides]
    by = {(x["law"], x["exponent"], x["sweep"]): x for x in c.exponents}
    keys = list(dict.fromkeys((x["law"], x["label"], x["exponent"]) for x in c.exponents))
    head = "<th>law</th><th>exponent</th>" + "".join(f'<th class="num">{e(n)}</th>' for n in names)
    body = []
    for law, label, exp in keys:
        cells = []
        for n in names:
            x = by.get((law, exp, n))
            if x is None:
                cells.append('<td class="num">–</td>')
            elif not x["reliable"]:
                cells.append(f'<td class="num unreliable" title="{e(x["doubts"][0])}">{num(x["interval"].value, 3)} '
                             '<span class="ci">(unreliable)</span></td>')
            else:
                cells.append(f'<td class="num">{interval(x["interval"], 3)}</td>')
        body.append(f"<tr><td>{e(label)}</td><td>{e(exp)}</td>{''.join(cells)}</tr>")
    table = f'<table id="exponents-table"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return section("exponents", "Exponents", "<p>Point estimates with 95% bootstrap intervals. A law the data "
                    "cannot pin down is marked unreliable and shown without an interval.</p>" + table)


def _differences(c: Comparison, page: Page) -> str:
    if not c.differences:
        return section("differences", "Differences", missing("No law is fitted for two of these sweeps."))
    listed = ranked(c.differences)[:MAX_PAGE_DIFFERENCES]
    rows = []
    for d in listed:
        diff = d["difference"]
        if diff.kind == "percentile":
            verdict = "significant" if d["significant"] else "not significant"
            cell = interval(diff, 3)
        else:
            verdict = "no interval"
            cell = "–" if not math.isfinite(diff.value) else num(diff.value, 3)
        rows.append(f'<tr class="{e(verdict.replace(" ", "-"))}"><td>{e(d["label"])}</td><td>{e(d["exponent"])}</td>'
                    f"<td>{e(d['second'])} − {e(d['first'])}</td><td class=\"num\">{cell}</td>"
                    f"<td>{e(verdict)}</td><td>{e(d['reason'])}</td></tr>")
    table = ('<table id="differences-table"><thead><tr><th>law</th><th>exponent</th><th>difference</th>'
             '<th class="num">value [95%]</th><th>verdict</th><th>why</th></tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    intro = ("<p>Each difference's interval is the 2.5%–97.5% range of (second − first) over all pairs of the two "
             "fits' bootstrap replicates (independent resamples of different runs). Significant: the interval "
             "excludes 0.</p>")
    if len(listed) < len(c.differences):
        counts = verdict_counts(c.differences)
        intro += (f"<p>Listed: {len(listed):,} of the {len(c.differences):,} differences ("
                  + ", ".join(f"{n:,} {v}" for v, n in counts.items())
                  + "), significant ones first. The JSON (<code>scaling compare ... --json FILE</code>) has every one.</p>")
    drawn = [d for d in listed if d["difference"].kind == "percentile"][:MAX_FIGURE_DIFFERENCES]
    if len(drawn) < sum(d["difference"].kind == "percentile" for d in c.differences):
        intro += f"<p>The figure draws the first {len(drawn)} of those listed with an interval.</p>"
    return section("differences", "Differences", intro + table
                    + page.figure("compare-differences", FC.exponent_differences(drawn)))


def compare_sweeps(url: str, sweeps: Sequence[str], path: str | Path = "compare.html", *, fit: str = "sweep",
                   params: str | None = None, flops: str | None = None,
                   json_path: str | Path | None = None) -> Comparison:
    """Compare ``sweeps`` and write the comparison page to ``path`` (and its JSON to ``json_path``).

    Returns the :class:`Comparison` (``path`` is the page written). See
    :func:`load_comparison` for ``fit``, ``params`` and ``flops``.
    """
    comparison = load_comparison(url, sweeps, fit=fit, params=params, flops=flops)
    out = Path(path).expanduser().resolve()
    write_atomic(out, render(comparison))
    comparison.path = out
    if json_path is not None:
        write_atomic(Path(json_path).expanduser().resolve(), comparison.to_json() + "\n")
    return comparison
