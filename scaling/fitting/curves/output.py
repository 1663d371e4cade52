"""The curve law from a CSV or a sweep, and its predictions written as text or JSON (`scaling fit --law curve`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from scaling.errors import FitError
from scaling.fitting.curves.data import Schedule, curves_from_csv, curves_from_db
from scaling.fitting.curves.fit import CurveLaw, CurveLaws, fit_curves
from scaling.fmt import bounds, num

__all__ = ["curve_law", "predictions_json", "predictions_records", "predictions_text"]


def curve_law(*, csv: Optional[str | Path] = None, url: Optional[str] = None, sweep: Optional[str] = None,
              bootstrap: int = 100, seed: int = 0, schedules: Optional[list[Schedule]] = None) -> CurveLaw | CurveLaws:
    """The curve law fitted to a CSV's curves (``run, step, lr, loss``) or to a sweep's runs, bootstrapped
    (one law per model size where the curves' N differ)."""
    if csv is not None:
        curves = curves_from_csv(csv)
    elif url is not None:
        curves, _ = curves_from_db(url, sweep)
    else:
        raise FitError("give a CSV of curves or a database with a sweep")
    sizes = {c.N for c in curves if c.N is not None and math.isfinite(c.N)}
    for s in schedules or []:  # refused before a fit that would be wasted
        if len(sizes) > 1 and (s.N is None or not math.isfinite(s.N)):
            raise FitError(f"run {s.run!r} has no N: the curves come from several model sizes, so each schedule "
                           "needs an N column saying which")
    return fit_curves(curves, bootstrap=bootstrap, seed=seed)


def _finite(v: Any) -> Optional[float]:
    return float(v) if v is not None and math.isfinite(float(v)) else None


def predictions_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Predictions as a list of ``{run, step, loss, lo, hi}`` (null where there is no value or interval; with
    ``N`` too where the law has one per model size)."""
    sized = "N" in df.columns
    return [{"run": str(r.run), **({"N": _finite(r.N)} if sized else {}), "step": int(r.step), "loss": _finite(r.loss),
             "lo": _finite(r.lo), "hi": _finite(r.hi)} for r in df.itertuples(index=False)]


def predictions_json(df: pd.DataFrame) -> str:
    """:func:`predictions_records` as JSON."""
    return json.dumps(predictions_records(df), indent=2)


def predictions_text(df: pd.DataFrame, law: CurveLaw | CurveLaws) -> str:
    """One line per predicted step: run, step, loss and its 95% interval; then the law's notes."""
    lines = [f"Predicted loss ({law.form_} law), 95% interval:" if isinstance(law, CurveLaw)
             else "Predicted loss (each model size's chosen law), 95% interval:"]
    for r in df.itertuples(index=False):
        value = "not predicted" if not math.isfinite(r.loss) else num(r.loss, 5)
        iv = bounds(r.lo, r.hi, 4) if math.isfinite(r.lo) and math.isfinite(r.hi) else "no interval"
        size = f" (N = {num(r.N, 3)})" if "N" in df.columns else ""
        lines.append(f"  {r.run}{size}  step {int(r.step)}: {value} {iv}")
    lines += [f"note: {n}" for n in law.notes_]
    return "\n".join(lines) + "\n"
