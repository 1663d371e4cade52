"""Values of the JSON columns (plans, specs, event details, fit results), going in and coming out."""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from scaling.vocab import HPARAM_GROUP_TAG


def json_safe(value: object) -> Any:
    """``value`` with non-finite floats as strings: PostgreSQL's json type refuses NaN and Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def check_json(value: object, what: str) -> Any:
    """``value`` made :func:`json_safe`; a ``TypeError`` naming ``what`` if it cannot be stored."""
    value = json_safe(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None
    return value


def as_dict(value: object) -> dict[str, Any]:
    """A JSON object as a dict, whether it arrives decoded (from the database) or as text (from a
    CSV or JSON export); ``{}`` for anything else (missing, malformed, not an object)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str) and value.lstrip().startswith("{"):
        try:
            out = json.loads(value)
        except ValueError:
            return {}
        return out if isinstance(out, dict) else {}
    return {}


def _number(value: object) -> Optional[float]:
    """A finite number (not a boolean, not text), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: object) -> Optional[int]:
    """A positive whole number (``2e10`` counts), else None."""
    x = _number(value)
    return int(x) if x is not None and x > 0 and x.is_integer() else None


def run_settings(spec: object, hparam_group: Optional[str] = None) -> dict[str, Any]:
    """The columns of a run's row that its spec decides and the fits read: ``lr``, ``beta2``
    (``optimizer``), ``batch_tokens``, ``unique_tokens`` (``data``) and ``hparam_group`` (given, else
    the spec's ``tags.hparam_group``); None where the spec gives no usable value."""
    s = as_dict(spec)
    optimizer = s.get("optimizer") if isinstance(s.get("optimizer"), dict) else {}
    data = s.get("data") if isinstance(s.get("data"), dict) else {}
    tags = s.get("tags") if isinstance(s.get("tags"), dict) else {}
    tagged = tags.get(HPARAM_GROUP_TAG)
    group = hparam_group if hparam_group else (tagged if isinstance(tagged, str) and tagged else None)
    return {
        "lr": _number(optimizer.get("lr")),
        "batch_tokens": _count(s.get("batch_tokens")),
        "beta2": _number(optimizer.get("beta2")),
        "unique_tokens": _count(data.get("unique_tokens")),
        "hparam_group": None if group is None else str(group),
    }
