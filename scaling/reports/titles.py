"""The one way a report figure is titled: its title, each axis's title with its unit, the legend's title.

plotly.js draws a title only in the form ``{text: ...}``. plotly.py rewrites a plain string into
that form when it validates a figure, but a figure built without validation (the training curves
skip it for speed) keeps the string, and the browser draws nothing. Every figure function titles
its figure here, so each title reaches the browser in the form it draws, escaped once (titles may
hold user text: task and run names), and with room to be read: no title drawn over another, over a
row's tick labels or under a legend (:func:`make_room`).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from scaling.fmt import FLOPS_AXIS_FORMAT, escape

#: A layout key of one cartesian axis: ``xaxis``, ``xaxis2``, ``yaxis3`` ...
_AXIS_KEY = re.compile(r"([xy])axis(\d*)")

#: plotly's default figure height and margins (px), where a figure sets none.
DEFAULT_HEIGHT, DEFAULT_MARGIN = 450, {"t": 100, "b": 80}
#: Pixels under a plot taken by its tick labels (two lines on a log axis) and its x title.
BELOW_PLOT_PX = 72
#: Pixels between two rows of small multiples: the upper row's tick labels and x title, the lower row's title.
ROW_GAP_PX = 78
#: The least height of one row of small multiples, so its y title fits beside it.
MIN_ROW_PX = 170
#: Width of a character of an axis title (14 px font), to tell whether a title fits along its axis.
CHAR_PX = 7.5


#: The unit of compute on an axis title: such an axis's ticks are written as :func:`scaling.fmt.flops` writes.
FLOPS = "FLOPs"


def axis(quantity: str, unit: str = "") -> str:
    """An axis title: the quantity, then its unit in parentheses ("C", "FLOPs" -> "C (FLOPs)")."""
    return f"{quantity} ({unit})" if unit else quantity


def _axis_keys(fig: Any, letter: str) -> list[str]:
    """The figure's ``letter`` axes in subplot order (``xaxis``, ``xaxis2``, ...); a plain figure has one."""
    keys = [k for k in fig.layout.to_plotly_json() if (m := _AXIS_KEY.fullmatch(k)) and m.group(1) == letter]
    return sorted(keys, key=lambda k: int(_AXIS_KEY.fullmatch(k).group(2) or 1)) or [f"{letter}axis"]


def _text(value: str) -> dict[str, str]:
    return {"text": escape(value)}


def titled(fig: Any, title: str, *, x: str | Sequence[str | None] | None = None,
           y: str | Sequence[str | None] | None = None, legend: str | None = None) -> Any:
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
                if text.endswith(f"({FLOPS})"):  # compute's ticks as the text writes compute: 1e+15
                    updates[key]["exponentformat"] = FLOPS_AXIS_FORMAT
    if legend is not None:
        updates["legend"] = {**fig.layout.to_plotly_json().get("legend", {}), "title": _text(legend)}
    fig.update_layout(updates, overwrite=True)  # each axis and the legend given whole (a string title replaced)
    return make_room(fig)


def _plot_px(layout: dict[str, Any]) -> float:
    """The height of the plotting area in pixels, as plotly lays it out before any automatic margin."""
    margin = {**DEFAULT_MARGIN, **(layout.get("margin") or {})}
    return float(layout.get("height") or DEFAULT_HEIGHT) - margin["t"] - margin["b"]


def make_room(fig: Any) -> Any:
    """Space ``fig``'s titles apart: rows of small multiples far enough apart that a row's title clears
    the tick labels of the row above (and tall enough for their y titles), a y title longer than its
    axis broken over two lines, and a legend laid out under the plot placed below the x title."""
    layout = fig.layout.to_plotly_json()
    updates: dict[str, Any] = {}
    tops = sorted({tuple(layout[k].get("domain", (0, 1))) for k in _axis_keys(fig, "y") if k in layout},
                  key=lambda d: -d[1])
    if len(tops) > 1:
        rows = len(tops)
        height = float(layout.get("height") or DEFAULT_HEIGHT)
        margins = height - _plot_px(layout)
        if height < (need := rows * MIN_ROW_PX + (rows - 1) * ROW_GAP_PX + margins):
            height = updates["height"] = need
        plot = height - margins
        gap = ROW_GAP_PX / plot
        row = (1 - gap * (rows - 1)) / rows
        new = {old: (round(1 - i * (row + gap) - row, 6), round(1 - i * (row + gap), 6)) for i, old in enumerate(tops)}
        for key in _axis_keys(fig, "y"):
            old = tuple(layout.get(key, {}).get("domain", (0, 1)))
            if old in new:
                updates[key] = {**layout.get(key, {}), "domain": list(new[old])}
        moved = {round(old[1], 6): top for old, (_, top) in new.items()}
        notes = [dict(a, y=moved[round(a["y"], 6)]) if a.get("yref") == "paper" and round(a.get("y", -1), 6) in moved
                 else a for a in layout.get("annotations", [])]
        if notes:
            updates["annotations"] = notes
        layout = {**layout, **updates}
    for key in _axis_keys(fig, "y"):
        title = (layout.get(key) or {}).get("title") or {}
        text = title.get("text") if isinstance(title, dict) else None
        span = (lambda d: (d[1] - d[0]) * _plot_px(layout))(tuple((layout.get(key) or {}).get("domain", (0, 1))))
        if text and "<br>" not in text and " " in text and len(text) * CHAR_PX > 0.9 * span:
            cut = min((i for i, c in enumerate(text) if c == " "), key=lambda i: abs(i - len(text) / 2))
            axis_layout = updates.get(key) or layout.get(key) or {}
            updates[key] = {**axis_layout, "title": {**title, "text": text[:cut] + "<br>" + text[cut + 1:]}}
    legend = layout.get("legend") or {}
    if legend.get("orientation") == "h" and float(legend.get("y", 1)) < 0:
        updates["legend"] = {**legend, "yanchor": "top", "y": -BELOW_PLOT_PX / _plot_px(layout)}
    if updates:
        fig.update_layout(updates, overwrite=True)
    return fig
