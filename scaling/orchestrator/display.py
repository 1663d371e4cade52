"""The sweep's live display: each run's state, step, loss and ETA, and the sweep's totals.

On a terminal it is a rich ``Live`` table redrawn in place; elsewhere (a log file, CI) it
prints one line per state change so the output stays readable. Both read the scheduler's
:class:`~scaling.orchestrator.tally.Tally` (counts, the runs in each state, the runs that changed),
so an update costs the same in a sweep of 10 runs and of 10,000, and the live table is redrawn
at most a few times a second.
"""

from __future__ import annotations

import itertools
import time
from typing import TYPE_CHECKING, Any, Optional, Protocol

from scaling import fmt
from scaling.orchestrator.tally import RunState, Tally

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from rich.console import Console

    from scaling.db.results import Results


class Scheduler(Protocol):
    """What the display reads of the scheduler (it is handed the scheduler; it never imports it)."""

    sweep: str
    started: float
    states: list[RunState]
    tally: Tally

_MAX_ROWS = 30  # a big sweep shows its running runs first, then the most recent others
_REDRAW_S = 0.25  # the live table is redrawn at most this often (rich refreshes it twice a second)
#: The table's order of states; finished runs show the most recent first.
_ORDER = ("running", "reserving", "waiting", "queued", "failed", "interrupted", "completed")
_RECENT_FIRST = ("failed", "interrupted", "completed")


def _fmt_eta(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def read_progress(results: Results, states: "list[RunState]", sweep: str, now: Optional[float] = None) -> None:
    """Set each running run's step, train loss and eval loss from its last recorded rows.

    Reads one row per run and metric (``Results.last_metrics``), so the once-a-second refresh
    costs the same at step 10 and at step 100,000.
    """
    from scaling import vocab as names

    if not states:
        return
    df = results.last_metrics(sweep=sweep, run_keys=[s.key for s in states], names=[names.TRAIN_LOSS, names.EVAL_LOSS])
    if df is None or len(df) == 0:
        return
    now = time.monotonic() if now is None else now
    last = {(r.run_key, r.name): (int(r.step), float(r.value)) for r in df.itertuples(index=False)}
    for s in states:
        train = last.get((s.key, names.TRAIN_LOSS))
        if train is not None:
            s.step, s.loss = train
            if s.first_seen is None:
                s.first_seen = (now, s.step)
        ev = last.get((s.key, names.EVAL_LOSS))
        if ev is not None:
            s.eval_loss = ev[1]


def totals(sched: "Scheduler") -> dict[str, Any]:
    """Runs per state and compute done: completed runs in full, the others by their steps."""
    tally = sched.tally
    done_flops = tally.completed_flops
    for state, runs in tally.by_state.items():
        if state == "completed":  # counted in full as they completed
            continue
        for s in runs.values():  # (a redraw's work, a few times a second: not per event)
            if s.step:
                done_flops += s.flops * min(1.0, s.step / max(1, s.steps))
    return {
        "counts": tally.counts(),
        "runs": len(sched.states),
        "flops_done": done_flops,
        "flops_total": tally.total_flops,
        "elapsed": time.monotonic() - sched.started,
    }


def shown(sched: "Scheduler", limit: int = _MAX_ROWS) -> "list[RunState]":
    """The table's rows: running runs first, then waiting and queued ones, then the most recent finished."""
    rows: "list[RunState]" = []
    for state in _ORDER:
        if len(rows) >= limit:
            break
        if state == "queued":
            picked = itertools.islice(sched.tally.queued(), limit - len(rows))
        else:
            runs = sched.tally.by_state.get(state, {})
            picked = itertools.islice(reversed(runs.values()) if state in _RECENT_FIRST else runs.values(),
                                      limit - len(rows))
        rows.extend(picked)
    return rows


def render(sched: "Scheduler") -> Any:
    from rich.table import Table

    t = totals(sched)
    now = time.monotonic()
    states = shown(sched)
    summary = ", ".join(f"{v} {k}" for k, v in sorted(t["counts"].items()))
    table = Table(
        title=f"sweep {sched.sweep}: {summary}",
        caption=f"compute {fmt.flops(t['flops_done'])} / {fmt.flops(t['flops_total'])} FLOPs "
        f"({100 * t['flops_done'] / max(t['flops_total'], 1e-30):.0f}%), elapsed {t['elapsed']:.0f}s",
    )
    for col in ("key", "N", "D", "state", "attempt", "step", "loss", "eval", "ETA"):
        table.add_column(col, justify="left" if col in ("key", "state") else "right")
    for s in states:
        spec = s.run.spec
        table.add_row(
            s.key,
            fmt.count(spec.n_params),
            fmt.count(spec.trained_tokens),
            s.state + (" (done before)" if s.skipped else ""),
            "" if s.attempt is None else str(s.attempt),
            f"{s.step}/{s.steps}",
            "" if s.loss is None else f"{s.loss:.4f}",
            "" if s.eval_loss is None else f"{s.eval_loss:.4f}",
            _fmt_eta(s.eta_seconds(now)),
        )
    return table


class SweepDisplay:
    """Call :meth:`update` with the scheduler after each change; use as a context manager."""

    def __init__(self, console: Optional[Console] = None, live: Optional[bool] = None) -> None:
        from rich.console import Console

        self.console = console or Console()
        self.live_mode = self.console.is_terminal if live is None else live
        self._live: Any = None
        self._last: dict[str, str] = {}
        self._drawn_at = float("-inf")
        self._pending: Any = None  # a scheduler whose latest change is not drawn yet

    def _draw(self, sched: "Scheduler") -> None:
        self._live.update(render(sched))
        self._drawn_at, self._pending = time.monotonic(), None

    def __enter__(self) -> "SweepDisplay":
        if self.live_mode:
            from rich.live import Live

            self._live = Live(console=self.console, refresh_per_second=2, transient=False)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._live is not None:
            if self._pending is not None:
                self._draw(self._pending)  # the final state, however soon after the last redraw
            self._live.__exit__(*exc)
            self._live = None

    def update(self, sched: "Scheduler") -> None:
        if self._live is not None:
            sched.tally.take_changed()  # the table reads the current state; nothing to print per change
            if time.monotonic() - self._drawn_at >= _REDRAW_S:
                self._draw(sched)
            else:
                self._pending = sched
            return
        for s in sched.tally.take_changed():
            label = f"{s.state}:{s.attempt}"
            if self._last.get(s.key) == label:
                continue
            self._last[s.key] = label
            spec = s.run.spec
            extra = ""
            if s.state == "completed" and s.eval_loss is not None:
                extra = f" eval loss {s.eval_loss:.4f}"
            elif s.state in ("failed", "interrupted") and s.error:
                extra = f" ({s.error})"
            elif s.state == "running":
                extra = f" attempt {s.attempt}"
            done = " (done before)" if s.skipped else ""
            self.console.print(
                f"[{time.strftime('%H:%M:%S')}] {s.key} N={fmt.count(spec.n_params)} D={fmt.count(spec.trained_tokens)} "
                f"{s.state}{done}{extra}",
                highlight=False,
                markup=False,
            )
