"""The figure functions work on plain DataFrames (as a notebook has them) and draw SVG only."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from report_synth import HOSTILE
from scaling.reports import figures as F
from scaling.reports.report_data import normalise_runs
from scaling import vocab as names


def _frames(n_runs: int = 4, steps: int = 3000) -> tuple[pd.DataFrame, pd.DataFrame]:
    runs = normalise_runs(pd.DataFrame({
        "run_key": [f"k{i}" for i in range(n_runs)],
        "N": [1e5 * 3**i for i in range(n_runs)],
        "D": [1e7] * n_runs,
        "C": [6e12 * 3**i for i in range(n_runs)],
        "status": ["completed"] * n_runs,
        "final_loss": [3.0 - 0.2 * i for i in range(n_runs)],
        "spec": [{"name": HOSTILE if i == 0 else f"r{i}"} for i in range(n_runs)],
    }))
    rows = []
    for i, key in enumerate(runs["run_key"]):
        for s in range(1, steps + 1):
            t = s * 1000
            rows.append((key, s, t, 6.0 * runs["N"][i] * t, names.TRAIN_LOSS, 2 + 5 / s**0.3 - 0.1 * i))
            if s % 500 == 0:
                rows.append((key, s, t, 6.0 * runs["N"][i] * t, names.EVAL_LOSS, 2.05 + 5 / s**0.3 - 0.1 * i))
    return runs, pd.DataFrame(rows, columns=["run_key", "step", "tokens", "flops", "name", "value"])


def _types(fig: go.Figure) -> set[str]:
    return {t.type for t in fig.data}


def test_loss_curves_thin_long_curves_and_keep_minima() -> None:
    runs, curves = _frames()
    fig = F.loss_curves(curves, runs, x="flops", envelope=F.loss_envelope(curves), max_points=100)
    assert _types(fig) == {"scatter"}
    train = [t for t in fig.data if t.mode == "lines" and t.legendgroup and t.legendgroup.startswith("N=") and t.meta == "raw"]
    assert len(train) == 4
    for t, (key, g) in zip(train, curves[curves.name == names.TRAIN_LOSS].groupby("run_key")):
        assert len(t.y) <= 103
        assert np.isclose(np.min(t.y), g["value"].min(), rtol=1e-6)
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.type == "log"
    assert any(t.name == "envelope (approach 1)" for t in fig.data)


def test_envelope_is_the_running_minimum_over_flops() -> None:
    _, curves = _frames()
    env = F.loss_envelope(curves)
    assert (np.diff(env["loss"]) < 0).all() and (np.diff(env["flops"]) > 0).all()
    tr = curves[curves.name == names.TRAIN_LOSS]
    assert env["loss"].min() == tr["value"].min()


def test_user_text_is_escaped_in_figure_json() -> None:
    runs, curves = _frames()
    blob = F.loss_curves(curves, runs).to_json() + F.isoflop_profiles(runs).to_json()
    assert HOSTILE not in blob and "&lt;script&gt;" in blob


def test_every_figure_draws_something_or_says_why() -> None:
    runs, curves = _frames(1, 10)
    empty = pd.DataFrame()
    figs = [
        F.loss_curves(empty, runs), F.isoflop_profiles(runs.iloc[0:0]), F.frontiers({}), F.parametric_contour(None),
        F.residuals({}, runs), F.backtest(None), F.run_events(empty, runs), F.throughput(empty, runs),
    ]
    for fig in figs:
        assert isinstance(fig, go.Figure)
        assert "scattergl" not in _types(fig)
        assert fig.layout.annotations, "an empty figure must say why it is empty"
        json.loads(fig.to_json())


def test_many_sizes_share_a_legend_entry_per_size_range() -> None:
    sizes = np.logspace(4.7, 8, 80)
    groups = F.size_groups(sizes, max_groups=12)
    assert len(set(groups.values())) == 12
    for s, label in groups.items():
        scale = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}
        lo, hi = (float(v[:-1]) * scale[v[-1]] if v[-1] in scale else float(v)
                  for v in label.removeprefix("N ").split("–"))
        assert lo * 0.99 <= s <= hi * 1.01, (s, label)
    assert F.size_groups([1e5, 2e5]) == {1e5: "N=100K", 2e5: "N=200K"}  # counts as scaling.fmt.size writes them


def test_run_health_draws_problem_events_only_and_says_so_when_there_are_none() -> None:
    """The corpus event at step 0 and a simulated run's law are no problems: not drawn; a spike is, with its
    detail in words (never a Python dict)."""
    runs, _ = _frames(2, 10)
    ordinary = pd.DataFrame({"run_key": ["k0", "k1", "k0"], "step": [0, 0, 9],
                             "kind": [names.DATA, names.DATA, names.SIMULATED],
                             "detail": [{"fingerprint": "ab12"}, {"fingerprint": "ab12"}, {"law": {"E": 2.5}}]})
    fig = F.run_events(ordinary, runs)
    assert [t for t in fig.data if len(t.x)] == [] and fig.layout.annotations[0].text == F.NO_PROBLEMS
    assert F.NO_PROBLEMS.startswith("No spikes, rollbacks or retries")
    spike = pd.DataFrame({"run_key": ["k1"], "step": [7], "kind": [names.LOSS_SPIKE],
                          "detail": [{"loss": 5.25, "threshold": 4.0}]})
    fig = F.run_events(pd.concat([ordinary, spike], ignore_index=True), runs)
    assert [t.name for t in fig.data] == [names.LOSS_SPIKE] and list(fig.data[0].x) == [7]
    assert list(fig.data[0].text) == ["loss 5.25, threshold 4"]


def test_unreliable_laws_are_drawn_grey_and_thin_without_a_band() -> None:
    from report_synth import true_loss
    from scaling.fitting import fit_data
    from scaling.fitting.core.measurements import from_frame

    Ns, Ds = np.meshgrid(np.geomspace(2e4, 2e6, 5), np.geomspace(2e6, 2e8, 5))
    N, D = Ns.ravel(), Ds.ravel()
    data = from_frame(pd.DataFrame({"N": N, "D": D, "loss": true_loss(N, D)}))
    laws = fit_data(data, "approach3", n_bootstrap=4).laws
    drawn = {t.line.color for t in F.frontiers(laws, target=1e16).data if t.mode == "lines" and t.legendgroup != "d20"}
    grey = F.frontiers(laws, target=1e16, unreliable={"approach3"})
    lines = [t for t in grey.data if t.mode == "lines" and t.legendgroup != "d20"]
    assert F.UNRELIABLE_COLOR not in drawn
    assert lines and all(t.line.color == F.UNRELIABLE_COLOR and t.line.width == 1 and t.line.dash == "dot" for t in lines)
    assert not [t for t in grey.data if t.fill == "toself"] and "(unreliable)" in lines[0].name
