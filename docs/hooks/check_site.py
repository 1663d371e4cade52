"""Check a built site: every CLI command and option, and every plan and spec field, is in it, each
field with a description; the gallery's figures are there; no page loads anything (a font, a
script, a style sheet) from another host; the pages with math load the vendored KaTeX from the site.

Usage: python docs/hooks/check_site.py SITE_DIR (run by scripts/docs.sh after the build).
"""

from __future__ import annotations

import html
import re
import sys
import typing
from pathlib import Path

import typer
from pydantic import BaseModel

from scaling.cli import app
from scaling.orchestrator.plan import Plan
from scaling.trainer.spec import RunSpec


def page_text(path: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", path.read_text()))


def page_text_of(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def cli_names() -> list[str]:
    """'scaling fit', 'scaling fit --law', ... for every command and option of the app."""
    names: list[str] = []

    def walk(command: typing.Any, path: str) -> None:
        for name, sub in getattr(command, "commands", {}).items():
            full = f"{path} {name}"
            names.append(full)
            names.extend(f"{full} {opt}" for p in sub.params for opt in getattr(p, "opts", []) if opt.startswith("-"))
            walk(sub, full)

    walk(typer.main.get_command(app), "scaling")
    return names


def field_names(model: type[BaseModel], seen: set[type] | None = None) -> set[str]:
    """Every field name of a model and of the models its fields hold (as a plan spells it: its alias)."""
    seen = set() if seen is None else seen
    if model in seen:
        return set()
    seen.add(model)
    names = {field.alias or name for name, field in model.model_fields.items()}
    for field in model.model_fields.values():
        stack = [field.annotation]
        while stack:
            kind = stack.pop()
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                names |= field_names(kind, seen)
            stack.extend(typing.get_args(kind))
    return names


#: A script, style sheet, font or frame fetched from another host when a page opens.
EXTERNAL = re.compile(r"""<(?:script|link|iframe|img)\b[^>]*\b(?:src|href)=["'](?:https?:)?//""", re.I)


def external_requests(site: Path) -> list[str]:
    """'page: tag' for every element of a built page that loads something from another host."""
    found = []
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(errors="replace")
        for m in EXTERNAL.finditer(text):
            tag = text[m.start():m.start() + 160].split(">")[0]
            found.append(f"{page.relative_to(site)}: {tag}>")
    return found


#: What a page with math must load, from the site itself (docs/assets/katex, docs/js).
MATH_ASSETS = ("assets/katex/katex.min.js", "assets/katex/katex.min.css", "js/katex-render.js")


def math_problems(site: Path) -> list[str]:
    """Pages with math (arithmatex's output) that do not load the vendored KaTeX by a relative path
    resolving inside the site, and KaTeX fonts its style sheet names but the site lacks."""
    found = []
    pages = 0
    for page in sorted(site.rglob("*.html")):
        text = page.read_text(errors="replace")
        if 'class="arithmatex"' not in text:
            continue
        pages += 1
        refs = re.findall(r"""<(?:script|link)\b[^>]*\b(?:src|href)=["']([^"']+)["']""", text)
        for asset in MATH_ASSETS:
            hits = [r for r in refs if r.split("?")[0].endswith(asset)]
            if not hits or not all((page.parent / r.split("?")[0]).resolve().is_file() for r in hits):
                found.append(f"{page.relative_to(site)}: has math but does not load {asset} from the site")
    if not pages:
        found.append("no page has math (pymdownx.arithmatex's output)")
    css = site / MATH_ASSETS[1]
    if css.is_file():
        fonts = re.findall(r"url\(([^)]+)\)", css.read_text())
        found += [f"KaTeX's style sheet names a font the site lacks: {f}" for f in fonts if not (css.parent / f).is_file()]
    return found


def main(site: Path) -> int:
    cli = page_text(site / "reference" / "cli" / "index.html")
    rows = set(re.findall(r"<td><code>([A-Za-z_0-9]+)</code></td>", (site / "reference" / "plan" / "index.html").read_text()))
    problems = [f"CLI reference lacks {name!r}" for name in cli_names()
                if (name.rsplit(" ", 1)[-1] if " -" in name else name) not in cli]
    problems += [f"plan schema reference lacks the field {name!r}"
                 for name in sorted(field_names(Plan) | field_names(RunSpec)) if name not in rows]
    plan_page = (site / "reference" / "plan" / "index.html").read_text()
    for row in plan_page.split("<tr>")[1:]:
        cells = re.findall(r"<td>(.*?)</td>", row.split("</tr>", 1)[0], re.S)
        if len(cells) == 5 and not cells[4].strip():
            problems.append(f"plan schema reference: the field {page_text_of(cells[0])!r} has no description")
    gallery = site / "gallery" / "gallery"
    problems += [f"the figure gallery lacks {name}" for name in ("plotly.min.js", "report.html", "fig-isoflop.html")
                 if not (gallery / name).is_file()]
    problems += [f"loads from another host: {line}" for line in external_requests(site)]
    problems += math_problems(site)
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
