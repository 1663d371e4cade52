"""The report and the notebook over a database made by a real small sweep (`scaling sweep`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaling.reports import write_report

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.ray]


@pytest.mark.browser
def test_report_written_by_the_sweep_renders(real_sweep, browser) -> None:
    assert real_sweep.report.is_file()
    page = browser.open(real_sweep.report, "real-sweep")
    assert page.console_errors == [] and page.dialogs == []
    figs = page.figures
    assert figs["fig-loss-tokens"] == 3 * 8  # raw and smoothed train, and eval, of each of the 8 runs
    assert figs["fig-isoflop"] >= 2 and figs["fig-throughput"] == 2
    assert "tiny-real" in page.title and "8 completed" in page.text


def test_report_reuses_the_sweeps_fits(real_sweep, tmp_path: Path) -> None:
    from scaling.db import connect

    before = len(connect(real_sweep.url).fits(sweep=real_sweep.sweep))
    text = write_report(real_sweep.url, None, tmp_path / "again.html").read_text()
    assert len(connect(real_sweep.url).fits(sweep=real_sweep.sweep)) == before  # nothing refitted
    assert "Scaling report: tiny-real" in text


def test_explore_notebook_runs_top_to_bottom(real_sweep, tmp_path: Path) -> None:
    """examples/explore.ipynb in a fresh kernel (the venv's python3), against the sweep's database, executed by
    `jupyter nbconvert` in a process of its own: a kernel client in this process would leave its event loop
    running, which Playwright's synchronous API (the browser tests on this worker) cannot share."""
    import os
    import shutil

    from notebook_run import execute_notebook

    shutil.copy(REPO / "examples" / "explore.ipynb", tmp_path / "explore.ipynb")
    outputs = execute_notebook(tmp_path / "explore.ipynb", tmp_path / "executed",
                               {**os.environ, "SCALING_DB": real_sweep.url}, cwd=tmp_path)
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) >= 4  # loss curves, IsoFLOP slices, frontiers, contour or residuals
    assert (tmp_path / "scaling_runs" / "explore-report.html").stat().st_size > 1_000_000
    printed = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream"
                      and o["name"] == "stdout")
    assert "recommended by " in printed and "N* =" in printed
    tables = ["".join(o["data"]["text/plain"]) for o in outputs if o["output_type"] == "execute_result"]
    assert any("N value" in t for t in tables)  # the recommendation per law, as a DataFrame
