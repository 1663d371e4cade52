"""One self-contained HTML report of a sweep: plotly.js inlined once, every figure as JSON.

The file opens without a network (a researcher can mail it or put it on a share): plotly.js is
inlined once (as text, run when the first figure is drawn), each figure is a ``<div>`` filled by
``Plotly.newPlot`` from one JSON block when it comes within a screen of the viewport (all of them
before printing), so a large sweep's first screen waits neither for plotly.js nor for the figures
below it.
Every string that came from a user (sweep, run names, tags, errors, the plan) is HTML-escaped,
and the JSON block has ``<``, ``>`` and ``&`` written as ``\\u003c`` etc., so no text can end the
script element or open a comment in it.
"""

from __future__ import annotations

import html
import json
import math
import re
import string
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pandas as pd

from scaling import vocab as names
from scaling.db.jsonvalues import as_dict
from scaling.fitting.brief import DENSE_FAMILY
from scaling.fitting.core.measurements import group_budgets
from scaling.fmt import escape as e
from scaling.fmt import num as _num
from scaling.fmt import Interval, bounds, size
from scaling.reports import figures as F
from scaling.reports import fitview
from scaling.errors import mask_data
from scaling.reports.blocks import Answer, Page, answer_grid, interval, kv, missing, prose, section
from scaling.reports.report_data import ReportData
from scaling.reports.downsample import (MAX_EVENTS_DRAWN, MAX_POINTS_DRAWN, MAX_RUNS_DRAWN, MAX_TABLE_ROWS, thin_events,
                                        thin_runs, thin_table)
from scaling.reports.figures_adaptive import adaptive_section
from scaling.naming import group_title
from scaling.reports.figures_hparams import hparams_section
from scaling.reports.moe_section import moe_headline, moe_section
from scaling.reports.next_run import next_run_block
from scaling.reports.output import write_atomic

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.analysis import Analysis
    from scaling.fitting.recommend import Recommendation

SECTIONS = (
    ("summary", "Summary"),
    ("runs", "Runs"),
    ("curves", "Training curves"),
    ("isoflop", "IsoFLOP profiles"),
    ("frontiers", "Frontiers"),
    ("parametric", "Parametric fit"),
    ("health", "Run health"),
)

#: Event kinds the run-health figure keeps first when it must thin its markers (the ones it draws).
HEALTH_EVENTS = F.PROBLEM_EVENTS

#: The unit of every loss the report shows (cross-entropy with the natural log).
LOSS_UNIT = "nats per token"
#: A section's opening, as :func:`scaling.reports.blocks.section` writes it: its id and title.
_SECTION_HEAD = re.compile(r'<section id="([^"]+)"><h2>([^<]*)</h2>')

#: The heading of the notes under the answer.
LIMITS_TITLE = "What the data cannot determine"

#: An optional section: (data, page) -> its HTML, appended after the standard ones (e.g. the
#: inference trade-off of :mod:`scaling.reports.figures_inference`).
Extra = Callable[[ReportData, "Page"], str]


def write_report(url: str, sweep: str | None = None, path: str | Path = "report.html", *, fit: str = "sweep",
                 store_fits: bool = False, extras: Sequence[Extra] = (), analysis: Analysis | None = None,
                 recommendation: Recommendation | None = None, next_plan: str | None = None) -> Path:
    """Write the report of ``sweep`` (default: the latest) in the database at ``url`` to ``path``.

    Returns the absolute path written. ``fit="sweep"`` (default) reads the stored
    analysis of unchanged data (``scaling.fitting.analyse``), else makes one as ``scaling fit`` does;
    ``"stored"`` shows only the newest stored analysis; ``"memory"`` analyses it quickly, storing nothing.
    New fits are stored only with ``store_fits=True``: by default the database is only read.
    ``analysis``: the sweep's :class:`~scaling.fitting.analysis.Analysis` already made (e.g. at the end of
    ``scaling sweep``): the report shows its loss, hyperparameter and task laws and fits nothing;
    ``recommendation``: its recommendation sized by the plan, the report's headline; ``next_plan``: the plan
    that trains its run (YAML), shown under the run to copy.
    """
    from scaling.reports.figures_curves import curve_law_section
    from scaling.reports.figures_tasks import task_section

    data = ReportData.load(url, sweep, fit=fit, store_fits=store_fits, sweep_fit=analysis,
                           recommendation=recommendation, next_plan=next_plan)
    # downstream tasks: a section only when the sweep's runs evaluated some (the report is unchanged otherwise)
    return write_report_data(data, path, extras=(*extras, curve_law_section(url), task_section))


def write_report_data(data: ReportData, path: str | Path, *, extras: Sequence[Extra] = ()) -> Path:
    """Render ``data`` and write it to ``path`` (parent folders created); returns the path."""
    out = Path(path).expanduser().resolve()
    write_atomic(out, render(data, extras=extras))
    return out


def render(data: ReportData, *, extras: Sequence[Extra] = ()) -> str:
    """The report as one HTML string."""
    page = Page()
    # the sections below the summary first: those that compute an answer (lr, batch, each task's
    # accuracy) give it to the page, and the summary's first screen shows them all (:func:`_headline`)
    parts = [
        _runs_table(data),
        _curves(data, page),
        _isoflop(data, page),
        _frontiers(data, page),
        _parametric(data, page),
        moe_section(data, page),
        _health(data, page),
        adaptive_section(data, page),
        hparams_section(data, page),
        *(extra(data, page) for extra in extras),
    ]
    body = "\n".join([_summary(data, page), *parts])
    title = f"Scaling report: {data.sweep}" if data.sweep else "Scaling report"
    # the notes follow the answer inside the summary (:func:`_limits`), not above it
    return render_page(title=title, sections=[*SECTIONS, *optional_sections(parts)], body=body, page=page,
                       source=data.source)


def optional_sections(parts: Sequence[str]) -> list[tuple[str, str]]:
    """(id, title) of each section in ``parts`` beyond the standard ones (hyperparameters, downstream
    tasks, ...), in page order, for the navigation bar."""
    standard = {sid for sid, _ in SECTIONS}
    found = [m.groups() for part in parts for m in _SECTION_HEAD.finditer(part)]
    return [(sid, html.unescape(title)) for sid, title in found if sid not in standard]


def render_page(*, title: str, sections: Sequence[tuple[str, str]], body: str, page: "Page",
                notes: Sequence[str] = (), source: str = "", notes_title: str = "What is missing") -> str:
    """One self-contained page in the report's template: header, section links, notes, body, figures.

    ``body`` is HTML (callers escape user text); ``title``, ``notes`` and ``source`` are escaped here.
    Shared by the sweep report and the comparison page (:mod:`scaling.reports.compare`).
    """
    from plotly.offline import get_plotlyjs

    from scaling.version import __version__

    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    meta = f"generated {generated}" + (f" from {e(source)}" if source else "")
    nav = "".join(f'<a href="#{sid}">{e(name)}</a>' for sid, name in sections)
    notes_html = ""
    if notes:
        items = "".join(f'<li tabindex="0" title="{e(n)}">{e(n)}</li>' for n in notes)
        notes_html = f'<div class="notes" id="notes"><strong>{e(notes_title)}</strong><ul>{items}</ul></div>'
    template = string.Template(resources.files("scaling.reports").joinpath("templates/report.html").read_text("utf-8"))
    return template.substitute(
        version=e(__version__),
        title=e(title),
        meta=meta,
        nav=nav,
        notes=notes_html,
        body=body,
        plotly_js=get_plotlyjs(),
        figures_json=page.figures_json(),
    )


# -- building blocks ---------------------------------------------------------------------------
# -- summary ----------------------------------------------------------------------------------
def _summary(data: ReportData, page: Page) -> str:
    r = data.runs
    info = data.sweep_info or {}
    counts = data.status_counts()
    done = data.completed
    rows: list[tuple[str, str]] = [("sweep", e(data.sweep or "–"))]
    if info.get("created_at") or info.get("created"):
        rows.append(("created", e(utc_text(info.get("created_at") or info.get("created")))))
    conv_p = info.get("params_convention")
    conv_f = info.get("flops_convention")
    if conv_p or conv_f:
        rows.append(("conventions", e(f"N counts {conv_p or '?'} parameters; C = {conv_f or '?'} FLOPs per token × D")))
    rows.append(("runs", e(f"{len(r)} in all: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) if len(r) else "none")))
    spent = float(done["C"].sum()) if len(done) else 0.0
    planned = float(r["C"].sum()) if len(r) else 0.0
    rows.append(("compute", e(f"{_num(spent)} FLOPs spent on completed runs, of {_num(planned)} planned")))
    if len(r):
        rows.append(("model sizes", e(f"N from {size(r['N'].min())} to {size(r['N'].max())} parameters; "
                                      f"D from {size(r['D'].min())} to {size(r['D'].max())} tokens; "
                                      f"{r['N'].nunique()} sizes, {len(set(group_budgets(r['C'].to_numpy(float))))} budgets")))
    data_line, hw_line = _data_and_hardware(r)
    rows.append(("data", e(data_line)))
    rows.append(("hardware", e(hw_line) if not _simulated(r) else
                 e("none: every run is simulated (losses drawn from a known law, nothing trained)")))
    # the answer first, then what the data cannot determine, then the sweep it comes from
    inner = _headline(data, page) + _limits(data) + '<h3 id="sweep-facts">The sweep</h3>' + kv(rows)
    plan = info.get("plan")
    if plan:
        # masked again: a plan stored by an earlier version may hold its db: password
        text = mask_data(plan) if isinstance(plan, str) else json.dumps(mask_data(plan), indent=2, default=str)
        inner += f"<details><summary>Plan as submitted</summary><pre>{e(text)}</pre></details>"
    return section("summary", "Summary", inner)


def utc_text(value: object) -> str:
    """A stored time as UTC to the second ("2026-12-05 03:24:26 UTC"); a naive time is UTC (as the database stores it)."""
    try:
        t = pd.Timestamp(value)
    except (TypeError, ValueError):
        return str(value)
    if pd.isna(t):
        return str(value)
    t = t.tz_localize("UTC") if t.tzinfo is None else t.tz_convert("UTC")
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def _simulated(runs: pd.DataFrame) -> bool:
    """Whether every run of ``runs`` is simulated (its spec has a ``simulate`` section): no hardware, no throughput."""
    if runs.empty or "spec" not in runs:
        return False
    specs = [as_dict(x) for x in runs["spec"]]
    return bool(specs) and all(s and s.get("simulate") for s in specs)


def limit_notes(data: ReportData) -> list[str]:
    """What the data cannot determine and what is missing: the load's notes, and each fitted law's
    doubts as it stands now (a law's notes can change after loading), each once."""
    notes = list(data.notes)
    for kind, fitted in data.fits.items():
        law = fitview.as_law(fitted)
        if law is not None:
            notes += [f"{fitview.label_of(kind, fitted)}: {d}" for d in law.doubts()]
    return list(dict.fromkeys(notes))


def _limits(data: ReportData) -> str:
    """The notes, compactly, under the answer: one line each, the whole note on hover or focus."""
    notes = limit_notes(data)
    if not notes:
        return ""
    items = "".join(f'<li tabindex="0" title="{e(n.replace("`", ""))}">{prose(n)}</li>' for n in notes)
    return f'<div class="notes limits" id="notes"><strong>{e(LIMITS_TITLE)}</strong><ul>{items}</ul></div>'


def _data_and_hardware(r: pd.DataFrame) -> tuple[str, str]:
    specs = [s for s in (as_dict(x) for x in r["spec"]) if s]
    if not specs:
        return "–", "–"
    d = specs[0].get("data") or {}
    parts = [f"source {d.get('source', '?')}"]
    if d.get("path"):
        parts.append(f"path {d['path']}")
    if d.get("fingerprint"):
        parts.append(f"fingerprint {str(d['fingerprint'])[:16]}")
    if d.get("unique_tokens"):
        parts.append(f"{_num(d['unique_tokens'])} unique tokens")
    m = specs[0].get("model") or {}
    if m:
        parts.append(f"vocabulary {m.get('vocab_size', '?')}, context {m.get('context', '?')}")
    precisions = sorted({str(s.get("precision", "?")) for s in specs})
    ex = [s.get("execution") or {} for s in specs]
    devices = sorted({str(x.get("device", "auto")) for x in ex})
    workers = sorted({int(x.get("workers", 1)) for x in ex})
    strategies = sorted({str(x.get("strategy", "auto")) for x in ex})
    hosts = sorted({str(h) for h in r["host"].dropna()}) if "host" in r else []
    hw = (f"device {'/'.join(devices)}, {'/'.join(map(str, workers))} worker(s) per run, strategy "
          f"{'/'.join(strategies)}, precision {'/'.join(precisions)}")
    if hosts:
        hw += f"; hosts: {', '.join(hosts[:8])}" + (f" and {len(hosts) - 8} more" if len(hosts) > 8 else "")
    return "; ".join(parts), hw


def next_budget(data: ReportData) -> float | None:
    """The budget the headline recommends for: the recommendation's (handed in, or the analysis' own: the
    closing answer's), else ten times the largest completed run (:func:`scaling.fitting.recommend.default_budget`)."""
    from scaling.fitting.recommend import default_budget

    for rec in (data.recommendation, data.sweep_fit.recommendation if data.sweep_fit is not None else None):
        if rec is not None:
            return float(rec.compute)
    done = data.completed
    if done.empty:
        return None
    return default_budget(float(done["C"].max()))


def recommend_for(data: ReportData, target: float) -> Any | None:
    """The recommendation at ``target``: the one handed in (sized by the plan) or the analysis' own at its
    budget (None when there is none: the report compares no laws of its own)."""
    return data.recommendation_at(target)


def recommendations(data: ReportData, target: float) -> list[dict[str, Any]]:
    """Each fitted method's N*, D* and loss at ``target`` with their 95% intervals, and whether it is reliable."""
    rec = recommend_for(data, target)
    if rec is None:
        return []
    return [{"method": kind, "label": fitview.label_of(kind, data.fits.get(kind)), "chosen": kind == rec.chosen,
             "unreliable": rec.unreliable.get(kind), **iv} for kind, iv in rec.per_law.items()]


def _headline(data: ReportData, page: Page | None = None) -> str:
    """The answer: the dense laws' (:func:`_dense_headline`), then, on a sweep with experts, the laws of
    sparsity's at the same budget (each says which family of law it comes from)."""
    target = next_budget(data)
    if target is None:
        return missing("No recommendation: no run has completed yet.")
    moe_fit = data.sweep_fit.moe if data.sweep_fit is not None else None
    return _dense_headline(data, target, page) + (moe_headline(moe_fit, target) if moe_fit is not None else "")


def _dense_headline(data: ReportData, target: float, page: Page | None = None) -> str:
    """The answer as one block: the next budget; N*, D*, the loss, and what the other sections give
    for that run (lr, batch, each task's accuracy: ``page.answers``), each with its 95% interval or why
    none, each linked to its section; then why this law; then every law's numbers in a table."""
    answers = list(page.answers) if page is not None else []
    rec = recommend_for(data, target)
    run_block = next_run_block(rec, data.next_plan) if rec is not None else ""  # the run, its lr, batch, plan
    if not run_block and not any(a.href == "#hparams" for a in answers):  # no section fitted lr* or B*
        plan = '<span class="ci">set by the plan: the sweep has no hyperparameter groups to fit it from</span>'
        answers[:0] = [Answer("learning rate", plan, "#sweep-facts"), Answer("batch (tokens)", plan, "#sweep-facts")]
    moe_fit = data.sweep_fit.moe if data.sweep_fit is not None else None
    family = " from the dense laws" if moe_fit is not None else ""
    if rec is None or not rec.per_law:
        return missing(f"No recommendation{family} for the next budget (C = {_num(target)} FLOPs): no law could be "
                       "fitted.")
    if rec.chosen is None:
        return missing(f"No recommendation{family} for the next budget (C = {_num(target)} FLOPs): no fitted law has "
                       "an interval on N* or is reliable.")
    best = rec.per_law[rec.chosen]
    label = fitview.label_of(rec.chosen, data.fits.get(rec.chosen)) + (f" ({DENSE_FAMILY})" if moe_fit else "")
    budget = f"<strong>Next budget C = {_num(target)} FLOPs</strong> (10× the largest run)"
    if rec.chosen in rec.unreliable:  # an unreliable law's interval measures nothing the data determine
        none = '(no interval: no law is reliable)'
        sizes = [Answer(label, f'<span class="unrecommended">{text} {none}</span>', href) for label, text, href in (
            ("N* (parameters)", size(best["N"].value), "#frontiers"),
            ("D* (tokens)", size(best["D"].value), "#frontiers"),
            (f"loss ({LOSS_UNIT})", _num(best["loss"].value, 4), "#parametric"))]
        head = (f'<div class="headline"><span class="answer">{budget}: no law is reliable, so nothing is '
                f"recommended.</span>{answer_grid(sizes + answers)}"
                f'<span class="why">The values are those of {e(label)}, the best determined, without intervals: '
                f"{e(rec.chosen_reason)}.</span></div>")
    else:
        sizes = [Answer("N* (parameters)", interval(best["N"], fmt=size), "#frontiers"),
                 Answer("D* (tokens)", interval(best["D"], fmt=size), "#frontiers"),
                 Answer(f"predicted loss ({LOSS_UNIT})", interval(best["loss"], 4), "#parametric")]
        head = (f'<div class="headline"><span class="answer">{budget}, recommended by {e(label)}:</span>'
                f"{answer_grid(sizes + answers)}"
                f'<span class="why">95% intervals in brackets. '
                f"Why this law: {e(rec.chosen_why or rec.chosen_reason)}.</span></div>")
    rows = []
    for kind, r in rec.per_law.items():
        unreliable = kind in rec.unreliable  # its reason is in the notes under the table
        status = ("chosen" if kind == rec.chosen and not unreliable else
                  "left out: unreliable" if unreliable else "reliable")
        if kind in rec.determined_at_budget:  # a flagged law is never used silently
            status += f" (determined at this budget, though {rec.determined_at_budget[kind]})"

        def cell(iv: Interval, digits: int = 3, fmt: Callable[..., str] = _num) -> str:
            return fmt(iv.value, digits) if unreliable else interval(iv, digits, fmt=fmt)

        ratio = r["D"].value / r["N"].value if r["N"].value else math.nan
        row_class = ' class="unreliable"' if unreliable else ""
        rows.append(f"<tr{row_class}><td>{e(fitview.label_of(kind, data.fits.get(kind)))}</td>"
                    f"<td class=\"num\">{cell(r['N'], fmt=size)}</td><td class=\"num\">{cell(r['D'], fmt=size)}</td>"
                    f"<td class=\"num\">{_num(ratio)}</td><td class=\"num\">{cell(r['loss'], 4)}</td>"
                    f"<td>{e(status)}</td></tr>")
    table = ('<table id="recommendations"><thead><tr><th>method</th><th class="num">N*</th><th class="num">D*</th>'
             f'<th class="num">D*/N*</th><th class="num">loss ({LOSS_UNIT})</th><th>status</th></tr></thead>'
             f"<tbody>{''.join(rows)}</tbody></table>")
    extra = []
    if any(iv.widened for r in rec.per_law.values() for iv in r.values()):
        extra.append("Intervals marked * are widened for extrapolating beyond the largest fitted budget by the "
                     "error each law made predicting its own largest budget (its backtest).")
    if rec.across_laws:
        extra.append(f"Across the reliable laws N* lies in {bounds(rec.across_laws.lo, rec.across_laws.hi, fmt=size)}: "
                     "the spread between methods, a model uncertainty no single law's interval shows.")
    if rec.agreement:
        extra.append(f"The reliable methods' N* span a factor of {rec.agreement['N_ratio']:.2g}.")
    return head + run_block + table + (f'<p class="small">{" ".join(e(x) for x in extra)}</p>' if extra else "")


# -- runs table -------------------------------------------------------------------------------
def _runs_table(data: ReportData) -> str:
    r = data.runs
    if r.empty:
        return section("runs", "Runs", missing("The sweep has no runs."))
    ev = data.event_counts()
    # one table that fits a 1280-px screen: the name and tags under the key, the problem events in one column
    cols = ["run", "N", "shape", "D", "C", "D/N", "lr", "batch", "group", "train loss", "eval loss",
            "status", "attempts", "events"]
    numeric = {"N", "D", "C", "D/N", "lr", "batch", "train loss", "eval loss", "attempts", "events"}
    head = "".join(f'<th class="num">{e(c)}</th>' if c in numeric else f"<th>{e(c)}</th>" for c in cols)
    body = []
    listed = thin_table(r)
    for _, row in listed.iterrows():
        key = row["run_key"]
        counts = ev.loc[key] if key in ev.index else None
        spikes = int(counts[names.LOSS_SPIKE]) if counts is not None else 0
        rollbacks = int(counts[names.ROLLBACK]) if counts is not None else 0
        retries = int(counts[names.RETRY]) if counts is not None else 0
        attempts = row["attempts"]
        about = " · ".join(str(x) for x in (row.get("name"), row.get("tags")) if x)
        events = ", ".join(f"{n} {what}{'s' if n > 1 else ''}" for n, what in
                           ((spikes, "spike"), (rollbacks, "rollback"), (retries, "retry")) if n).replace("retrys", "retries")
        group = row.get("hparam_group")
        cells = [
            f'<td class="runcell"><code>{e(key)}</code>' + (f'<br><span class="ci">{e(about)}</span>' if about else "")
            + "</td>",
            _numcell(row["N"], fmt=size), f"<td>{e(row['shape'])}</td>", _numcell(row["D"], fmt=size), _numcell(row["C"]),
            _numcell(row["tokens_per_param"]), _numcell(row.get("lr")), _numcell(row.get("batch_tokens"), fmt=size),
            f"<td>{e(group_title(str(group))) if isinstance(group, str) and group else '–'}</td>",
            _numcell(row["final_train_loss"], 4), _numcell(row["final_loss"], 4),
            f'<td class="status-{e(row["status"])}">{e(row["status"])}</td>',
            _numcell(attempts, 3), f'<td class="num" data-v="{spikes + rollbacks + retries}">{e(events) or "–"}</td>',
        ]
        body.append("<tr>" + "".join(cells) + "</tr>")
    table = (f'<div class="table-wrap"><table class="sortable" id="runs-table"><thead><tr>{head}</tr></thead>'
             f'<tbody>{"".join(body)}</tbody></table></div>')
    shown = "" if len(listed) == len(r) else (
        f" Listed: {len(listed):,} of the {len(r):,} runs (at most {MAX_TABLE_ROWS:,}: every run that did not complete, "
        "then one run of every (N, D) before a second seed of any); <code>scaling runs</code> lists them all.")
    return section("runs", "Runs", f"<p>Click a column to sort.{shown}</p>" + table)


def _numcell(x: object, digits: int = 3, fmt: Callable[..., str] = _num) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return '<td class="num" data-v="">–</td>'
    if not math.isfinite(f):
        return '<td class="num" data-v="">–</td>'
    return f'<td class="num" data-v="{f!r}">{fmt(f, digits)}</td>'


# -- figures sections -------------------------------------------------------------------------
def _curves(data: ReportData, page: Page) -> str:
    if data.curves is None or data.curves.empty:
        return section("curves", "Training curves", missing("No loss curves recorded yet."))
    env = F.loss_envelope(data.curves)  # from every run's curve, drawn or not
    with_curves = data.runs[data.runs["run_key"].isin(set(data.curves["run_key"]))]
    runs, curves = thin_runs(with_curves), data.curves
    thinned = len(runs) < len(with_curves)
    if thinned:
        curves = curves[curves["run_key"].isin(set(runs["run_key"]))]
    else:
        runs = data.runs
    inner = page.figure("loss-tokens", F.loss_curves(curves, runs, x="tokens"))
    inner += page.figure("loss-flops", F.loss_curves(curves, runs, x="flops", envelope=env,
                                                     optima=_approach1_optima(data)))
    drawn = "" if not thinned else (
        f"Drawn: the curves of {len(runs):,} of the {len(with_curves):,} runs (at most {MAX_RUNS_DRAWN:,}, one run of "
        "every (N, D) before a second seed of any), so the page stays quick to open; the envelope uses them all. ")
    inner += (f"<p>{drawn}Curves are thinned for display to about {int(curves.groupby(['run_key', 'name']).size().max())} "
              "log-spaced points each, always keeping each curve's minimum. The dashed black line is the "
              "approach-1 envelope: the lowest loss any run reached within each FLOP budget; crosses mark the "
              "optima approach 1 fitted its frontier to.</p>")
    return section("curves", "Training curves", inner)


def drawn_points(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a figure of one marker per run draws: :func:`thin_runs` at :data:`MAX_POINTS_DRAWN`."""
    return thin_runs(runs, MAX_POINTS_DRAWN)


def thinned_note(runs: pd.DataFrame) -> str:
    """What :func:`drawn_points` left out of this section's figures, in words ("" when nothing)."""
    if len(runs) <= MAX_POINTS_DRAWN:
        return ""
    return (f'<p class="small">Drawn: markers for {MAX_POINTS_DRAWN:,} of the {len(runs):,} runs (one run of every '
            "(N, D) before a second seed of any); the fits use them all.</p>")


def _approach1_optima(data: ReportData) -> pd.DataFrame | None:
    """The per-FLOP optima approach 1 used (flops, loss, N), from its stored envelope."""
    law = data.fits.get("approach1")
    rows = fitview.plot_info(law).get("envelope") if law is not None else None
    if not rows:
        return None
    env = pd.DataFrame(rows)
    if not {"flops", "loss_opt", "N_opt"} <= set(env.columns):
        return None
    if "status" in env.columns:
        env = env[env["status"] == "used"]
    out = pd.DataFrame({"flops": env["flops"], "loss": env["loss_opt"], "N": env["N_opt"]}).astype(float).dropna()
    return out if not out.empty else None


def _isoflop(data: ReportData, page: Page) -> str:
    inner = page.figure("isoflop", F.isoflop_profiles(drawn_points(data.runs), data.fits.get("approach2")))
    inner += thinned_note(data.runs)
    if "approach2" not in data.fits:
        inner += missing("Approach 2 is not fitted, so no parabolas are drawn.")
    else:
        flagged = [s for s in fitview.fitted_slices(data.fits["approach2"]) if s["flagged"]]
        if flagged:
            inner += missing("Left out of the fit: " + "; ".join(f"C = {_num(s['C'])}: {s['status']}" for s in flagged))
    return section("isoflop", "IsoFLOP profiles", inner)


def _frontiers(data: ReportData, page: Page) -> str:
    target = next_budget(data)
    rec = recommend_for(data, target) if target is not None else None
    unreliable = set(rec.unreliable) if rec is not None else set()
    inner = page.figure("frontiers", F.frontiers(data.fits, runs=drawn_points(data.completed), target=target,
                                                 unreliable=unreliable))
    inner += thinned_note(data.completed)
    inner += _exponents(data)
    return section("frontiers", "Frontiers", inner)


def _exponents(data: ReportData) -> str:
    rows = []
    for method, law in data.fits.items():
        try:
            ivs = law.reported_intervals()
        except Exception:
            continue
        ivs = {k: v for k, v in ivs.items() if isinstance(v, Interval)}
        unreliable = any(v.kind == "unreliable" for v in ivs.values())  # said once for the law, not per parameter
        cells = ", ".join(f"{e(k)} = {_num(v.value, 4) if v.kind == 'unreliable' else interval(v, 4)}"
                          for k, v in ivs.items())
        if unreliable:
            cells += ' <span class="ci">(no intervals: law unreliable)</span>'
        rows.append(f"<tr><td>{e(fitview.label_of(method, law))}</td><td>{cells}</td></tr>")
    if not rows:
        return ""
    return ('<h3>Fitted parameters (95% bootstrap intervals)</h3><table id="parameters"><thead><tr><th>method</th>'
            f"<th>parameters</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _parametric(data: ReportData, page: Page) -> str:
    law = data.fits.get("approach3")
    inner = ""
    if law is None:
        inner += missing("Approach 3 (parametric L(N, D)) is not fitted, so there is no contour.")
    else:
        inner += page.figure("contour", F.parametric_contour(law, drawn_points(data.completed)))
    inner += page.figure("residuals", F.residuals(data.fits, drawn_points(data.runs)))
    inner += thinned_note(data.runs)
    bt = fitview.backtest_frame(data.fits)
    inner += page.figure("backtest", F.backtest(bt))
    if bt.attrs.get("notes"):
        inner += "<ul>" + "".join(f"<li>{e(n)}</li>" for n in bt.attrs["notes"]) + "</ul>"
    return section("parametric", "Parametric fit", inner)


def _health(data: ReportData, page: Page) -> str:
    r = data.runs
    failed = r[r["status"].isin(["failed", "interrupted"]) | r["error"].notna() & (r["error"].astype(str) != "")]
    if failed.empty:
        inner = "<p>No run failed.</p>"
    else:
        rows = "".join(
            f"<tr><td><code>{e(x['run_key'])}</code></td><td>{e(x['name'])}</td><td class=\"status-{e(x['status'])}\">"
            f"{e(x['status'])}</td><td class=\"num\">{_num(x['attempts'])}</td><td class=\"error\">{e(x['error'] or '')}</td></tr>"
            for _, x in failed.iterrows()
        )
        inner = ('<h3>Failures</h3><table id="failures"><thead><tr><th>run</th><th>name</th><th>status</th>'
                 f'<th class="num">attempts</th><th>error</th></tr></thead><tbody>{rows}</tbody></table>')
    events = data.events
    if events is not None and len(events) > MAX_EVENTS_DRAWN:
        events = thin_events(events, HEALTH_EVENTS)
        inner += (f"<p>Drawn: {len(events):,} of the {len(data.events):,} events (at most {MAX_EVENTS_DRAWN:,}: every "
                  "spike, rollback, retry, resume, skip or failure first).</p>")
    inner += page.figure("events", F.run_events(events, r))
    if _simulated(r):  # nothing ran on hardware: no throughput to draw
        inner += '<p class="small" id="no-throughput">No throughput: every run is simulated.</p>'
    else:
        inner += page.figure("throughput", F.throughput(data.perf, drawn_points(r)))
    return section("health", "Run health", inner)
