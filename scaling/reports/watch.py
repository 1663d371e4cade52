"""`scaling report --watch`: keep a sweep's report file current while the sweep runs.

Every ``interval`` seconds the runs' statuses are read (one row per run); when any run changed
status the report is rendered again and replaced atomically (written to a temporary file in the
same folder, then ``os.replace``), so a browser or a copy never sees half a file. While any run is
pending or running the page carries ``<meta http-equiv="refresh">`` and reloads itself every
``interval`` seconds; the last rewrite, once no run is pending or running, drops it, and the
watch returns. Stopped by Ctrl-C, the watch drops the reload from the page it last wrote (the
page is kept as it was, atomically rewritten) before the interrupt goes on.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from scaling import vocab
from scaling.errors import NotFoundError, mask_url
from scaling.fmt import bounds
from scaling.reports.output import write_atomic

#: Run statuses that mean the sweep is still going.
LIVE_STATUSES = frozenset({vocab.PENDING, vocab.RUNNING})
#: The longest --interval: an hour between checks (a page that reloads less often is not live).
MAX_INTERVAL = 3600.0
#: The shortest: a page reloads at most once a second (its refresh is in whole seconds), and
#: checking the database more often only takes CPU from the runs.
MIN_INTERVAL = 1.0
#: The marker of a self-reloading page (tests and readers look for it).
REFRESH_TAG = '<meta http-equiv="refresh" content="{seconds}">'


def with_reload(page: str, seconds: float) -> str:
    """``page`` with a meta refresh after ``<head>``, so the browser reloads it every ``seconds``."""
    tag = REFRESH_TAG.format(seconds=max(1, int(round(seconds))))
    head = page.find("<head>")
    if head < 0:
        raise ValueError("the report has no <head> to put the reload in")
    cut = head + len("<head>")
    return page[:cut] + "\n" + tag + page[cut:]


def without_reload(page: str) -> str:
    """``page`` without the refresh :func:`with_reload` put in (unchanged if it has none)."""
    return _RELOAD.sub("", page, count=1)


_RELOAD = re.compile("\n" + re.escape(REFRESH_TAG).replace(re.escape("{seconds}"), "[0-9]+"))


def run_statuses(url: str, sweep: str) -> dict[str, str]:
    """Run key -> status for ``sweep`` (one row per run)."""
    from scaling.db import connect

    with connect(url) as res:
        runs = res.runs(sweep=sweep)
    return dict(zip(runs["run_key"].astype(str), runs["status"].astype(str)))


def resolve_sweep(url: str, sweep: str | None) -> str:
    """``sweep``, or the latest sweep in the database."""
    if sweep is not None:
        return sweep
    from scaling.db import connect

    with connect(url) as res:
        latest = res.latest_sweep()
    if latest is None:
        raise NotFoundError(f"no sweeps in the database at {mask_url(url)}")
    return latest


def render_to(url: str, sweep: str, path: Path, *, live: bool, interval: float, fit: str,
              extras: Sequence[Any] = (), store_fits: bool = False) -> Path:
    """Render the report of ``sweep`` and replace ``path`` with it (reloading itself if ``live``)."""
    from scaling.reports.report_data import ReportData
    from scaling.reports.html import render

    page = render(ReportData.load(url, sweep, fit=fit, store_fits=store_fits), extras=extras)
    write_atomic(path, with_reload(page, interval) if live else page)
    return path


def watch(url: str, sweep: str | None, path: str | Path, *, interval: float = 10.0, fit: str = "sweep",
          extras: Sequence[Any] = (), on_write: Callable[[Path, bool], None] | None = None,
          sleep: Callable[[float], None] = time.sleep, store_fits: bool = False) -> Path:
    """Rewrite the report at ``path`` whenever a run of ``sweep`` changes status; return when none
    is pending or running (after a last rewrite without the reload). ``on_write(path, live)``
    is called after each rewrite; ``store_fits`` stores each rewrite's new fits, as
    :func:`scaling.reports.write_report` does."""
    if not (MIN_INTERVAL <= interval <= MAX_INTERVAL):
        raise ValueError(f"interval must be in {bounds(MIN_INTERVAL, MAX_INTERVAL, 6)} seconds")
    out = Path(path).expanduser().resolve()
    sweep = resolve_sweep(url, sweep)
    seen: dict[str, str] | None = None
    reloading = False  # whether the page this watch last wrote reloads itself
    try:
        while True:
            statuses = run_statuses(url, sweep)
            live = any(s in LIVE_STATUSES for s in statuses.values())
            if statuses != seen:
                render_to(url, sweep, out, live=live, interval=interval, fit=fit, extras=extras,
                          store_fits=store_fits)
                seen, reloading = statuses, live
                if on_write is not None:
                    on_write(out, live)
            if not live:
                return out
            sleep(interval)
    except KeyboardInterrupt:
        if reloading:  # a page left reloading would keep doing so with no watch behind it
            write_atomic(out, without_reload(out.read_text(encoding="utf-8")))
        raise
