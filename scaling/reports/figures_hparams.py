"""The report's hyperparameter section: loss against lr per point, the fitted lr* and B* laws, the next run's values.

Drawn only for a sweep whose runs form hyperparameter groups (runs of one (N, D) that differ in
lr, batch or beta2; :mod:`scaling.fitting.hyperparams.hparams`): for any other sweep the section is empty and
the report is as it was. The figures take the runs and a fitted :class:`HparamFit`, so a notebook
can draw them from its own frames.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from scaling.db.jsonvalues import as_dict
from scaling.errors import UserError
from scaling.fitting.core.sweep_data import fitted_runs
from scaling.fitting.core.notes import Note, NoteKind
from scaling.fitting.hyperparams.hparams import LAWS, PUBLISHED, HparamFit, assign_groups, runs_frame
from scaling.fmt import escape as e
from scaling.fmt import Interval, num, size
from scaling.naming import group_title
from scaling.reports import fitview
from scaling.reports.blocks import interval, missing, section
from scaling.reports.figures import TEMPLATE, size_colors, with_alpha
from scaling.reports.titles import axis, titled

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.reports.blocks import Page
    from scaling.reports.report_data import ReportData

SECTION_ID = "hparams"
#: Panels of the loss-against-lr figure (one per group); beyond this many, the first ones are drawn.
MAX_PANELS = 24
#: The axis titles of the loss-against-lr panels.
LR_AXIS = "learning rate (peak, per step)"
LOSS_AXIS = "final loss (nats per token)"
def hparam_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs the fits use (:func:`scaling.fitting.core.sweep_data.fitted_runs`) with a finite loss, and their
    lr, batch, beta2 and group."""
    r = fitted_runs(runs)
    return runs_frame(r[np.isfinite(r["loss"].astype(float))])


def loss_against_lr(runs: pd.DataFrame, fit: HparamFit, *, title: str = "Loss against learning rate") -> go.Figure:
    """One panel per group: final loss against lr, one curve per batch, the near-optimal settings ringed
    and the fitted optimum marked."""
    labels = assign_groups(runs)
    groups = [g for g in fit.groups][:MAX_PANELS]
    cols = min(4, max(1, len(groups)))
    rows = math.ceil(len(groups) / cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[e(group_title(g.label)) for g in groups],
                        horizontal_spacing=0.06, vertical_spacing=min(0.12, 0.5 / max(rows, 1)))
    batches = sorted({float(b) for b in runs.loc[labels.notna(), "batch"].dropna()})
    colors = size_colors(batches)
    shown: set[float] = set()
    shown_extra: set[str] = set()
    traces, where = [], []  # added in one call: plotly validates each add_trace on its own (slow)
    for i, g in enumerate(groups):
        cell = (i // cols + 1, i % cols + 1)
        sub = runs[labels == g.label]
        mean = sub.groupby(["batch", "lr"], sort=True)["loss"].mean().reset_index()
        for b, curve in mean.groupby("batch"):
            traces.append(go.Scatter(
                x=curve["lr"], y=curve["loss"], mode="lines+markers", name=f"batch {size(b)}",
                legendgroup=f"b{b}", showlegend=float(b) not in shown, line=dict(color=colors.get(float(b))),
                hovertemplate=f"batch {size(b)}: lr %{{x:.3g}}, loss %{{y:.4f}}<extra></extra>"))
            where.append(cell)
            shown.add(float(b))
        if g.near.get("n"):  # the near-optimal settings, ringed (DeepSeek LLM draw the region so)
            ref = min(g.loss.value, float(mean["loss"].min()))
            near = mean[mean["loss"] <= ref * (1 + fit.near_fraction)]
            traces.append(go.Scatter(
                x=near["lr"], y=near["loss"], mode="markers", name=f"within {100 * fit.near_fraction:.2g}% of L*",
                legendgroup="near", showlegend="near" not in shown_extra,
                marker=dict(symbol="circle-open", size=14, color="#d62728", line=dict(width=2)),
                hovertemplate="near-optimal: lr %{x:.3g}, loss %{y:.4f}<extra></extra>"))
            where.append(cell)
            shown_extra.add("near")
        if g.used:
            traces.append(go.Scatter(
                x=[g.lr.value], y=[g.loss.value], mode="markers", showlegend=i == 0, name="fitted optimum",
                legendgroup="opt", marker=dict(symbol="x", size=11, color="black"),
                hovertemplate=f"lr* %{{x:.3g}}, B* {num(g.batch.value, 3)}, L* %{{y:.4f}}<extra></extra>"))
            where.append(cell)
    if traces:
        fig.add_traces(traces, rows=[r for r, _ in where], cols=[c for _, c in where])
    fig.update_xaxes(type="log")
    fig.update_layout(template=TEMPLATE, height=max(320, 260 * rows))
    # the x title under the bottom panel of each column, the y title left of each row
    cells = [(i // cols + 1, i % cols + 1) for i in range(rows * cols)]
    last_in_column = {c: max(r for r, cc in cells[: len(groups)] if cc == c) for _, c in cells[: len(groups)]}
    return titled(fig, title, x=[LR_AXIS if last_in_column.get(c) == r else None for r, c in cells],
                  y=[LOSS_AXIS if c == 1 else None for r, c in cells], legend="batch (tokens)")


def law_bands(fit: HparamFit, *, title: str = "Fitted lr*(N, D) and B*(D)") -> go.Figure:
    """lr* and B* of each used group against D with their intervals; the fitted laws with 95% bands."""
    fig = make_subplots(rows=1, cols=2, subplot_titles=["lr*(N, D) = c N^a D^b", "B*(D) = d D^e"],
                        horizontal_spacing=0.1)
    used = [g for g in fit.groups if g.used]
    colors = size_colors([g.N for g in used])
    Ds = [g.D for g in fit.groups]
    grid = np.exp(np.linspace(math.log(min(Ds)), math.log(max(Ds)), 40)) if Ds else np.array([])
    for N in sorted({g.N for g in used}):
        pts = [g for g in used if g.N == N]
        color = colors.get(float(N))
        fig.add_trace(go.Scatter(
            x=[g.D for g in pts], y=[g.lr.value for g in pts], mode="markers", name=f"N = {size(N, 3)}",
            legendgroup=f"n{N}", marker=dict(color=color, size=9), error_y=_errors([g.lr for g in pts]),
            hovertemplate=f"N {num(N, 3)}, D %{{x:.3g}}: lr* %{{y:.3g}}<extra></extra>"), row=1, col=1)
        law = fit.laws.get("lr_ND")
        if law is not None:
            _band(fig, law, grid, {"N": N}, color, f"n{N}", col=1)
    for g in used:
        fig.add_trace(go.Scatter(
            x=[g.D], y=[g.batch.value], mode="markers", showlegend=False, legendgroup=f"n{g.N}",
            marker=dict(color=colors.get(float(g.N)), size=9), error_y=_errors([g.batch]),
            hovertemplate=f"N {num(g.N, 3)}, D %{{x:.3g}}: B* %{{y:.3g}} tokens<extra></extra>"), row=1, col=2)
    if fit.laws.get("batch_D") is not None:
        _band(fig, fit.laws["batch_D"], grid, {}, "#444444", "batch", col=2)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_layout(template=TEMPLATE, height=440)
    return titled(fig, title, x=axis("D", "tokens"), y=[axis("lr*", "peak learning rate"), axis("B*", "tokens")],
                  legend="model size N (parameters)")


def _errors(ivs: list[Interval]) -> dict[str, Any]:
    ok = [iv.kind == "percentile" and iv.interval is not None for iv in ivs]
    return dict(type="data", symmetric=False, visible=True,
                array=[iv.hi - iv.value if o else 0.0 for iv, o in zip(ivs, ok)],
                arrayminus=[iv.value - iv.lo if o else 0.0 for iv, o in zip(ivs, ok)])


def _band(fig: go.Figure, law: Any, grid: np.ndarray, fixed: dict[str, float], color: str | None, group: str,
          col: int) -> None:
    """The law's line over D (dashed when flagged) and, when it has one, its 95% band."""
    ivs = [law.predict_interval(D=float(D), **fixed) for D in grid]
    value = [iv.value for iv in ivs]
    flagged = not law.reliable()
    if not flagged and all(iv.kind == "percentile" and iv.interval is not None for iv in ivs):
        fig.add_trace(go.Scatter(x=np.concatenate([grid, grid[::-1]]),
                                 y=[iv.hi for iv in ivs] + [iv.lo for iv in ivs][::-1], fill="toself",
                                 fillcolor=_translucent(color or "#444444", 0.15), line=dict(width=0), showlegend=False,
                                 legendgroup=group, hoverinfo="skip"), row=1, col=col)
    fig.add_trace(go.Scatter(x=grid, y=value, mode="lines", showlegend=False, legendgroup=group,
                             line=dict(color=color, dash="dash" if flagged else "solid"),
                             hovertemplate=f"{e(law.form)}{' (flagged)' if flagged else ''}: D %{{x:.3g}}, "
                                           "%{y:.3g}<extra></extra>"), row=1, col=col)


def _translucent(color: str, a: float) -> str:
    """A ``#rrggbb`` or ``rgb(r, g, b)`` colour (plotly's scales give the latter) with opacity ``a``."""
    if color.startswith("rgb("):
        return "rgba(" + color[4:].rstrip(")") + f", {a})"
    return with_alpha(color, a)


def groups_table(fit: HparamFit) -> str:
    rows = []
    for g in fit.groups:
        rows.append(f"<tr><td>{e(group_title(g.label))}</td><td class=\"num\">{g.n_runs}</td><td class=\"num\">{interval(g.loss, 4)}</td>"
                    f"<td class=\"num\">{interval(g.lr)}</td><td class=\"num\">{interval(g.batch)}</td>"
                    f"<td>{e(near_text(g.near))}</td><td>{'used' if g.used else e('left out: ' + g.message)}</td></tr>")
    return ('<table id="hparam-groups"><thead><tr><th>group</th><th class="num">runs</th><th class="num">L*</th>'
            '<th class="num">lr*</th><th class="num">B* (tokens)</th>'
            f'<th>near-optimal (within {100 * fit.near_fraction:.2g}% of L*)</th><th>status</th></tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def near_text(near: dict[str, Any]) -> str:
    """The near-optimal region of a group in words: its settings' lr and batch ranges, or "best run only"."""
    if not near:
        return "–"
    if not near.get("n"):
        return f"no setting measured within it (of {near['of']})"
    if near["n"] == 1:
        return f"best run only (lr {num(near['lr_lo'], 3)}, batch {num(near['batch_lo'], 3)}; of {near['of']} settings)"

    def span(lo: float, hi: float) -> str:
        return num(lo, 3) if num(lo, 3) == num(hi, 3) else f"{num(lo, 3)}–{num(hi, 3)}"

    return (f"{near['n']} of {near['of']} settings: lr {span(near['lr_lo'], near['lr_hi'])}, "
            f"batch {span(near['batch_lo'], near['batch_hi'])}")


def laws_table(fit: HparamFit) -> str:
    rows = []
    for name, law in fit.laws.items():
        cells = ", ".join(f"{e(p)} = {interval(iv, 4)}" for p, iv in law.params.items())
        status = f"{law.n_groups} groups" if law.reliable() else "flagged: " + "; ".join(law.doubts())
        rows.append(f"<tr><td>{e(law.form)}</td><td>{cells}</td><td>{e(status)}</td><td>{e(PUBLISHED[name])}</td></tr>")
    for name, why in fit.skipped.items():
        rows.append(f"<tr><td>{e(LAWS[name][2])}</td><td>not fitted</td><td>{e(why)}</td><td>{e(PUBLISHED[name])}</td></tr>")
    return ('<table id="hparam-laws"><thead><tr><th>law</th><th>parameters (95% intervals)</th><th>status</th>'
            f"<th>published, for comparison</th></tr></thead><tbody>{''.join(rows)}</tbody></table>")


def next_run_values(data: ReportData, fit: HparamFit, page: Optional[Page] = None) -> str:
    """The lr and batch the laws give for the run the headline recommends (10x the largest run); each
    (or why there is none) also given to ``page`` for the first screen (:meth:`scaling.reports.blocks.Page.answer`)."""

    def answer(lr: str, batch: str, title: str = "") -> None:
        if page is not None:
            page.answer("learning rate", lr, f"#{SECTION_ID}", title)
            page.answer("batch (tokens)", batch, f"#{SECTION_ID}", title)

    from scaling.fitting.recommend import default_budget

    done = data.completed
    if done.empty:
        return ""
    target = default_budget(float(done["C"].max()))
    laws = {kind: law for kind, law in ((k, fitview.as_law(v)) for k, v in data.fits.items()) if law is not None}
    rec = data.recommendation_at(target)  # the headline's: the closing answer's run when handed in
    if rec is None or rec.chosen is None:
        return _at_largest_run(done, fit, answer, "no loss law gives N* at the next budget")
    N = rec.per_law[rec.chosen]["N"].value
    k = float(laws[rec.chosen].k_)
    D = target / (k * N)
    try:
        h = fit.recommend(N, D, target)
    except UserError as exc:
        return missing(f"No recommended lr and batch: {exc}.")
    if rec.chosen in rec.unreliable:
        return _at_largest_run(done, fit, answer, "the next run's N* comes from a loss law flagged unreliable")
    page_values = [interval(h[q], fmt=fmt) if h[q] is not None and h[q].kind != "unreliable" else
                   f'<span class="ci">none: {e(h[f"{q}_why"])}</span>' for q, fmt in (("lr", num), ("batch", size))]
    answer(*page_values, title=f"lr: {h['lr_why']}; batch: {h['batch_why']}")
    return (f'<p id="hparam-next">For the recommended run (C = {num(target, 3)} FLOPs, N = {size(N)}, '
            f"D = {size(D)} tokens): lr = {_or_why(h['lr'], h['lr_why'])}, batch = "
            f"{_or_why(h['batch'], h['batch_why'], size)} tokens. 95% intervals in brackets.</p>")


def _at_largest_run(done: Any, fit: HparamFit, answer: Callable[..., None], why: str) -> str:
    """Where no run is recommended (``why``), the fitted lr* and B* laws' values at the sweep's largest run, so the
    first screen still gives what the sweep determined; said to be at that run, not at a recommended one."""
    big = done.loc[done["C"].astype(float).idxmax()]
    N, D, C = float(big["N"]), float(big["D"]), float(big["C"])
    try:
        h = fit.recommend(N, D, C)
    except UserError as exc:
        none = f'<span class="ci">none: {e(why)}; at the largest run: {e(exc)}</span>'
        answer(none, none)
        return missing(f"No recommended run to give an lr and batch for: {why}; at the largest run: {exc}.")
    where = f"at the largest run (N = {size(N)}, D = {size(D)}): no run is recommended"
    values = [f'{interval(h[q], fmt=fmt)} <span class="ci">({e(where)})</span>'
              if h[q] is not None and h[q].kind != "unreliable" else
              f'<span class="ci">none: {e(h[f"{q}_why"])}</span>' for q, fmt in (("lr", num), ("batch", size))]
    answer(*values, title=f"{why}; lr: {h['lr_why']}; batch: {h['batch_why']}")
    return (f'<p id="hparam-next">No run is recommended ({e(why)}), so the fitted laws are given at the sweep\'s '
            f"largest run (C = {num(C, 3)} FLOPs, N = {size(N)}, D = {size(D)} tokens): lr = "
            f"{_or_why(h['lr'], h['lr_why'])}, batch = {_or_why(h['batch'], h['batch_why'], size)} tokens. "
            "95% intervals in brackets.</p>")


def _or_why(iv: Interval | None, why: str, fmt: Callable[..., str] = num) -> str:
    """The value with its interval (each number by ``fmt``: :func:`size` for a batch), then why; "none" and why."""
    if iv is None or iv.kind == "unreliable":
        return f"none ({e(why)})"
    return f"{interval(iv, fmt=fmt)} ({e(why)})"


def hparams_section(data: ReportData, page: Page) -> str:
    """The report section; empty for a sweep whose runs form no hyperparameter group."""
    runs = data.completed
    if runs is None or runs.empty or "spec" not in runs or not any(as_dict(s) for s in runs["spec"]):
        return ""
    fit = data.sweep_fit.hparams if data.sweep_fit is not None else None  # the analysis' laws, fitted once
    if fit is None:
        return ""
    hp = hparam_runs(runs)
    mode = next((n for n in data.notes if isinstance(n, Note) and n.kind is NoteKind.HPARAM_MODE), None)
    inner = f"<p>{e(mode or 'hyperparameters: the runs form groups that differ in lr, batch or beta2.')}</p>"
    inner += next_run_values(data, fit, page)
    inner += page.figure("hparam-loss-lr", loss_against_lr(hp, fit))
    inner += page.figure("hparam-laws", law_bands(fit))
    inner += "<h3>Each group's optimum</h3>" + groups_table(fit)
    inner += "<h3>Hyperparameter laws (95% bootstrap intervals over the groups)</h3>" + laws_table(fit)
    if fit.notes:
        inner += "<ul>" + "".join(f"<li>{e(n)}</li>" for n in fit.notes) + "</ul>"
    return section(SECTION_ID, "Hyperparameters", inner)
