"""Figures of a comparison of sweeps: frontiers, IsoFLOP profiles and exponent differences on shared axes.

One colour per sweep, one line style per law, so a reader can follow either. A law flagged
unreliable is drawn only on demand (``visible="legendonly"``) and says so in its legend entry.
Built from the same views as the sweep report (:mod:`scaling.reports.fitview`) and its helpers.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from scaling.fmt import escape, num
from scaling.reports import fitview
from scaling.reports.figures import TEMPLATE, with_alpha, empty_figure, run_label
from scaling.reports.titles import axis, titled

#: One colour per sweep (plotly's qualitative D3 palette).
SWEEP_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
#: One dash style per law kind.
LAW_DASH = {"kaplan": "dot", "approach1": "dashdot", "approach2": "dash", "approach3": "solid"}
#: One marker symbol per sweep in the IsoFLOP view.
SWEEP_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star-triangle-up", "hexagon")


def sweep_color(i: int) -> str:
    return SWEEP_COLORS[i % len(SWEEP_COLORS)]


def frontiers(sides: Sequence[Any], *, title: str = "Compute-optimal frontiers") -> go.Figure:
    """N*(C) with 95% bands, and loss against C (runs and each law's frontier loss), for every sweep and law.

    ``sides`` are :class:`scaling.reports.compare.SweepSide` (name, completed runs, laws).
    """
    cs = [float(c) for s in sides for c in s.completed["C"].to_numpy(float) if math.isfinite(c) and c > 0]
    if not cs:
        return empty_figure(title, "No completed runs.")
    grid = np.logspace(math.log10(min(cs) / 2), math.log10(max(cs) * 2), 50)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("N*(C)", "loss against C"), horizontal_spacing=0.1)
    drawn = 0
    for i, side in enumerate(sides):
        color = sweep_color(i)
        done = side.completed
        fig.add_trace(go.Scatter(
            x=done["C"].to_numpy(float), y=done["final_loss"].to_numpy(float), mode="markers",
            name=escape(f"{side.name}: runs"), legendgroup=f"runs-{i}", marker=dict(color=color, size=7, opacity=0.7),
            text=[run_label(r) for _, r in done.iterrows()], hovertemplate="%{text}<br>final loss %{y:.4f}<extra></extra>",
        ), row=1, col=2)
        for kind, law in side.laws.items():
            view = fitview.frontier(kind, law)
            if view is None:
                continue
            unreliable = bool(law.doubts())
            name = f"{side.name}: {view.label}" + (" (unreliable)" if unreliable else "")
            visible: Any = "legendonly" if unreliable else True
            group = f"{i}-{kind}"
            curve = view.curve(grid)
            band = view.band(grid, "N")
            if band is not None:
                lo, hi = band
                fig.add_trace(go.Scatter(
                    x=np.concatenate([grid, grid[::-1]]), y=np.concatenate([hi, lo[::-1]]), fill="toself",
                    fillcolor=with_alpha(color, 0.12), line=dict(width=0), legendgroup=group, showlegend=False,
                    hoverinfo="skip", visible=visible,
                ), row=1, col=1)
            line = dict(color=color, width=2, dash=LAW_DASH.get(kind, "solid"))
            fig.add_trace(go.Scatter(
                x=grid, y=curve["N"], mode="lines", name=escape(name), legendgroup=group, line=line, visible=visible,
                hovertemplate=f"{escape(name)}<br>C %{{x:.3g}}: N* %{{y:.3g}}<extra></extra>",
            ), row=1, col=1)
            if np.isfinite(curve["loss"]).any():
                fig.add_trace(go.Scatter(
                    x=grid, y=curve["loss"], mode="lines", legendgroup=group, showlegend=False, line=line,
                    visible=visible, hovertemplate=f"{escape(name)}<br>C %{{x:.3g}}: loss %{{y:.4f}}<extra></extra>",
                ), row=1, col=2)
            drawn += 1
    if not drawn:
        fig.add_annotation(text="No law gives a frontier for these sweeps.", showarrow=False, xref="paper",
                           yref="paper", x=0.25, y=0.5)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_layout(template=TEMPLATE, height=500)
    titled(fig, title, x=axis("C", "FLOPs"), y=[axis("N*", "parameters"), axis("loss", "nats/token")], legend="sweep: law")
    return fig


def isoflop_profiles(sides: Sequence[Any], *, title: str = "IsoFLOP profiles") -> go.Figure:
    """Final loss against N per budget for every sweep (one colour and marker per sweep), with
    approach 2's parabolas and minima where it was fitted; budgets it left out are hollow."""
    fig = go.Figure()
    for i, side in enumerate(sides):
        done = side.completed
        if done.empty:
            continue
        color, symbol = sweep_color(i), SWEEP_SYMBOLS[i % len(SWEEP_SYMBOLS)]
        slices = fitview.isoflop_slices(side.laws.get("approach2"), done)
        first = True
        for budget in sorted(slices):
            sl = slices[budget]
            pts = sl["points"]
            flagged = sl.get("flagged", False)
            fig.add_trace(go.Scatter(
                x=pts["N"].to_numpy(float), y=pts["final_loss"].to_numpy(float), mode="markers",
                name=escape(side.name), legendgroup=str(i), showlegend=first,
                marker=dict(color=color, size=8, symbol=f"{symbol}-open" if flagged else symbol),
                text=[run_label(r) + f"<br>C={num(budget, 2)}" + (f" (left out: {escape(sl['status'])})" if flagged else "")
                      for _, r in pts.iterrows()],
                hovertemplate=f"{escape(side.name)}<br>%{{text}}<br>final loss %{{y:.4f}}<extra></extra>",
            ))
            first = False
            if sl.get("parabola") is not None and not flagged:
                fig.add_trace(go.Scatter(
                    x=sl["parabola"]["N"], y=sl["parabola"]["loss"], mode="lines", legendgroup=str(i), showlegend=False,
                    line=dict(color=color, width=1.3), hoverinfo="skip",
                ))
            if sl.get("N_opt") is not None and not flagged:
                fig.add_trace(go.Scatter(
                    x=[sl["N_opt"]], y=[sl["loss_opt"]], mode="markers", legendgroup=str(i), showlegend=False,
                    marker=dict(symbol="star", size=13, color=color, line=dict(color="black", width=1)),
                    hovertemplate=f"{escape(side.name)}, C={num(budget, 2)}: N* %{{x:.3g}}, loss %{{y:.4f}}<extra></extra>",
                ))
    if not fig.data:
        return empty_figure(title, "No completed runs.")
    fig.update_layout(template=TEMPLATE, height=480, xaxis=dict(type="log"))
    titled(fig, title, x=axis("N", "parameters"), y=axis("final eval loss", "nats/token"), legend="sweep")
    return fig


def exponent_differences(differences: Sequence[dict[str, Any]], *,
                         title: str = "Differences of exponents (second − first), 95% bootstrap intervals") -> go.Figure:
    """One row per law, exponent and pair of sweeps: the difference and its interval; red when it
    excludes 0. Differences without an interval (an unreliable law, a pinned or biased exponent)
    are left out here; the table says why."""
    rows = [d for d in differences if d["difference"].kind == "percentile" and d["difference"].interval is not None]
    if not rows:
        return empty_figure(title, "No difference of exponents has an interval (see the table for why).")
    labels = [escape(f"{d['label']} · {d['exponent']} · {d['second']} − {d['first']}") for d in rows]
    value = np.array([d["difference"].value for d in rows], float)
    lo = np.array([d["difference"].lo for d in rows], float)
    hi = np.array([d["difference"].hi for d in rows], float)
    colors = ["#c62828" if d["significant"] else "#555555" for d in rows]
    fig = go.Figure(go.Scatter(
        x=value, y=labels, mode="markers", marker=dict(color=colors, size=9), showlegend=False,
        error_x=dict(type="data", symmetric=False, array=hi - value, arrayminus=value - lo, color="#888"),
        text=["significant" if d["significant"] else "not significant" for d in rows],
        hovertemplate="%{y}<br>difference %{x:.4f}<br>%{text}<extra></extra>",
    ))
    fig.add_vline(x=0, line=dict(color="black", width=1))
    fig.update_layout(template=TEMPLATE, height=max(300, 120 + 28 * len(rows)),
                      yaxis=dict(type="category", autorange="reversed"), margin=dict(l=360))
    return titled(fig, title, x="difference of exponent (second − first)", y="law · exponent · sweeps")
