"""Every figure of the report, as a public function returning a plotly ``Figure``.

The functions take plain DataFrames (the columns of ``scaling.db.connect(url)``'s frames) and
fitted laws, so a notebook can draw any of them from its own data. Only SVG traces are used
(``go.Scatter``, ``go.Contour``, ``go.Bar``; never ``Scattergl``): headless browsers without a GPU
have no WebGL, and a report must open anywhere. Text that came from users (run names, tags,
sweep names) is HTML-escaped before it reaches plotly, which renders a subset of HTML in labels.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.colors import sample_colorscale
from plotly.subplots import make_subplots

from scaling.accounting import FLOPS_PER_PARAM_TOKEN
from scaling.fmt import escape, num, size
from scaling.reports import fitview
from scaling.reports.report_data import normalise_runs, summarise_perf
from scaling.reports.downsample import downsample_frame
from scaling.reports.titles import axis, titled
from scaling import vocab as names

COLORSCALE = "Viridis"
METHOD_COLORS = {
    "kaplan": "#7f7f7f",
    "approach1": "#1f77b4",
    "approach2": "#d62728",
    "approach3": "#2ca02c",
}
TEMPLATE = "plotly_white"
#: Weight of the training curves' smoothing: TensorBoard's default. Applied to
#: the points drawn, which are log-spaced in tokens, so it averages over a fixed fraction of a decade.
EMA_WEIGHT = 0.6
#: Opacity of the raw train curves behind their smoothed lines.
RAW_UNDER_EMA = 0.25


def size_colors(sizes: Iterable[float]) -> dict[float, str]:
    """One colour per model size, spread over a sequential scale in log N."""
    uniq = sorted({float(s) for s in sizes if s is not None and np.isfinite(s) and s > 0})
    if not uniq:
        return {}
    lo, hi = math.log(uniq[0]), math.log(uniq[-1])
    fracs = [0.5 if hi == lo else (math.log(s) - lo) / (hi - lo) for s in uniq]
    return dict(zip(uniq, sample_colorscale(COLORSCALE, [0.05 + 0.85 * f for f in fracs])))


def empty_figure(title: str, message: str) -> go.Figure:
    """A figure that says why it has nothing to show (still a real plot, with an annotation)."""
    fig = go.Figure(go.Scatter(x=[], y=[], mode="markers", showlegend=False))
    fig.update_layout(
        template=TEMPLATE,
        xaxis_visible=False,
        yaxis_visible=False,
        annotations=[dict(text=escape(message), showarrow=False, xref="paper", yref="paper", x=0.5, y=0.5)],
        height=260,
    )
    return titled(fig, title)


def _runs(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` as ``Results.runs()`` returns it, with the derived columns the figures read."""
    return runs if "tokens_per_param" in runs.columns else normalise_runs(runs)


def run_label(run: pd.Series) -> str:
    """A run's hover label: its name, N and D (escaped: the name is the user's)."""
    name = run.get("name") or ""
    base = f"N={size(run['N'])} D={size(run['D'])}"
    return escape(f"{name} ({base})" if name else base)


# -- training curves -----------------------------------------------------------------------------
def ema(values: Sequence[float] | np.ndarray, weight: float = EMA_WEIGHT) -> np.ndarray:
    """Debiased exponential moving average, as TensorBoard smooths a scalar.

    s_t = w s_(t-1) + (1 - w) v_t from s_0 = 0, divided by 1 - w^t (t counting finite values) so
    the first points are not pulled towards 0. Non-finite values are passed through and skipped by
    the average; a constant series is returned as it is (both as TensorBoard does).
    """
    from scipy.signal import lfilter

    if not 0.0 <= weight < 1.0:
        raise ValueError(f"the smoothing weight must be in [0, 1), not {weight}")
    v = np.asarray(values, dtype=float)
    out = v.copy()
    finite = np.isfinite(v)
    x = v[finite]
    if x.size == 0 or weight == 0.0 or np.all(x == x[0]):
        return out
    last = lfilter([1.0 - weight], [1.0, -weight], x)
    out[finite] = last / (1.0 - weight ** np.arange(1, x.size + 1))
    return out


def _smoothing_buttons(raw: list[int], smooth: list[int], n: int) -> dict[str, Any]:
    """Buttons that show the smoothed train curves over faint raw ones, or the raw curves alone."""
    visible_ema, visible_raw = [True] * n, [True] * n
    opacity_ema, opacity_raw = [0.85] * n, [0.85] * n
    for i in raw:
        opacity_ema[i] = RAW_UNDER_EMA
    for i in smooth:
        visible_raw[i] = False
    return dict(
        type="buttons", direction="right", showactive=True, active=0, x=1.0, xanchor="right", y=1.02, yanchor="bottom",
        pad=dict(t=2, b=2), bgcolor="#f3f5f7",
        buttons=[
            dict(label=f"smoothed (EMA {EMA_WEIGHT:g})", method="restyle", args=[{"visible": visible_ema, "opacity": opacity_ema}]),
            dict(label="raw", method="restyle", args=[{"visible": visible_raw, "opacity": opacity_raw}]),
        ],
    )


def _approach1_traces(envelope: pd.DataFrame | None, optima: pd.DataFrame | None) -> list[dict]:
    """Approach 1's lower envelope and its per-budget optima over the FLOPs view (none where not given)."""
    traces = []
    if envelope is not None and not envelope.empty:
        env = envelope.sort_values("flops")
        traces.append(dict(
            type="scatter", x=env["flops"].to_numpy(dtype=float), y=env["loss"].to_numpy(dtype=float), mode="lines",
            name="envelope (approach 1)", line=dict(color="black", width=2.5, dash="dash"),
            hovertemplate="envelope: loss %{y:.4f} at %{x:.3g} FLOPs<extra></extra>",
        ))
    if optima is not None and not optima.empty:
        traces.append(dict(
            type="scatter", x=optima["flops"].to_numpy(dtype=float), y=optima["loss"].to_numpy(dtype=float),
            mode="markers", name="approach 1 optima", marker=dict(color="black", symbol="x", size=7),
            text=[f"N_opt {num(n)}" for n in optima["N"]],
            hovertemplate="approach 1: %{text}, loss %{y:.4f} at %{x:.3g} FLOPs<extra></extra>",
        ))
    return traces


def _pieces(curves: pd.DataFrame, x: str) -> tuple[np.ndarray, np.ndarray, dict[tuple[Any, Any], tuple[int, int]]]:
    """The curves' x and y (float32) and each (run, metric)'s slice of them: split once, since per-run
    boolean filtering is quadratic in the runs."""
    curves = curves.sort_values(["run_key", "name", x], kind="stable")
    keys = curves["run_key"].to_numpy()
    metric = curves["name"].to_numpy()
    xs = curves[x].to_numpy(dtype=np.float32)
    ys = curves["value"].to_numpy(dtype=np.float32)
    cuts = np.flatnonzero((keys[1:] != keys[:-1]) | (metric[1:] != metric[:-1])) + 1
    return xs, ys, {(keys[a], metric[a]): (a, b) for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(keys)])}


def _curve_trace(xs: np.ndarray, ys: np.ndarray, *, name: str, legendgroup: str, color: str, label: str, x: str,
                 is_eval: bool = False, first: bool = False, faint: bool = False, ema: bool = False) -> dict:
    """One run's train loss (raw, faint under its EMA, or the EMA itself) or eval loss, as a scatter trace."""
    if ema:
        return dict(type="scatter", x=xs, y=ys, mode="lines", name=name, legendgroup=legendgroup, showlegend=False,
                    opacity=0.85, meta="ema", line=dict(color=color, width=1.8),
                    hovertemplate=f"{label}<br>train loss (EMA) %{{y:.4f}}<br>{x} %{{x:.3g}}<extra></extra>")
    return dict(
        type="scatter", x=xs, y=ys, mode="lines+markers" if is_eval else "lines",
        name=name, legendgroup=legendgroup, showlegend=first, opacity=RAW_UNDER_EMA if faint else 0.85,
        line=dict(color=color, width=1.2, dash="dot" if is_eval else "solid"), marker=dict(size=4, color=color),
        meta="raw" if not is_eval else "eval",
        hovertemplate=f"{label}<br>{'eval' if is_eval else 'train'} loss %{{y:.4f}}<br>{x} %{{x:.3g}}<extra></extra>",
    )


def loss_curves(
    curves: pd.DataFrame,
    runs: pd.DataFrame,
    *,
    x: str = "tokens",
    envelope: pd.DataFrame | None = None,
    optima: pd.DataFrame | None = None,
    max_points: int = 400,
    title: str | None = None,
    smoothing: float | None = EMA_WEIGHT,
) -> go.Figure:
    """Train loss (lines) and eval loss (dotted, markers) of every run against ``tokens`` or ``flops``.

    With ``smoothing`` (a weight in (0, 1)) each train curve is drawn smoothed by :func:`ema` over
    its raw points, drawn faint, and two buttons switch between that view and the raw curves alone;
    ``smoothing=None`` draws the raw curves only.

    Log axes, coloured by model size; the legend has one entry per size (or per size range when
    there are many sizes), and clicking one hides those runs. ``envelope`` (columns ``flops``,
    ``loss``) is approach 1's lower envelope, drawn over the FLOPs view, and ``optima`` (columns
    ``flops``, ``loss``, ``N``) the per-budget optima approach 1 fitted. Curves longer than
    ``max_points`` are thinned log-spaced with their minimum kept.
    """
    runs = _runs(runs)
    if x not in ("tokens", "flops"):
        raise ValueError("x must be 'tokens' or 'flops'")
    title = title or f"Loss against {'tokens' if x == 'tokens' else 'FLOPs'}"
    if curves is None or curves.empty:
        return empty_figure(title, "No loss curves recorded yet.")
    curves = downsample_frame(curves, ["run_key", "name"], x=x, y="value", max_points=max_points)
    curves = curves[(curves[x] > 0) & np.isfinite(curves["value"])]
    runs = runs.drop_duplicates("run_key").set_index("run_key", drop=False)
    colors = size_colors(runs["N"])
    groups = size_groups(runs["N"])
    xs, ys, pieces = _pieces(curves, x)
    traces: list[dict] = []
    raw_ids: list[int] = []
    ema_ids: list[int] = []
    shown: set[str] = set()
    for key in runs.sort_values(["N", "D"]).index:
        run = runs.loc[key]
        size = float(run["N"])
        color = colors.get(size, "#444")
        group = groups.get(size, "N unknown")
        label = run_label(run)
        for name, is_eval in ((names.TRAIN_LOSS, False), (names.EVAL_LOSS, True)):
            if (key, name) not in pieces:
                continue
            a, b = pieces[(key, name)]
            first = group not in shown and not is_eval
            if first:
                shown.add(group)
            smooth = bool(smoothing) and not is_eval
            if smooth:
                raw_ids.append(len(traces))
            style = dict(name=escape(group), legendgroup=group, color=color, label=label, x=x)
            traces.append(_curve_trace(xs[a:b], ys[a:b], is_eval=is_eval, first=first, faint=smooth, **style))
            if smooth:
                ema_ids.append(len(traces))
                traces.append(_curve_trace(xs[a:b], ema(ys[a:b], float(smoothing)).astype(np.float32), ema=True,
                                           **style))
    if x == "flops":
        traces.extend(_approach1_traces(envelope, optima))
    # One Figure from all traces at once: add_trace one by one is quadratic in the trace count. The
    # traces are plain scatter dicts of finite float32 arrays built above, so plotly's per-property
    # validation (three quarters of this figure's time with a thousand traces) is skipped.
    fig = go.Figure(
        _validate=False,
        data=traces,
        layout=dict(
            template=TEMPLATE,
            xaxis=dict(type="log"),
            yaxis=dict(type="log"),
            height=480,
            updatemenus=[_smoothing_buttons(raw_ids, ema_ids, len(traces))] if ema_ids else [],
        ),
    )
    return titled(fig, title, x=axis("D, tokens seen", "tokens") if x == "tokens" else axis("C, compute spent", "FLOPs"),
                  y=axis("loss", "nats/token"), legend="model size (solid: train, dotted: eval)")


def size_groups(sizes: Iterable[float], max_groups: int = 12) -> dict[float, str]:
    """A legend group per model size, or per log-spaced size range when there are many sizes."""
    uniq = sorted({float(s) for s in sizes if s is not None and np.isfinite(s) and s > 0})
    if len(uniq) <= max_groups:
        return {s: f"N={size(s)}" for s in uniq}
    edges = np.logspace(math.log10(uniq[0]), math.log10(uniq[-1]), max_groups + 1)
    out = {}
    for s in uniq:
        # clip: logspace's end points may round just past the smallest and largest sizes
        i = min(max(int(np.searchsorted(edges, s, side="right")) - 1, 0), max_groups - 1)
        out[s] = f"N {size(edges[i], 2)}–{size(edges[i + 1], 2)}"
    return out


def loss_envelope(curves: pd.DataFrame, metric: str = names.TRAIN_LOSS, points: int = 120) -> pd.DataFrame:
    """Approach 1's envelope from the curves themselves: the lowest loss reached within C FLOPs.

    Loss falls with compute along every curve, so the running minimum over all runs' points,
    sorted by FLOPs, is the best loss any run reached with at most that compute.
    """
    if curves is None or curves.empty:
        return pd.DataFrame(columns=["flops", "loss"])
    m = curves[(curves["name"] == metric) & (curves["flops"] > 0)].sort_values("flops")
    m = m[np.isfinite(m["value"])]
    if m.empty:
        return pd.DataFrame(columns=["flops", "loss"])
    env = pd.DataFrame({"flops": m["flops"].to_numpy(float), "loss": np.minimum.accumulate(m["value"].to_numpy(float))})
    env = env[env["loss"].diff().fillna(-1) < 0]  # only where it drops
    if len(env) > points:
        grid = np.exp(np.linspace(np.log(env["flops"].iloc[0]), np.log(env["flops"].iloc[-1]), points))
        idx = np.searchsorted(env["flops"].to_numpy(), grid, side="right") - 1
        env = env.iloc[np.unique(np.concatenate([[0, len(env) - 1], idx.clip(0)]))]  # ends kept exactly
    return env.reset_index(drop=True)


# -- IsoFLOP profiles ----------------------------------------------------------------------------
def isoflop_profiles(runs: pd.DataFrame, isoflop: Any | None = None, *, title: str = "IsoFLOP profiles") -> go.Figure:
    """Final loss against N for each compute budget, with approach 2's parabolas and minima.

    ``isoflop`` is a fitted approach-2 law (or its ``to_dict()``); without it the points are drawn
    grouped by budget. Budgets the fit flagged (lowest loss at the edge of the sampled sizes) are
    drawn with hollow markers and no parabola, and the legend says why they were left out.
    """
    runs = _runs(runs)
    done = runs[(runs["status"] == "completed") & np.isfinite(runs["final_loss"])]
    if done.empty:
        return empty_figure(title, "No completed runs with a final loss yet.")
    slices = fitview.isoflop_slices(isoflop, done)
    budgets = sorted(slices)
    colors = dict(zip(budgets, sample_colorscale("Plasma", np.linspace(0.05, 0.85, max(len(budgets), 1)))))
    fig = go.Figure()
    for budget in budgets:
        sl = slices[budget]
        pts = sl["points"]
        color = colors[budget]
        flagged = sl.get("flagged", False)
        label = f"C={num(budget, 2)}" + (f" (left out: {sl.get('status', 'flagged')})" if flagged else "")
        fig.add_trace(
            go.Scatter(
                x=pts["N"].to_numpy(float),
                y=pts["final_loss"].to_numpy(float),
                mode="markers",
                name=escape(label),
                legendgroup=str(budget),
                marker=dict(color=color, size=9, symbol="circle-open" if flagged else "circle",
                            line=dict(width=2, color=color) if flagged else dict(width=0.5, color="white")),
                text=[run_label(r) for _, r in pts.iterrows()],
                hovertemplate="%{text}<br>final loss %{y:.4f}<extra></extra>",
            )
        )
        parabola = sl.get("parabola")
        if parabola is not None and not flagged:
            fig.add_trace(
                go.Scatter(
                    x=parabola["N"], y=parabola["loss"], mode="lines", legendgroup=str(budget),
                    showlegend=False, line=dict(color=color, width=1.5), hoverinfo="skip",
                )
            )
        if sl.get("N_opt") is not None and not flagged:
            fig.add_trace(
                go.Scatter(
                    x=[sl["N_opt"]], y=[sl["loss_opt"]], mode="markers", legendgroup=str(budget),
                    showlegend=False, marker=dict(symbol="star", size=15, color=color, line=dict(color="black", width=1)),
                    hovertemplate=f"C={num(budget, 2)}: N_opt %{{x:.3g}}, loss %{{y:.4f}}<extra></extra>",
                )
            )
    fig.update_layout(template=TEMPLATE, xaxis=dict(type="log"), height=460)
    return titled(fig, title, x=axis("N", "parameters"), y=axis("final eval loss", "nats/token"),
                  legend="compute budget C (FLOPs)")


# -- frontiers -----------------------------------------------------------------------------------
#: The colour of a law its fit notes flag: drawn, but not beside the chosen one as its equal.
UNRELIABLE_COLOR = "#b0b0b0"


def frontiers(
    fits: dict[str, Any],
    *,
    runs: pd.DataFrame | None = None,
    target: float | None = None,
    title: str = "Compute-optimal frontiers",
    unreliable: Iterable[str] = (),
) -> go.Figure:
    """N_opt and D_opt against C for every fitted method, with 95% bands, points and D = 20N.

    ``fits`` maps method names to fitted laws (or their stored dicts); ``target`` is the budget
    of the recommended next run, marked with a star on every method's line. The methods in
    ``unreliable`` (flagged by their fit notes) are drawn thin, grey and dotted, without a band.
    """
    unreliable = set(unreliable)
    runs = _runs(runs) if runs is not None else None
    views = [v for v in (fitview.frontier(m, law) for m, law in fits.items()) if v is not None]
    if not views:
        return empty_figure(title, "No law has been fitted yet, so there is no frontier to draw.")
    lo_c, hi_c = _budget_range(runs, target, views)
    grid = np.logspace(math.log10(lo_c), math.log10(hi_c), 60)
    fig = make_subplots(rows=1, cols=2, subplot_titles=("N_opt(C)", "D_opt(C)"), horizontal_spacing=0.1)
    for v in views:
        flagged = v.method in unreliable or v.kind in unreliable
        color = UNRELIABLE_COLOR if flagged else METHOD_COLORS.get(v.kind, "#9467bd")
        name = escape(v.label) + (" (unreliable)" if flagged else "")
        curve = v.curve(grid)
        for col, key in ((1, "N"), (2, "D")):
            band = None if flagged else v.band(grid, key)
            if band is not None:
                lo, hi = band
                fig.add_trace(
                    go.Scatter(
                        x=np.concatenate([grid, grid[::-1]]), y=np.concatenate([hi, lo[::-1]]),
                        fill="toself", fillcolor=with_alpha(color, 0.15), line=dict(width=0),
                        legendgroup=v.method, showlegend=False, hoverinfo="skip",
                    ),
                    row=1, col=col,
                )
            fig.add_trace(
                go.Scatter(
                    x=grid, y=curve[key], mode="lines", name=name, legendgroup=v.method,
                    showlegend=col == 1, line=dict(color=color, width=1, dash="dot") if flagged else dict(color=color, width=2),
                    hovertemplate=f"{escape(v.label)}<br>C %{{x:.3g}}: {key}_opt %{{y:.3g}}<extra></extra>",
                ),
                row=1, col=col,
            )
            if v.points is not None and not v.points.empty:
                fig.add_trace(
                    go.Scatter(
                        x=v.points["C"], y=v.points[key], mode="markers", legendgroup=v.method,
                        showlegend=False, marker=dict(color=color, size=7, symbol="diamond"),
                        hovertemplate=f"{escape(v.label)} measured: C %{{x:.3g}}, {key} %{{y:.3g}}<extra></extra>",
                    ),
                    row=1, col=col,
                )
            if target is not None:
                at = v.curve(np.array([target]))
                fig.add_trace(
                    go.Scatter(
                        x=[target], y=at[key], mode="markers", legendgroup=v.method, showlegend=False,
                        marker=dict(symbol="star", size=9 if flagged else 14, color=color,
                                    line=dict(color="black", width=0 if flagged else 1)),
                        hovertemplate=f"{escape(v.label)} at the recommended budget: {key} %{{y:.3g}}<extra></extra>",
                    ),
                    row=1, col=col,
                )
    _twenty_tokens_per_parameter(fig, grid)
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    fig.update_layout(template=TEMPLATE, height=470)
    return titled(fig, title, x=axis("C", "FLOPs"), y=[axis("N_opt", "parameters"), axis("D_opt", "tokens")],
                  legend="method")


def _twenty_tokens_per_parameter(fig: go.Figure, grid: np.ndarray) -> None:
    """Hoffmann et al.'s rule of thumb on both panels: D = 20 N, with C = k N D, so N = sqrt(C / (20 k))."""
    n20 = np.sqrt(grid / (20.0 * FLOPS_PER_PARAM_TOKEN))
    for col, y in ((1, n20), (2, 20 * n20)):
        fig.add_trace(
            go.Scatter(
                x=grid, y=y, mode="lines", name=f"D = 20N (C = {FLOPS_PER_PARAM_TOKEN:g}ND)", legendgroup="d20",
                showlegend=col == 1, line=dict(color="black", dash="dot", width=1),
                hovertemplate="D = 20N: %{y:.3g}<extra></extra>",
            ),
            row=1, col=col,
        )


def _budget_range(runs: pd.DataFrame | None, target: float | None, views: Sequence[Any]) -> tuple[float, float]:
    cs: list[float] = []
    if runs is not None and not runs.empty:
        c = runs["C"].to_numpy(float)
        cs.extend(c[np.isfinite(c) & (c > 0)].tolist())
    for v in views:
        if v.points is not None and not v.points.empty:
            cs.extend(v.points["C"].astype(float).tolist())
    if target:
        cs.append(float(target))
    if not cs:
        return 1e15, 1e21
    return min(cs) / 2, max(cs) * 2


def with_alpha(color: str, a: float) -> str:
    """``#rrggbb`` as ``rgba(...)`` with opacity ``a`` (bands drawn in their line's colour)."""
    color = color.lstrip("#")
    r, g, b = (int(color[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{a})"


# -- parametric fit ------------------------------------------------------------------------------
def parametric_contour(
    law: Any, runs: pd.DataFrame | None = None, *, title: str = "Parametric fit: L(N, D)"
) -> go.Figure:
    """A contour of the fitted L(N, D) on log axes, the compute-optimal line, and the runs."""
    runs = _runs(runs) if runs is not None else None
    model = fitview.as_law(law)
    if model is None:
        return empty_figure(title, "The parametric law (approach 3) has not been fitted.")
    n_lo, n_hi, d_lo, d_hi = 1e5, 1e10, 1e7, 1e12
    if runs is not None and not runs.empty:
        n = runs["N"].to_numpy(float)
        d = runs["D"].to_numpy(float)
        if np.isfinite(n).any() and np.isfinite(d).any():
            n_lo, n_hi = np.nanmin(n) / 4, np.nanmax(n) * 8
            d_lo, d_hi = np.nanmin(d) / 4, np.nanmax(d) * 8
    ns = np.logspace(math.log10(n_lo), math.log10(n_hi), 70)
    ds = np.logspace(math.log10(d_lo), math.log10(d_hi), 70)
    nn, dd = np.meshgrid(ns, ds)
    z = np.asarray(model.predict(nn.ravel(), dd.ravel()), dtype=float).reshape(nn.shape)
    fig = go.Figure()
    fig.add_trace(
        go.Contour(
            x=ns, y=ds, z=np.log10(z), colorscale="Viridis", ncontours=25,
            colorbar=dict(title=dict(text="log10 L (L in nats/token)")), hovertemplate="N %{x:.3g}, D %{y:.3g}<br>log10 L %{z:.4f}<extra></extra>",
            contours=dict(coloring="heatmap", showlabels=False), line=dict(width=0.5), name="L(N, D)",
        )
    )
    view = fitview.frontier("approach3", law)
    if view is not None:
        cs = np.logspace(math.log10(FLOPS_PER_PARAM_TOKEN * n_lo * d_lo), math.log10(FLOPS_PER_PARAM_TOKEN * n_hi * d_hi), 80)
        cur = view.curve(cs)
        keep = (cur["N"] >= n_lo) & (cur["N"] <= n_hi) & (cur["D"] >= d_lo) & (cur["D"] <= d_hi)
        fig.add_trace(
            go.Scatter(
                x=cur["N"][keep], y=cur["D"][keep], mode="lines", name="compute-optimal",
                line=dict(color="white", width=3), hovertemplate="N_opt %{x:.3g}, D_opt %{y:.3g}<extra></extra>",
            )
        )
    if runs is not None and not runs.empty:
        done = runs[np.isfinite(runs["final_loss"])]
        role = done["role"] if "role" in done.columns else pd.Series("", index=done.index)
        done, role = done[role != "trunk"], role[role != "trunk"]  # a trunk is no (N, D) point
        # Cooldown branches (points that share a trunk) get their own marker.
        for name, part, symbol in (("runs", done[role != "branch"], "circle"),
                                   ("branch points", done[role == "branch"], "diamond")):
            if part.empty:
                continue
            fig.add_trace(
                go.Scatter(
                    x=part["N"], y=part["D"], mode="markers", name=name,
                    marker=dict(color="white", size=9, symbol=symbol, line=dict(color="black", width=1.5)),
                    text=[run_label(r) + f"<br>final loss {num(r['final_loss'], 4)}" for _, r in part.iterrows()],
                    hovertemplate="%{text}<extra></extra>",
                )
            )
    fig.update_layout(
        template=TEMPLATE, height=520, xaxis=dict(type="log"), yaxis=dict(type="log"),
        legend=dict(x=0.01, y=0.99, bgcolor="rgba(255,255,255,0.7)"),
    )
    return titled(fig, title, x=axis("N", "parameters"), y=axis("D", "tokens"), legend="drawn")


def residuals(fits: dict[str, Any], runs: pd.DataFrame, *, title: str = "Residuals of each law") -> go.Figure:
    """Relative error (predicted − observed) / observed of each law's L(N, D) on every completed run."""
    runs = _runs(runs)
    done = runs[(runs["status"] == "completed") & np.isfinite(runs["final_loss"])]
    fig = go.Figure()
    drawn = 0
    labels = [run_label(r) for _, r in done.iterrows()]  # once: the same runs under every law
    for method, law in fits.items():
        model = fitview.as_law(law)
        if model is None or done.empty:
            continue
        try:
            pred = np.asarray(model.predict(done["N"].to_numpy(float), done["D"].to_numpy(float)), dtype=float)
        except Exception:  # a law that cannot evaluate at these points is left out of the figure, not the report
            continue
        if pred.shape != (len(done),) or not np.isfinite(pred).any():
            continue
        rel = (pred - done["final_loss"].to_numpy(float)) / done["final_loss"].to_numpy(float)
        kind = fitview.kind_of(method, law)
        fig.add_trace(
            go.Scatter(
                x=done["C"], y=rel, mode="markers", name=escape(fitview.label_of(method, law)),
                marker=dict(color=METHOD_COLORS.get(kind, "#9467bd"), size=8),
                text=labels, hovertemplate="%{text}<br>relative error %{y:.2%}<extra></extra>",
            )
        )
        drawn += 1
    if not drawn:
        return empty_figure(title, "No fitted law predicts L(N, D) for these runs yet.")
    fig.add_hline(y=0, line=dict(color="black", width=1))
    fig.update_layout(template=TEMPLATE, height=400, xaxis=dict(type="log"), yaxis=dict(tickformat=".1%"))
    return titled(fig, title, x=axis("C", "FLOPs"), y=axis("(predicted − observed) / observed", "%"), legend="law")


def backtest(results: pd.DataFrame | None, *, title: str = "Backtest: predicting the largest runs") -> go.Figure:
    """Relative error of each law's predicted loss for runs held out of its fit (largest compute).

    ``results`` has columns ``method``, ``N``, ``C`` and ``rel_error`` (one row per held-out run
    and law), as :func:`scaling.reports.fitview.backtest_frame` collects them from stored fits.
    """
    if results is None or results.empty:
        return empty_figure(title, "No backtest available (it needs fits refitted without the largest runs).")
    fig = go.Figure()
    for method, g in results.groupby("method", sort=False):
        g = g.sort_values("N")
        label = g["label"].iloc[0] if "label" in g else method
        fig.add_trace(
            go.Bar(
                x=[f"N={size(n)}, C={num(c, 2)}" for n, c in zip(g["N"], g["C"])], y=g["rel_error"], name=escape(label),
                marker_color=METHOD_COLORS.get(fitview.kind_of(method, None), "#9467bd"),
                hovertemplate=f"{escape(label)}<br>%{{x}}: %{{y:.2%}}<extra></extra>",
            )
        )
    fig.update_layout(template=TEMPLATE, barmode="group", height=400, yaxis=dict(tickformat=".1%"))
    return titled(fig, title, x="held-out run (N parameters, C FLOPs)",
                  y=axis("(predicted − observed) / observed", "%"), legend="law")


# -- run health ----------------------------------------------------------------------------------
#: The events the run-health figure draws: what went wrong or was recovered from. Ordinary events
#: (the corpus a run read, a simulated run's law, a branch start, an adaptive decision) are not drawn.
PROBLEM_EVENTS = frozenset({names.LOSS_SPIKE, names.ROLLBACK, names.RETRY, names.RESUME, names.FAILURE,
                            names.STALE_RECOVERED, names.OVERFLOW_SKIP, names.INTERRUPTED,
                            names.CHECKPOINT_CORRUPT, names.TRUNK_RETRAIN})

#: What the run-health figure says when no run recorded a problem event.
NO_PROBLEMS = "No spikes, rollbacks or retries: no run recorded a problem event."


def run_events(events: pd.DataFrame, runs: pd.DataFrame, *, title: str = "Loss spikes, rollbacks and retries") -> go.Figure:
    """Every problem event (:data:`PROBLEM_EVENTS`) of every run: step on x, run on y, one marker symbol per kind."""
    runs = _runs(runs)
    if events is not None and not events.empty:
        events = events[events["kind"].isin(PROBLEM_EVENTS)]
    if events is None or events.empty:
        return empty_figure(title, NO_PROBLEMS)
    r = runs.set_index("run_key")
    labels = {k: run_label(row) + f" [{escape(k)}]" for k, row in r.iterrows()}
    symbols = {
        names.LOSS_SPIKE: "triangle-up", names.ROLLBACK: "triangle-down", names.RETRY: "square",
        names.RESUME: "circle", names.FAILURE: "x", names.STALE_RECOVERED: "diamond",
        names.OVERFLOW_SKIP: "cross", names.INTERRUPTED: "hexagon", names.CHECKPOINT_CORRUPT: "star",
        names.TRUNK_RETRAIN: "triangle-right",
    }
    fig = go.Figure()
    for kind, g in events.groupby("kind", sort=True):
        ys = [labels.get(k, escape(k)) for k in g["run_key"]]
        detail = [escape(_short(d)) for d in g.get("detail", pd.Series([""] * len(g)))]
        fig.add_trace(
            go.Scatter(
                x=pd.to_numeric(g["step"], errors="coerce").fillna(0), y=ys, mode="markers", name=escape(kind),
                marker=dict(symbol=symbols.get(kind, "circle"), size=10), text=detail,
                hovertemplate=f"{escape(kind)} at step %{{x}}<br>%{{y}}<br>%{{text}}<extra></extra>",
            )
        )
    fig.update_layout(template=TEMPLATE, yaxis=dict(type="category"),
                      height=max(300, min(1200, 80 + 22 * events["run_key"].nunique())))
    return titled(fig, title, x=axis("step", "optimizer steps"), y="run", legend="event")


def throughput(perf: pd.DataFrame, runs: pd.DataFrame, *, title: str = "Throughput and MFU per run") -> go.Figure:
    """Mean tokens/s and model FLOPs utilisation of each run (``perf`` indexed by run_key), against its size."""
    runs = _runs(runs)
    if perf is not None and "name" in perf.columns:  # raw metric rows, as Results.metrics returns them
        perf = summarise_perf(perf)
    if perf is None or perf.empty:
        return empty_figure(title, "No throughput metrics recorded yet.")
    df = runs.set_index("run_key").join(perf, how="inner")
    if df.empty:
        return empty_figure(title, "No throughput metrics recorded yet.")
    fig = make_subplots(rows=1, cols=2, subplot_titles=("tokens per second", "MFU"), horizontal_spacing=0.1)
    text = [run_label(r) for _, r in df.iterrows()]
    colors = size_colors(df["N"])
    mc = [colors.get(float(n), "#444") for n in df["N"]]
    fig.add_trace(
        go.Scatter(x=df["N"], y=df["tokens_per_s"], mode="markers", marker=dict(color=mc, size=9), text=text,
                   name="tokens/s", hovertemplate="%{text}<br>%{y:.4g} tokens/s<extra></extra>", showlegend=False),
        row=1, col=1,
    )
    fig.add_trace(
        go.Scatter(x=df["N"], y=df["mfu"], mode="markers", marker=dict(color=mc, size=9), text=text,
                   name="MFU", hovertemplate="%{text}<br>MFU %{y:.2%}<extra></extra>", showlegend=False),
        row=1, col=2,
    )
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log", row=1, col=1)
    fig.update_yaxes(tickformat=".2%", row=1, col=2)
    fig.update_layout(template=TEMPLATE, height=380)
    return titled(fig, title, x=axis("N", "parameters"), y=[axis("throughput", "tokens/s"), axis("MFU", "%")])


def _short(detail: Any, limit: int = 160) -> str:
    """An event's detail on one line: a mapping as "key value, ..." (never a Python dict's repr)."""
    if isinstance(detail, dict):
        text = ", ".join(f"{k} {num(v, 4) if isinstance(v, float) else v}" for k, v in detail.items())
    else:
        text = detail if isinstance(detail, str) else ("" if detail is None else str(detail))
    return text if len(text) <= limit else text[: limit - 1] + "…"
