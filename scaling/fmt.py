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
