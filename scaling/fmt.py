"""How numbers and user text are written in what the platform shows (reports, tables).

A torch-free leaf: imports nothing of ours, so the reports, the fitting tables and the CLI can
all use it.
"""

from __future__ import annotations

import html
import math
from typing import Any

#: what a missing or non-finite number is shown as
MISSING = "–"


def num(x: Any, digits: int = 3, missing: str = MISSING) -> str:
    """``x`` to ``digits`` significant digits; ``missing`` for None, non-numbers, NaN and infinities."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return missing
    return f"{f:.{digits}g}" if math.isfinite(f) else missing


def escape(text: Any) -> str:
    """User text made safe for HTML element content, attribute values and plotly labels."""
    return html.escape("" if text is None else str(text), quote=True)


#: Suffixes of a count (parameters, tokens), smallest first.
_SCALES = ((1e3, "K"), (1e6, "M"), (1e9, "B"), (1e12, "T"))


def size(x: Any, digits: int = 3, missing: str = MISSING) -> str:
    """A count (parameters, tokens) to ``digits`` significant digits (whole units at least) with a
    K, M, B or T suffix: 21.6K for 21,600, 2.0M for 1,998,850 at two digits; ``missing`` as :func:`num`."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return missing
    if not math.isfinite(f):
        return missing
    rounded = abs(float(f"{f:.{digits}g}"))
    scale, suffix = 1.0, ""
    for s, name in _SCALES:
        if rounded >= s:
            scale, suffix = s, name
    v = f / scale
    if abs(v) >= 10 ** digits or (not suffix and float(v).is_integer()):
        return f"{v:.0f}{suffix}"
    text = f"{v:#.{digits}g}" if suffix else f"{v:.{digits}g}"
    return text.rstrip(".") + suffix
