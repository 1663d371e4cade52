"""Downsampling keeps a curve's shape where a log axis shows it, and never moves its minimum."""

from __future__ import annotations

import numpy as np
import pandas as pd

from scaling.reports.downsample import downsample_curve, downsample_frame, log_spaced_indices


def test_short_curves_are_untouched() -> None:
    x = np.arange(1, 51, dtype=float)
    assert list(log_spaced_indices(x, 100)) == list(range(50))


def test_long_curve_is_thinned_log_spaced_with_ends_and_minimum() -> None:
    rng = np.random.default_rng(0)
    x = np.arange(1, 100_001, dtype=float)
    y = 2 + 10 / x**0.3 + 0.01 * rng.standard_normal(x.size)
    y[73_421] = 0.5  # the minimum sits where no log-spaced point would land
    xs, ys = downsample_curve(x, y, max_points=200)
    assert len(xs) <= 203
    assert xs[0] == 1 and xs[-1] == 100_000
    assert 73_422.0 in xs and ys.min() == 0.5
    # log spacing: as many points in the first decade of steps as in the last one, roughly
    first = np.sum(xs <= 10)
    last = np.sum(xs > 10_000)
    assert first >= 9 and last < 80


def test_non_positive_x_falls_back_to_linear() -> None:
    x = np.zeros(1000)
    idx = log_spaced_indices(x, 50)
    assert idx[0] == 0 and idx[-1] == 999 and len(idx) <= 50


def test_frame_keeps_each_groups_minimum_and_all_columns() -> None:
    rows = []
    for key, m in (("a", 1.0), ("b", 2.0)):
        for step in range(1, 5001):
            rows.append((key, step, step * 100, step * 600.0, "train/loss", m + 1 / step + (0.0 if step != 4321 else -1)))
    df = pd.DataFrame(rows, columns=["run_key", "step", "tokens", "flops", "name", "value"])
    out = downsample_frame(df, ["run_key", "name"], x="tokens", max_points=100)
    assert set(out.columns) == set(df.columns)
    for key, g in out.groupby("run_key"):
        full = df[df.run_key == key]
        assert g["value"].min() == full["value"].min()
        assert 4321 in set(g["step"])
        assert len(g) <= 103
        assert (g["flops"] == g["tokens"] * 6).all()  # rows stay whole
