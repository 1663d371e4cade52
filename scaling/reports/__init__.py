"""Reports: plotly figures of a sweep (``scaling.reports.figures``) and one self-contained HTML file.

Reads through ``scaling.db.connect`` and redraws fits from their stored form; never imports torch,
Ray, the trainer (except its torch-free metric names) or the orchestrator.
"""

from __future__ import annotations

from pathlib import Path


def write_report(url: str, sweep: str | None = None, path: str | Path = "report.html") -> Path:
    """Write the HTML report of ``sweep`` (default: the latest) at ``url`` to ``path``; returns it.

    Imported lazily so ``import scaling.reports`` stays cheap for callers that may skip the report.
    """
    from scaling.reports.html import write_report as _write

    return _write(url, sweep, path)


__all__ = ["write_report"]
