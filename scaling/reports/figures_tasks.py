"""The report's downstream section: each task's accuracy against compute and its accuracy-from-loss fit.

Shown only when the sweep's runs evaluated tasks (``task/<task>/<kind>`` metrics); without them
the report is unchanged. Per task: accuracy against compute with the chained prediction along
the recommended law's compute-optimal frontier and its 95% band (both steps' bootstrap), the
prediction at the next budget marked; and step 2 (accuracy against task loss) with every
evaluation and each fitted form. A form flagged unreliable draws its curve but no band.

Accuracies are probabilities: their axes run from 0 to 1 with the task's chance level dashed where
it is known, and a value outside [0, 1] is neither drawn nor printed (the fits bound their forms to
[chance, 1]; this is the report's own check).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from scaling.errors import UserError
from scaling.fitting.tasks.task_laws import FORMS, ChainedAccuracy, TaskFits, TaskLaw, backtest_clause
from scaling.fmt import escape as e
from scaling.fmt import Interval, num
from scaling.reports.blocks import Page, interval, missing, prose, section
from scaling.reports.report_data import REPORT_BOOTSTRAP, ReportData
from scaling.reports.figures import with_alpha
from scaling.reports.titles import axis, titled

SECTION_ID = "tasks"
TITLE = "Downstream tasks"
#: Tasks drawn as figures (the rest are listed in the table only): a page of 60 figures helps no one.
MAX_TASK_FIGURES = 8
#: Budgets drawn along the frontier.
FRONTIER_POINTS = 24
COLORS = {"sigmoid": "#d62728", "exp": "#2ca02c"}
#: What an accuracy axis shows.
ACCURACY_RANGE = (0.0, 1.0)


def probabilities(values: Any) -> np.ndarray:
    """``values`` as floats with anything outside [0, 1] made NaN (not drawn)."""
    v = np.asarray(values, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.where((v >= 0.0) & (v <= 1.0), v, np.nan)


def accuracy_interval(iv: Interval | None, digits: int = 3) -> str:
    """A predicted accuracy with its interval as :func:`scaling.reports.blocks.interval` shows it, or why it is
    not shown when the value or an end of its interval lies outside [0, 1]."""
    if iv is None:
        return "-"
    if not _within_0_1(iv):
        return '<span class="ci">(not shown: outside [0, 1], not an accuracy)</span>'
    return interval(iv, digits)


def _within_0_1(iv: Interval) -> bool:
    """Whether the value and the ends of ``iv`` (those that are numbers) lie in [0, 1]."""
    return all(v is None or not math.isfinite(v) or 0.0 <= v <= 1.0 for v in (iv.value, iv.lo, iv.hi))


def _accuracy_axis(fig: go.Figure, law: TaskLaw) -> None:
    """The y axis on [0, 1] and, where the task's chance level is known, a dashed line at it."""
    fig.update_yaxes(range=list(ACCURACY_RANGE))
    if law.chance is not None and 0.0 <= law.chance <= 1.0:
        fig.add_hline(y=law.chance, line=dict(dash="dash", color="#7f7f7f", width=1),
                      annotation_text=f"chance {law.chance:.3g}", annotation_position="bottom right")


def frontier_prediction(law: TaskLaw, optimal: Callable[[float], float], k: float, c_lo: float,
                        c_hi: float) -> dict[str, tuple[np.ndarray, list[Interval]]]:
    """Each form's compute C in [c_lo, c_hi] and predicted accuracy with its 95% interval there, along the
    frontier N*(C) (no number where N*(C) is none)."""
    Cs = np.geomspace(c_lo, c_hi, FRONTIER_POINTS)
    out: dict[str, tuple[np.ndarray, list[Interval]]] = {f: (Cs, []) for f in law.curves}
    for C in Cs:
        N = optimal(float(C))
        p = law.predict_interval(N, C / (k * N)) if N > 0 and math.isfinite(N) else {}
        for f in law.curves:
            out[f][1].append(p.get(f) or Interval(math.nan))
    return out


def _band(ivs: Sequence[Interval]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The values and the lower and upper ends of ``ivs`` as arrays (NaN where an interval has none)."""
    ends = [(iv.value, *(iv.interval or (math.nan, math.nan))) for iv in ivs]
    value, lo, hi = np.asarray(ends, float).reshape(-1, 3).T
    return value, lo, hi


def accuracy_vs_compute(law: TaskLaw, frontier: dict[str, tuple[np.ndarray, list[Interval]]] | None,
                        prediction: dict[str, Any] | None) -> go.Figure:
    """Measured accuracy against compute (final evaluations solid, earlier ones faint), the chained curve and band."""
    ev = law.evals
    fig = go.Figure()
    if ev is not None and len(ev):
        for final, name, opacity in ((False, "earlier checkpoints", 0.3), (True, "final evaluations", 1.0)):
            rows = ev[ev["final"].astype(bool) == final]
            if len(rows):
                fig.add_trace(go.Scatter(x=rows["C"], y=probabilities(rows["y"]), mode="markers", name=name,
                                         opacity=opacity,
                                         marker=dict(color="#1f77b4", size=7 if final else 5),
                                         hovertemplate="C %{x:.3g}<br>accuracy %{y:.3g}<extra></extra>"))
    for form, (Cs, ivs) in (frontier or {}).items():
        color = COLORS.get(form, "#555")
        reliable = law.reliable(form)
        value, lo, hi = _band(ivs)
        if np.isfinite(lo).any():  # where the paired bootstrap gives an interval (see TaskLaw.predict_interval)
            fig.add_trace(go.Scatter(x=np.concatenate([Cs, Cs[::-1]]),
                                     y=probabilities(np.concatenate([hi, lo[::-1]])), fill="toself",
                                     fillcolor=with_alpha(color, 0.15), line=dict(width=0), hoverinfo="skip",
                                     name=f"{form}: 95% band", showlegend=True))
        fig.add_trace(go.Scatter(x=Cs, y=probabilities(value), mode="lines",
                                 name=f"{form} chain" + ("" if reliable else " (unreliable)"),
                                 line=dict(color=color, dash=None if reliable else "dot")))
    if prediction is not None:
        for form in law.curves:
            iv = prediction.get(form)
            shown = (law.reliable(form) or isinstance(iv, ChainedAccuracy) and iv.determined_at_point) if iv is not None else False
            if not shown or not 0.0 <= iv.value <= 1.0:  # a flagged chain's value is in the table, marked
                continue
            lo, hi = iv.interval or (math.nan, math.nan)
            err = None
            if 0.0 <= lo <= 1.0 and 0.0 <= hi <= 1.0:
                err = dict(type="data", symmetric=False, array=[hi - iv.value], arrayminus=[iv.value - lo])
            fig.add_trace(go.Scatter(x=[prediction["C"]], y=[iv.value], mode="markers", error_y=err,
                                     name=f"prediction at the next budget ({form})",
                                     marker=dict(symbol="star", size=13, color=COLORS.get(form, "#555"))))
    fig.update_layout(template="plotly_white", height=420, xaxis=dict(type="log"), legend=dict(orientation="h", y=-0.3))
    _accuracy_axis(fig, law)
    return titled(fig, f"{law.task}: {law.accuracy} against compute", x=axis("C", "FLOPs"),
                  y=axis(law.accuracy, "fraction correct"), legend="shown")


def accuracy_vs_loss(law: TaskLaw, prediction: dict[str, Any] | None = None) -> go.Figure:
    """Step 2: every evaluation's accuracy against its task loss, with each fitted form."""
    ev = law.evals
    fig = go.Figure()
    xs = [] if ev is None else list(ev["x"])
    if prediction is not None and math.isfinite(prediction["task_loss"].value):
        xs.append(prediction["task_loss"].value)
    if ev is not None and len(ev):
        fig.add_trace(go.Scatter(x=ev["x"], y=probabilities(ev["y"]), mode="markers", name="evaluations",
                                 marker=dict(color="#1f77b4", size=6, opacity=0.7),
                                 hovertemplate=f"{law.loss_label} %{{x:.4g}}<br>accuracy %{{y:.3g}}<extra></extra>"))
    if xs:
        grid = np.linspace(min(xs), max(xs), 200)
        for form, curve in law.curves.items():
            fig.add_trace(go.Scatter(x=grid, y=probabilities(curve.predict(grid)), mode="lines",
                                     name=curve.label + ("" if curve.reliable() else " (unreliable)"),
                                     line=dict(color=COLORS.get(form, "#555"),
                                               dash=None if curve.reliable() else "dot")))
    fig.update_layout(template="plotly_white", height=380, legend=dict(orientation="h", y=-0.3))
    _accuracy_axis(fig, law)
    return titled(fig, f"{law.task}: {law.accuracy} against {law.loss_label} (step 2)",
                  x=axis("task loss", "bits per byte") if law.loss_source == "bpb" else law.loss_label,
                  y=axis(law.accuracy, "fraction correct"), legend="shown")


def _frontier_law(data: ReportData, target: float) -> tuple[Any, float] | None:
    """The law the report recommends with at ``target`` (reliable only), and its k."""
    from scaling.reports import fitview

    laws = {kind: law for kind, law in ((k, fitview.as_law(v)) for k, v in data.fits.items()) if law is not None}
    rec = data.recommendation_at(target)  # the headline's: the closing answer's run when handed in
    if rec is None or not rec.chosen or rec.chosen in rec.unreliable:
        return None
    law = laws[rec.chosen]
    return law, float(law.k_)


def render_tasks(data: ReportData, page: Page, fits: TaskFits, how: str = "") -> str:
    """The section's HTML for fitted tasks ``fits`` (figures added to ``page``); ``how`` says how they were fitted."""
    if not fits:
        return ""
    done = data.completed
    target = 10.0 * float(done["C"].max()) if len(done) else None
    chosen = _frontier_law(data, target) if target else None
    rows, figures = [], []
    for i, (task, law) in enumerate(fits.laws.items()):
        prediction = frontier = None
        if chosen is not None:
            flaw, k = chosen
            N = float(np.asarray(flaw.optimal(target)[0]))
            prediction = law.predict_interval(N, target / (k * N))
            ev = law.evals
            c_lo = float(ev["C"].min()) if ev is not None and len(ev) else target / 100
            frontier = frontier_prediction(law, lambda C: float(np.asarray(flaw.optimal(C)[0])), k, c_lo, target)
        cells = "".join(f"<td>{accuracy_interval(prediction.get(f)) if prediction else '-'}</td>" for f in FORMS)
        bt = law.backtest or {}
        back = ("-" if not bt or bt.get("error") else
                ", ".join(f"{f} {num(100 * bt[f'{f}_mean_abs_error'], 3)}" for f in law.curves
                          if f"{f}_mean_abs_error" in bt))
        rows.append(f"<tr><td>{e(task)}</td><td>{e(law.accuracy)} from {e(law.loss_label)}</td>{cells}"
                    f"<td>{e(back)}</td></tr>")
        if i < MAX_TASK_FIGURES:
            figures.append(page.figure(f"task-{i}-compute", accuracy_vs_compute(law, frontier, prediction)))
            figures.append(page.figure(f"task-{i}-loss", accuracy_vs_loss(law, prediction)))
        # the report's first screen shows each task's accuracy too
        page.answer(f"{task} accuracy" if law.accuracy == "acc" else f"{task} {law.accuracy}",
                    headline_accuracy(law, prediction), f"#{SECTION_ID}")
    head = "".join(f"<th>{e(f)} at the next budget</th>" for f in FORMS)
    table = (f'<table id="task-predictions"><thead><tr><th>task</th><th>predicted</th>{head}'
             "<th>backtest mean |error| (percentage points)</th></tr></thead><tbody>" + "".join(rows)
             + "</tbody></table>")
    intro = ("<p>Accuracy at the next budget (10× the largest run) on the recommended law's compute-optimal run: "
             "step 1 predicts the task loss from (N, D), step 2 the accuracy from it; 95% intervals carry both "
             f"steps' bootstrap. A form flagged unreliable shows its value without an interval. {prose(how)}</p>")
    if chosen is None:
        intro += missing("No prediction at the next budget: no reliable law recommends a run.")
    # step 1's doubts are each form's: listed once per task
    notes = list(dict.fromkeys(f"{t}: {d}" for t, law in fits.laws.items() for f in law.curves for d in law.doubts(f)))
    notes += [f"{t}: not fitted: {why}" for t, why in fits.skipped.items()]
    if len(fits.laws) > MAX_TASK_FIGURES:
        notes.append(f"figures for the first {MAX_TASK_FIGURES} of {len(fits.laws)} tasks")
    notes_html = "<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes[:40]) + "</ul>" if notes else ""
    return section(SECTION_ID, TITLE, intro + table + notes_html + "".join(figures))


def task_section(data: ReportData, page: Page) -> str:
    """A report section (``scaling.reports.html.Extra``): the task laws of the report's analysis ("" without
    any: no run evaluated a task, or they could not be fitted, which the analysis' notes say)."""
    fitted = data.sweep_fit.tasks if data.sweep_fit is not None else None
    if not data.sweep or fitted is None or not fitted.laws:
        return ""
    return render_tasks(data, page, fitted)


def headline_accuracy(law: TaskLaw, prediction: dict[str, Any] | None) -> str:
    """A task's predicted accuracy for the report's first screen (HTML): the first reliable form's value
    with its 95% interval, else a flagged form's value saying it has none, else why there is none.
    A value or interval end outside [0, 1] is no accuracy: that form is passed over."""
    if prediction is None:
        return '<span class="ci">none: no reliable law recommends a run</span>'
    forms = [f for f in FORMS if f in law.curves and prediction.get(f)]
    for form in sorted(forms, key=lambda f: not law.reliable(f)):
        iv = prediction[form]
        if not _within_0_1(iv) or not math.isfinite(iv.value):
            continue
        if law.reliable(form):
            return f'{interval(iv)} <span class="ci">({e(form)} chain{e(backtest_clause(iv))})</span>'
        return (f'{num(iv.value)} <span class="ci">(no interval: the {e(form)} chain is unreliable'
                f'{e(backtest_clause(iv))})</span>')
    return '<span class="ci">none: no chain predicts an accuracy within [0, 1]</span>'
