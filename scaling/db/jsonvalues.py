"""Values of the JSON columns (plans, specs, event details, fit results), going in and coming out."""

from __future__ import annotations

import json
import math
from typing import Any


def json_safe(value: Any) -> Any:
    """``value`` with non-finite floats as strings: PostgreSQL's json type refuses NaN and Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def check_json(value: Any, what: str) -> Any:
    """``value`` made :func:`json_safe`; a ``TypeError`` naming ``what`` if it cannot be stored."""
    value = json_safe(value)
    try:
        json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serializable: {exc}") from None
    return value


def as_dict(value: Any) -> dict[str, Any]:
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
