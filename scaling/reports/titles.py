"""The one way a report figure is titled: its title, each axis's title with its unit, the legend's title.

plotly.js draws a title only in the form ``{text: ...}``. plotly.py rewrites a plain string into
that form when it validates a figure, but a figure built without validation (the training curves
skip it for speed) keeps the string, and the browser draws nothing. Every figure function titles
its figure here, so each title reaches the browser in the form it draws, escaped once (titles may
hold user text: task and run names).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Sequence

from scaling.fmt import escape

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from plotly.graph_objects import Figure

#: A layout key of one cartesian axis: ``xaxis``, ``xaxis2``, ``yaxis3`` ...
_AXIS_KEY = re.compile(r"([xy])axis(\d*)")


def axis(quantity: str, unit: str = "") -> str:
    """An axis title: the quantity, then its unit in parentheses ("C", "FLOPs" -> "C (FLOPs)")."""
    return f"{quantity} ({unit})" if unit else quantity


def _axis_keys(fig: Figure, letter: str) -> list[str]:
    """The figure's ``letter`` axes in subplot order (``xaxis``, ``xaxis2``, ...); a plain figure has one."""
    keys = [k for k in fig.layout.to_plotly_json() if (m := _AXIS_KEY.fullmatch(k)) and m.group(1) == letter]
    return sorted(keys, key=lambda k: int(_AXIS_KEY.fullmatch(k).group(2) or 1)) or [f"{letter}axis"]


def _text(value: str) -> dict[str, str]:
    return {"text": escape(value)}


def titled(fig: Figure, title: str, *, x: str | Sequence[str | None] | None = None,
           y: str | Sequence[str | None] | None = None, legend: str | None = None) -> Figure:
    """``fig`` with its title, axis titles and legend title set in the form plotly.js draws; returns ``fig``.

    ``x`` (``y``): one title for every x (y) axis, or one per axis in subplot order (``None`` leaves
    that axis untitled: small multiples title the bottom row and the left column). ``legend``: the
    legend's title, which names what its entries are. All text is escaped here (plain text in).
    """
    updates: dict[str, Any] = {"title": _text(title)}
    for letter, given in (("x", x), ("y", y)):
        if given is None:
            continue
        keys = _axis_keys(fig, letter)
        texts = [given] * len(keys) if isinstance(given, str) else list(given)
        if len(texts) > len(keys):
            raise ValueError(f"{len(texts)} {letter} axis titles for {len(keys)} {letter} axes")
        for key, text in zip(keys, texts):
            if text is not None:
                updates[key] = {**fig.layout.to_plotly_json().get(key, {}), "title": _text(text)}
    if legend is not None:
        updates["legend"] = {**fig.layout.to_plotly_json().get("legend", {}), "title": _text(legend)}
    fig.update_layout(updates, overwrite=True)  # each axis and the legend given whole (a string title replaced)
    return fig
