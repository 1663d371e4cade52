"""Everything one report shows, read once from the database's read API.

The figures take plain DataFrames and fitted laws, so a notebook can call them on its own
frames; :class:`ReportData` is what the HTML report gathers for them: a sweep's runs, its loss
curves (already thinned for display), its events, per-run throughput, and its fits redrawn from
their stored form. Whatever cannot be had (no completed runs, a fit that fails) becomes a line in
``notes`` instead of an exception, so a broken sweep still gets a report that says what is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from scaling.db.jsonvalues import as_dict
from scaling.reports.downsample import downsample_frame
from scaling import vocab as names

#: points kept per curve for display (log-spaced, minimum kept)
CURVE_POINTS = 150

RUN_COLUMNS = (
    "run_key", "sweep", "N", "N_total", "D", "C", "status", "final_loss", "final_train_loss",
    "n_layer", "d_model", "n_head", "seed", "attempts", "error", "spec", "host",
)


@dataclass
class ReportData:
    """What a report shows; build it with :meth:`load` (database) or directly from frames."""

    sweep: str | None
    runs: pd.DataFrame
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_key, step, tokens, flops, name, value
    events: pd.DataFrame = field(default_factory=pd.DataFrame)  # run_key, step, kind, detail
    perf: pd.DataFrame = field(default_factory=pd.DataFrame)  # index run_key; tokens_per_s, mfu (means)
    fits: dict[str, Any] = field(default_factory=dict)  # method -> fitted law (from_dict)
    fit_dicts: dict[str, dict] = field(default_factory=dict)  # method -> stored form
    sweep_info: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what is missing, in words
    source: str = ""  # the database URL, masked

    def __post_init__(self) -> None:
        self.runs = normalise_runs(self.runs)

    # -- loading ---------------------------------------------------------------------------
    @classmethod
    def load(cls, url: str, sweep: str | None = None, *, fit: str = "sweep", curve_points: int = CURVE_POINTS) -> "ReportData":
        """Read ``sweep`` (default: the latest) from the database at ``url``.

        ``fit`` says where the laws come from (see :func:`scaling.reports.fitview.load`): by
        default ``scaling.fitting.fit_sweep``, which reuses a stored fit of unchanged data and
        stores a new one otherwise. A law that cannot be fitted becomes a note.
        """
        from scaling.db import connect
        from scaling.errors import NotFoundError, mask_url

        results = connect(url)
        if sweep is None:
            sweep = results.latest_sweep()
            if sweep is None:
                raise NotFoundError(f"no sweeps in the database at {mask_url(url)}")
        sweeps = results.sweeps()
        name_col = "name" if "name" in sweeps.columns else "sweep"
        if sweep not in set(sweeps[name_col].astype(str)):
            raise NotFoundError(f"no sweep named {sweep!r} in the database at {mask_url(url)}")
        info = _sweep_info(results, sweeps, name_col, sweep)
        runs = results.runs(sweep=sweep)
        data = cls(sweep=sweep, runs=runs, sweep_info=info, source=mask_url(url))
        if len(data.runs):
            loss = results.metrics(sweep=sweep, names=[names.TRAIN_LOSS, names.EVAL_LOSS])
            data.curves = thin_curves(loss, curve_points)
            del loss
            perf_names = [names.TOKENS_PER_SECOND, names.MFU]
            if hasattr(results, "metric_summary"):  # one GROUP BY instead of every step's row
                data.perf = summarise_perf_table(results.metric_summary(sweep=sweep, names=perf_names))
            else:
                data.perf = summarise_perf(results.metrics(sweep=sweep, names=perf_names))
            data.events = results.events(sweep=sweep)
        else:
            data.notes.append("The sweep has no runs yet.")
        data.fits, data.fit_dicts, fit_notes = load_fits(results, url, sweep, data.runs, fit=fit)
        data.notes.extend(fit_notes)
        return data

    # -- derived views ------------------------------------------------------------------------
    @property
    def completed(self) -> pd.DataFrame:
        """Runs that finished with a finite final loss (the points the fits use)."""
        r = self.runs
        ok = (r["status"] == "completed") & np.isfinite(r["final_loss"].astype(float))
        return r[ok]

    def status_counts(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self.runs["status"].value_counts().items()}

    def event_counts(self) -> pd.DataFrame:
        """Per run: loss spikes, rollbacks, retries (events), indexed by run_key."""
        kinds = [names.LOSS_SPIKE, names.ROLLBACK, names.RETRY, names.RESUME, names.OVERFLOW_SKIP]
        ev = self.events
        if ev is None or ev.empty or "kind" not in ev.columns:
            return pd.DataFrame(0, index=self.runs["run_key"], columns=kinds)
        table = pd.crosstab(ev["run_key"], ev["kind"]).reindex(columns=kinds, fill_value=0)
        return table.reindex(self.runs["run_key"], fill_value=0)


# -- helpers (public so notebooks and tests can use them on their own frames) ------------------
def normalise_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """Runs with every column the report reads, numeric where numbers are expected.

    Adds ``tokens_per_param`` (D/N), ``shape`` ("L×d×h"), ``name`` and ``tags`` (from the spec).
    """
    r = runs.copy()
    for col in RUN_COLUMNS:
        if col not in r.columns:
            r[col] = None
    for col in ("N", "N_total", "D", "C", "final_loss", "final_train_loss", "attempts"):
        r[col] = pd.to_numeric(r[col], errors="coerce").astype(float)
    r["status"] = r["status"].fillna("unknown").astype(str)
    r["run_key"] = r["run_key"].astype(str)
    r["tokens_per_param"] = r["D"] / r["N"]
    r["shape"] = [
        f"{int(l)}×{int(d)}×{int(h)}" if _finite(l) and _finite(d) and _finite(h) else ""
        for l, d, h in zip(
            pd.to_numeric(r["n_layer"], errors="coerce"),
            pd.to_numeric(r["d_model"], errors="coerce"),
            pd.to_numeric(r["n_head"], errors="coerce"),
        )
    ]
    specs = [as_dict(s) for s in r["spec"]]
    r["name"] = [str(s.get("name") or "") for s in specs]
    r["tags"] = [
        ", ".join(f"{k}={v}" for k, v in (s.get("tags") or {}).items()) if isinstance(s.get("tags"), dict) else ""
        for s in specs
    ]
    return r.sort_values(["N", "D"], kind="stable").reset_index(drop=True)


def thin_curves(metrics: pd.DataFrame, max_points: int = CURVE_POINTS) -> pd.DataFrame:
    """Loss curves thinned per (run, metric): log-spaced in tokens, each curve's minimum kept."""
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=["run_key", "step", "tokens", "flops", "name", "value"])
    m = metrics[["run_key", "step", "tokens", "flops", "name", "value"]].copy()
    for col in ("tokens", "flops", "value"):
        m[col] = pd.to_numeric(m[col], errors="coerce").astype(float)
    return downsample_frame(m, ["run_key", "name"], x="tokens", y="value", max_points=max_points)


def summarise_perf(metrics: pd.DataFrame) -> pd.DataFrame:
    """Median tokens/s and MFU per run (medians ignore warm-up and evaluation pauses)."""
    cols = ["tokens_per_s", "mfu"]
    if metrics is None or metrics.empty:
        return pd.DataFrame(columns=cols)
    med = metrics.groupby(["run_key", "name"])["value"].median().unstack("name")
    out = pd.DataFrame(index=med.index)
    out["tokens_per_s"] = med.get(names.TOKENS_PER_SECOND)
    out["mfu"] = med.get(names.MFU)
    return out


def summarise_perf_table(summary: pd.DataFrame) -> pd.DataFrame:
    """Mean tokens/s and MFU per run from ``Results.metric_summary`` rows (run_key, name, mean)."""
    cols = ["tokens_per_s", "mfu"]
    if summary is None or summary.empty:
        return pd.DataFrame(columns=cols)
    wide = summary.pivot_table(index="run_key", columns="name", values="mean", aggfunc="first")
    out = pd.DataFrame(index=wide.index)
    out["tokens_per_s"] = wide.get(names.TOKENS_PER_SECOND)
    out["mfu"] = wide.get(names.MFU)
    return out


def _sweep_info(results: Any, sweeps: pd.DataFrame, name_col: str, sweep: str) -> dict[str, Any]:
    if hasattr(results, "sweep_info"):
        try:
            info = results.sweep_info(sweep)
            if isinstance(info, dict):
                return info
        except Exception:  # an older read API: fall back to the sweeps table
            pass
    row = sweeps[sweeps[name_col].astype(str) == sweep]
    return {} if row.empty else {k: _plain(v) for k, v in row.iloc[0].to_dict().items()}


def load_fits(results: Any, url: str, sweep: str, runs: pd.DataFrame, *, fit: str) -> tuple[dict, dict, list[str]]:
    """The fitted laws of ``sweep`` (see :func:`scaling.reports.fitview.load`) and notes."""
    from scaling.reports import fitview

    return fitview.load(results, url, sweep, runs, fit=fit)


def _finite(x: Any) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def _plain(v: Any) -> Any:
    if isinstance(v, (np.generic,)):
        return v.item()
    if isinstance(v, pd.Timestamp):
        return v.isoformat()
    return v
