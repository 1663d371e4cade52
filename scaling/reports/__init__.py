"""Reports: plotly figures of a sweep (``scaling.reports.figures``) and one self-contained HTML file.

Reads through ``scaling.db.connect`` and redraws fits from their stored form; never imports torch,
Ray, the trainer (except its torch-free metric names) or the orchestrator.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from scaling.fitting.analysis import Analysis
    from scaling.fitting.recommend import Recommendation
    from scaling.reports.html import Extra


def write_report(url: str, sweep: str | None = None, path: str | Path = "report.html", *, fit: str = "sweep",
                 store_fits: bool = False, extras: Sequence[Extra] = (), analysis: Analysis | None = None,
                 recommendation: Recommendation | None = None, next_plan: str | None = None) -> Path:
    """Write the HTML report of ``sweep`` (default: the latest) at ``url`` to ``path``; returns it.

    ``fit``: ``"sweep"`` (fit as ``scaling fit`` does, reusing stored fits), ``"stored"`` or
    ``"memory"``; ``store_fits=True`` stores the new fits of ``fit="sweep"`` (by default a report
    only reads the database). See :func:`scaling.reports.report_data.load_fits`. ``extras``: optional
    sections (e.g. :func:`scaling.reports.figures_inference.inference_section`). ``analysis``: the
    sweep's :class:`~scaling.fitting.analysis.Analysis` already made: shown as it is, nothing fitted;
    ``recommendation``: its recommendation with the run sized by the plan (the orchestrator's
    ``size_recommendation``), the headline, so that the report and the closing answer name one run;
    ``next_plan``: the plan that trains that run (YAML, the orchestrator's ``run_plan_text``), shown to copy.
    Imported lazily so ``import scaling.reports`` stays cheap for callers that may skip the report.
    """
    from scaling.reports.html import write_report as _write

    return _write(url, sweep, path, fit=fit, store_fits=store_fits, extras=extras, analysis=analysis,
                  recommendation=recommendation, next_plan=next_plan)


__all__ = ["write_report"]
