"""Reports opened in real headless Chromium: figures drawn, no console errors, hostile text inert.

Each test keeps a full-page screenshot under ``artifacts/reports/`` (or ``$SCALING_ARTIFACTS``)
and prints its path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from report_synth import HOSTILE
from scaling.reports import write_report

pytestmark = pytest.mark.browser

#: figures every report has (each is drawn even when it only says what is missing)
ALWAYS = {"fig-isoflop", "fig-frontiers", "fig-residuals", "fig-backtest", "fig-events", "fig-throughput"}
ALL_DRAWN = "Array.from(document.querySelectorAll('.figure')).every(d => d.hasAttribute('data-rendered'))"


def _check_clean(page) -> None:
    assert page.console_errors == [], page.console_errors
    assert page.dialogs == [], f"user text ran as script: {page.dialogs}"
    assert page.screenshot is not None and page.screenshot.stat().st_size > 10_000
    assert all(n >= 0 for n in page.figures.values()), f"figures without plotly SVG: {page.figures}"


def _sort_by_n(page) -> list[list[float]]:
    """Click the runs table's N header twice; the N column after each click."""
    column = """() => { const t = document.getElementById('runs-table');
        const i = Array.from(t.tHead.rows[0].cells).findIndex(c => c.textContent === 'N');
        return Array.from(t.tBodies[0].rows).map(r => parseFloat(r.cells[i].dataset.v)); }"""
    orders = []
    for _ in range(2):
        page.click("#runs-table th:text-is('N')")
        orders.append(page.evaluate(column))
    return orders


def test_typical_sweep_renders_every_figure(sweeps, browser, tmp_path: Path) -> None:
    url, spec = sweeps["typical"]
    page = browser.open(write_report(url, None, tmp_path / "typical.html"), "typical", actions=_sort_by_n)
    _check_clean(page)
    assert ALWAYS | {"fig-loss-tokens", "fig-loss-flops"} <= set(page.figures)
    runs = len(spec.keys)
    # a raw and a smoothed train trace and an eval trace per run, plus the envelope and approach 1's
    # optima on the FLOPs view
    assert page.figures["fig-loss-tokens"] == 3 * runs
    assert page.figures["fig-loss-flops"] == 3 * runs + 2
    # points, parabola and minimum per budget
    assert page.figures["fig-isoflop"] == 3 * len(spec.budgets)
    # all four laws fitted: a line per method and panel at least, the contour, residuals of each
    assert page.figures["fig-frontiers"] >= 2 * 4 + 2
    assert page.figures["fig-contour"] >= 1 and page.figures["fig-residuals"] >= 3
    assert page.figures["fig-events"] >= 3 and page.figures["fig-throughput"] == 2
    assert "Scaling report: typical" in page.title
    ascending, descending = page.result  # the runs table sorts on a header click, both ways
    assert ascending == sorted(ascending) and descending == sorted(ascending, reverse=True)
    assert len(ascending) == runs


def test_hostile_names_show_as_text_and_never_run(sweeps, browser, tmp_path: Path) -> None:
    url, _ = sweeps["hostile"]
    page = browser.open(write_report(url, HOSTILE, tmp_path / "hostile.html"), "hostile")
    _check_clean(page)
    assert HOSTILE in page.title
    assert page.text.count(HOSTILE) >= 3  # header, runs table (names), failures table
    assert "alert(3)" in page.text  # the error text, shown
    assert "failed" in page.text and "What the data cannot determine" in page.text


def test_one_run(sweeps, browser, tmp_path: Path) -> None:
    url, _ = sweeps["one_run"]
    page = browser.open(write_report(url, "one-run", tmp_path / "one.html"), "one-run")
    _check_clean(page)
    assert page.figures["fig-loss-tokens"] == 3  # raw and smoothed train, eval


def test_sweep_with_nothing_finished(sweeps, browser, tmp_path: Path) -> None:
    url, _ = sweeps["pending"]
    page = browser.open(write_report(url, "not-started", tmp_path / "pending.html"), "pending")
    _check_clean(page)
    assert "No loss curves recorded yet." in page.text
    assert ALWAYS <= set(page.figures)


def test_figures_are_drawn_as_they_near_the_viewport(sweeps, browser, tmp_path: Path) -> None:
    """At the top of a report only the figures within a screen of the viewport are drawn; scrolling to
    one draws it, and "draw every figure" (as printing does) draws the rest."""
    url, _ = sweeps["typical"]
    drawn = "() => Array.from(document.querySelectorAll('.figure[data-rendered]')).map(d => d.id)"

    def act(page) -> dict[str, list[str]]:
        page.wait_for_function("document.querySelector('.figure[data-rendered]') !== null", timeout=60_000)
        at_top = page.evaluate(drawn)
        page.evaluate("() => document.getElementById('fig-events').scrollIntoView()")
        page.wait_for_function("document.getElementById('fig-events').hasAttribute('data-rendered')", timeout=60_000)
        page.evaluate("() => window.scrollTo(0, 0)")
        page.click("#draw-all")
        page.wait_for_function(ALL_DRAWN, timeout=60_000)
        return {"at_top": at_top, "all": page.evaluate(drawn)}

    page = browser.open(write_report(url, None, tmp_path / "lazy.html"), "lazy", actions=act, draw_all=False)
    assert page.console_errors == [] and page.dialogs == []
    at_top, every = page.result["at_top"], page.result["all"]
    assert "fig-loss-tokens" in at_top, at_top  # the first section with figures, within a screen of the top
    assert not {"fig-events", "fig-throughput"} & set(at_top), at_top  # the last section's: not yet
    assert ALWAYS | {"fig-loss-tokens", "fig-loss-flops"} <= set(every)
