"""An adaptive sweep's progress: the 95% interval of N* at the target budget against compute spent.

Drawn from the sweep's ``adaptive_decision`` events (`scaling.orchestrator.adaptive`): one point
per refit, with its interval, the target's allowed width around the last estimate, and what
each round did. The section is empty for a sweep without such events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pandas as pd
import plotly.graph_objects as go

from scaling import vocab
from scaling.db.jsonvalues import as_dict
from scaling.fmt import Interval
from scaling.fmt import escape as e
from scaling.fmt import num
from scaling.reports.blocks import section
from scaling.reports.titles import axis, titled

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.reports.blocks import Page
    from scaling.reports.report_data import ReportData

SECTION_ID = "adaptive"


def decisions(events: pd.DataFrame) -> list[dict[str, Any]]:
    """The sweep's adaptive decisions, the latest of each round, in round order."""
    if events is None or not len(events) or "kind" not in events:
        return []
    by_round: dict[int, dict[str, Any]] = {}
    for detail in events.loc[events["kind"] == vocab.ADAPTIVE_DECISION, "detail"]:
        d = as_dict(detail)
        if isinstance(d, dict) and isinstance(d.get("round"), int):
            by_round[d["round"]] = d
    return [by_round[r] for r in sorted(by_round)]


def interval_against_compute(rows: list[dict[str, Any]]) -> go.Figure:
    """N* at the target budget with its 95% interval after each refit, against FLOPs spent."""
    measured = [(d["spent"], Interval.of(d["fit"]), d["fit"].get("ratio")) for d in rows if d.get("fit")]
    pts = [(spent, iv, ratio) for spent, iv, ratio in measured if iv.interval is not None]
    fig = go.Figure()
    if pts:
        x = [p[0] for p in pts]
        value = [p[1].value for p in pts]
        fig.add_trace(go.Scatter(
            x=x, y=value, mode="lines+markers", name="N* (point estimate)",
            error_y=dict(type="data", symmetric=False, array=[p[1].hi - p[1].value for p in pts],
                         arrayminus=[p[1].value - p[1].lo for p in pts]),
            customdata=[[p[2]] for p in pts],
            text=[p[1].text(4) for p in pts],
            hovertemplate="spent %{x:.3g} FLOPs<br>N* %{text}"
                          "<br>upper / lower %{customdata[0]:.3g}<extra></extra>"))
    fig.update_layout(xaxis=dict(type="log"), yaxis=dict(type="log"), template="plotly_white", height=420,
                      showlegend=False)
    return titled(fig, "N* at the target budget after each refit",
                  x=axis("compute spent by the sweep", "FLOPs"), y=axis("N* with its 95% interval", "parameters"))


def adaptive_section(data: "ReportData", page: "Page") -> str:
    """The report section (empty for a sweep that is not adaptive)."""
    rows = decisions(data.events)
    if not rows:
        return ""
    last = rows[-1]
    items = []
    for d in rows:
        fit = d.get("fit") or {}
        ratio = f"ratio {num(fit['ratio'], 3)}" if fit.get("ratio") is not None else "no interval"
        items.append(f"<li>round {d['round']} ({num(d['spent'], 3)} FLOPs spent, {ratio}): "
                     f"<strong>{e(d['action'])}</strong> ({e(d['reason'])}): {e(d['message'])}</li>")
    head = (f"<p>Stopped: <strong>{e(last['reason'])}</strong> after {num(last['spent'], 3)} of "
            f"{num(last['max_compute'], 3)} FLOPs.</p>" if last["action"] == "stop"
            else "<p>Still adding slices.</p>")
    inner = head + page.figure("adaptive_interval", interval_against_compute(rows)) + f"<ol>{''.join(items)}</ol>"
    return section(SECTION_ID, "Adaptive sweep", inner)
