"""What a sweep has done, as the CLI shows it: `scaling status` (progress, failures, compute) and
`scaling runs` (its runs as a table, JSON or CSV)."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any, Callable, Optional

from scaling import vocab
from scaling import fmt
from scaling.errors import UserError
from scaling.quantities import possible_losses

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    import pandas as pd

RUNS_FORMATS = ("table", "json", "csv")
RUNS_TABLE_COLUMNS = ["run_key", "status", "N", "D", "C", "attempts", "final_loss", "final_train_loss", "host", "error"]


def sweep_status(url: str, sweep: Optional[str] = None) -> dict[str, Any]:
    """Counts by status, failed runs with their errors, and FLOPs spent (partial runs by their
    last logged ``flops``) and remaining. ``sweep`` defaults to the most recent one.

    Compute is counted once: a cooldown branch counts only what it trained after leaving its
    trunk. ``*_without_reuse`` is what the same (N, D) points would cost trained from scratch.
    """
    from scaling.db import connect

    with connect(url) as results:
        name = results.sweep_name(sweep)
        runs = results.runs(sweep=name, spec=False)
        partial = runs[runs["status"] != vocab.COMPLETED]
        metrics = results.metrics(run_keys=list(partial["run_key"]), sweep=name) if len(partial) else None
    counts = {str(k): int(v) for k, v in runs["status"].value_counts().items()}
    # A branch's first trunk_tokens were trained by its trunk: its own compute is the rest.
    inherited = runs["C"] * runs["trunk_tokens"] / runs["D"].where(runs["D"] > 0, 1)
    own = runs["C"] - inherited
    # A superseded run is no part of the sweep any more: not in its total; what it spent is said apart.
    superseded = set(runs.loc[runs["status"] == vocab.SUPERSEDED, "run_key"])
    total = float(own[runs["status"] != vocab.SUPERSEDED].sum())
    done = runs["status"] == vocab.COMPLETED
    spent = float(own[done].sum())
    spent_superseded = 0.0
    if metrics is not None and len(metrics):
        last = metrics.groupby("run_key")["flops"].max()
        caps = partial.set_index("run_key")["C"]
        before = dict(zip(runs["run_key"], inherited))
        for k, v in last.items():
            used = max(0.0, min(float(v), float(caps.get(k, v))) - before.get(k, 0.0))
            if k in superseded:
                spent_superseded += used
            else:
                spent += used
    # Without reuse: every (N, D) point trained from scratch (trunks are no points of their own).
    trunks = set(runs["parent_key"].dropna())
    points = ~runs["run_key"].isin(trunks) & (runs["status"] != vocab.SUPERSEDED)
    failures = [
        {"key": r.run_key, "N": int(r.N), "D": float(r.D), "attempts": _int(getattr(r, "attempts", None)),
         "error": str(getattr(r, "error", "") or "")}
        for r in runs[runs["status"] == vocab.FAILED].itertuples()
    ]
    return {
        "sweep": name,
        "runs": int(len(runs)),
        "counts": counts,
        "stale": stale_running(runs),
        "flops_total": total,
        "flops_spent": spent,
        "flops_remaining": max(0.0, total - spent),
        "flops_spent_superseded": spent_superseded,
        "flops_total_without_reuse": float(runs.loc[points, "C"].sum()),
        "flops_spent_without_reuse": float(runs.loc[points & done, "C"].sum()),
        "branches": int(runs["parent_key"].notna().sum()),
        "trunks": len(trunks),
        "failures": failures,
    }


def stale_running(runs: pd.DataFrame, timeout_s: Optional[float] = None) -> Optional[dict[str, Any]]:
    """The running runs whose heartbeat is older than the timeout a claimant takes them over after
    (``HEARTBEAT_TIMEOUT_S``): no live driver is running them. Their number and how long since the
    newest of their heartbeats, in seconds; None when every running run has a fresh heartbeat."""
    import pandas as pd

    from scaling.db import HEARTBEAT_TIMEOUT_S

    timeout = HEARTBEAT_TIMEOUT_S if timeout_s is None else timeout_s
    running = runs[runs["status"] == vocab.RUNNING]
    if running.empty:
        return None
    beats = pd.to_datetime(running["heartbeat_at"], utc=True, errors="coerce")
    age = (pd.Timestamp.now(tz="UTC") - beats).dt.total_seconds()
    stale = age.isna() | (age > timeout)
    if not stale.any():
        return None
    known = age[stale].dropna()
    return {"runs": int(stale.sum()), "running": int(len(running)),
            "since_s": float(known.min()) if len(known) else None}


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} days"


def _int(v: object) -> Optional[int]:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def render_status(status: dict[str, Any]) -> Any:
    from rich.console import Group
    from rich.table import Table

    counts = ", ".join(f"{v} {k}" for k, v in sorted(status["counts"].items()))
    head = Table.grid(padding=(0, 2))
    head.add_row("sweep", status["sweep"])
    head.add_row("runs", f"{status['runs']} ({counts})")
    stale = status.get("stale")
    if stale:
        which = f"{stale['runs']} running" if stale["runs"] == stale["running"] else \
            f"{stale['runs']} of {stale['running']} running"
        since = "no heartbeat recorded" if stale["since_s"] is None else \
            f"heartbeats stale for {_duration(stale['since_s'])}"
        head.add_row("stale", f"{which}, {since}: no live driver; re-run the sweep to recover them")
    pct = 100 * status["flops_spent"] / max(status["flops_total"], 1e-30)
    head.add_row("compute", f"{fmt.flops(status['flops_spent'])} of {fmt.flops(status['flops_total'])} FLOPs spent ({pct:.0f}%), "
                 f"{fmt.flops(status['flops_remaining'])} remaining")
    if status.get("branches"):
        ratio = status["flops_total"] / max(status["flops_total_without_reuse"], 1e-30)
        head.add_row("reuse", f"{status['branches']} cooldown branches of {status['trunks']} trunk(s): without reuse "
                     f"{fmt.flops(status['flops_spent_without_reuse'])} spent of {fmt.flops(status['flops_total_without_reuse'])} "
                     f"FLOPs; the sweep needs {ratio:.2f}x that")
    if status["counts"].get(vocab.SUPERSEDED):
        head.add_row("superseded", f"{status['counts'][vocab.SUPERSEDED]} run(s) a later plan replaced (its corpus or "
                     f"settings changed), not counted above; {fmt.flops(status['flops_spent_superseded'])} FLOPs went "
                     "into them")
    parts: list[Any] = [head]
    if status["failures"]:
        t = Table(title="failed runs")
        for col in ("key", "N", "D", "attempts", "error"):
            t.add_column(col)
        for f in status["failures"]:
            t.add_row(f["key"], fmt.count(f["N"]), fmt.count(f["D"]), str(f["attempts"] or ""), f["error"])
        parts.append(t)
    return Group(*parts)


def list_runs(url: Optional[str], sweep: Optional[str] = None, fmt: str = "table",
              warn: Callable[[str], None] = lambda line: None) -> str:
    """The runs of ``sweep`` (default: the latest sweep) formatted as ``fmt``. A stored loss that
    breaks the loss rule (:mod:`scaling.quantities`) is left blank, and ``warn`` gets one line naming the run."""
    if fmt not in RUNS_FORMATS:
        raise UserError(f"--format must be one of {', '.join(RUNS_FORMATS)}, not {fmt!r}")
    from scaling.db import connect

    with connect(url) as res:
        name = res.sweep_name(sweep)
        df = res.runs(sweep=name, spec=fmt == "json")
    df, problem = possible_losses(df, LOSS_COLUMNS)
    if problem:
        warn(f"warning: {problem}")
    if fmt == "json":
        records = json.loads(df.to_json(orient="records", date_format="iso"))
        return json.dumps(records, indent=2) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        df.drop(columns=["spec"]).to_csv(buf, index=False)
        return buf.getvalue()
    return _runs_table(name, df[RUNS_TABLE_COLUMNS])


def _runs_table(sweep: str, df) -> str:  # type: ignore[no-untyped-def]
    """The runs as a boxed text table, built directly: a sweep of 10,000 runs prints in a second."""
    from rich.cells import cell_len

    cols = list(df.columns)
    rows = [[_cell(c, v) for c, v in zip(cols, row)] for row in df.itertuples(index=False)]
    widths = [max([cell_len(c)] + [cell_len(r[i]) for r in rows]) for i, c in enumerate(cols)]
    right = [c in _RIGHT_ALIGNED for c in cols]

    def rule(left: str, fill: str, mid: str, end: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + end

    def line(cells: list[str], bar: str) -> str:
        padded = (" " * (w - cell_len(t)) + t if r else t + " " * (w - cell_len(t)) for t, w, r in zip(cells, widths, right))
        return (bar + bar.join(f" {t} " for t in padded) + bar).rstrip()

    out = [f"sweep {sweep}: {len(df)} runs", rule("┏", "━", "┳", "┓"), line(cols, "┃"), rule("┡", "━", "╇", "┩")]
    out += [line(r, "│") for r in rows]
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"


LOSS_COLUMNS = ("final_loss", "final_train_loss")
_RIGHT_ALIGNED = ("N", "D", "C", "attempts", *LOSS_COLUMNS)


def _cell(col: str, v: object) -> str:
    if v is None or (isinstance(v, float) and v != v):
        return ""
    if col in ("N", "D"):
        return fmt.count(v)
    if col == "C":
        return fmt.flops(v)
    if col.startswith("final"):
        return f"{float(v):.4f}"  # type: ignore[arg-type]
    text = "".join(ch if ch.isprintable() else "?" for ch in " ".join(str(v).split()))  # no terminal escapes
    if col == "error":
        return text[:60] + ("…" if len(text) > 60 else "")
    return text
