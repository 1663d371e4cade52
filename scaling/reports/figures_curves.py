"""The report's curve-law section: each size's eval curves with its fitted curve law, the held-out errors, and
which schedule the law predicts best for that size's longest run.

Drawn from the sweep's analysis (its :class:`~scaling.fitting.curves.sweep.SweepCurves`, fitted once with
the loss laws) and the runs' eval curves read again with their rates (:func:`scaling.fitting.curves.data.
curves_from_db`): nothing is fitted here. A sweep without curve laws gets no section (the run to train
says why there is no schedule advice).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
import plotly.graph_objects as go

from scaling.errors import UserError
from scaling.fitting.curves.advice import advice_lines, schedule_advice
from scaling.fitting.curves.data import Curve, curves_from_db
from scaling.fitting.curves.laws import form as law_form
from scaling.fitting.curves.sweep import SizeCurves, SweepCurves, selected_curves
from scaling.fmt import num
from scaling.fmt import escape as e
from scaling.reports.blocks import missing, prose, section
from scaling.reports.titles import axis, titled

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.recommend import Recommendation
    from scaling.reports.blocks import Page
    from scaling.reports.report_data import ReportData

__all__ = ["SECTION_ID", "TITLE", "curve_law_section", "size_figure"]

SECTION_ID = "curve-laws"
TITLE = "Loss curves across schedules"
#: Steps at which each curve's fitted law is drawn.
DRAWN_STEPS = 200
LOSS_AXIS = axis("eval loss", "nats per token")


def _label(run: str) -> str:
    return run[:12]


def size_figure(size: SizeCurves, curves: list[Curve]) -> go.Figure:
    """One size's measured eval losses (markers), its chosen curve law fitted to them all (lines) and each
    curve predicted by the law fitted without it (dashed)."""
    law = size.law
    held = {h["run"]: h for h in law.held_out_.get(law.form_ or "", []) if h.get("steps")}
    fig = go.Figure()
    for i, c in enumerate(curves):
        colour = f"hsl({(i * 67) % 360}, 60%, 45%)"
        name = _label(c.run)
        fig.add_trace(go.Scatter(x=c.steps.tolist(), y=c.loss.tolist(), mode="markers", name=f"{name} measured",
                                 marker=dict(color=colour, size=5), legendgroup=name))
        steps = np.unique(np.linspace(int(c.steps.min()), int(c.steps.max()), DRAWN_STEPS).round().astype(np.int64))
        fitted = law.loss_at(c.lr, steps)
        fig.add_trace(go.Scatter(x=steps.tolist(), y=fitted.tolist(), mode="lines", name=f"{name} fitted law",
                                 line=dict(color=colour), legendgroup=name))
        h = held.get(c.run)
        if h is not None:
            fig.add_trace(go.Scatter(x=h["steps"], y=h["pred"], mode="lines", name=f"{name} predicted held out",
                                     line=dict(color=colour, dash="dash"), legendgroup=name))
    fig.update_layout(template="plotly_white", height=420)
    return titled(fig, f"N = {num(size.N, 3)}: eval loss and the {law_form(law.form_ or '').title}",
                  x=axis("optimizer step", "steps"), y=LOSS_AXIS, legend="run")


def _held_out_table(size: SizeCurves) -> str:
    law = size.law
    forms = [f for f in law.forms if law.held_out_.get(f)]
    if not forms:
        return missing("No held-out errors: one curve only, none can be left out.")
    head = "".join(f"<th>{e(law_form(f).title)}{' (chosen)' if f == law.form_ else ''}: MAE / relative</th>"
                   for f in forms)
    rows = []
    for i, run in enumerate(law.runs_):
        cells = []
        for f in forms:
            h = law.held_out_[f][i] if i < len(law.held_out_[f]) else {}
            mae, mre = h.get("mae", math.nan), h.get("mre", math.nan)
            cells.append(f"<td>{e(num(mae, 3))} / {e(f'{100 * mre:.3g}%' if math.isfinite(mre) else '-')}</td>")
        rows.append(f"<tr><td>{e(_label(run))}</td>{''.join(cells)}</tr>")
    means = "".join(f"<td>{e(num(law.held_out_error(f), 3))}</td>" for f in forms)
    return (f'<table class="curve-held-out"><thead><tr><th>run left out</th>{head}</tr></thead><tbody>'
            f"{''.join(rows)}<tr><th>mean absolute error</th>{means}</tr></tbody></table>")


def _advice(size: SizeCurves) -> str:
    """Which schedule the size's law predicts best for a run as long as its longest (or why it says nothing)."""
    verdicts = [str(d) for d in size.law.doubts() if not d.kind.about_parameters]
    if verdicts:
        return missing("No schedule advice at this size: the curve law is not trusted: " + "; ".join(verdicts))
    try:
        advice = schedule_advice(size.law, size.longest, size.peak, int(round(size.warmup * size.longest)))
    except UserError as exc:
        return missing(f"No schedule advice at this size: {' '.join(str(exc).split())}")
    rows = "".join(f"<tr><td>{e(name)}{' (best)' if name == advice.best else ''}</td><td>{e(iv.text(4))}</td></tr>"
                   for name, iv in sorted(advice.losses.items(), key=lambda kv: kv[1].value))
    said = advice_lines(advice.to_dict() | {"N": size.N, "steps": size.longest, "peak": size.peak}, indent="")
    return (f"<p>{prose(' '.join(said))}</p>"
            f'<table class="curve-advice"><thead><tr><th>schedule ({size.longest:,} steps)</th>'
            f"<th>predicted final loss [95% interval]</th></tr></thead><tbody>{rows}</tbody></table>")


def render_curve_laws(data: ReportData, page: Page, curves: SweepCurves, measured: list[Curve]) -> str:
    """The section's HTML for the sweep's curve laws ``curves`` and its runs' ``measured`` curves."""
    kept, _ = selected_curves(measured)
    parts = [f"<p>Each size whose runs of one recipe (peak learning rate, batch) follow two schedules or more has "
             f"a curve law of its own, fitted to every evaluation of those runs; the law with the lower held-out "
             f"error (each curve left out, predicted by the others) is chosen. Lines: the law fitted to all the "
             f"curves; dashed: each curve predicted by the law fitted without it.</p>"]
    if curves.left_out:
        parts.append(f"<p class=\"ci\">Left out: {e('; '.join(curves.left_out))}.</p>")
    rec = data.recommendation or (data.sweep_fit.recommendation if data.sweep_fit is not None else None)
    if rec is not None and rec.chosen is not None and rec.chosen not in rec.unreliable:
        parts.append(schedule_block(rec, "For the recommended run"))
    for N, size in curves.sizes.items():
        runs = {c.run: c for c in kept.get(N, [])}
        shown = [runs[r] for r in size.law.runs_ if r in runs]
        parts.append(f"<h3>N = {e(num(N, 3))} ({e(law_form(size.law.form_ or '').title)})</h3>")
        if size.law.notes_:
            parts.append("<ul>" + "".join(f"<li>{e(str(n))}</li>" for n in size.law.notes_) + "</ul>")
        if shown:
            parts.append(page.figure(f"curve-law-{len(page.figures)}", size_figure(size, shown)))
        parts.append(_held_out_table(size))
        parts.append(_advice(size))
    return section(SECTION_ID, TITLE, "\n".join(parts))


def curve_law_section(url: str) -> Callable[[ReportData, Page], str]:
    """A report section (``scaling.reports.html.Extra``) for the sweep's curve laws; "" without any."""

    def build(data: ReportData, page: Page) -> str:
        curves = data.sweep_fit.curves if data.sweep_fit is not None else None
        if not data.sweep or not isinstance(curves, SweepCurves) or not curves.sizes:
            return ""
        try:
            measured, _ = curves_from_db(url, data.sweep)
        except UserError as exc:
            return section(SECTION_ID, TITLE, missing(f"The curves could not be read: {' '.join(str(exc).split())}"))
        return render_curve_laws(data, page, curves, measured)

    return build


def schedule_block(rec: Recommendation, title: str = "Schedule") -> str:
    """The schedule advice for the recommended run (HTML): the best schedule and its rivals, or why none."""
    lines = advice_lines(rec.schedule, indent="")
    if not lines:
        return ""
    lines = [x.removeprefix("schedule: ") for x in lines]  # the block's title says it
    return (f'<div class="schedule-advice"><strong>{e(title)}</strong><p>{"<br>".join(e(x) for x in lines)}</p>'
            "</div>")
