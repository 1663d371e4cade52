"""The report reads the sweep's analysis and fits nothing of its own: on a sweep whose analysis is stored,
every way to fit a law (loss, hyperparameter, task, curve laws) or to compare laws refuses, and the report
is still written whole, its headline the analysis' recommendation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from scaling.fitting import fit_sweep


@pytest.mark.parametrize("mode", ["sweep", "stored"])
def test_a_report_on_a_stored_sweep_fits_nothing(db_url: str, make_sweep, tmp_path: Path, mode: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from scaling.fitting import analysis, sweep_fit
    from scaling.fitting.core import base
    from scaling.fitting.curves import sweep as curves_sweep
    from scaling.fitting.hyperparams import hparams
    from scaling.fitting.tasks import task_laws
    from scaling.reports import write_report

    recommend = importlib.import_module("scaling.fitting.recommend")

    make_sweep(db_url)
    fitted = fit_sweep(db_url, n_bootstrap=30)  # stored
    rec = fitted.recommendation
    assert rec is not None and rec.chosen

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the report fitted a law or compared laws")

    for owner, name in ((analysis, "_fit"), (sweep_fit, "fit_data"), (sweep_fit, "fit_one"), (base.Law, "fit"),
                        (hparams, "fit_law"), (hparams, "fit_hparams"), (task_laws, "fit_tasks"),
                        (curves_sweep, "sweep_curves"), (recommend, "compare_laws")):
        monkeypatch.setattr(owner, name, refuse)
    page = write_report(db_url, fitted.sweep, tmp_path / "report.html", fit=mode).read_text()
    assert "No law could be fitted" not in page and "No fits are stored" not in page
    headline = page.split('<div class="headline">', 1)[1].split("</dl>", 1)[0]
    shown = re.sub("<[^>]+>", " ", headline)
    assert rec.chosen in page and "N*" in shown, shown[:400]
    if mode == "stored":  # an analysis without an answer: the report has none, and compares no laws for one
        from dataclasses import replace

        from scaling.reports.report_data import ReportData

        data = ReportData.load(db_url, fitted.sweep, fit="stored")
        assert data.recommendation_at(rec.compute) is not None
        data.sweep_fit = replace(data.sweep_fit, recommendation=None, no_recommendation="no law gives N*")
        assert data.recommendation_at(rec.compute) is None
