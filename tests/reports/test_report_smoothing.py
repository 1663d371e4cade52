"""The report's smoothed training curves: TensorBoard's debiased EMA, and the toggle on the page."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scaling import vocab as names
from scaling.reports import figures as F
from scaling.reports import write_report
from scaling.reports.report_data import normalise_runs


def tensorboard_ema(values: list[float], weight: float) -> list[float]:
    """TensorBoard's scalar smoothing, transcribed from its frontend (``resampleAndSmooth``)."""
    out = []
    last = 0.0
    accumulated = 0
    constant = all(v == values[0] for v in values)
    for v in values:
        if constant or not math.isfinite(v):
            out.append(v)
            continue
        last = last * weight + (1 - weight) * v
        accumulated += 1
        out.append(last / (1 - weight**accumulated))
    return out


@pytest.mark.parametrize("weight", [0.3, 0.6, 0.8, 0.95])
def test_ema_is_tensorboards(weight: float) -> None:
    rng = np.random.default_rng(0)
    v = 3 + 2 / np.arange(1, 301) ** 0.5 + 0.2 * rng.standard_normal(300)
    v[[5, 77]] = np.nan  # skipped by the average, passed through
    v[120] = np.inf
    got = F.ema(v, weight)
    want = np.array(tensorboard_ema(list(v), weight))
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    assert np.allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=1e-12)
    assert np.isnan(got[5]) and got[120] == np.inf


def test_ema_closed_forms() -> None:
    w = 0.8
    assert F.ema([4.0], w)[0] == 4.0  # debiased: the first value is itself, not 0.2 * 4
    s2 = F.ema([1.0, 3.0], w)[1]
    assert math.isclose(s2, (w * (1 - w) * 1.0 + (1 - w) * 3.0) / (1 - w**2))
    assert np.array_equal(F.ema([2.5] * 7, w), [2.5] * 7)  # a constant series is left as it is
    x = np.linspace(1, 2, 50)
    assert np.array_equal(F.ema(x, 0.0), x)
    noisy = 3 + 0.1 * np.random.default_rng(1).standard_normal(2000)
    assert F.ema(noisy, 0.95)[100:].std() < 0.25 * noisy[100:].std()  # it does smooth
    with pytest.raises(ValueError):
        F.ema(x, 1.0)


def _frames(n_runs: int = 3, steps: int = 400) -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(2)
    runs = normalise_runs(pd.DataFrame({
        "run_key": [f"k{i}" for i in range(n_runs)], "N": [1e5 * 3**i for i in range(n_runs)],
        "D": [1e7] * n_runs, "C": [6e12 * 3**i for i in range(n_runs)], "status": ["completed"] * n_runs,
        "final_loss": [3.0 - 0.2 * i for i in range(n_runs)], "spec": [{} for _ in range(n_runs)],
    }))
    rows = []
    for i, key in enumerate(runs["run_key"]):
        for s in range(1, steps + 1):
            t = s * 1000
            noisy = (2 + 5 / s**0.3 - 0.1 * i) * (1 + 0.05 * rng.standard_normal())
            rows.append((key, s, t, 6.0 * runs["N"][i] * t, names.TRAIN_LOSS, noisy))
            if s % 100 == 0:
                rows.append((key, s, t, 6.0 * runs["N"][i] * t, names.EVAL_LOSS, 2.05 + 5 / s**0.3 - 0.1 * i))
    return runs, pd.DataFrame(rows, columns=["run_key", "step", "tokens", "flops", "name", "value"])


def test_train_curves_are_drawn_smoothed_over_faint_raw_ones() -> None:
    runs, curves = _frames()
    fig = F.loss_curves(curves, runs)
    raw = [t for t in fig.data if t.meta == "raw"]
    smooth = [t for t in fig.data if t.meta == "ema"]
    evals = [t for t in fig.data if t.meta == "eval"]
    assert len(raw) == len(smooth) == len(evals) == 3
    for r, s in zip(raw, smooth):
        assert r.legendgroup == s.legendgroup and r.line.color == s.line.color
        assert np.allclose(s.y, F.ema(np.asarray(r.y, float), F.EMA_WEIGHT), rtol=1e-6)  # the EMA of the points drawn
        assert r.opacity == F.RAW_UNDER_EMA and s.opacity > r.opacity
    (menu,) = fig.layout.updatemenus
    smoothed, raw_only = menu.buttons
    index = {id(t): i for i, t in enumerate(fig.data)}
    vis = raw_only.args[0]["visible"]
    assert [vis[index[id(t)]] for t in smooth] == [False] * 3 and all(vis[index[id(t)]] for t in raw + evals)
    assert all(smoothed.args[0]["visible"])
    assert F.loss_curves(curves, runs, smoothing=None).layout.updatemenus == ()  # raw only: no buttons
    assert not any(t.meta == "ema" for t in F.loss_curves(curves, runs, smoothing=None).data)


def _visible_traces(page, fig_id: str) -> dict[str, int]:
    return page.evaluate(
        """(id) => { const d = document.getElementById(id); const out = {raw: 0, ema: 0, eval: 0, drawn: 0};
            d.data.forEach(t => { if (t.meta in out && t.visible !== false && t.visible !== 'legendonly') { out[t.meta] += 1; } });
            out.drawn = d.querySelectorAll('.scatterlayer .trace').length; return out; }""", fig_id)


@pytest.mark.browser
def test_toggle_switches_between_smoothed_and_raw_in_chromium(sweeps, browser, tmp_path: Path) -> None:
    url, spec = sweeps["typical"]
    runs = len(spec.keys)

    def toggle(page) -> list[dict[str, int]]:
        states = [_visible_traces(page, "fig-loss-tokens")]
        page.locator("#fig-loss-tokens .updatemenu-button", has_text="raw").click()
        page.wait_for_timeout(300)
        states.append(_visible_traces(page, "fig-loss-tokens"))
        page.locator("#fig-loss-tokens .updatemenu-button", has_text="smoothed").click()
        page.wait_for_timeout(300)
        states.append(_visible_traces(page, "fig-loss-tokens"))
        return states

    page = browser.open(write_report(url, None, tmp_path / "typical.html"), "smoothing", actions=toggle)
    assert page.console_errors == [] and page.dialogs == []
    smoothed, raw, again = page.result
    assert smoothed == {"raw": runs, "ema": runs, "eval": runs, "drawn": 3 * runs}
    assert raw == {"raw": runs, "ema": 0, "eval": runs, "drawn": 2 * runs}
    assert again == smoothed
