"""The curve law from a CSV or a sweep, and its predictions written as text or JSON (`scaling fit --law curve`)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from scaling.errors import FitError
from scaling.fitting.curves.data import curves_from_csv, curves_from_db
from scaling.fitting.curves.fit import CurveLaw, fit_curves
from scaling.fmt import bounds, num

__all__ = ["curve_law", "predictions_json", "predictions_records", "predictions_text"]


def curve_law(*, csv: Optional[str | Path] = None, url: Optional[str] = None, sweep: Optional[str] = None,
              bootstrap: int = 100, seed: int = 0) -> CurveLaw:
    """The curve law fitted to a CSV's curves (``run, step, lr, loss``) or to a sweep's runs, bootstrapped."""
    if csv is not None:
        curves = curves_from_csv(csv)
    elif url is not None:
        curves, _ = curves_from_db(url, sweep)
    else:
        raise FitError("give a CSV of curves or a database with a sweep")
    return fit_curves(curves, bootstrap=bootstrap, seed=seed)


def _finite(v: Any) -> Optional[float]:
    return float(v) if v is not None and math.isfinite(float(v)) else None


def predictions_records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Predictions as a list of ``{run, step, loss, lo, hi}`` (null where there is no value or interval)."""
    return [{"run": str(r.run), "step": int(r.step), "loss": _finite(r.loss), "lo": _finite(r.lo), "hi": _finite(r.hi)}
            for r in df.itertuples(index=False)]


def predictions_json(df: pd.DataFrame) -> str:
    """:func:`predictions_records` as JSON."""
    return json.dumps(predictions_records(df), indent=2)


def predictions_text(df: pd.DataFrame, law: CurveLaw) -> str:
    """One line per predicted step: run, step, loss and its 95% interval; then the law's notes."""
    lines = [f"Predicted loss ({law.form_} law), 95% interval:"]
    for r in df.itertuples(index=False):
        value = "not predicted" if not math.isfinite(r.loss) else num(r.loss, 5)
        iv = bounds(r.lo, r.hi, 4) if math.isfinite(r.lo) and math.isfinite(r.hi) else "no interval"
        lines.append(f"  {r.run}  step {int(r.step)}: {value} {iv}")
    lines += [f"note: {n}" for n in law.notes_]
    return "\n".join(lines) + "\n"
