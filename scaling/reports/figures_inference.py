"""The over-training trade-off (Sardana et al. 2023): what serving T tokens does to the best model.

Along the iso-loss curve of the approach-3 law (every (N, D) reaching the loss of the
compute-optimal run at a budget), training FLOPs are least at the compute-optimal point, and
training plus inference FLOPs least at a smaller model trained on more tokens. The figure draws
both costs against tokens per parameter with the two optima marked (and the bootstrap interval
of the inference-aware D/N shaded); the section says what the shift saves. Shown in the report
only when asked (``scaling report --inference-tokens T``).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import plotly.graph_objects as go

from scaling.errors import FitError
from scaling.fmt import escape as e
from scaling.fmt import num, size
from scaling.fitting.inference import InferenceRecommendation, LossLaw, iso_loss_curve, recommend_for_inference
from scaling.reports.blocks import interval, missing, section
from scaling.reports.titles import axis, titled

SECTION_ID = "inference"


def overtraining_tradeoff(law: Any, rec: InferenceRecommendation, *, title: str | None = None) -> go.Figure:
    """Training and total (training + inference) FLOPs along the iso-loss curve against D/N."""
    model = LossLaw.from_params(law.params_)
    curve = iso_loss_curve(model, rec.target_loss, rec.inference_tokens, rec.k)
    x = curve["tokens_per_param"]
    hover = "D/N %{x:.3g}<br>N %{customdata[0]:.3g}, D %{customdata[1]:.3g}<br>%{y:.3g} FLOPs<extra>%{fullData.name}</extra>"
    custom = np.stack([curve["N"], curve["D"]], axis=1)
    fig = go.Figure()
    opt = rec.optimum["tokens_per_param"]
    if opt.interval is not None:
        fig.add_vrect(x0=opt.lo, x1=opt.hi, fillcolor="rgba(214,39,40,0.12)", line_width=0,
                      annotation_text="95% interval", annotation_position="top left")
    fig.add_trace(go.Scatter(x=x, y=curve["training_flops"], mode="lines", name="training FLOPs (6ND)",
                             line=dict(color="#1f77b4", dash="dash"), customdata=custom, hovertemplate=hover))
    fig.add_trace(go.Scatter(x=x, y=curve["total_flops"], mode="lines",
                             name=f"training + inference FLOPs (T = {size(rec.inference_tokens)} tokens)",
                             line=dict(color="#d62728"), customdata=custom, hovertemplate=hover))
    for label, row, color, symbol in (("compute-optimal", rec.compute_optimal, "#1f77b4", "circle"),
                                      ("inference-aware optimum", rec.optimum, "#d62728", "star")):
        fig.add_trace(go.Scatter(
            x=[row["tokens_per_param"].value], y=[row["total_flops"].value], mode="markers", name=label,
            marker=dict(color=color, size=13, symbol=symbol, line=dict(color="#222", width=1)),
            customdata=[[row["N"].value, row["D"].value]], hovertemplate=hover))
    budget = f"the compute-optimal run at C = {rec.compute:.3g} FLOPs" if rec.compute is not None else "the target"
    fig.update_layout(xaxis=dict(type="log"), yaxis=dict(type="log"), template="plotly_white", height=460,
                      legend=dict(orientation="h", y=-0.2))
    return titled(fig, title or f"Over-training trade-off at loss {rec.target_loss:.4g} ({budget})",
                  x=axis("D/N", "tokens per parameter"), y=axis("compute", "FLOPs"), legend="cost")


def inference_section(inference_tokens: float, compute: float | None = None) -> Callable[[Any, Any], str]:
    """A report section (see ``scaling.reports.html.Extra``) for serving ``inference_tokens`` tokens.

    ``compute`` defaults to the report's next budget (ten times the largest completed run).
    """

    def build(data: Any, page: Any) -> str:
        from scaling.reports import html as H

        title = "Inference-heavy use"
        law = data.fits.get("approach3")
        budget = compute if compute is not None else H.next_budget(data)
        if law is None or budget is None:
            return section(SECTION_ID, title, missing(
                "No trade-off: it needs the approach-3 fit and a completed run."))
        try:
            rec = recommend_for_inference(law, inference_tokens, compute=budget, source=data.sweep or "sweep")
        except FitError as exc:
            return section(SECTION_ID, title, missing(f"No trade-off: {exc}"))
        o, c = rec.optimum, rec.compute_optimal
        text = (f"<p>Serving {num(inference_tokens)} tokens (inference costs 2N FLOPs per token) from a model "
                f"as good as the compute-optimal run at C = {num(budget)} FLOPs (loss {num(rec.target_loss, 4)}): "
                f"the cheapest model to train and serve has N = {interval(o['N'])} parameters trained on "
                f"D = {interval(o['D'])} tokens ({interval(o['tokens_per_param'])} tokens per parameter, "
                f"against {num(c['tokens_per_param'].value)} compute-optimal), and costs "
                f"{interval(o['total_flops'])} FLOPs in all instead of {interval(c['total_flops'])}"
                + (": approach 3 is unreliable on these data, so these are what an undetermined law extrapolates, "
                   "with no interval and no saving claimed.</p>" if rec.unreliable else
                   f": {num(100 * rec.saving)}% less (approach 3; 95% bootstrap intervals in brackets).</p>"))
        notes = "".join(f"<li>{e(n)}</li>" for n in rec.notes)
        inner = page.figure("overtraining", overtraining_tradeoff(law, rec)) + text
        if notes:
            inner += f"<ul>{notes}</ul>"
        return section(SECTION_ID, title, inner)

    return build
