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
    import json
    import os
    import shutil
    import subprocess
    import sys

    jupyter = Path(sys.executable).with_name("jupyter")
    if not jupyter.is_file():
        pytest.skip("jupyter (nbconvert) is not installed: pip install -e '.[dev]'")
    shutil.copy(REPO / "examples" / "explore.ipynb", tmp_path / "explore.ipynb")
    env = {**os.environ, "SCALING_DB": real_sweep.url, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([str(jupyter), "nbconvert", "--to", "notebook", "--execute", "--output-dir",
                           str(tmp_path / "executed"), "--ExecutePreprocessor.timeout=600",
                           "--ExecutePreprocessor.kernel_name=python3", str(tmp_path / "explore.ipynb")],
                          capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    nb = json.loads((tmp_path / "executed" / "explore.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    plots = [o for o in outputs if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(plots) >= 4  # loss curves, IsoFLOP slices, frontiers, contour or residuals
    assert (tmp_path / "scaling_runs" / "explore-report.html").stat().st_size > 1_000_000
    printed = "".join("".join(o.get("text", "")) for o in outputs if o["output_type"] == "stream"
                      and o["name"] == "stdout")
    assert "recommended by " in printed and "N* =" in printed
    tables = ["".join(o["data"]["text/plain"]) for o in outputs if o["output_type"] == "execute_result"]
    assert any("N value" in t for t in tables)  # the recommendation per law, as a DataFrame
