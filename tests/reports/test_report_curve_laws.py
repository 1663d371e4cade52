"""The report's curve-law section, on a simulated sweep whose runs follow a known curve law (tests/curve_sweep.py):
each fitted size's curves with the law drawn (titled, axes with units), the held-out errors per run and form,
the schedule advice at that size; sizes without a law said; no section for a sweep without curve laws."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest


@pytest.fixture(scope="module")
def report(curve_sweep_analysis: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, str, str]:
    from scaling.orchestrator.expand import sweep_recommendation
    from scaling.reports import write_report

    url, analysis = curve_sweep_analysis
    path = write_report(url, "curves", tmp_path_factory.mktemp("curve-report") / "report.html", analysis=analysis,
                        recommendation=sweep_recommendation(url, analysis))
    return analysis, url, path


def _section(html: str) -> str:
    start = html.index('<section id="curve-laws">')
    return html[start:html.index("</section>", start)]


def _figures(html: str) -> dict[str, Any]:
    """The page's figures by div id (the JSON block the page draws them from)."""
    m = re.search(r'<script type="application/json" id="figure-data">(.*?)</script>', html, re.S)
    assert m is not None
    return json.loads(m.group(1))


def test_each_fitted_size_has_its_curves_with_the_law_and_held_out_predictions(report) -> None:
    analysis, _, path = report
    html = path.read_text()
    (size,) = analysis.curves.sizes.values()
    assert '<a href="#curve-laws">' in html  # in the navigation bar
    figs = {k: v for k, v in _figures(html).items() if k.startswith("fig-curve-law")}
    assert len(figs) == 1
    fig = next(iter(figs.values()))
    layout = fig["layout"]
    title = layout["title"]["text"]
    assert title.startswith(f"N = ") and "eval loss" in title and ("multi-power" in title or "annealing" in title)
    assert layout["xaxis"]["title"]["text"] == "optimizer step (steps)"
    assert layout["yaxis"]["title"]["text"] == "eval loss (nats per token)"
    names = [t["name"] for t in fig["data"]]
    for run in size.law.runs_:
        assert {f"{run[:12]} measured", f"{run[:12]} fitted law", f"{run[:12]} predicted held out"} <= set(names)
    drawn = [t for t in fig["data"] if t["name"].endswith("fitted law")]
    assert all(v > 0 for t in drawn for v in t["y"])  # no impossible loss drawn


def test_the_held_out_table_and_the_advice_give_every_run_and_schedule(report) -> None:
    analysis, _, path = report
    html = path.read_text()
    sec = _section(html)
    (size,) = analysis.curves.sizes.values()
    table = sec[sec.index('class="curve-held-out"'):]
    for run in size.law.runs_:
        assert f"<td>{run[:12]}</td>" in table
    assert "mean absolute error" in table and "(chosen)" in table
    advice = sec[sec.index('class="curve-advice"'):]
    assert advice.count("<tr><td>") == 7 and "(best)" in advice and "cosine" in advice
    assert "one schedule shape" in sec  # the two cosine-only sizes are said to have no law


def test_a_sweep_without_curve_laws_has_no_section(report) -> None:
    """The same sweep's analysis with no curve law (as a sweep of one schedule has): no section, nothing drawn."""
    from dataclasses import replace

    import pandas as pd

    from scaling.fitting.curves.sweep import SweepCurves
    from scaling.reports.blocks import Page
    from scaling.reports.figures_curves import curve_law_section
    from scaling.reports.report_data import ReportData

    analysis, url, _ = report
    none = replace(analysis, curves=SweepCurves({}, "no curve law: no model size was trained under two schedules"))
    page = Page()
    assert curve_law_section(url)(ReportData(sweep="curves", runs=pd.DataFrame(), sweep_fit=none), page) == "" and not page.figures


#: The curve-law figures' drawn title, axis titles and legend title (as plotly.js drew them, from the SVG).
DRAWN = """() => Array.from(document.querySelectorAll('.figure[id^="fig-curve-law"]')).map(d => {
    const text = el => el ? el.textContent.trim() : '';
    return {title: text(d.querySelector('.gtitle')), x: text(d.querySelector('text.xtitle')),
            y: text(d.querySelector('text.ytitle')), legend: text(d.querySelector('.legendtitletext')),
            traces: d.querySelectorAll('.scatterlayer .trace').length};
})"""


@pytest.mark.browser
def test_the_curve_law_figure_is_drawn_titled_in_the_browser(report, browser) -> None:
    analysis, _, path = report
    (size,) = analysis.curves.sizes.values()
    page = browser.open(path, "curve-laws", actions=lambda p: p.evaluate(DRAWN))
    assert page.console_errors == []
    (fig,) = page.result
    assert fig["title"].startswith("N = ") and fig["x"] == "optimizer step (steps)"
    assert fig["y"] == "eval loss (nats per token)" and fig["legend"] == "run"
    assert fig["traces"] == 3 * len(size.law.runs_)
