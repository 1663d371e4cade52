"""`scaling status`: a sweep's progress, failures with reasons, compute spent and remaining."""

from __future__ import annotations

from typing import Any, Optional

from scaling.errors import NotFoundError


def sweep_status(url: str, sweep: Optional[str] = None) -> dict[str, Any]:
    """Counts by status, failed runs with their errors, and FLOPs spent (partial runs by their
    last logged ``flops``) and remaining. ``sweep`` defaults to the most recent one."""
    from scaling.db import connect

    results = connect(url)
    name = sweep or results.latest_sweep()
    if name is None:
        raise NotFoundError("the database holds no sweep yet; run `scaling sweep PLAN.yaml` first")
    runs = results.runs(sweep=name)
    if len(runs) == 0:
        raise NotFoundError(f"no sweep named {name!r} in the database")
    counts = {str(k): int(v) for k, v in runs["status"].value_counts().items()}
    total = float(runs["C"].sum())
    spent = float(runs.loc[runs["status"] == "completed", "C"].sum())
    partial = runs[runs["status"] != "completed"]
    if len(partial):
        metrics = results.metrics(run_keys=list(partial["run_key"]))
        if metrics is not None and len(metrics):
            last = metrics.groupby("run_key")["flops"].max()
            caps = partial.set_index("run_key")["C"]
            spent += float(sum(min(float(v), float(caps.get(k, v))) for k, v in last.items()))
    failures = [
        {"key": r.run_key, "N": int(r.N), "D": float(r.D), "attempts": _int(getattr(r, "attempts", None)),
         "error": str(getattr(r, "error", "") or "")}
        for r in runs[runs["status"] == "failed"].itertuples()
    ]
    return {
        "sweep": name,
        "runs": int(len(runs)),
        "counts": counts,
        "flops_total": total,
        "flops_spent": spent,
        "flops_remaining": max(0.0, total - spent),
        "failures": failures,
    }


def _int(v: Any) -> Optional[int]:
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
    pct = 100 * status["flops_spent"] / max(status["flops_total"], 1e-30)
    head.add_row("compute", f"{status['flops_spent']:.3g} of {status['flops_total']:.3g} FLOPs spent ({pct:.0f}%), "
                 f"{status['flops_remaining']:.3g} remaining")
    parts: list[Any] = [head]
    if status["failures"]:
        t = Table(title="failed runs")
        for col in ("key", "N", "D", "attempts", "error"):
            t.add_column(col)
        for f in status["failures"]:
            t.add_row(f["key"], f"{f['N']:,}", f"{f['D']:.3g}", str(f["attempts"] or ""), f["error"])
        parts.append(t)
    return Group(*parts)
