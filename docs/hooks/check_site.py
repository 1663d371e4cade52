"""Check a built site: every CLI command and option, and every plan and spec field, is in it.

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


def main(site: Path) -> int:
    cli = page_text(site / "reference" / "cli" / "index.html")
    rows = set(re.findall(r"<td><code>([A-Za-z_0-9]+)</code></td>", (site / "reference" / "plan" / "index.html").read_text()))
    problems = [f"CLI reference lacks {name!r}" for name in cli_names()
                if (name.rsplit(" ", 1)[-1] if " -" in name else name) not in cli]
    problems += [f"plan schema reference lacks the field {name!r}"
                 for name in sorted(field_names(Plan) | field_names(RunSpec)) if name not in rows]
    for line in problems:
        print(line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
