"""The building blocks of a report page: figures collected once, sections, tables, intervals.

Shared by the sweep report (:mod:`scaling.reports.html`), its adaptive section and the comparison
page, so none of them reaches into another's private helpers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from scaling.fmt import Interval
from scaling.fmt import escape as e
from scaling.fmt import num

if TYPE_CHECKING:  # pragma: no cover - names for type hints only
    from plotly.graph_objects import Figure


def script_json(text: str) -> str:
    """JSON made safe inside ``<script>``: no ``</script>``, ``<!--`` or ``]]>`` can appear."""
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


@dataclass(frozen=True)
class Answer:
    """One number of the report's first screen, given by the section that computes it: ``label`` (text),
    ``value`` (HTML: the value with its interval, or why there is none) and the section it links to."""

    label: str
    value: str
    href: str
    title: str = ""


class Page:
    """Collects the figures of one page (each gets a div id and goes into one JSON block) and the
    numbers its sections give for the first screen (:meth:`answer`)."""

    def __init__(self) -> None:
        self.figures: list[tuple[str, str]] = []
        self.answers: list[Answer] = []

    def answer(self, label: str, value: str, href: str, title: str = "") -> None:
        """Put ``value`` (HTML) under ``label`` on the first screen, linked to ``href`` (a section's anchor);
        ``title``: the whole reason on hover, where ``value`` gives it shortened."""
        self.answers.append(Answer(label, value, href, title))

    def figure(self, fig_id: str, fig: Figure) -> str:
        """The div for ``fig`` (its JSON is emitted once, in :meth:`figures_json`)."""
        div_id = f"fig-{fig_id}"
        self.figures.append((div_id, fig.to_json()))
        return f'<div class="figure" id="{div_id}" data-figure="{e(fig_id)}"></div>'

    def figures_json(self) -> str:
        parts = ",".join(f"{json.dumps(div_id)}:{fig_json}" for div_id, fig_json in self.figures)
        return script_json("{" + parts + "}")


def section(sid: str, title: str, inner: str) -> str:
    """A titled ``<section>``; ``inner`` is already HTML."""
    return f'<section id="{sid}"><h2>{e(title)}</h2>\n{inner}\n</section>'


def prose(text: object) -> str:
    """User-facing text as HTML: escaped, with its `backticked` commands set as code (not raw Markdown)."""
    return re.sub(r"`([^`<>]+)`", r"<code>\1</code>", e(text))


def missing(text: str) -> str:
    """A paragraph saying what is not there (escaped)."""
    return f'<p class="missing">{e(text)}</p>'


def kv(rows: list[tuple[str, str]]) -> str:
    """A two-column table; values are already HTML (callers escape user text)."""
    body = "".join(f"<tr><th>{e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f'<table class="kv">{body}</table>'


def answer_grid(answers: Sequence[Answer], grid_id: str = "answer") -> str:
    """The first screen's numbers side by side, each label a link to the section it comes from."""
    cells = []
    for a in answers:
        hover = f' title="{e(a.title)}"' if a.title else ""
        cells.append(f'<div class="cell"><dt><a href="{e(a.href)}">{e(a.label)}</a></dt><dd{hover}>{a.value}</dd></div>')
    return f'<dl class="answer-grid" id="{e(grid_id)}">{"".join(cells)}</dl>'


def interval(d: "Interval | None", digits: int = 3, fmt: Callable[..., str] = num) -> str:
    """A value with its 95% interval, or with why it has none (pinned, biased, no spread, unreliable);
    ``fmt(x, digits)`` writes each number (e.g. :func:`scaling.fmt.size` for counts)."""
    return "-" if d is None else d.text(digits, fmt, html_=True, mark=True)
